"""Stand-ins for the hardware counters: Linux perf_event_open (a fake
system call, recorded group reads, the real call with software events)
and illumos libcpc/libc (fake libraries that record every call)."""

import ctypes
import errno
import struct
import threading

from tumbler.platform.illumos import counters as cpc
from tumbler.platform.linux import counters as perf


def group_read(cycles, misses, enabled, running):
    """One read() of a group leader: nr, time_enabled, time_running, values."""
    return struct.pack("=QQQQQ", 2, enabled, running, cycles, misses)


class FakeSyscall:
    """perf_event_open that records its calls; fails with ``errors`` (one
    errno per call, None = succeed) and otherwise hands out fds from 100."""

    def __init__(self, *errors):
        self.errors = list(errors)
        self.calls = []
        self.next_fd = 100

    def __call__(self, number, attr, tid, cpu, group_fd, flags):
        event = attr._obj
        self.calls.append({"number": number.value, "type": event.type, "size": event.size,
                           "config": event.config, "read_format": event.read_format,
                           "flags": event.flags, "tid": tid.value, "cpu": cpu.value,
                           "group_fd": group_fd.value, "open_flags": flags.value})
        code = self.errors.pop(0) if self.errors else None
        if code is not None:
            ctypes.set_errno(code)
            return -1
        self.next_fd += 1
        return self.next_fd


class Reads:
    """os.read stand-in: each fd answers its queued group reads in turn
    (the last one again when the queue runs out)."""

    def __init__(self):
        self.queued = {}

    def __call__(self, fd, size):
        queue = self.queued[fd]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class SoftwareEvents:
    """The real syscall with the attr's type switched to PERF_TYPE_SOFTWARE
    (config 0 = cpu-clock, 3 = context-switches): the kernel then checks
    our layout, flags, grouping and read format without needing a PMU."""

    def __call__(self, number, attr, tid, cpu, group_fd, flags):
        attr._obj.type = 1
        return perf.libc_syscall()(number, attr, tid, cpu, group_fd, flags)


ILLUMOS_CPC = ("cpc_open", "cpc_close", "cpc_seterrhndlr", "cpc_cciname", "cpc_walk_events_all",
               "cpc_walk_generic_events_all", "cpc_set_create", "cpc_set_destroy",
               "cpc_set_add_request", "cpc_buf_create", "cpc_buf_destroy", "cpc_bind_cpu",
               "cpc_set_sample", "cpc_buf_get", "cpc_unbind")


HANDLE = 0x1000


# What cpc_cciname and the two event walks give on each CPU family, as
# illumos-gate's back ends build them (usr/src/uts/intel/pcbe/core_pcbe.c
# core_pcbe_init, opteron_pcbe.c opt_pcbe_init): written from those
# sources, not recorded on the CPUs -- there was no illumos machine.
CPUS = {
    # Skylake-SP: architectural events whose CPUID bit is clear, the fixed
    # counters, and the generic names of the first two
    "intel": ("Intel Arch PerfMon v4 on Family 6 Model 85",
              ("cpu_clk_unhalted.thread_p", "inst_retired.any_p", "cpu_clk_unhalted.ref_p",
               "longest_lat_cache.reference", "longest_lat_cache.miss",
               "br_inst_retired.all_branches", "br_misp_retired.all_branches",
               "instr_retired.any", "cpu_clk_unhalted.thread", "cpu_clk_unhalted.ref",
               "PAPI_tot_cyc", "PAPI_tot_ins")),
    # CPUID leaf 0xA sets the LLC bits: those two are not listed
    "intel-no-llc": ("Intel Arch PerfMon v2 on Family 6 Model 28",
                     ("cpu_clk_unhalted.thread_p", "inst_retired.any_p", "cpu_clk_unhalted.ref_p",
                      "br_inst_retired.all_branches", "br_misp_retired.all_branches",
                      "PAPI_tot_cyc", "PAPI_tot_ins")),
    # an illumos that still had GENERICEVENTS_FAM6_NHM: both names, one event
    "intel-nehalem-table": ("Intel Arch PerfMon v3 on Family 6 Model 44",
                            ("cpu_clk_unhalted.thread_p", "longest_lat_cache.miss",
                             "PAPI_l3_tcm", "PAPI_l3_tca", "PAPI_tot_cyc")),
    "core2": ("Core Microarchitecture", ("cpu_clk_unhalted", "l2_rqsts", "PAPI_l2_tcm",
                                         "PAPI_tot_cyc")),
    "amd-10h": ("AMD Family 10h", ("BU_cpu_clk_unhalted", "L3_miss", "L3_read_req",
                                   "PAPI_tot_cyc", "PAPI_l3_tcm", "PAPI_l3_tcr")),
    "zen2": ("AMD Family 17h", ("LsNotHaltedCyc", "ExRetInstr", "ExRetBrn", "PAPI_br_cn",
                                "PAPI_br_ins", "PAPI_tot_cyc", "PAPI_tot_ins", "PAPI_tlb_dm")),
    "hygon": ("Hygon Family 18h", ("LsNotHaltedCyc", "PAPI_tot_cyc", "PAPI_tot_ins")),
    "opteron": ("AMD Opteron & Athlon64", ("BU_cpu_clk_unhalted", "DC_miss", "PAPI_tot_cyc",
                                           "PAPI_l2_dcm")),
}


class FakeLibs:
    """libcpc.so.1 and libc.so.1 stand-ins: plain functions (ctypes sets
    argtypes on them), calls recorded with the calling thread's name."""

    def __init__(self, cpu="intel", psets=None, fail=None, open_errno=None, privileged=True,
                 refuse=()):
        self.cciname, self.events = CPUS[cpu]
        self.refuse = refuse            # events listed but refused by cpc_set_add_request
        self.psets = psets or {}
        self.fail = fail or {}          # call name -> (errno, libcpc subcode or None)
        self.open_errno, self.privileged = open_errno, privileged
        self.calls, self.lock = [], threading.Lock()
        self.handler = None
        self.made = 0
        self.set_cpu, self.buf_set, self.samples, self.requests = {}, {}, {}, {}
        self.cpc, self.libc = type("Cpc", (), {})(), type("Libc", (), {})()
        for name in ILLUMOS_CPC:
            setattr(self.cpc, name, self._recorder(name))
        for name in ("pset_assign", "pset_bind", "priv_ineffect"):
            setattr(self.libc, name, self._recorder(name))

    def lib(self):
        return cpc.LibCpc(cpc=self.cpc, libc=self.libc)

    def names(self, thread=None):
        return [name for who, name, _ in self.calls if thread in (None, who)]

    def _recorder(self, name):
        def call(*args):
            shown = tuple("ptr" if type(a).__name__ == "CArgObject" else a for a in args)
            with self.lock:
                self.calls.append((threading.current_thread().name, name, shown))
            if name in self.fail:
                code, subcode = self.fail[name]
                if subcode is not None:
                    self.handler(name.encode(), subcode, b"Couldn't bind LWP to requested "
                                 b"processor\n" if subcode == 10 else b"Hardware resource "
                                 b"unavailable\n", None)
                ctypes.set_errno(code)
                return -1
            return getattr(self, "_" + name, lambda *a: 0)(*args)
        return call

    def _new(self):
        with self.lock:
            self.made += 1
            return 0x2000 + self.made

    def _cpc_open(self, version):
        if self.open_errno:
            ctypes.set_errno(self.open_errno)
            return None
        return HANDLE if version == 2 else None

    def _cpc_seterrhndlr(self, handle, handler):
        self.handler = handler
        return 0

    def _cpc_cciname(self, handle):
        return self.cciname.encode()

    def _cpc_walk_events_all(self, handle, arg, action):
        for event in self.events:
            if not event.startswith("PAPI"):
                action(arg, event.encode())

    def _cpc_walk_generic_events_all(self, handle, arg, action):
        for event in self.events:
            if event.startswith("PAPI"):
                action(arg, event.encode())

    def _cpc_set_create(self, handle):
        made = self._new()
        self.requests[made] = []
        return made

    def _cpc_set_add_request(self, handle, cpc_set, event, preset, flags, nattrs, attrs):
        if event.decode() not in self.events or event.decode() in self.refuse:
            self.handler(b"cpc_set_add_request", 1, b"Unknown event\n", None)
            ctypes.set_errno(errno.EINVAL)
            return -1
        self.requests[cpc_set].append(event.decode())
        return len(self.requests[cpc_set]) - 1

    def _cpc_buf_create(self, handle, cpc_set):
        buf = self._new()
        self.buf_set[buf] = cpc_set
        return buf

    def _cpc_bind_cpu(self, handle, cpu, cpc_set, flags):
        self.set_cpu[cpc_set] = cpu
        return 0

    def _cpc_set_sample(self, handle, cpc_set, buf):
        self.samples[cpc_set] = self.samples.get(cpc_set, 0) + 1
        return 0

    def _cpc_buf_get(self, handle, buf, index, value):
        cpc_set = self.buf_set[buf]
        event = self.requests[cpc_set][index]
        per_sample = 1000 if event == cpc.CYCLE_EVENT else 7
        value._obj.value = per_sample * (self.set_cpu[cpc_set] + 1) * self.samples[cpc_set]
        return 0

    def _pset_assign(self, pset, cpu, old):
        old._obj.value = self.psets.get(cpu, cpc.PS_NONE)
        return 0

    def _priv_ineffect(self, name):
        return int(self.privileged)
