"""The Linux backend's one mapping of OS errors to ``platform.base``'s
exceptions: base.py promises that OS errors are mapped once, at the backend
edge, so nothing above the platform layer looks at errno.  Each message
says what was attempted, a read (of /proc, of a thread's CPU mask) or a
change (of a thread's CPU mask), and the privilege that one needs."""

import errno
from contextlib import contextmanager

from ..base import AccessDenied, NoSuchProcess, PlatformError, Unmovable

#: What reading another user's /proc files needs.
READ_PRIVILEGE = "read access to /proc"
#: What sched_setaffinity(2) on another user's thread needs.
SETAFFINITY_PRIVILEGE = "the same user as the target, or CAP_SYS_NICE"

_GONE = (errno.ESRCH, errno.ENOENT)
_REFUSED = (errno.EPERM, errno.EACCES)


def os_error(exc, pid, tid=None, attempted="", change=False):
    """The base exception for ``exc``, an OSError met while ``attempted``
    (a phrase: "read /proc/12/stat", "change thread 13 of process 12"),
    about process ``pid`` (None: no process in particular) or its thread
    ``tid``; ``change`` says it was a change, not a read.

    Gone (ESRCH, ENOENT): NoSuchProcess.  Refused (EPERM, EACCES):
    AccessDenied, with the privilege a read or a change needs.  EINVAL on
    a change: Unmovable (the kernel refused the CPU set).  Anything else:
    PlatformError."""
    code = exc.errno
    if code in _GONE and pid is not None:
        return NoSuchProcess(pid, tid)
    if code in _REFUSED:
        if change:
            return AccessDenied("not permitted to " + attempted, SETAFFINITY_PRIVILEGE)
        return AccessDenied("cannot " + attempted, READ_PRIVILEGE)
    if code == errno.EINVAL and change:
        return Unmovable(tid, "the kernel refused the CPU set (EINVAL)")
    return PlatformError("cannot %s: %s" % (attempted, exc.strerror or exc))


@contextmanager
def mapped(pid, tid=None, attempted="", change=False):
    """Run the block with its OSErrors mapped by ``os_error``."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, pid, tid, attempted, change) from None


def thread_phrase(pid, tid):
    return "thread %d of process %d" % (tid, pid)
