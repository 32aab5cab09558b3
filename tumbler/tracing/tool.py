"""The tracing tool a probe run needs: bpftrace (Linux) or dtrace
(illumos), the privileges each needs, and tracefs, where bpftrace finds
its tracepoints (mounted here when missing and tumbler is root).

``check_tool`` says in one line what is missing and how to get it.
"""

import os
import shutil
import subprocess

from ..errors import TumblerError
from .scripts import check_platform

#: bpftrace uses the first that exists (src/tracefs: debugfs, then tracefs).
DEBUGFS_TRACEFS = "/sys/kernel/debug/tracing"
TRACEFS = "/sys/kernel/tracing"

_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39


def tracefs_dir():
    """The tracefs directory bpftrace will use."""
    return DEBUGFS_TRACEFS if os.path.exists(DEBUGFS_TRACEFS) else TRACEFS


def _tracefs_ready():
    return os.path.isdir(os.path.join(tracefs_dir(), "events"))


def ensure_tracefs():
    """Mount tracefs where bpftrace looks for it, if it is missing.

    Returns the tracefs directory, or None when it is missing and we are not
    root (``check_tool`` then says what to run).  Raises TumblerError when
    root cannot mount it.
    """
    if _tracefs_ready():
        return tracefs_dir()
    if os.geteuid() != 0:
        return None
    target = tracefs_dir()
    import ctypes               # here: only the first probe run on a machine needs it
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_ulong, ctypes.c_void_p)
    if libc.mount(b"nodev", target.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise TumblerError("cannot mount tracefs on %s: %s"
                           % (target, os.strerror(err)))
    if not _tracefs_ready():
        raise TumblerError("tracefs mounted on %s has no events directory"
                           % target)
    return target


def _illumos_missing_privileges():
    """Privileges the process lacks for the probe scripts, per ppriv(1); []
    if unknown."""
    # -p PID needs dtrace_proc.  The sched and proc providers are registered
    # at the dtrace_user level (usr/src/uts/common/dtrace/sdt_subr.c,
    # sdt_providers), but every script reads kernel data of other threads
    # -- args[] of an LWP another thread enqueues, dequeues or wakes, and
    # curthread->t_mstate -- which needs dtrace_kernel (without it DTrace
    # refuses loads from kernel memory); dtrace_kernel includes what
    # dtrace_user allows (dtrace_cred2priv, usr/src/uts/common/dtrace/dtrace.c).
    need = {"dtrace_proc", "dtrace_kernel"}
    ppriv = shutil.which("ppriv") or "/usr/bin/ppriv"
    try:
        out = subprocess.run([ppriv, str(os.getpid())], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("E:"):
            have = set(p.strip() for p in line[2:].split(","))
            if "all" in have:
                return []
            return sorted(need - have)
    return []


def check_tool(platform_name):
    """Return the tracing tool's path, or raise TumblerError saying, in one
    line, what is missing and how to get it."""
    check_platform(platform_name)
    if platform_name == "linux":
        tool = shutil.which("bpftrace")
        if not tool:
            raise TumblerError(
                "bpftrace not found: install it (Debian/Ubuntu: apt-get install "
                "bpftrace; Fedora/RHEL: dnf install bpftrace)")
        if os.geteuid() != 0:
            # Here, not at the top: only a probe run on Linux needs the backend.
            from ..platform.linux.procfs import has_capability
            if not (has_capability(_CAP_SYS_ADMIN)
                    or (has_capability(_CAP_BPF) and has_capability(_CAP_PERFMON))):
                raise TumblerError("bpftrace needs root (or CAP_BPF and "
                                   "CAP_PERFMON): run tumbler as root")
        if not _tracefs_ready():
            raise TumblerError("tracefs is not mounted: mount -t tracefs nodev %s"
                               % tracefs_dir())
        return tool
    tool = shutil.which("dtrace")
    if not tool and os.path.exists("/usr/sbin/dtrace"):
        tool = "/usr/sbin/dtrace"
    if not tool:
        raise TumblerError("dtrace not found in PATH or /usr/sbin: install "
                           "the DTrace package of your distribution")
    from ..platform.illumos import zone as zones    # illumos only: not loaded on Linux
    zone = zones.nonglobal_zone()
    if zone is not None:
        raise TumblerError(zones.prohibited(
            "dtrace_kernel", zone,
            "the probe scripts (they read other threads' kernel data through DTrace)"))
    if os.geteuid() != 0:
        missing = _illumos_missing_privileges()
        if missing:
            raise TumblerError(
                "dtrace needs root or the privileges %s (usermod -K "
                "defaultpriv=basic,%s USER)" % (", ".join(missing), ",".join(missing)))
    return tool


def has_futex_waitv():
    """Whether the kernel has futex_waitv(2)'s tracepoints (5.16 and later):
    without them locktime.bt's WAITV_MARK lines are left out."""
    return os.path.isdir(os.path.join(tracefs_dir(), "events", "syscalls",
                                      "sys_enter_futex_waitv"))
