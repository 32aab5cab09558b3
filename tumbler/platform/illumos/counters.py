"""Hardware counters on illumos: LLC misses and cycles per CPU, by libcpc.

Space sharing's model wants each program's LLC misses per cycle
(engine/share.py).  libcpc(3LIB) offers three bindings; only one serves a
balancer that must not disturb the programs it watches:

* ``cpc_bind_curlwp`` counts the calling LWP only;
* ``cpc_bind_pctx`` counts an LWP of another process, but only through a
  libpctx handle: ``pctx_capture`` grabs the process and *stops* it, and
  every bind and sample runs as a system call of the /proc agent LWP
  inside the stopped target (pctx_capture.3cpc; the kernel's ``cpc()``
  reaches another LWP only when ``curproc->p_agenttp == curthread``,
  usr/src/uts/common/io/cpc.c).  That is cputrack's way, not ours;
* ``cpc_bind_cpu`` counts everything that runs on one CPU -- cpustat's
  way.  Under space sharing a CPU belongs to one program, so a CPU's
  counts are that program's: sum ``CpuCounters.read()`` over its CPUs.

So ``ProgramCounters`` raises Unsupported here, and ``CpuCounters`` does
what cpustat does (usr/src/cmd/cpc/common/cpustat.c): one LWP per CPU,
each binding a set to its CPU and sampling it itself.  It must be that
LWP: ``cpc_bind_cpu`` processor_binds the caller and opens the shared
device, whose ioctls check ``curthread->t_bind_cpu`` and sample
``curthread->t_cpc_set`` (cpc.c, ``kcpc_ioctl``).  Costs and rules that
follow from the sources, for whoever drives this:

* the first CPU binding invalidates every per-LWP counter context on the
  system and refuses new ones (EAGAIN) until the last CPU binding ends
  (``kcpc_open``, cpc_bind_curlwp.3cpc): cputrack and self-profiling
  programs stop counting while tumbler counts;
* only one binding per CPU: a running cpustat makes ours fail (EAGAIN);
* processor_bind refuses a CPU outside the caller's processor set
  (``cpu_bind_thread``: ``tp->t_cpupart != cp->cpu_part`` -> EINVAL,
  usr/src/uts/common/os/cpu.c), so the counting LWP first pset_binds
  itself to the CPU's set -- which needs PRIV_SYS_RES_CONFIG
  (pset_bind.2);
* a CPU with a processor-bound LWP cannot change processor set
  (pset_assign fails with EBUSY, pset_create.2 NOTES): close the
  counters before the pset binder moves or frees CPUs, open them after;
* both requests count user mode only (CPC_COUNT_USER), as on Linux: the
  kernel's and the idle loop's work on the CPU is not the program's.

Events (``choose_events``): cycles are ``PAPI_tot_cyc``, a generic event
of every x86 back end.  The LLC-miss event depends on the CPU family, which
libcpc names (``cpc_cciname``: the back end's ``pcbe_impl_name``), and is
taken only if the back end lists it (``cpc_walk_events_all`` and
``cpc_walk_generic_events_all``):

* Intel with architectural performance monitoring ("Intel Arch PerfMon vN
  on Family F Model M", core_pcbe.c ``core_pcbe_init``):
  ``longest_lat_cache.miss``, the architectural event (``ARCH_EVENTS_COMMON``),
  listed only where CPUID leaf 0xA says the CPU has it.  Not ``PAPI_l3_tcm``:
  only the Nehalem-to-Skylake table (``GENERICEVENTS_FAM6_NHM``) named it,
  for the same event (0x2e, umask 0x41), and illumos has dropped that table
  since (the review of issue 31: change 10212; the copy of core_pcbe.c read
  here still has it), so no current Intel CPU offers it;
* Intel Core microarchitecture (family 6 models 15, 23, 29: "Core
  Microarchitecture"): no LLC-miss event in its table;
* AMD family 10h ("AMD Family 10h", opteron_pcbe.c): ``PAPI_l3_tcm``
  (``AMD_FAMILY_10h_generic_events``: ``L3_miss``, all cores);
* AMD Zen and Hygon (families 17h, 18h, 19h, 1ah): none -- their generic
  tables (``family_17h_zen1_papi_events`` ... ``family_1ah_zen5_papi_events``)
  have no ``PAPI_l3_tcm``, and tumbler picks no model-specific event from
  the rest; families 0fh and 11h have no L3;
* any other CPU: none tumbler knows of.

Where there is none, ``CpuCounters`` and ``probe_support`` say so in one
line, naming the CPU; where there is one, ``CpuCounters.note`` says which.

Verified only by reading illumos-gate (no illumos machine here; the fake
libraries of tests/platform/test_counters.py check the calls, not the ABI):
signatures of cpc_open, cpc_close, cpc_seterrhndlr and cpc_errhndlr_t,
cpc_set_create, cpc_set_destroy, cpc_set_add_request, cpc_buf_create,
cpc_buf_destroy, cpc_bind_cpu, cpc_set_sample, cpc_buf_get, cpc_unbind,
CPC_VER_CURRENT 2 (usr/src/lib/libcpc/common/libcpc.h, libcpc.c);
CPC_COUNT_USER 0x2 and the error subcodes, CPC_PBIND_FAILED 10
(usr/src/uts/common/sys/cpc_impl.h); the shared device and what a CPU
binding does (usr/src/lib/libcpc/common/libcpc_impl.h, libcpc.c,
usr/src/uts/common/io/cpc.c); errors (usr/src/man/man3cpc/
cpc_bind_curlwp.3cpc); one LWP per CPU (usr/src/cmd/cpc/common/
cpustat.c); pset_assign(PS_QUERY) and pset_bind (usr/src/man/man2/
pset_create.2, pset_bind.2), P_LWPID 8 (usr/src/uts/common/sys/procset.h),
P_MYID -1 (usr/src/uts/common/sys/types.h); processor_bind across sets
(usr/src/uts/common/os/cpu.c).  A Python thread is an LWP of its own
(illumos threads are 1:1), which the one-LWP-per-CPU design relies on.
"""

import collections
import ctypes
import errno
import os
import queue
import re
import threading

from ..base import AccessDenied, PlatformError, Unsupported
from .pset import POOLS_MESSAGE

CPC_VER_CURRENT = 2
CPC_COUNT_USER = 0x2
CPC_PBIND_FAILED = 10
PS_NONE, PS_QUERY = -1, -2
P_LWPID, P_MYID = 8, -1

CYCLE_EVENT = "PAPI_tot_cyc"
INTEL_LLC_MISS = "longest_lat_cache.miss"
AMD_10H_LLC_MISS = "PAPI_l3_tcm"

CPU_PRIVILEGE = "PRIV_CPC_CPU (cpc_cpu)"
PSET_PRIVILEGE = "PRIV_SYS_RES_CONFIG"
NO_COUNTERS = "no hardware counters"
PER_PROGRAM_MESSAGE = (
    "%s per program on illumos: libcpc counts another process's LWPs only "
    "through libpctx, which stops the process; count per CPU (CpuCounters)" % NO_COUNTERS)
REPLY_TIMEOUT = 10.0        # seconds a counting LWP may take to answer

_ERRHNDLR = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                             ctypes.c_void_p)
_EVENT_WALKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class LibCpc:
    """The libcpc and libc calls CpuCounters makes, through ctypes.

    Each method raises OSError(errno, text) on failure; text adds libcpc's
    own description where its error handler gave one (which otherwise goes
    to stderr).  ``cpc`` and ``libc`` default to libcpc.so.1 and libc.so.1;
    tests pass fake libraries.
    """

    def __init__(self, cpc=None, libc=None):
        self.cpc = cpc if cpc is not None else ctypes.CDLL("libcpc.so.1", use_errno=True)
        self.libc = libc if libc is not None else ctypes.CDLL("libc.so.1", use_errno=True)
        p, u, i, u64 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint64
        self._declare(self.cpc, "cpc_open", [i], p)
        self._declare(self.cpc, "cpc_close", [p], i)
        self._declare(self.cpc, "cpc_cciname", [p], ctypes.c_char_p)
        self._declare(self.cpc, "cpc_walk_events_all", [p, p, _EVENT_WALKER], None)
        self._declare(self.cpc, "cpc_walk_generic_events_all", [p, p, _EVENT_WALKER], None)
        self._declare(self.cpc, "cpc_seterrhndlr", [p, _ERRHNDLR], i)
        self._declare(self.cpc, "cpc_set_create", [p], p)
        self._declare(self.cpc, "cpc_set_destroy", [p, p], i)
        self._declare(self.cpc, "cpc_set_add_request", [p, p, ctypes.c_char_p, u64, u, u, p], i)
        self._declare(self.cpc, "cpc_buf_create", [p, p], p)
        self._declare(self.cpc, "cpc_buf_destroy", [p, p], i)
        self._declare(self.cpc, "cpc_bind_cpu", [p, i, p, u], i)
        self._declare(self.cpc, "cpc_set_sample", [p, p, p], i)
        self._declare(self.cpc, "cpc_buf_get", [p, p, i, ctypes.POINTER(u64)], i)
        self._declare(self.cpc, "cpc_unbind", [p, p], i)
        self._declare(self.libc, "pset_assign", [i, i, ctypes.POINTER(i)], i)
        self._declare(self.libc, "pset_bind", [i, i, i, ctypes.POINTER(i)], i)
        self._messages = threading.local()
        # Kept referenced: libcpc calls it for as long as the handle lives.
        self._handler = _ERRHNDLR(self._on_error)

    @staticmethod
    def _declare(lib, name, argtypes, restype):
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype

    def _on_error(self, fn, subcode, fmt, ap):
        # The messages have no conversions (libcpc.c ``errstr``): fmt is the text.
        text = (fmt or b"").decode("utf-8", "replace").strip()
        self._messages.last = (subcode, text)

    def _fail(self, what):
        code = ctypes.get_errno() or errno.EIO
        subcode, text = getattr(self._messages, "last", (None, ""))
        self._messages.last = (None, "")
        error = OSError(code, "%s: %s%s" % (what, os.strerror(code),
                                            " (%s)" % text if text else ""))
        error.subcode = subcode         # CPC_PBIND_FAILED, ...; None if libcpc gave none
        raise error

    def _check(self, result, what):
        if result != 0:
            self._fail(what)

    def open(self):
        handle = self.cpc.cpc_open(CPC_VER_CURRENT)
        if not handle:
            self._fail("cpc_open")
        self.cpc.cpc_seterrhndlr(handle, self._handler)
        return handle

    def close(self, handle):
        self.cpc.cpc_close(handle)

    def cciname(self, handle):
        """The CPU's performance counter implementation name, e.g. "Intel
        Arch PerfMon v4 on Family 6 Model 85"."""
        return (self.cpc.cpc_cciname(handle) or b"").decode("ascii", "replace")

    def event_names(self, handle):
        """Every event this CPU's back end names, generic (PAPI_*) or not."""
        names = set()
        walker = _EVENT_WALKER(lambda arg, event: names.add(event.decode("ascii", "replace")))
        self.cpc.cpc_walk_events_all(handle, None, walker)
        self.cpc.cpc_walk_generic_events_all(handle, None, walker)
        return frozenset(names)

    def set_create(self, handle):
        made = self.cpc.cpc_set_create(handle)
        if not made:
            self._fail("cpc_set_create")
        return made

    def set_destroy(self, handle, cpc_set):
        self.cpc.cpc_set_destroy(handle, cpc_set)

    def add_request(self, handle, cpc_set, event):
        """The request's index in the set's buffers."""
        index = self.cpc.cpc_set_add_request(handle, cpc_set, event.encode("ascii"), 0,
                                             CPC_COUNT_USER, 0, None)
        if index < 0:
            self._fail("cpc_set_add_request(%s)" % event)
        return index

    def buf_create(self, handle, cpc_set):
        buf = self.cpc.cpc_buf_create(handle, cpc_set)
        if not buf:
            self._fail("cpc_buf_create")
        return buf

    def buf_destroy(self, handle, buf):
        self.cpc.cpc_buf_destroy(handle, buf)

    def bind_cpu(self, handle, cpu, cpc_set):
        self._check(self.cpc.cpc_bind_cpu(handle, cpu, cpc_set, 0), "cpc_bind_cpu(%d)" % cpu)

    def sample(self, handle, cpc_set, buf):
        self._check(self.cpc.cpc_set_sample(handle, cpc_set, buf), "cpc_set_sample")

    def buf_get(self, handle, buf, index):
        value = ctypes.c_uint64(0)
        self._check(self.cpc.cpc_buf_get(handle, buf, index, ctypes.byref(value)),
                    "cpc_buf_get")
        return value.value

    def unbind(self, handle, cpc_set):
        self._check(self.cpc.cpc_unbind(handle, cpc_set), "cpc_unbind")

    def pset_of(self, cpu):
        """The processor set ``cpu`` is in (PS_NONE: the default set)."""
        pset = ctypes.c_int(PS_NONE)
        self._check(self.libc.pset_assign(PS_QUERY, cpu, ctypes.byref(pset)),
                    "pset_assign(PS_QUERY, %d)" % cpu)
        return pset.value

    def bind_self_to_pset(self, pset):
        """Bind the calling LWP to processor set ``pset``."""
        self._check(self.libc.pset_bind(pset, P_LWPID, P_MYID, None),
                    "pset_bind(%d, P_LWPID, P_MYID)" % pset)

    def has_privilege(self, name):
        """priv_ineffect(3C); True where libc cannot tell."""
        function = getattr(self.libc, "priv_ineffect", None)
        if function is None:
            return True
        function.argtypes, function.restype = [ctypes.c_char_p], ctypes.c_int
        return bool(function(name.encode("ascii")))


def load_libcpc():
    """LibCpc of this system; Unsupported where libcpc cannot be loaded."""
    try:
        return LibCpc()
    except (OSError, AttributeError) as exc:
        raise Unsupported("%s: libcpc.so.1 cannot be loaded (%s)" % (NO_COUNTERS, exc)) from None


def _mapped(exc, cpu=None, privilege=CPU_PRIVILEGE, unsupported=()):
    """The tumbler exception for OSError ``exc`` of a libcpc or pset call;
    errnos in ``unsupported`` mean this system cannot count at all."""
    code, text = exc.errno, exc.strerror
    where = "" if cpu is None else "CPU %d: " % cpu
    if code in (errno.EACCES, errno.EPERM):
        return AccessDenied(where + text, privilege)
    if code == errno.EAGAIN:
        return PlatformError("%s%s: its counters are in use by another program (cpustat?)"
                             % (where, text))
    if code in unsupported:
        return Unsupported("%s: %s%s" % (NO_COUNTERS, where, text))
    return PlatformError(where + text)


def _bind_error(exc, cpu):
    """cpc_bind_cpu's errors: no device node (a non-global zone) or a set
    the CPU cannot program mean no counters; EINVAL from processor_bind
    (CPC_PBIND_FAILED: off-line CPU) does not."""
    unsupported = (errno.ENOENT, errno.ENXIO)
    if getattr(exc, "subcode", None) != CPC_PBIND_FAILED:
        unsupported += (errno.EINVAL,)
    return _mapped(exc, cpu, unsupported=unsupported)


def llc_miss_event(cciname, events):
    """(event, None) -- the LLC-miss event of the CPU libcpc calls
    ``cciname`` whose back end lists ``events`` -- or (None, why there is
    none), per CPU family (module doc)."""
    family = re.search(r"\bFamily ([0-9a-f]+)h\b", cciname)
    if cciname.startswith("Intel Arch PerfMon"):
        if INTEL_LLC_MISS in events:
            return INTEL_LLC_MISS, None
        return None, ("this Intel CPU (%s) does not have the architectural LLC-miss event "
                      "%s (CPUID leaf 0xA)" % (cciname, INTEL_LLC_MISS))
    if cciname == "Core Microarchitecture":
        return None, "Intel Core microarchitecture CPUs have no LLC-miss event in libcpc"
    if cciname.startswith("AMD") and family and family.group(1) == "10":
        if AMD_10H_LLC_MISS in events:
            return AMD_10H_LLC_MISS, None
        return None, "this AMD family 10h CPU does not list %s" % AMD_10H_LLC_MISS
    if family and int(family.group(1), 16) >= 0x17:
        return None, ("Zen CPUs (%s) have no LLC-miss event in libcpc: no PAPI_l3_tcm in "
                      "their tables, and tumbler picks no model-specific event" % cciname)
    return None, "tumbler knows no LLC-miss event for %s" % (cciname or "this CPU")


CounterEvents = collections.namedtuple("CounterEvents", "cycles misses cpu")


def choose_events(lib, handle):
    """CounterEvents: the cycle and LLC-miss events of this CPU, and its
    name (cpc_cciname); Unsupported, saying why, where it has none."""
    cciname = lib.cciname(handle)
    events = lib.event_names(handle)
    if CYCLE_EVENT not in events:
        raise Unsupported("%s: this CPU (%s) does not list %s"
                          % (NO_COUNTERS, cciname or "?", CYCLE_EVENT))
    misses, why = llc_miss_event(cciname, events)
    if misses is None:
        raise Unsupported("%s: %s" % (NO_COUNTERS, why))
    return CounterEvents(CYCLE_EVENT, misses, cciname)


def _open(lib):
    """A libcpc handle; cpc_open fails with ENOSYS where the CPU has no
    counters the kernel knows (libcpc.c)."""
    try:
        return lib.open()
    except OSError as exc:
        raise _mapped(exc, unsupported=(errno.ENOSYS, errno.ENOTSUP, errno.EINVAL)) from None


class _CpuLwp:
    """The LWP that binds one CPU's counters and samples them (see the
    module doc: only the binding LWP can)."""

    STOP = object()

    def __init__(self, lib, handle, cpu, events):
        self.lib, self.handle, self.cpu, self.events = lib, handle, cpu, events
        self.requests, self.replies = queue.SimpleQueue(), queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="tumbler-cpc-%d" % cpu,
                                       daemon=True)
        self.thread.start()
        self.answer(0)              # the binding's outcome (raises if it failed)

    def ask(self, token):
        self.requests.put(token)

    def answer(self, token):
        """The reply to request ``token``; replies to older, timed-out
        requests are dropped."""
        while True:
            try:
                got, value = self.replies.get(timeout=REPLY_TIMEOUT)
            except queue.Empty:
                raise PlatformError("CPU %d: its counting thread did not answer in %d s"
                                    % (self.cpu, REPLY_TIMEOUT)) from None
            if got == token:
                if isinstance(value, BaseException):
                    raise value
                return value

    def _run(self):
        lib, handle, cpu = self.lib, self.handle, self.cpu
        cpc_set = buf = None
        try:
            try:
                pset = lib.pset_of(cpu)
                if pset != PS_NONE:
                    lib.bind_self_to_pset(pset)
            except OSError as exc:
                if exc.errno == errno.ENOTSUP:      # pset_bind, pools enabled (pset.c)
                    raise Unsupported(POOLS_MESSAGE) from None
                raise _mapped(exc, cpu, privilege=PSET_PRIVILEGE) from None
            try:
                cpc_set = lib.set_create(handle)
                cycles = lib.add_request(handle, cpc_set, self.events.cycles)
                misses = lib.add_request(handle, cpc_set, self.events.misses)
                buf = lib.buf_create(handle, cpc_set)
            except OSError as exc:
                raise _mapped(exc, cpu) from None
            try:
                lib.bind_cpu(handle, cpu, cpc_set)
            except OSError as exc:
                raise _bind_error(exc, cpu) from None
        except Exception as exc:       # the LWP's pset binding ends with it
            self._free(buf, cpc_set)
            self.replies.put((0, exc))
            return
        self.replies.put((0, None))
        token = self.requests.get()
        while token is not self.STOP:
            try:
                lib.sample(handle, cpc_set, buf)
                value = (lib.buf_get(handle, buf, misses), lib.buf_get(handle, buf, cycles))
            except OSError as exc:
                value = _mapped(exc, cpu)
            self.replies.put((token, value))
            token = self.requests.get()
        try:
            lib.unbind(handle, cpc_set)         # also undoes the processor binding
        except OSError:
            pass
        self._free(buf, cpc_set)
        self.replies.put((self.STOP, None))

    def _free(self, buf, cpc_set):
        if buf is not None:
            self.lib.buf_destroy(self.handle, buf)
        if cpc_set is not None:
            self.lib.set_destroy(self.handle, cpc_set)


class CpuCounters:
    """Cycles and LLC misses counted on each of ``cpus`` since it was
    opened, whoever runs there.  Raises Unsupported, AccessDenied or
    PlatformError (nothing stays bound then).  ``lib``: a LibCpc."""

    def __init__(self, cpus, lib=None):
        self.lib = lib if lib is not None else load_libcpc()
        self.handle = _open(self.lib)
        self.lwps = {}
        self._token = 0
        try:
            self.events = choose_events(self.lib, self.handle)
            #: One line on what is counted, for whoever reports it.
            self.note = "LLC misses counted as %s, cycles as %s (%s)" % (
                self.events.misses, self.events.cycles, self.events.cpu)
            for cpu in sorted(cpus):
                self.lwps[cpu] = _CpuLwp(self.lib, self.handle, cpu, self.events)
        except BaseException:
            self.close()
            raise

    def read(self):
        """{cpu: (misses, cycles)}, cumulative since the counters opened."""
        self._token += 1
        for lwp in self.lwps.values():
            lwp.ask(self._token)
        return {cpu: lwp.answer(self._token) for cpu, lwp in self.lwps.items()}

    def close(self):
        """Unbind every CPU, then release libcpc (kept if an LWP hangs)."""
        if self.handle is None:
            return
        for lwp in self.lwps.values():
            lwp.ask(_CpuLwp.STOP)
        hung = False
        for lwp in self.lwps.values():
            try:
                lwp.answer(_CpuLwp.STOP)
            except PlatformError:
                hung = True
        self.lwps = {}
        if not hung:
            self.lib.close(self.handle)
        self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ProgramCounters:
    """Per-program counting is not possible here without stopping the
    program (module doc); always raises Unsupported."""

    def __init__(self, pid, *args, **kwargs):
        raise Unsupported(PER_PROGRAM_MESSAGE)


_UNKNOWN = object()
_support = _UNKNOWN


def probe_support(lib=None):
    """None if CpuCounters can work here, else the one-line reason; cached
    unless ``lib`` is given.  It binds nothing -- a CPU binding would stop
    every per-LWP counter on the system -- so it checks libcpc, the two
    events (``choose_events``, and that a set takes them) and the cpc_cpu
    privilege only."""
    global _support
    if lib is None and _support is not _UNKNOWN:
        return _support
    reason = None
    try:
        cpc = lib if lib is not None else load_libcpc()
        handle = _open(cpc)
        try:
            events = choose_events(cpc, handle)
            cpc_set = cpc.set_create(handle)
            try:
                cpc.add_request(handle, cpc_set, events.cycles)
                cpc.add_request(handle, cpc_set, events.misses)
            finally:
                cpc.set_destroy(handle, cpc_set)
        except OSError as exc:
            raise _mapped(exc) from None
        finally:
            cpc.close(handle)
        if not cpc.has_privilege("cpc_cpu"):
            raise AccessDenied("counting per CPU needs the cpc_cpu privilege", CPU_PRIVILEGE)
    except PlatformError as exc:
        reason = str(exc)
    if lib is None:
        _support = reason
    return reason
