"""Platform layer: one small interface (``base``), one backend per OS.

The backend is chosen from ``sys.platform`` (psutil style), or explicitly
with ``--platform`` so captured trees of either OS can be read anywhere.
"""

import sys

from ..errors import TumblerError, UsageError
from .base import (LEVELS, AccessDenied, Backend, Binder, NoSuchProcess,  # noqa: F401
                   PlatformError, ProcessInfo, Sample, ThreadTimes, Topology,
                   Unmovable, Unsupported)

PLATFORMS = ("linux", "illumos")


def native_platform():
    """Name of the backend for the running OS, or None if unsupported."""
    if sys.platform.startswith("linux"):
        return "linux"
    if sys.platform.startswith("sunos"):
        return "illumos"
    return None


def open_backend(name=None, root="/"):
    """Return a backend instance for ``name`` (default: the running OS)."""
    if name is None:
        name = native_platform()
        if name is None:
            raise TumblerError("unsupported platform %r: tumbler runs on Linux and illumos"
                               % sys.platform)
    if name == "linux":
        from .linux import LinuxBackend
        return LinuxBackend(root)
    if name == "illumos":
        from .illumos import IllumosBackend
        return IllumosBackend(root)
    raise UsageError("unknown platform %r (choose from %s)" % (name, ", ".join(PLATFORMS)))
