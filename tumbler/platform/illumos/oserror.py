"""The illumos backend's mapping of an OSError reading /proc to
``platform.base``'s exceptions (the processor set calls map theirs in
pset.py)."""

import errno

from ..base import AccessDenied, NoSuchProcess, PlatformError, Unsupported

READ_PRIVILEGE = "read access to /proc (PRIV_PROC_OWNER for another user's process)"


def read_error(exc, path, pid, tid=None):
    """Map an OSError reading /proc to the backend exceptions."""
    code = exc.errno
    if code in (errno.ENOENT, errno.ESRCH):
        return NoSuchProcess(pid, tid)
    if code in (errno.EACCES, errno.EPERM):
        return AccessDenied("cannot read %s" % path, READ_PRIVILEGE)
    if code == errno.EOVERFLOW:
        return Unsupported("%s: a 32-bit reader cannot read a 64-bit process" % path)
    return PlatformError("%s: %s" % (path, exc.strerror or exc))
