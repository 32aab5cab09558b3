"""The Linux backend's one mapping of OS errors to ``platform.base``'s
exceptions: base.py promises that OS errors are mapped once, at the backend
edge, so nothing above the platform layer looks at errno.  Each message
says what was attempted, a read (of /proc, of a thread's CPU mask) or a
change (of a thread's CPU mask), and the privilege that one needs."""

import errno

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


class mapped:
    """``with mapped(pid, ...):`` runs the block with its OSErrors mapped by
    ``os_error``.  A class, not contextlib's generator: contextlib's import
    (with functools and collections) costs ~4 ms of CPU beside ``exec``'s
    command."""

    __slots__ = ("pid", "tid", "attempted", "change")

    def __init__(self, pid, tid=None, attempted="", change=False):
        self.pid, self.tid, self.attempted, self.change = pid, tid, attempted, change

    def __enter__(self):
        return None

    def __exit__(self, kind, exc, traceback):
        if isinstance(exc, OSError):
            raise os_error(exc, self.pid, self.tid, self.attempted, self.change) from None
        return False


def thread_phrase(pid, tid):
    return "thread %d of process %d" % (tid, pid)
