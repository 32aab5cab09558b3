"""The platform layer's one file reader, in a module of its own: the
package (``tumbler.platform``) and both backends use it, and a backend
importing the package that loads it would close an import cycle."""

import os


def read_file(path, size=4096):
    """The first ``size`` bytes of ``path`` -- all of a /proc or /sys file
    of a few lines -- in one pread(2) of a descriptor closed at once and
    never inherited (a child ``exec`` starts must not hold it).  OSError
    as ``os.open`` and ``os.pread`` raise it: each caller maps it."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)
