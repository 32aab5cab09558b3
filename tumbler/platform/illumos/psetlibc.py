"""pset_*(2), processor_bind(2) and priv_ineffect(3C) of illumos
libc.so.1 through ctypes, for the processor set binder (pset.py) and the
backend.  ``pset_bind_lwp`` is a private libc interface (SUNWprivate_1.1)
that a libc may lack: see pset.py."""

import ctypes
import errno
import os

from ..base import Unsupported
from .structs import PBIND_NONE, PS_NONE

P_CPUID = 14                    # usr/src/uts/common/sys/procset.h, idtype_t

NO_BIND_LWP_MESSAGE = (
    "this libc has no pset_bind_lwp (a private libc interface), the only call that "
    "binds one LWP of another process to a processor set; processor_bind(2) and "
    "pset_bind(2) bind single LWPs of the calling process only, so --binder pset "
    "cannot run here")


class PsetLibc:
    """pset_*(2) from illumos libc.so.1 through ctypes.

    Each method returns its result or raises OSError with the errno of the
    call; the binder maps errno to tumbler's exceptions.  Tests pass an
    object with the same methods instead.
    """

    def __init__(self, cdll=None):
        self.lib = cdll if cdll is not None else ctypes.CDLL("libc.so.1", use_errno=True)
        int_p = ctypes.POINTER(ctypes.c_int)
        self._declare("pset_create", [int_p])
        self._declare("pset_destroy", [ctypes.c_int])
        self._declare("pset_assign", [ctypes.c_int, ctypes.c_int, int_p])
        self._declare("pset_info", [ctypes.c_int, int_p, ctypes.POINTER(ctypes.c_uint), int_p])
        self._declare("processor_bind", [ctypes.c_int, ctypes.c_int, ctypes.c_int, int_p])
        # Private (SUNWprivate_1.1): a libc may lack it; the binder checks
        # can_bind_lwp before it changes anything.
        self.can_bind_lwp = self._declare(
            "pset_bind_lwp", [ctypes.c_int, ctypes.c_int, ctypes.c_int, int_p], optional=True)

    def _declare(self, name, argtypes, optional=False):
        """Set the C signature of ``name``; False if an optional one is absent."""
        try:
            function = getattr(self.lib, name)
        except AttributeError:
            if optional:
                return False
            raise
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        return True

    @staticmethod
    def _check(result, what):
        if result == -1:
            code = ctypes.get_errno()
            raise OSError(code, "%s: %s" % (what, os.strerror(code)))

    def pset_create(self):
        new = ctypes.c_int(PS_NONE)
        self._check(self.lib.pset_create(ctypes.byref(new)), "pset_create")
        return new.value

    def pset_destroy(self, pset):
        self._check(self.lib.pset_destroy(pset), "pset_destroy(%d)" % pset)

    def pset_assign(self, pset, cpu):
        old = ctypes.c_int(PS_NONE)
        self._check(self.lib.pset_assign(pset, cpu, ctypes.byref(old)),
                    "pset_assign(%d, %d)" % (pset, cpu))
        return old.value

    def pset_bind_lwp(self, pset, lwpid, pid):
        if not self.can_bind_lwp:
            raise OSError(errno.ENOSYS, "pset_bind_lwp: not in this libc")
        old = ctypes.c_int(PS_NONE)
        self._check(self.lib.pset_bind_lwp(pset, lwpid, pid, ctypes.byref(old)),
                    "pset_bind_lwp(%d, %d, %d)" % (pset, lwpid, pid))
        return old.value

    def unbind_cpu(self, cpu):
        """Remove the processor binding of every LWP bound to ``cpu``
        (``pbind -U cpu``)."""
        self._check(self.lib.processor_bind(P_CPUID, cpu, PBIND_NONE, None),
                    "processor_bind(P_CPUID, %d, PBIND_NONE)" % cpu)

    def has_privilege(self, name):
        """Whether ``name`` (e.g. "sys_res_config") is in our effective set,
        by priv_ineffect(3C); True when libc cannot tell."""
        try:
            function = self.lib.priv_ineffect
        except AttributeError:
            return True
        function.argtypes = [ctypes.c_char_p]
        function.restype = ctypes.c_int
        return bool(function(name.encode("ascii")))

    def pset_info(self, pset):
        """CPUs of ``pset``; PS_NONE gives the CPUs of the default set."""
        while True:
            count = ctypes.c_uint(0)
            self._check(self.lib.pset_info(pset, None, ctypes.byref(count), None),
                        "pset_info(%d)" % pset)
            wanted = count.value
            cpus = (ctypes.c_int * max(wanted, 1))()
            self._check(self.lib.pset_info(pset, None, ctypes.byref(count), cpus),
                        "pset_info(%d)" % pset)
            if count.value <= wanted:       # no CPU joined between the calls
                return frozenset(cpus[:count.value])


def require_bind_lwp(libc):
    """Refuse (Unsupported) before anything changes if ``libc`` cannot bind
    another process's LWPs; objects without ``can_bind_lwp`` can."""
    if not getattr(libc, "can_bind_lwp", True):
        raise Unsupported(NO_BIND_LWP_MESSAGE)


def load_libc():
    """PsetLibc of the running system, or None where libc.so.1 has no psets."""
    try:
        return PsetLibc()
    except (OSError, AttributeError):
        return None
