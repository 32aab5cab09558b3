"""Hardware counters: Linux perf_event_open groups, illumos libcpc per CPU.

This VM has no PMU, so the Linux parser runs on recorded group reads (built
with struct.pack, field by field as include/uapi/linux/perf_event.h lays
them out), errno mapping on a fake syscall, and the attr layout and group
read format on the real kernel with *software* events, which need no PMU.
illumos runs against fake libcpc/libc objects that record every call.
"""

import ctypes
import errno
import os
import re
import shutil
import struct
import subprocess
import threading
import time

import pytest

from support.counters import CPUS, HANDLE, FakeLibs, FakeSyscall, Reads, SoftwareEvents, group_read
from tumbler.engine.share import llc_rate
from tumbler.platform.base import AccessDenied, PlatformError, Unsupported
from tumbler.platform.illumos import counters as cpc
from tumbler.platform.linux import counters as perf

# -- Linux: recorded group reads -----------------------------------------------


def test_group_read_that_always_ran_is_taken_as_is():
    assert perf.parse_group_read(group_read(4_000_000, 12_000, 10**9, 10**9)) == (
        4_000_000, 12_000)


def test_multiplexed_group_read_is_scaled_by_enabled_over_running():
    # Counted a quarter of the time it was enabled: four times the counts.
    data = group_read(1_000_000, 2_500, enabled=800_000, running=200_000)
    assert perf.parse_group_read(data) == (4_000_000, 10_000)


def test_group_that_never_ran_counts_nothing():
    assert perf.parse_group_read(group_read(0, 0, enabled=5_000, running=0)) == (0, 0)


def test_malformed_group_reads_are_refused():
    with pytest.raises(ValueError):
        perf.parse_group_read(b"")
    with pytest.raises(ValueError):
        perf.parse_group_read(struct.pack("=QQQQ", 1, 10, 10, 7))      # one value only
    with pytest.raises(ValueError):
        perf.parse_group_read(struct.pack("=QQQQ", 2, 10, 10, 7))      # cut short


def test_llc_rate_of_parsed_counts_is_misses_per_cycle():
    cycles, misses = perf.parse_group_read(group_read(1_000_000, 2_500, 800_000, 200_000))
    assert llc_rate(misses, cycles) == pytest.approx(2_500 / 1_000_000)
    assert llc_rate(*reversed(perf.parse_group_read(group_read(0, 0, 9, 0)))) is None


# -- Linux: the attr -----------------------------------------------------------

def test_attr_layout_matches_perf_event_h():
    attr = perf.PerfEventAttr
    assert ctypes.sizeof(attr) == perf.PERF_ATTR_SIZE_VER5 == 112
    offsets = {"type": 0, "size": 4, "config": 8, "sample_period": 16, "sample_type": 24,
               "read_format": 32, "flags": 40, "wakeup_events": 48, "bp_type": 52,
               "config1": 56, "config2": 64, "branch_sample_type": 72,
               "sample_regs_user": 80, "sample_stack_user": 88, "clockid": 92,
               "sample_regs_intr": 96, "aux_watermark": 104, "sample_max_stack": 108}
    assert {name: getattr(attr, name).offset for name in offsets} == offsets


C_CHECK = r"""
#include <linux/perf_event.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    struct perf_event_attr a;
    unsigned long long bits = 0;
    memset(&a, 0, sizeof a);
    a.exclude_kernel = 1; a.exclude_hv = 1;
    memcpy(&bits, (char *)&a + 40, 8);
    printf("%zu %zu %zu %zu %zu %llu %d %d %d\n", offsetof(struct perf_event_attr, read_format),
           offsetof(struct perf_event_attr, wakeup_events),
           offsetof(struct perf_event_attr, config1),
           offsetof(struct perf_event_attr, aux_watermark),
           offsetof(struct perf_event_attr, sample_max_stack), bits,
           PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
           PERF_COUNT_HW_CACHE_MISSES, PERF_ATTR_SIZE_VER5);
    return 0;
}
"""


@pytest.mark.skipif(not (shutil.which("cc") and os.path.exists("/usr/include/linux/perf_event.h")),
                    reason="needs a C compiler and the kernel headers")
def test_attr_agrees_with_this_machines_header(tmp_path):
    source = tmp_path / "attr.c"
    source.write_text(C_CHECK)
    subprocess.run(["cc", "-o", str(tmp_path / "attr"), str(source)], check=True)
    out = subprocess.run([str(tmp_path / "attr")], capture_output=True, text=True, check=True)
    attr = perf.PerfEventAttr
    assert [int(x) for x in out.stdout.split()] == [
        attr.read_format.offset, attr.wakeup_events.offset, attr.config1.offset,
        attr.aux_watermark.offset, attr.sample_max_stack.offset,
        perf.ATTR_EXCLUDE_KERNEL | perf.ATTR_EXCLUDE_HV, perf.READ_FORMAT,
        perf.PERF_COUNT_HW_CACHE_MISSES, perf.PERF_ATTR_SIZE_VER5]


# -- Linux: a fake syscall -----------------------------------------------------


def test_each_thread_gets_a_cycles_led_group(monkeypatch):
    monkeypatch.setattr(perf, "machine", lambda: "x86_64")
    syscall, closed = FakeSyscall(), []
    counters = perf.ProgramCounters(42, syscall=syscall, close=closed.append)
    assert counters.add(43) is True
    leader, member = syscall.calls
    assert leader["number"] == 298
    assert (leader["config"], member["config"]) == (perf.PERF_COUNT_HW_CPU_CYCLES,
                                                    perf.PERF_COUNT_HW_CACHE_MISSES)
    assert (leader["group_fd"], member["group_fd"]) == (-1, 101)
    for call in (leader, member):
        assert (call["type"], call["size"], call["tid"], call["cpu"]) == (0, 112, 43, -1)
        assert call["read_format"] == 8 | 1 | 2
        assert call["flags"] == (1 << 5) | (1 << 6)     # exclude_kernel, exclude_hv; enabled
        assert call["open_flags"] == perf.PERF_FLAG_FD_CLOEXEC
    assert counters.add(43) is True and len(syscall.calls) == 2     # already counted
    counters.close()
    assert closed == [101, 102]


def test_aarch64_uses_its_own_syscall_number(monkeypatch):
    monkeypatch.setattr(perf, "machine", lambda: "aarch64")
    syscall = FakeSyscall()
    perf.ProgramCounters(1, syscall=syscall, close=lambda fd: None).add(1)
    assert syscall.calls[0]["number"] == 241


def test_unknown_machine_has_no_counters(monkeypatch):
    monkeypatch.setattr(perf, "machine", lambda: "sparc64")
    with pytest.raises(Unsupported, match="no hardware counters"):
        perf.ProgramCounters(1, syscall=FakeSyscall()).add(1)


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL])
def test_no_pmu_is_unsupported(code):
    with pytest.raises(Unsupported, match="^no hardware counters: .*CPU cycles"):
        perf.ProgramCounters(7, syscall=FakeSyscall(code)).add(8)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM])
def test_refusal_is_access_denied_naming_the_privilege(code):
    with pytest.raises(AccessDenied) as caught:
        perf.ProgramCounters(7, syscall=FakeSyscall(code)).add(8)
    assert "CAP_PERFMON" in caught.value.privilege
    assert "perf_event_paranoid" in caught.value.privilege


def test_thread_gone_is_skipped():
    syscall = FakeSyscall(errno.ESRCH)
    counters = perf.ProgramCounters(7, syscall=syscall)
    assert counters.add(8) is False
    assert counters.read() == (0, 0)


def test_failed_member_closes_its_leader():
    closed = []
    counters = perf.ProgramCounters(7, syscall=FakeSyscall(None, errno.ENOENT),
                                    close=closed.append)
    with pytest.raises(Unsupported, match="LLC misses"):
        counters.add(8)
    assert closed == [101]
    closed.clear()
    counters = perf.ProgramCounters(7, syscall=FakeSyscall(None, errno.ESRCH),
                                    close=closed.append)
    assert counters.add(8) is False and closed == [101]


def test_einval_once_counters_opened_is_not_taken_for_missing_hardware():
    counters = perf.ProgramCounters(7, syscall=FakeSyscall(None, None, errno.EINVAL),
                                    close=lambda fd: None)
    assert counters.add(8)
    with pytest.raises(PlatformError) as caught:
        counters.add(9)
    assert not isinstance(caught.value, Unsupported)


def test_other_errors_are_platform_errors():
    with pytest.raises(PlatformError, match="Too many open files"):
        perf.ProgramCounters(7, syscall=FakeSyscall(errno.EMFILE)).add(8)


def test_read_sums_threads_and_keeps_what_forgotten_threads_counted():
    reads = Reads()
    counters = perf.ProgramCounters(7, syscall=FakeSyscall(), read=reads,
                                    close=lambda fd: None)
    counters.add(8)                                      # leader fd 101
    counters.add(9)                                      # leader fd 103
    reads.queued[101] = [group_read(1000, 10, 5, 5), group_read(3000, 30, 5, 5)]
    reads.queued[103] = [group_read(500, 5, 5, 5)]
    assert counters.read() == (15, 1500)
    counters.forget(8)                                   # last read: 3000 cycles, 30 misses
    assert counters.read() == (35, 3500)
    counters.forget(9)
    counters.forget(9)                                   # twice is harmless
    assert counters.read() == (35, 3500)


def test_read_never_goes_backwards():
    reads = Reads()
    counters = perf.ProgramCounters(7, syscall=FakeSyscall(), read=reads,
                                    close=lambda fd: None)
    counters.add(8)
    reads.queued[101] = [group_read(1000, 100, 4, 1),    # multiplexed estimate: x4
                         group_read(1100, 101, 5, 5),    # ran since: estimate dips
                         OSError(errno.EIO, "gone"),     # a failing read
                         b""]                            # an error-state event reads 0 bytes
    assert counters.read() == (400, 4000)
    assert counters.read() == (400, 4000)
    assert counters.read() == (400, 4000)
    assert counters.read() == (400, 4000)


def test_probe_support_names_the_reason():
    assert perf.probe_support(syscall=FakeSyscall()) is None
    reason = perf.probe_support(syscall=FakeSyscall(errno.ENOENT))
    assert reason.startswith("no hardware counters: ")
    assert "No such file or directory" in reason
    assert "Permission denied" in perf.probe_support(syscall=FakeSyscall(errno.EACCES))


# -- Linux: this machine -------------------------------------------------------

def test_real_thread_counts_or_is_unsupported():
    counters = perf.ProgramCounters(os.getpid())
    try:
        added = counters.add(threading.get_native_id())
    except Unsupported as exc:
        assert str(exc).startswith("no hardware counters")
        return
    finally:
        counters.close()
    assert added


def test_probe_support_on_this_machine_is_cached():
    first = perf.probe_support()
    assert first is None or first.startswith("no hardware counters") or "Permission" in first
    assert perf.probe_support() is first


def spin(cpu_seconds):
    """Use this much CPU time (not wall time: the test may share its CPUs)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def test_kernel_accepts_the_layout_and_group_format():
    counters = perf.ProgramCounters(os.getpid(), syscall=SoftwareEvents())
    try:
        if not counters.add(threading.get_native_id()):
            pytest.fail("own thread reported gone")
    except (AccessDenied, Unsupported) as exc:
        pytest.skip("software events refused here: %s" % exc)
    spin(0.02)
    for _ in range(5):
        time.sleep(0.001)                            # a context switch each
    switches, cpu_ns = counters.read()
    assert cpu_ns >= 15_000_000                      # cpu-clock, in ns
    # exclude_kernel: the program's own events only, and a context switch
    # is the kernel's (counters.py) -- counted, the flag would be lost
    assert switches == 0
    started, go = threading.Event(), threading.Event()

    def work():
        started.set()
        go.wait()
        spin(0.02)
    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    assert counters.add(worker.native_id)
    go.set()
    worker.join()                                    # its counts outlive it
    _, with_worker = counters.read()
    assert with_worker >= cpu_ns + 15_000_000
    counters.forget(worker.native_id)
    _, after = counters.read()
    assert after >= with_worker
    counters.close()


# -- illumos: fake libcpc and libc ---------------------------------------------


def test_cpu_counters_make_cpustats_calls_in_order():
    libs = FakeLibs(psets={2: 5})
    counters = cpc.CpuCounters([2], lib=libs.lib())
    main = threading.current_thread().name
    assert [name for who, name, args in libs.calls if who == main] == [
        "cpc_open", "cpc_seterrhndlr", "cpc_cciname", "cpc_walk_events_all",
        "cpc_walk_generic_events_all"]
    assert libs.calls[1][2] == (HANDLE, libs.handler)
    lwp = "tumbler-cpc-2"
    s, b = 0x2001, 0x2002
    bind = [("pset_assign", (cpc.PS_QUERY, 2, "ptr")),
            ("pset_bind", (5, cpc.P_LWPID, cpc.P_MYID, None)),
            ("cpc_set_create", (HANDLE,)),
            ("cpc_set_add_request", (HANDLE, s, b"PAPI_tot_cyc", 0, cpc.CPC_COUNT_USER, 0, None)),
            ("cpc_set_add_request", (HANDLE, s, b"longest_lat_cache.miss", 0, cpc.CPC_COUNT_USER,
                                     0, None)),
            ("cpc_buf_create", (HANDLE, s)),
            ("cpc_bind_cpu", (HANDLE, 2, s, 0))]
    assert [(name, args) for who, name, args in libs.calls if who == lwp] == bind
    assert counters.read() == {2: (21, 3000)}
    assert counters.read() == {2: (42, 6000)}           # cumulative
    counters.close()
    sample = [("cpc_set_sample", (HANDLE, s, b)), ("cpc_buf_get", (HANDLE, b, 1, "ptr")),
              ("cpc_buf_get", (HANDLE, b, 0, "ptr"))]
    assert [(name, args) for who, name, args in libs.calls if who == lwp] == (
        bind + sample * 2 + [("cpc_unbind", (HANDLE, s)), ("cpc_buf_destroy", (HANDLE, b)),
                             ("cpc_set_destroy", (HANDLE, s))])
    assert libs.calls[-1][1:] == ("cpc_close", (HANDLE,))
    counters.close()                                   # twice is harmless
    assert libs.names().count("cpc_close") == 1


def test_each_cpu_is_counted_by_its_own_lwp():
    libs = FakeLibs()
    with cpc.CpuCounters({3, 0}, lib=libs.lib()) as counters:
        assert counters.read() == {0: (7, 1000), 3: (28, 4000)}
    for cpu in (0, 3):
        names = libs.names("tumbler-cpc-%d" % cpu)
        assert names[0] == "pset_assign" and "pset_bind" not in names   # default set
        assert names.count("cpc_bind_cpu") == 1 and names.count("cpc_set_sample") == 1
        assert names[-3:] == ["cpc_unbind", "cpc_buf_destroy", "cpc_set_destroy"]


@pytest.mark.parametrize("cpu, event", [
    ("intel", "longest_lat_cache.miss"),
    ("intel-nehalem-table", "longest_lat_cache.miss"),   # PAPI_l3_tcm: the same event
    ("amd-10h", "PAPI_l3_tcm"),
])
def test_the_llc_miss_event_is_chosen_per_cpu_family_and_said(cpu, event):
    libs = FakeLibs(cpu=cpu)
    with cpc.CpuCounters([1], lib=libs.lib()) as counters:
        assert counters.read() == {1: (14, 2000)}
    added = [args[2] for _, name, args in libs.calls if name == "cpc_set_add_request"]
    assert added == [b"PAPI_tot_cyc", event.encode()]         # nothing tried and refused
    assert counters.note == "LLC misses counted as %s, cycles as PAPI_tot_cyc (%s)" % (
        event, CPUS[cpu][0])


@pytest.mark.parametrize("cpu, reason", [
    ("intel-no-llc", "does not have the architectural LLC-miss event longest_lat_cache.miss"),
    ("core2", "Intel Core microarchitecture CPUs have no LLC-miss event"),
    ("zen2", r"Zen CPUs \(AMD Family 17h\) have no LLC-miss event in libcpc"),
    ("hygon", r"Zen CPUs \(Hygon Family 18h\)"),
    ("opteron", "knows no LLC-miss event for AMD Opteron & Athlon64"),
])
def test_a_cpu_without_an_llc_miss_event_says_so_and_binds_nothing(cpu, reason):
    libs = FakeLibs(cpu=cpu)
    with pytest.raises(Unsupported, match="^no hardware counters: .*" + reason) as caught:
        cpc.CpuCounters([0], lib=libs.lib())
    assert "\n" not in str(caught.value)
    names = libs.names()
    assert "cpc_set_create" not in names and "cpc_bind_cpu" not in names
    assert names[-1] == "cpc_close"
    assert re.search(reason, cpc.probe_support(lib=FakeLibs(cpu=cpu).lib()))


def test_an_event_listed_but_refused_is_an_error_not_a_silent_other_choice(capfd):
    libs = FakeLibs(refuse=("longest_lat_cache.miss",))
    with pytest.raises(PlatformError, match="CPU 0: cpc_set_add_request.*Unknown event"):
        cpc.CpuCounters([0], lib=libs.lib())
    assert capfd.readouterr().err == ""                # libcpc's complaint was caught
    assert libs.names()[-1] == "cpc_close"


@pytest.mark.parametrize("fail, raised, text", [
    ({"cpc_bind_cpu": (errno.EACCES, None)}, AccessDenied, "Permission denied"),
    ({"cpc_bind_cpu": (errno.EAGAIN, None)}, PlatformError, "in use by another program"),
    ({"cpc_bind_cpu": (errno.ENOENT, None)}, Unsupported, "no hardware counters"),
    ({"cpc_bind_cpu": (errno.EINVAL, 5)}, Unsupported, "Hardware resource unavailable"),
    ({"cpc_bind_cpu": (errno.EINVAL, 10)}, PlatformError, "Couldn't bind LWP"),
    ({"pset_bind": (errno.EPERM, None)}, AccessDenied, "pset_bind"),
    ({"pset_assign": (errno.EINVAL, None)}, PlatformError, "CPU 1: pset_assign"),
])
def test_errors_are_mapped(fail, raised, text):
    libs = FakeLibs(psets={1: 4}, fail=fail)
    with pytest.raises(PlatformError) as caught:
        cpc.CpuCounters([1], lib=libs.lib())
    assert type(caught.value) is raised
    assert text in str(caught.value)
    if raised is AccessDenied:
        expected = cpc.PSET_PRIVILEGE if "pset_bind" in fail else cpc.CPU_PRIVILEGE
        assert caught.value.privilege == expected
    assert libs.names()[-1] == "cpc_close"


def test_pset_bind_while_resource_pools_are_enabled_is_one_clear_line():
    # pset_bind returns ENOTSUP while pools are enabled
    # (usr/src/uts/common/syscall/pset.c, pset_bind: pool_state == POOL_ENABLED)
    libs = FakeLibs(psets={1: 4}, fail={"pset_bind": (errno.ENOTSUP, None)})
    with pytest.raises(Unsupported) as caught:
        cpc.CpuCounters([1], lib=libs.lib())
    assert str(caught.value) == ("resource pools are enabled: use poolbind or disable pools "
                                 "(`pooladm -d`, or `svcadm disable pools`)")
    assert "cpc_bind_cpu" not in libs.names() and libs.names()[-1] == "cpc_close"


def test_a_failing_cpu_unbinds_the_ones_already_bound():
    libs = FakeLibs()

    def bind(handle, cpu, cpc_set, flags):
        if cpu == 1:
            ctypes.set_errno(errno.EAGAIN)
            return -1
        libs.set_cpu[cpc_set] = cpu
        return 0
    libs._cpc_bind_cpu = bind
    with pytest.raises(PlatformError, match="CPU 1: .*in use"):
        cpc.CpuCounters([0, 1], lib=libs.lib())
    assert "cpc_unbind" in libs.names("tumbler-cpc-0")
    assert libs.names()[-1] == "cpc_close"


def test_cpc_open_without_counters_is_unsupported():
    libs = FakeLibs(open_errno=errno.ENOSYS)
    with pytest.raises(Unsupported, match="no hardware counters: cpc_open"):
        cpc.CpuCounters([0], lib=libs.lib())


def test_sampling_error_is_mapped_and_counters_stay_usable():
    libs = FakeLibs()
    with cpc.CpuCounters([0], lib=libs.lib()) as counters:
        libs.fail["cpc_set_sample"] = (errno.EAGAIN, None)
        with pytest.raises(PlatformError, match="CPU 0"):
            counters.read()
        del libs.fail["cpc_set_sample"]
        assert counters.read() == {0: (7, 1000)}


def test_illumos_cannot_count_one_program():
    with pytest.raises(Unsupported, match="libpctx"):
        cpc.ProgramCounters(42)


def test_illumos_probe_binds_nothing():
    libs = FakeLibs()
    assert cpc.probe_support(lib=libs.lib()) is None
    assert "cpc_bind_cpu" not in libs.names()
    assert libs.names()[-2:] == ["cpc_close", "priv_ineffect"]
    assert "cpc_cpu" in cpc.probe_support(lib=FakeLibs(privileged=False).lib())
    assert "no LLC-miss event" in cpc.probe_support(lib=FakeLibs(cpu="zen2").lib())
    assert cpc.probe_support(lib=FakeLibs(open_errno=errno.ENOSYS).lib()).startswith(
        "no hardware counters")


def test_illumos_probe_on_linux_says_libcpc_is_missing():
    reason = cpc.probe_support()
    assert reason.startswith("no hardware counters: libcpc.so.1")
    assert cpc.probe_support() is reason
