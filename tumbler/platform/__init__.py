"""Platform layer: one small interface (``base``), one backend per OS
(``linux/``, ``illumos/``), and what tumbler's own process needs from the
OS (priority.py, limits.py, signals.py); files.py reads a small file for
all of them.  Processes and threads are read (/proc, /sys, kstat) and
bound here only; it imports nothing above the leaves.

The backend is chosen from ``sys.platform`` (psutil style), or explicitly
with ``--platform`` so captured trees of either OS can be read anywhere.
"""

import sys

from ..errors import TumblerError, UsageError
# The interface's names live in base.py and are imported from there: this
# package is imported before ``tumbler exec`` starts its command (for
# signals.py and priority.py), base.py only after (BENCHMARKS.md, start-up).
from .files import read_file  # noqa: F401  (the one file reader: files.py)

PLATFORMS = ("linux", "illumos")


def native_platform(required=False):
    """Name of the backend for the running OS: None if unsupported, or with
    ``required`` a TumblerError that says so (the one place that decides)."""
    if sys.platform.startswith("linux"):
        return "linux"
    if sys.platform.startswith("sunos"):
        return "illumos"
    if required:
        raise TumblerError("unsupported platform %r: tumbler runs on Linux and illumos"
                           % sys.platform)
    return None


def boot_token():
    """A token of the running boot, None if it cannot be read: state written
    under another token predates a reboot (``tumbler.state``).

    Linux: /proc/sys/kernel/random/boot_id.  illumos has no boot id; the
    ``unix:0:system_misc:boot_time`` kstat (when the system booted, in
    seconds since the epoch) serves as one.
    """
    if native_platform() == "illumos":
        from .illumos.kstat import read_boot_time
        try:
            return "boot_time:%d" % read_boot_time()
        except OSError:
            return None
    try:
        return read_file("/proc/sys/kernel/random/boot_id").decode().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def own_start_ticks():
    """This process's start time in clock ticks since boot, None where it
    cannot be read: the token that tells this tumbler from a later one with
    the same PID (``tumbler.state``), and when it started (the summary's
    "ran N s").  Linux: /proc/self/stat field 22; illumos keeps it in binary
    psinfo, unread here, so None."""
    try:
        return int(read_file("/proc/self/stat").rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def microstate_percent(prev, cur):
    """prstat -mL percentages of one LWP (illumos; see
    ``illumos.prstat.microstate_percent``), loaded only when asked."""
    from .illumos.prstat import microstate_percent as percent
    return percent(prev, cur)


def open_backend(name=None, root="/"):
    """Return a backend instance for ``name`` (default: the running OS)."""
    if name is None:
        name = native_platform(required=True)
    if name == "linux":
        from .linux.backend import LinuxBackend
        return LinuxBackend(root)
    if name == "illumos":
        from .illumos.backend import IllumosBackend
        return IllumosBackend(root)
    raise UsageError("unknown platform %r (choose from %s)" % (name, ", ".join(PLATFORMS)))
