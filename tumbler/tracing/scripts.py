"""The probe scripts of ``probes/``: where they are found, and the text a
tracing tool runs -- the script with a prelude put on its TUMBLER-PRELUDE
line (the target processes, threads and CPU domains of this run).

Linux runs ``probes/linux/*.bt`` with bpftrace, illumos
``probes/illumos/*.d`` with dtrace (``tumbler.tracing.session``).
"""

import os
import sys
from pathlib import Path

from ..errors import TumblerError, UsageError
from ..platform import PLATFORMS
from ..safefile import UnsafePath, read_trusted

SCRIPT_NAMES = ("locktime", "runqlat", "migrations")
EXTENSION = {"linux": ".bt", "illumos": ".d"}
PRELUDE_MARK = {"linux": "// TUMBLER-PRELUDE", "illumos": "/* TUMBLER-PRELUDE */"}

#: A probe script is a few KiB; a larger file is not one of ours.
MAX_SCRIPT_BYTES = 1 << 20

#: locktime.bt's lines that trace futex_waitv(2), whose tracepoints kernels
#: before 5.16 lack (a missing tracepoint stops bpftrace from loading).
WAITV_MARK = "// TUMBLER-WAITV"


# -- locating scripts --------------------------------------------------------

def check_platform(platform_name):
    """UsageError unless there are scripts for ``platform_name``."""
    if platform_name not in PLATFORMS:
        raise UsageError("unknown probe platform %r (one of: %s)"
                         % (platform_name, ", ".join(PLATFORMS)))


def probe_dirs():
    """Directories searched for scripts, in order.

    1. ``$TUMBLER_PROBES`` (laid out like ``probes/``: ``linux/``, ``illumos/``);
    2. ``probes/`` next to the ``tumbler`` package (source or editable checkout);
    3. ``<sys.prefix>/share/tumbler/probes`` (installed by setup.cfg data_files).
    """
    dirs = []
    env = os.environ.get("TUMBLER_PROBES")
    if env:
        dirs.append(Path(env))
    dirs.append(Path(__file__).resolve().parents[2] / "probes")
    dirs.append(Path(sys.prefix) / "share" / "tumbler" / "probes")
    return dirs


def find_script(platform_name, name):
    """Path of script ``name`` (locktime, runqlat, migrations) for a platform."""
    check_platform(platform_name)
    if name not in SCRIPT_NAMES:
        raise UsageError("unknown probe script %r (one of: %s)"
                         % (name, ", ".join(SCRIPT_NAMES)))
    filename = name + EXTENSION[platform_name]
    tried = []
    for base in probe_dirs():
        path = base / platform_name / filename
        if path.is_file():
            # The tracer runs it with the privileges it needs (root): the
            # file and its directories must be root's (or the user's) alone,
            # wherever $TUMBLER_PROBES points (tumbler.safefile).
            try:
                read_trusted(str(path), MAX_SCRIPT_BYTES)
            except UnsafePath as exc:
                raise TumblerError("untrusted probe script %s" % exc) from None
            return path
        tried.append(str(path.parent))
    raise TumblerError("probe script %s not found in %s (set TUMBLER_PROBES to "
                       "the probes directory)" % (filename, ", ".join(tried)))


# -- script preludes ---------------------------------------------------------

def bpftrace_prelude(script, pids, tids_of, domain_of_cpu):
    """BEGIN-block lines: more target processes, known threads, CPU domains."""
    lines = []
    for pid in pids[1:]:
        lines.append("@target[%d] = 1;" % pid)
    for pid in pids:
        for tid in sorted(set(tids_of.get(pid, ())) | {pid}):
            if (tid, pid) != (pids[0], pids[0]):   # the script sets that one
                lines.append("@tgid[%d] = %d;" % (tid, pid))
            if script == "locktime" and tid in tids_of.get(pid, ()):
                # listed from the start: a thread that leaves @lock_seen has exited
                lines.append("@lock_seen[%d, %d] = 0;" % (pid, tid))
    if script == "migrations" and domain_of_cpu:
        for cpu, dom in sorted(domain_of_cpu.items()):
            lines.append("@dom[%d] = %d;" % (cpu, dom + 1))
    return " ".join(lines)


def dtrace_prelude(script, domain_of_cpu, pid=None, tids=()):
    """BEGIN-block statements: CPU domains (migrations.d), the known LWPs
    ``tids`` of process ``pid`` (locktime.d)."""
    if script == "migrations" and domain_of_cpu:
        return " ".join("dom[%d] = %d;" % (cpu, dom + 1)
                        for cpu, dom in sorted(domain_of_cpu.items()))
    if script == "locktime" and pid is not None:
        # listed: an LWP asleep since the start is found by its first event
        return " ".join("locktime_unseen[%d, %d] = 1; @lock_seen[%d, %d] = sum(0);"
                        % (pid, tid, pid, tid) for tid in sorted(set(tids)))
    return ""


def with_prelude(platform_name, path, prelude, drop_mark=None):
    """The script's text with ``prelude`` put on its TUMBLER-PRELUDE line, and
    the lines that end with ``drop_mark`` emptied, so that line numbers in
    the tool's error messages stay those of the file."""
    text = path.read_text()
    mark = PRELUDE_MARK[platform_name]
    if text.count(mark) != 1:
        raise TumblerError("probe script %s must hold the line '%s' once"
                           % (path, mark))
    if drop_mark:
        text = "\n".join("" if line.endswith(drop_mark) else line
                         for line in text.split("\n"))
    return text.replace(mark, prelude + " " + mark if prelude else mark)
