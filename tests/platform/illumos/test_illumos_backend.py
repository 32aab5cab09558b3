"""illumos backend against fixture trees, a fake libc and a fake libkstat."""

import ctypes
import errno
import json
import os
import struct
import time

import pytest

from support import illumos_fixtures as fx
from support.illumos_fakes import PID, FakeLibc, lwp
from support.counters import FakeLibs
from tumbler.platform.illumos import counters as cpc
from tumbler.platform.illumos import kstat
from tumbler.platform.illumos import pset
from tumbler.platform.illumos import structs
from tumbler.platform.base import (AccessDenied, NoSuchProcess, PlatformError, ThreadTimes,
                                   Unmovable, Unsupported)
from tumbler.errors import UsageError
from tumbler.platform.illumos.backend import IllumosBackend
from tumbler.platform.illumos.prstat import PRSTAT_COLUMNS, microstate_percent
from tumbler.platform.illumos.topology import topology_from_cpu_info

S = fx.NANOSEC


@pytest.fixture
def tree(tmp_path):
    fx.write_kstat(str(tmp_path), fx.machine(2, 2, 2, 2, offline={15}))
    return tmp_path


def backend(tree, **kwargs):
    return IllumosBackend(str(tree), **kwargs)


# -- struct layouts ----------------------------------------------------------

def test_struct_sizes_match_procfs_h():
    assert structs.PRUSAGE.size == fx.PRUSAGE_SIZE == 504
    assert structs.LWPSINFO.size == fx.LWPSINFO_SIZE == 128
    assert structs.PSINFO_SIZE == fx.PSINFO_SIZE == 416
    assert structs.PRHEADER.size == 16
    # LSPAN(): round16(sizeof) + 16, never the struct size
    assert (structs.lspan(structs.PRUSAGE.size), structs.lspan(structs.LWPSINFO.size)) == (
        fx.PRUSAGE_SPAN, fx.LWPSINFO_SPAN)


def test_kstat_structs_match_kstat_h():
    assert ctypes.sizeof(kstat.Kstat) == 184
    assert kstat.Kstat.ks_next.offset == 8
    assert kstat.Kstat.ks_module.offset == 20
    assert kstat.Kstat.ks_instance.offset == 52
    assert kstat.Kstat.ks_type.offset == 87
    assert kstat.Kstat.ks_data.offset == 120
    assert kstat.KstatCtl.kc_chain.offset == 8


# -- sampling ----------------------------------------------------------------

def test_sample_parses_every_field(tree):
    fx.write_process(str(tree), PID, {"fname": "app"}, [
        lwp(1, utime_ns=3 * S + 5, stime_ns=S + 7, wtime_ns=250, ltime_ns=11,
            slptime_ns=13, ttime_ns=17, tftime_ns=19, dftime_ns=23, kftime_ns=29,
            rtime_ns=9 * S + 31, tstamp_ns=77 * S, term_ns=0, stoptime_ns=37,
            create_ns=123 * S + 456, onpro=6, sname="O", lwpname="main"),
        lwp(2, utime_ns=S, onpro=9, sname="S", bindpset=3, lwpname="worker"),
    ])
    sample = backend(tree).sample(PID)
    assert sample.pid == PID and sample.wall_ns > 0
    assert sorted(sample.threads) == [1, 2]
    one = sample.threads[1]
    assert one.tid == 1
    assert one.start == 123 * S + 456
    assert one.name == "main"
    assert one.run_ns == 4 * S + 12
    assert (one.usr_ns, one.sys_ns, one.lat_ns) == (3 * S + 5, S + 7, 250)
    assert one.cpu == 6
    assert one.state == "R"                 # 'O' (on a CPU) reported as running
    assert dict(one.micro) == {"lck": 11, "slp": 13, "trp": 17, "tfl": 19, "dfl": 23,
                               "rtime": 9 * S + 31}
    two = sample.threads[2]
    assert (two.name, two.cpu, two.state, two.run_ns) == ("worker", 9, "S", S)


def test_exited_lwp_entry_is_skipped(tree):
    fx.write_process(str(tree), PID, {}, [lwp(7, utime_ns=S)],
                     exited={"count": 5, "utime_ns": 999 * S, "rtime_ns": 999 * S})
    threads = backend(tree).sample(PID).threads
    assert list(threads) == [7]
    assert threads[7].run_ns == S


def test_entry_stride_comes_from_the_header(tree):
    lwps = [lwp(1, utime_ns=S, onpro=4, lwpname="a"), lwp(2, utime_ns=2 * S, onpro=5)]
    fx.write_process(str(tree), PID, {}, lwps, usage_entsize=512, lpsinfo_entsize=136)
    threads = backend(tree).sample(PID).threads
    assert (threads[1].run_ns, threads[1].cpu) == (S, 4)
    assert (threads[2].run_ns, threads[2].cpu) == (2 * S, 5)


def test_table_larger_than_first_read_is_read_whole(tree):
    lwps = [lwp(i, utime_ns=i * S) for i in range(1, 301)]      # > 32 entries
    fx.write_process(str(tree), PID, {}, lwps)
    be = backend(tree)
    threads = be.sample(PID).threads
    assert len(threads) == 300 and threads[300].run_ns == 300 * S
    assert be.thread_ids(PID) == list(range(1, 301))


def test_zombie_lwps_only_in_lpsinfo_are_left_out(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1), lwp(2)], zombies=[{"lwpid": 3}])
    be = backend(tree)
    assert sorted(be.sample(PID).threads) == [1, 2]
    assert be.thread_ids(PID) == [1, 2]


def test_lwp_missing_from_lpsinfo_still_sampled(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=S), lwp(2, utime_ns=S)])
    lusage = (tree / "proc" / str(PID) / "lusage").read_bytes()
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=S)])
    (tree / "proc" / str(PID) / "lusage").write_bytes(lusage)     # LWP 2 born between reads
    threads = backend(tree).sample(PID).threads
    assert threads[2].state == "?" and threads[2].cpu is None


def test_lwp_name_comes_from_lwpname_never_from_pr_name(tree):
    # prgetlwpsinfo() bzero()s lwpsinfo_t and never fills pr_name, so bytes
    # found there (a fixture, or a future kernel) are not a name source.
    fx.write_process(str(tree), PID, {}, [lwp(1, name="zpool-rpool", lwpname="worker"),
                                          lwp(2, name="stale")])
    threads = backend(tree).sample(PID).threads
    assert threads[1].name == "worker"
    assert threads[2].name == ""            # no lwpname file: unnamed


def test_lwpname_is_read_once_per_lwp(tree, monkeypatch):
    fx.write_process(str(tree), PID, {}, [lwp(1, lwpname="first")])
    be = backend(tree)
    assert be.sample(PID).threads[1].name == "first"
    fx.write_process(str(tree), PID, {}, [lwp(1, lwpname="renamed")])
    assert be.sample(PID).threads[1].name == "first"      # cached
    be.forget(PID, 1)
    assert be.sample(PID).threads[1].name == "renamed"


def test_reused_lwpid_gets_its_own_name(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1, lwpname="old", create_ns=5)])
    be = backend(tree)
    assert be.sample(PID).threads[1].name == "old"
    fx.write_process(str(tree), PID, {}, [lwp(1, lwpname="new", create_ns=6)])
    assert be.sample(PID).threads[1].name == "new"


def test_missing_process_raises_no_such_process(tree):
    be = backend(tree)
    for call in (be.sample, be.thread_ids, be.process):
        with pytest.raises(NoSuchProcess):
            call(999)
    with pytest.raises(NoSuchProcess):
        be.allowed_cpus(999, 1)


def test_corrupt_header_is_a_platform_error(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1)])
    path = tree / "proc" / str(PID) / "lusage"
    path.write_bytes(struct.pack("=qq", 3, 504) + bytes(504))     # says 3, holds 1
    with pytest.raises(PlatformError):
        backend(tree).sample(PID)


# -- process -----------------------------------------------------------------

def test_process_from_psinfo(tree):
    fx.write_process(str(tree), PID, {"fname": "postgres", "uid": 70, "euid": 0,
                                      "start_ns": 1_700_000_000 * S + 42}, [lwp(1)])
    info = backend(tree).process(PID)
    assert (info.pid, info.name, info.uid, info.tgid) == (PID, "postgres", 70, PID)
    assert info.start == 1_700_000_000 * S + 42
    assert info.is_kernel is False


def test_system_process_is_kernel(tree):
    fx.write_process(str(tree), 3, {"fname": "fsflush", "flag": fx.SSYS}, [lwp(1)])
    assert backend(tree).process(3).is_kernel is True


def test_zombie_process_is_gone(tree):
    fx.write_process(str(tree), PID, {"fname": "dead", "nlwp": 0}, [lwp(1)])
    with pytest.raises(NoSuchProcess):
        backend(tree).process(PID)


# -- prstat -m percentages ---------------------------------------------------

def times(usr, sys_, trp, tfl, dfl, lck, slp, lat, rtime, start=1, tid=1):
    return ThreadTimes(tid=tid, start=start, name="t", run_ns=usr + sys_, usr_ns=usr,
                       sys_ns=sys_, lat_ns=lat,
                       micro={"trp": trp, "tfl": tfl, "dfl": dfl, "lck": lck, "slp": slp,
                              "rtime": rtime})


def test_first_sample_is_total_over_rtime():
    cur = times(usr=2 * S, sys_=S, trp=0, tfl=0, dfl=0, lck=S, slp=5 * S, lat=S,
                rtime=10 * S)
    assert microstate_percent(None, cur) == {
        "usr": 20.0, "sys": 10.0, "trp": 0.0, "tfl": 0.0, "dfl": 0.0, "lck": 10.0,
        "slp": 50.0, "lat": 10.0}


def test_percent_is_delta_over_delta_rtime():
    prev = times(usr=2 * S, sys_=S, trp=10, tfl=20, dfl=30, lck=S, slp=5 * S, lat=S,
                 rtime=10 * S)
    # 400 ms later: +100 usr, +20 sys, +4 trp, +8 tfl, +12 dfl, +60 lck, +160 slp, +36 lat
    ms = S // 1000
    cur = times(usr=2 * S + 100 * ms, sys_=S + 20 * ms, trp=10 + 4 * ms, tfl=20 + 8 * ms,
                dfl=30 + 12 * ms, lck=S + 60 * ms, slp=5 * S + 160 * ms, lat=S + 36 * ms,
                rtime=10 * S + 400 * ms)
    got = microstate_percent(prev, cur)
    expected = {"usr": 25.0, "sys": 5.0, "trp": 1.0, "tfl": 2.0, "dfl": 3.0, "lck": 15.0,
                "slp": 40.0, "lat": 9.0}
    assert list(got) == list(PRSTAT_COLUMNS)
    assert got == pytest.approx(expected)


def test_percent_of_a_reused_tid_starts_over():
    prev = times(usr=9 * S, sys_=0, trp=0, tfl=0, dfl=0, lck=0, slp=0, lat=0, rtime=9 * S)
    cur = times(usr=S, sys_=0, trp=0, tfl=0, dfl=0, lck=0, slp=3 * S, lat=0, rtime=4 * S,
                start=2)
    assert microstate_percent(prev, cur)["usr"] == 25.0


def test_percent_with_no_elapsed_time_is_zero_and_linux_times_empty():
    same = times(usr=S, sys_=0, trp=0, tfl=0, dfl=0, lck=0, slp=0, lat=0, rtime=S)
    assert set(microstate_percent(same, same).values()) == {0.0}
    assert microstate_percent(None, ThreadTimes(tid=1, start=0, name="", run_ns=5)) == {}


def test_percent_from_two_fixture_snapshots(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=S, stime_ns=S, slptime_ns=2 * S,
                                              rtime_ns=4 * S)])
    be = backend(tree)
    first = be.sample(PID).threads[1]
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=S + 300 * S // 1000,
                                              stime_ns=S, slptime_ns=2 * S + 200 * S // 1000,
                                              wtime_ns=S // 2, rtime_ns=5 * S)])
    second = be.sample(PID).threads[1]
    assert microstate_percent(None, first)["usr"] == 25.0
    pct = microstate_percent(first, second)
    assert (pct["usr"], pct["sys"], pct["slp"], pct["lat"]) == pytest.approx(
        (30.0, 0.0, 20.0, 50.0))


# -- topology ----------------------------------------------------------------

def test_topology_two_sockets_two_llcs_offline_cpu_excluded(tree):
    topo = backend(tree).topology()
    assert topo.online == frozenset(range(15))
    assert topo.levels["package"] == (frozenset(range(8)), frozenset(range(8, 15)))
    assert topo.levels["llc"] == (frozenset(range(0, 4)), frozenset(range(4, 8)),
                                  frozenset(range(8, 12)), frozenset(range(12, 15)))
    assert topo.levels["core"][0] == frozenset({0, 1})
    assert topo.levels["core"][-1] == frozenset({14})
    assert len(topo.levels["core"]) == 8
    assert "numa" not in topo.levels


def test_topology_without_cache_id_has_no_llc_level():
    cpu_info = {0: {"state": "on-line", "chip_id": 0, "core_id": 0},
                1: {"state": "no-intr", "chip_id": 0, "core_id": 1},
                2: {"state": "powered-off", "chip_id": 1, "core_id": 2},
                3: {"state": "on-line", "chip_id": 1, "core_id": 3}}
    topo = topology_from_cpu_info(cpu_info)
    assert topo.online == frozenset({0, 1, 3})            # no-intr still runs threads
    assert topo.levels["package"] == (frozenset({0, 1}), frozenset({3}))
    assert "llc" not in topo.levels
    assert topo.levels["core"] == (frozenset({0}), frozenset({1}), frozenset({3}))


def test_core_ids_repeating_per_chip_stay_apart():
    cpu_info = {c: {"state": "on-line", "chip_id": c // 2, "core_id": 0, "cache_id": 0}
                for c in range(4)}
    topo = topology_from_cpu_info(cpu_info)
    assert topo.levels["core"] == (frozenset({0, 1}), frozenset({2, 3}))
    assert topo.levels["llc"] == (frozenset({0, 1}), frozenset({2, 3}))


def test_no_online_cpu_or_no_kstat_file_is_unsupported(tmp_path):
    with pytest.raises(Unsupported):
        topology_from_cpu_info({0: {"state": "off-line", "chip_id": 0, "core_id": 0}})
    with pytest.raises(Unsupported):
        IllumosBackend(str(tmp_path)).topology()


def test_kstat_text_parser_handles_odd_lines():
    text = ("cpu_info:0:cpu_info0:brand\tAMD EPYC 7742 64-Core Processor: rev B0\n"
            "cpu_info:0:cpu_info0:chip_id\t0\n"
            "cpu_info:0:cpu_info0:state\ton-line\n"
            "cpu_stat:0:cpu_stat0:idle\t12345\n"
            "garbage line\n"
            "cpu_info:1:cpu_info1:chip_id\t-1\n")
    parsed = kstat.read_kstat_text(text)
    assert parsed[0]["brand"] == "AMD EPYC 7742 64-Core Processor: rev B0"
    assert parsed[0]["chip_id"] == 0 and parsed[0]["state"] == "on-line"
    assert parsed[1] == {"chip_id": -1}


def test_kstat_command_fallback_uses_kstat_p():
    calls = []

    class Done:
        returncode, stdout, stderr = 0, fx.kstat_text(fx.machine(1, 1, 1, 2)), ""

    def runner(argv, **kwargs):
        calls.append(argv)
        return Done()

    assert sorted(kstat.run_kstat_command(runner)) == [0, 1]
    assert calls == [["kstat", "-p", "cpu_info:::"]]


def test_injected_kstat_reader(tmp_path):
    be = IllumosBackend(str(tmp_path), kstat_reader=lambda: {
        5: {"state": "on-line", "chip_id": 0, "core_id": 5, "cache_id": 0}})
    assert be.topology().online == frozenset({5})


# -- libkstat through ctypes, with a fake library ----------------------------

def _named(name, data_type, value):
    buf = ctypes.create_string_buffer(kstat.KSTAT_NAMED_SIZE)
    buf[:len(name)] = name.encode()
    buf[31] = bytes([data_type])
    if data_type == kstat.KSTAT_DATA_CHAR:
        buf[32:32 + len(value)] = value.encode()
    elif data_type == kstat.KSTAT_DATA_INT32:
        struct.pack_into("=i", buf, 32, value)
    elif data_type == kstat.KSTAT_DATA_INT64:
        struct.pack_into("=q", buf, 32, value)
    return buf


class FakeLibKstat:
    """kstat_open/read/data_lookup/close over a chain built in memory;
    entries are (module, instance, fields[, name, crtime])."""

    def __init__(self, entries):
        self.keep = []
        self.named = {}
        previous = None
        self.headers = []
        for module, instance, fields, *more in reversed(entries):
            name, crtime = more or (b"", 0)
            header = kstat.Kstat(ks_module=module, ks_instance=instance, ks_name=name,
                                 ks_crtime=crtime, ks_type=kstat.KSTAT_TYPE_NAMED)
            if previous is not None:
                header.ks_next = ctypes.pointer(previous)
            self.named[(module, instance)] = {n: _named(n, t, v) for n, (t, v) in fields.items()}
            self.headers.append(header)
            previous = header
        self.control = kstat.KstatCtl(kc_chain=ctypes.pointer(previous))
        self.closed = False

    def kstat_open(self):
        return ctypes.pointer(self.control)

    def kstat_close(self, control):
        self.closed = True
        return 0

    def kstat_read(self, control, entry, buf):
        return 0

    def kstat_data_lookup(self, entry, name):
        header = entry.contents
        found = self.named[(header.ks_module, header.ks_instance)].get(name.decode())
        return ctypes.addressof(found) if found is not None else None


def test_libkstat_walks_the_chain_and_decodes_named_values():
    CHAR, I32, I64 = kstat.KSTAT_DATA_CHAR, kstat.KSTAT_DATA_INT32, kstat.KSTAT_DATA_INT64
    lib = FakeLibKstat([
        (b"cpu_info", 0, {"state": (CHAR, "on-line"), "chip_id": (I64, 0),
                          "core_id": (I64, 0), "cache_id": (I32, 0)}),
        (b"cpu_stat", 0, {"state": (CHAR, "ignored")}),
        (b"cpu_info", 1, {"state": (CHAR, "off-line"), "chip_id": (I64, 1),
                          "core_id": (I64, 4)}),
    ])
    result = kstat.LibKstat(lib).read()
    assert result == {
        0: {"state": "on-line", "chip_id": 0, "core_id": 0, "cache_id": 0},
        1: {"state": "off-line", "chip_id": 1, "core_id": 4},
    }
    assert lib.closed


def test_named_string_value_follows_the_pointer():
    text = ctypes.create_string_buffer(b"GenuineIntel")
    buf = ctypes.create_string_buffer(kstat.KSTAT_NAMED_SIZE)
    buf[31] = bytes([kstat.KSTAT_DATA_STRING])
    struct.pack_into("@P", buf, 32, ctypes.addressof(text))
    assert kstat.named_value(ctypes.addressof(buf)) == "GenuineIntel"


# -- processor sets with a fake libc -----------------------------------------


DOMAINS = [frozenset({0, 1, 2, 3}), frozenset({8, 9, 10, 11})]


@pytest.fixture
def bound_tree(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1), lwp(2, bindpset=7), lwp(3, bindpro=5),
                                          lwp(4)])
    return tree


def test_pset_setup_bind_restore_close_sequence(bound_tree):
    libc = FakeLibc(psets={7: {14}})
    be = backend(bound_tree, libc=libc)
    binder = be.binder("pset")
    assert binder.kind == "pset"
    binder.setup(DOMAINS)
    assert binder.sets == [8, 9]
    assert libc.calls[:2] == [("pset_info", -1), ("pset_create", None)]
    assert libc.psets[8] == {0, 1, 2, 3} and libc.psets[9] == {8, 9, 10, 11}
    assert ("pset_assign", (9, 11)) in libc.calls

    saved = {tid: binder.save(PID, tid) for tid in (1, 2, 3)}
    assert saved[1] == {"bindpset": -1, "bindpro": -1}
    assert saved[2] == {"bindpset": 7, "bindpro": -1}
    assert saved[3] == {"bindpset": -1, "bindpro": 5}

    binder.bind(PID, 1, 0, DOMAINS[0])
    binder.bind(PID, 2, 1, DOMAINS[1])
    assert libc.bound == {(PID, 1): 8, (PID, 2): 9}

    binder.restore(PID, 1, saved[1])
    binder.restore(PID, 2, saved[2])
    assert libc.bound == {(PID, 2): 7}
    binder.setup(DOMAINS)                       # same domains: nothing recreated
    assert libc.names().count("pset_create") == 2
    binder.close()
    assert [c for c in libc.calls if c[0] == "pset_destroy"] == [("pset_destroy", 8),
                                                                 ("pset_destroy", 9)]
    assert libc.psets == {7: {14}} and binder.sets == []
    assert libc.default == set(range(14))


def test_setup_refuses_to_empty_the_default_set(bound_tree):
    libc = FakeLibc(cpus=range(8))
    binder = backend(bound_tree, libc=libc).binder("pset")
    with pytest.raises(Unsupported, match="default processor set must keep at least one CPU"):
        binder.setup([frozenset(range(4)), frozenset(range(4, 8))])
    assert "pset_create" not in libc.names()                     # nothing changed


def test_setup_refuses_cpus_of_another_set(bound_tree):
    libc = FakeLibc(psets={7: {14}})
    binder = backend(bound_tree, libc=libc).binder("pset")
    with pytest.raises(Unsupported, match="psrset -i"):
        binder.setup([frozenset({13, 14})])
    assert "pset_create" not in libc.names()


def test_ebusy_from_assign_is_the_same_message_and_rolls_back(bound_tree):
    libc = FakeLibc()
    libc.fail[("pset_assign", (2, 9))] = errno.EBUSY
    binder = backend(bound_tree, libc=libc).binder("pset")
    with pytest.raises(Unsupported, match="default processor set must keep at least one CPU"):
        binder.setup(DOMAINS)
    assert libc.psets == {} and binder.sets == []                # both sets destroyed
    assert libc.default == set(range(15))


def test_eperm_names_the_privilege(bound_tree):
    libc = FakeLibc()
    libc.fail[("pset_create", None)] = errno.EPERM
    binder = backend(bound_tree, libc=libc).binder("pset")
    with pytest.raises(AccessDenied) as caught:
        binder.setup(DOMAINS)
    assert caught.value.privilege == "PRIV_SYS_RES_CONFIG"
    assert "PRIV_SYS_RES_CONFIG" in str(caught.value)


def test_enotsup_means_pools_are_enabled(bound_tree):
    libc = FakeLibc()
    libc.fail[("pset_create", None)] = errno.ENOTSUP
    binder = backend(bound_tree, libc=libc).binder("pset")
    with pytest.raises(Unsupported, match="pooladm -d"):
        binder.setup(DOMAINS)


def test_bind_errors(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    libc.fail[("pset_bind_lwp", (1, 2))] = errno.ESRCH
    libc.fail[("pset_bind_lwp", (1, 3))] = errno.EBUSY
    libc.fail[("pset_bind_lwp", (1, 4))] = errno.EINVAL
    with pytest.raises(NoSuchProcess) as gone:
        binder.bind(PID, 2, 0, DOMAINS[0])
    assert (gone.value.pid, gone.value.tid) == (PID, 2)
    with pytest.raises(Unmovable, match="pbind -u 4242/3"):
        binder.bind(PID, 3, 0, DOMAINS[0])
    with pytest.raises(Unmovable):
        binder.bind(PID, 4, 0, DOMAINS[0])
    binder.bind(PID, 1, 0, DOMAINS[0])         # a vanished LWP does not stop the others
    assert libc.bound == {(PID, 1): 1}
    libc.fail[("pset_bind_lwp", (2, 1))] = errno.EPERM
    with pytest.raises(AccessDenied) as denied:
        binder.bind(PID, 1, 1, DOMAINS[1])
    assert denied.value.privilege == "PRIV_SYS_RES_CONFIG"


def test_save_of_a_vanished_lwp_is_no_such_process(bound_tree):
    binder = backend(bound_tree, libc=FakeLibc()).binder("pset")
    with pytest.raises(NoSuchProcess):
        binder.save(PID, 99)


def test_restore_to_a_destroyed_saved_set_unbinds(bound_tree):
    libc = FakeLibc(psets={7: {14}})
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    saved = binder.save(PID, 2)
    binder.bind(PID, 2, 0, DOMAINS[0])
    del libc.psets[7]                               # the admin removed set 7 meanwhile
    binder.restore(PID, 2, saved)
    assert (PID, 2) not in libc.bound
    assert libc.calls[-2:] == [("pset_bind_lwp", (7, 2)), ("pset_bind_lwp", (-1, 2))]


def test_close_destroys_every_set_even_after_errors(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    libc.fail[("pset_bind_lwp", None)] = errno.ESRCH
    with pytest.raises(NoSuchProcess):
        binder.bind(PID, 1, 0, DOMAINS[0])
    libc.fail[("pset_destroy", 1)] = errno.EPERM
    with pytest.raises(AccessDenied, match="psrset -d 1"):
        binder.close()
    assert ("pset_destroy", 2) in libc.calls and 2 not in libc.psets
    assert binder.sets == [1]
    del libc.fail[("pset_destroy", 1)]
    binder.close()                                  # a retry finishes the job
    assert libc.psets == {} and binder.sets == []


def test_resetup_with_new_domains_replaces_the_sets(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    binder.setup([frozenset({0, 1}), frozenset({2, 3})])
    assert sorted(libc.psets.values(), key=min) == [{0, 1}, {2, 3}]
    assert [c for c in libc.calls if c[0] == "pset_destroy"] == [("pset_destroy", 1),
                                                                 ("pset_destroy", 2)]


def test_linux_binders_and_missing_libc(tree):
    be = backend(tree, libc=FakeLibc())
    for kind in ("affinity", "cpuset"):
        with pytest.raises(Unsupported, match="--binder pset"):
            be.binder(kind)
    with pytest.raises(UsageError):
        be.binder("magic")
    with pytest.raises(Unsupported, match="pset_create"):
        backend(tree).binder("pset")            # a fixture tree never uses the real libc


# -- allowed CPUs --------------------------------------------------------------

def test_allowed_cpus(bound_tree):
    libc = FakeLibc(psets={7: {14}})
    be = backend(bound_tree, libc=libc)
    be.topology()
    assert be.allowed_cpus(PID, 1) == frozenset(range(14))    # the default set
    assert be.allowed_cpus(PID, 2) == frozenset({14})         # its processor set
    assert be.allowed_cpus(PID, 3) == frozenset({5})          # its processor
    binder = be.binder("pset")
    binder.setup(DOMAINS)
    fx.write_process(str(bound_tree), PID, {}, [lwp(1, bindpset=binder.sets[0])])
    # tumbler's own sets still count as the default set they came from
    assert be.allowed_cpus(PID, 1) == frozenset(range(14))


def test_allowed_cpus_without_libc_is_the_online_set(bound_tree):
    be = backend(bound_tree)
    assert be.allowed_cpus(PID, 2) == frozenset(range(15))
    assert be.allowed_cpus(PID, 3) == frozenset({5})


# -- example tree --------------------------------------------------------------

def test_example_tree(tmp_path):
    fx.build_example_tree(str(tmp_path))
    be = IllumosBackend(str(tmp_path))
    topo = be.topology()
    assert len(topo.levels["package"]) == 2 and len(topo.levels["llc"]) == 4
    assert 15 not in topo.online
    info = be.process(fx.EXAMPLE_PID)
    assert (info.name, info.uid, info.is_kernel) == ("worker", 1000, False)
    threads = be.sample(fx.EXAMPLE_PID).threads
    assert [threads[t].name for t in sorted(threads)] == ["main", "compute-0", "compute-1",
                                                          "io"]
    busiest = max(threads.values(), key=lambda t: t.run_ns)
    assert busiest.name == "compute-0" and busiest.state == "R"
    assert microstate_percent(None, busiest)["usr"] == pytest.approx(30 / 40 * 100)


# -- the ctypes libc wrapper, over a fake CDLL ---------------------------------

class FakeCDLL:
    """C-like pset_* taking ctypes byref() arguments and setting errno."""

    def __init__(self):
        self.sets = {-1: [0, 2, 3], 4: [1]}
        self.info_calls = 0
        self.unbound = []
        for name in ("pset_create", "pset_destroy", "pset_assign", "pset_bind_lwp",
                     "pset_info", "processor_bind"):
            bound = getattr(self, name)
            # a plain function object, like a ctypes function, takes argtypes
            setattr(self, name, lambda *args, _bound=bound: _bound(*args))

    @staticmethod
    def _fail(code):
        ctypes.set_errno(code)
        return -1

    def pset_create(self, new):
        new._obj.value = 6
        return 0

    def pset_destroy(self, pset):
        return 0 if pset in self.sets else self._fail(errno.EINVAL)

    def pset_assign(self, pset, cpu, old):
        if cpu == 0:
            return self._fail(errno.EBUSY)
        old._obj.value = -1
        return 0

    def pset_bind_lwp(self, pset, lwpid, pid, old):
        if pid == 1:
            return self._fail(errno.ESRCH)
        old._obj.value = 4
        return 0

    def processor_bind(self, idtype, ident, bind, old):
        self.unbound.append((idtype, ident, bind, old))
        return 0 if ident in self.sets[-1] else self._fail(errno.EINVAL)

    def pset_info(self, pset, kind, count, cpus):
        self.info_calls += 1
        members = self.sets[pset]
        if cpus is not None:
            for i, cpu in enumerate(members[:count._obj.value]):
                cpus[i] = cpu
        count._obj.value = len(members)
        return 0


def test_ctypes_libc_wrapper_marshals_arguments_and_errno():
    from tumbler.platform.illumos.psetlibc import PsetLibc
    cdll = FakeCDLL()
    libc = PsetLibc(cdll)
    assert libc.pset_create() == 6
    assert libc.pset_assign(6, 1) == -1
    assert libc.pset_bind_lwp(6, 3, 42) == 4
    assert libc.pset_info(-1) == frozenset({0, 2, 3})
    assert cdll.info_calls == 2                     # count first, then the list
    with pytest.raises(OSError) as busy:
        libc.pset_assign(6, 0)
    assert busy.value.errno == errno.EBUSY
    with pytest.raises(OSError) as gone:
        libc.pset_bind_lwp(6, 3, 1)
    assert gone.value.errno == errno.ESRCH
    libc.pset_destroy(4)
    libc.unbind_cpu(2)
    assert cdll.unbound == [(14, 2, -1, None)]          # P_CPUID, PBIND_NONE: pbind -U 2
    with pytest.raises(OSError) as offline:
        libc.unbind_cpu(9)
    assert offline.value.errno == errno.EINVAL
    cdll.priv_ineffect = lambda name: int(name == b"sys_res_config")
    assert libc.has_privilege("sys_res_config") and not libc.has_privilege("proc_owner")


def test_live_proc_keeps_table_files_open(tree):
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=S)])
    be = backend(tree, libc=FakeLibc())
    be._live = True                 # exercise the cached-fd path of the real /proc
    assert be.sample(PID).threads[1].run_ns == S
    fds = dict(be._fds)
    assert sorted(name for _, name in fds) == ["lpsinfo", "lusage"]
    fx.write_process(str(tree), PID, {}, [lwp(1, utime_ns=2 * S), lwp(2)])
    assert sorted(be.sample(PID).threads) == [1, 2]
    assert be._fds == fds and be.sample(PID).threads[1].run_ns == 2 * S
    be.close()
    assert be._fds == {}


def test_a_bind_checks_the_process_is_the_one_read_right_before(bound_tree):
    """PID reuse: once the process a round read has exited (its kept /proc
    descriptors fail; an emptied fixture file stands in for ENOENT),
    neither a bind nor a restore reaches pset_bind -- another process may
    have its PID, and LWP IDs start at 1 in every process."""
    libc = FakeLibc()
    be = backend(bound_tree, libc=libc)
    be._live = True                 # descriptors kept open, as on the real /proc
    binder = be.binder("pset")
    binder.setup(DOMAINS)
    assert sorted(be.sample(PID).threads) == [1, 2, 3, 4]
    saved = binder.save(PID, 1)
    binder.bind(PID, 1, 0, DOMAINS[0])
    assert libc.bound == {(PID, 1): binder.sets[0]}
    for name in ("lpsinfo", "lusage"):
        os.truncate(os.path.join(str(bound_tree), "proc", str(PID), name), 0)
    calls = len(libc.calls)
    with pytest.raises(NoSuchProcess):
        binder.bind(PID, 4, 1, DOMAINS[1])
    with pytest.raises(NoSuchProcess):
        binder.restore(PID, 1, saved)
    assert libc.bound == {(PID, 1): binder.sets[0]} and len(libc.calls) == calls
    binder.close()


def test_check_can_bind_asks_for_privileges_first(tree):
    from tumbler.platform.base import ProcessInfo
    mine = ProcessInfo(pid=PID, name="app", uid=__import__("os").geteuid(), start=0,
                       is_kernel=False, tgid=PID)
    other = mine._replace(uid=mine.uid + 1)
    libc = FakeLibc()
    be = backend(tree, libc=libc)
    be.check_can_bind(mine, "pset")                 # no has_privilege: cannot tell
    libc.has_privilege = lambda name: name != "sys_res_config"
    with pytest.raises(AccessDenied) as denied:
        be.check_can_bind(mine, "pset")
    assert denied.value.privilege == "PRIV_SYS_RES_CONFIG"
    libc.has_privilege = lambda name: name != "proc_owner"
    be.check_can_bind(mine, "pset")
    with pytest.raises(AccessDenied, match="belongs to uid"):
        be.check_can_bind(other, "pset")
    with pytest.raises(Unsupported, match="--binder pset"):
        be.check_can_bind(mine, "affinity")
    assert "pset_create" not in libc.names()


# -- pset_bind_lwp is private; errno as pset.c returns it; zones ---------------

def test_libc_without_pset_bind_lwp_still_loads_and_refuses_before_any_change(bound_tree):
    import types
    from tumbler.platform.illumos.psetlibc import PsetLibc
    full = FakeCDLL()
    cdll = types.SimpleNamespace(**{name: getattr(full, name) for name in
                                    ("pset_create", "pset_destroy", "pset_assign",
                                     "pset_info", "processor_bind")})
    libc = PsetLibc(cdll)
    assert libc.can_bind_lwp is False
    assert libc.pset_info(-1) == frozenset({0, 2, 3})   # the rest still works
    with pytest.raises(OSError) as missing:
        libc.pset_bind_lwp(4, 1, PID)
    assert missing.value.errno == errno.ENOSYS

    fake = FakeLibc()
    fake.can_bind_lwp = False
    be = backend(bound_tree, libc=fake)
    with pytest.raises(Unsupported, match="no pset_bind_lwp.*calling process only"):
        be.check_can_bind(be.process(PID), "pset")
    with pytest.raises(Unsupported, match="pset_bind_lwp"):
        be.binder("pset").setup(DOMAINS)
    assert fake.calls == []                              # nothing created


def test_bind_errno_as_pset_bind_lwp_returns_them(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    libc.fail[("pset_bind_lwp", (1, 1))] = errno.EPERM
    with pytest.raises(AccessDenied, match="out of the default set") as denied:
        binder.bind(PID, 1, 0, DOMAINS[0])
    assert "PRIV_PROC_OWNER" in str(denied.value)
    libc.fail[("pset_bind_lwp", (1, 2))] = errno.EINVAL
    with pytest.raises(Unmovable, match="has no CPUs"):
        binder.bind(PID, 2, 0, DOMAINS[0])
    # pset_bind_lwp never checks the pool state: an ENOTSUP is not "pools"
    libc.fail[("pset_bind_lwp", (1, 4))] = errno.ENOTSUP
    with pytest.raises(PlatformError) as other:
        binder.bind(PID, 4, 0, DOMAINS[0])
    assert type(other.value) is PlatformError and "pooladm" not in str(other.value)


def test_non_global_zone_names_the_prohibited_privilege_not_root(bound_tree, monkeypatch):
    from tumbler.platform.illumos import zone as _illumos_zone
    monkeypatch.setattr(_illumos_zone, "zone_name", lambda: "web1")
    libc = FakeLibc()
    be = backend(bound_tree, libc=libc)
    with pytest.raises(AccessDenied) as early:
        be.check_can_bind(be.process(PID), "pset")
    message = str(early.value)
    assert "sys_res_config" in message and "web1" in message
    assert "global zone" in message and "run as root" not in message
    assert "pset_create" not in libc.names()            # refused before any change
    libc.fail[("pset_create", None)] = errno.EPERM      # had it gone that far
    with pytest.raises(AccessDenied) as late:
        be.binder("pset").setup(DOMAINS)
    assert "web1" in str(late.value) and "run as root" not in str(late.value)
    monkeypatch.setattr(_illumos_zone, "zone_name", lambda: "global")
    with pytest.raises(AccessDenied, match=r"\(run as root\)"):
        be.binder("pset").setup(DOMAINS)


# -- state files and `tumbler restore` on illumos -----------------------------

PROC_START = 1_700_000_000 * S


def write_state(directory, threads, psets=(), boot=None, domains=None, pset_cpus=None,
                pids=None):
    """A dead tumbler's state file for PID (started at PROC_START), as the
    journal writes it; ``threads`` is [(lwpid, saved bindpset)]."""
    from tumbler.state import STATE_VERSION, StateFile, write_json
    from tumbler.state import store as state_module
    resources = {"psets": list(psets)}
    if pset_cpus is not None:
        resources["pset_cpus"] = {str(k): sorted(v) for k, v in pset_cpus.items()}
    if pids is not None:
        resources["pids"] = list(pids)
    state_file = StateFile(str(directory), PID, PROC_START)
    write_json(state_file.path, {
        "version": STATE_VERSION, "boot": boot or state_module.boot_id(),
        "tumbler": {"pid": 99999999, "start": 1}, "platform": "illumos", "binder": "pset",
        "target": {"pid": PID, "start": PROC_START, "name": "app", "allowed": None},
        "domains": [sorted(d) for d in (domains or DOMAINS)], "resources": resources,
        "threads": [{"tid": tid, "start": 500 * S + tid, "binder": "pset",
                     "saved": {"bindpset": saved, "bindpro": -1}}
                    for tid, saved in threads]})
    return state_file


@pytest.fixture
def illumos_boot(monkeypatch):
    """The running system is illumos, booted at the time set in the list."""
    import tumbler.platform as platform
    booted = [1_700_000_000]
    monkeypatch.setattr(platform, "native_platform", lambda: "illumos")
    monkeypatch.setattr(kstat, "read_boot_time", lambda: booted[0])
    return booted


def test_boot_token_on_illumos_is_the_boot_time_kstat(illumos_boot, monkeypatch):
    from tumbler.state import store as state_module
    assert state_module.boot_id() == "boot_time:1700000000"

    def unreadable():
        raise OSError(errno.ENOENT, "no kstat")
    monkeypatch.setattr(kstat, "read_boot_time", unreadable)
    assert state_module.boot_id() is None


def test_read_boot_time_through_kstat_p_and_libkstat(monkeypatch):
    seen = []

    def runner(argv, **kwargs):
        seen.append(argv)
        return type("Done", (), {"returncode": 0, "stderr": "",
                                 "stdout": "unix:0:system_misc:boot_time\t1699999000\n"})()
    values = kstat.run_kstat_command(runner, selector="unix:0:system_misc:boot_time")
    assert seen == [["kstat", "-p", "unix:0:system_misc:boot_time"]]
    assert values == {0: {"boot_time": 1699999000}}
    monkeypatch.setattr(kstat, "LibKstat", lambda: (_ for _ in ()).throw(OSError("no lib")))
    monkeypatch.setattr(kstat, "run_kstat_command", lambda selector: values)
    assert kstat.read_boot_time() == 1699999000


def test_state_from_before_a_reboot_is_discarded_untouched(bound_tree, tmp_path,
                                                           illumos_boot):
    from tumbler.state import restore_state
    fx.write_process(str(bound_tree), PID, {"start_ns": PROC_START},
                     [lwp(1, bindpset=8), lwp(2, bindpset=8)])
    libc = FakeLibc(psets={8: {0, 1, 2, 3}})
    libc.bound = {(PID, 1): 8, (PID, 2): 8}
    states = tmp_path / "state"
    states.mkdir()
    stale = write_state(states, [(1, -1), (2, -1)], psets=[8], boot="boot_time:1600000000")
    report = restore_state(stale, backend(bound_tree, libc=libc))
    assert report.process_gone and report.restored == 0
    assert libc.calls == [] and libc.psets == {8: {0, 1, 2, 3}}   # set 8 is not ours now
    assert not (states / ("%d-%d.json" % (PID, PROC_START))).exists()
    # the same state written in this boot is applied: the check is the boot
    current = write_state(states, [(1, -1), (2, -1)], psets=[8])
    assert restore_state(current, backend(bound_tree, libc=libc)).restored == 2
    assert libc.bound == {}


def test_pset_id_reused_by_someone_else_survives_restore(bound_tree, tmp_path, illumos_boot):
    """After the crash set 8 was destroyed and an admin's new set got id 8
    (cpupart_create takes the lowest free id): `tumbler restore` keeps it."""
    from tumbler.state import restore_state
    fx.write_process(str(bound_tree), PID, {"start_ns": PROC_START}, [lwp(1), lwp(2)])
    fx.write_process(str(bound_tree), 777, {}, [lwp(1, bindpset=8)])     # the admin's
    libc = FakeLibc(psets={8: {5, 6}})
    libc.bound = {(777, 1): 8}
    states = tmp_path / "state"
    states.mkdir()
    stale = write_state(states, [(1, -1), (2, -1)], psets=[8], pset_cpus={8: {0, 1, 2, 3}})
    report = restore_state(stale, backend(bound_tree, libc=libc))
    assert report.removed == [] and not report.failed
    assert libc.psets == {8: {5, 6}} and libc.bound == {(777, 1): 8}
    assert "pset_destroy" not in libc.names()
    # Same CPUs as recorded, but another process is bound to it: still not ours.
    libc.psets = {8: {0, 1, 2, 3}}
    stale = write_state(states, [(1, -1)], psets=[8], pset_cpus={8: {0, 1, 2, 3}})
    assert restore_state(stale, backend(bound_tree, libc=libc)).removed == []
    assert 8 in libc.psets
    # Our own set (recorded CPUs, only the managed process bound) does go.
    fx.write_process(str(bound_tree), 777, {}, [lwp(1)])
    fx.write_process(str(bound_tree), PID, {"start_ns": PROC_START},
                     [lwp(1), lwp(2, bindpset=8)])
    libc.bound = {(PID, 2): 8}
    stale = write_state(states, [(1, -1)], psets=[8], pset_cpus={8: {0, 1, 2, 3}},
                        pids=[PID])
    assert restore_state(stale, backend(bound_tree, libc=libc)).removed == ["processor set 8"]
    assert libc.psets == {}


def pset_kstats(tree, created):
    """Add the ``unix:<id>:pset`` kstats of sets {id: creation hrtime ns} to
    the tree's ``kstat -p`` text (crtime as kstat prints it: s.nnnnnnnnn)."""
    with open(str(tree / "kstat"), "a") as f:
        for pset_id, ns in created.items():
            prefix = "unix:%d:pset:" % pset_id
            f.write(prefix + "class\tmisc\n" + prefix + "crtime\t%d.%09d\n"
                    % divmod(ns, S) + prefix + "ncpus\t4\n")


def test_state_records_each_sets_creation_time_cpus_and_the_bound_processes(bound_tree):
    libc = FakeLibc()
    # what kstat_create stamps on the sets pset_create makes (and the
    # default partition's, and another kstat of the same module and instance)
    pset_kstats(bound_tree, {0: 30 * S + 5, 1: 7200 * S + 123, 2: 7200 * S + 456})
    with open(str(bound_tree / "kstat"), "a") as f:
        f.write("unix:1:callout:crtime\t99.000000001\n")
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    binder.save(PID, 1)
    assert binder.resources() == {"psets": [1, 2],
                                  "pset_created": {"1": 7200 * S + 123, "2": 7200 * S + 456},
                                  "pset_cpus": {"1": [0, 1, 2, 3], "2": [8, 9, 10, 11]},
                                  "pids": [PID]}


def test_a_reused_id_with_the_same_cpus_and_nothing_bound_is_told_by_its_creation_time(
        bound_tree, tmp_path, illumos_boot, monkeypatch, capsys):
    """The dead tumbler's set 8 (made at 7200 s) was destroyed; an admin's
    new set got id 8 and the same CPUs, and nothing is bound to it yet: its
    CPUs and its LWPs pass, its creation time does not.  Through the
    command (`tumbler restore`), which merges the state files' resources."""
    from tumbler.commands import restore as restore_command
    fx.write_process(str(bound_tree), PID, {"start_ns": PROC_START}, [lwp(1), lwp(2)])
    libc = FakeLibc(psets={8: {0, 1, 2, 3}})
    states = tmp_path / "state"
    states.mkdir()

    def restore(created_now):
        pset_kstats(bound_tree, {8: created_now})
        be = backend(bound_tree, libc=libc)
        monkeypatch.setattr(restore_command, "open_backend", lambda platform, root: be)
        stale = write_state(states, [(1, -1), (2, -1)], psets=[8], pids=[PID],
                            pset_cpus={8: {0, 1, 2, 3}})
        data = json.loads(open(stale.path).read())
        data["resources"]["pset_created"] = {"8": 7200 * S + 123}
        open(stale.path, "w").write(json.dumps(data))
        return restore_command.run_restore([], directory=str(states))

    assert restore(9000 * S) == 0
    assert libc.psets == {8: {0, 1, 2, 3}} and "pset_destroy" not in libc.names()
    assert restore(7200 * S + 123) == 0                 # the dead tumbler's own set
    assert libc.psets == {} and "removed 1 resources left by tumbler" in capsys.readouterr().out


def test_pset_creation_times_through_libkstat_and_kstat_p(monkeypatch):
    lib = FakeLibKstat([(b"unix", 0, {}, b"pset", 30 * S), (b"unix", 3, {}, b"pset", 71 * S + 9),
                        (b"unix", 3, {}, b"callout", 5), (b"cpu_info", 3, {}, b"pset", 1)])
    assert kstat.LibKstat(lib).creation_times(b"unix", b"pset") == {0: 30 * S, 3: 71 * S + 9}
    assert lib.closed
    seen = []

    def runner(argv, **kwargs):
        seen.append(argv)
        return type("Done", (), {"returncode": 0, "stderr": "", "stdout":
                                 "unix:3:pset:crtime\t71.000000009\n"
                                 "unix:4:pset:crtime\t8.5\n"})()
    command = kstat.run_kstat_command
    monkeypatch.setattr(kstat, "LibKstat", lambda: (_ for _ in ()).throw(OSError("no lib")))
    monkeypatch.setattr(kstat, "run_kstat_command",
                        lambda selector, name: command(runner, selector=selector, name=name))
    assert kstat.read_system_pset_created() == {3: 71 * S + 9, 4: 8 * S + 500_000_000}
    assert seen == [["kstat", "-p", "unix::pset:crtime"]]


def test_bound_lwps_walks_every_process(bound_tree):
    fx.write_process(str(bound_tree), 777, {}, [lwp(1, bindpset=7), lwp(2)],
                     zombies=[{"lwpid": 3}])
    (bound_tree / "proc" / "self").mkdir()
    assert backend(bound_tree).bound_lwps() == [(777, 1, 7, -1), (PID, 2, 7, -1),
                                                (PID, 3, -1, 5)]


# -- set teardown: EBUSY while a CPU of the set has a processor-bound LWP ---------

def test_ebusy_at_teardown_is_retried_after_the_cpus_bindings_are_removed(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)                                       # sets 1 and 2
    # LWP 3 bound itself to CPU 2, in set 1, after tumbler put it there
    fx.write_process(str(bound_tree), PID, {}, [lwp(1), lwp(3, bindpset=1, bindpro=2)])
    libc.cpu_bound = {2: {(PID, 3)}}
    notices = binder.close()
    assert [c for c in libc.calls if c[0] in ("pset_destroy", "unbind_cpu")] == [
        ("pset_destroy", 1), ("unbind_cpu", 2), ("unbind_cpu", 3),   # 0, 1 already out
        ("pset_destroy", 1), ("pset_destroy", 2)]
    assert libc.psets == {} and binder.sets == [] and libc.default == set(range(15))
    assert notices == ["processor set 1 could not be destroyed while LWPs were bound to its "
                       "CPUs: removed the processor binding of LWP %d/3 (CPU 2)" % PID]


def test_a_set_that_stays_busy_is_kept_and_named_never_left_unsaid(bound_tree):
    libc = FakeLibc()
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    libc.cpu_bound, libc.sticky = {9: {"a kernel thread"}}, {9}
    with pytest.raises(PlatformError, match=r"processor set 2 still has a thread bound to a "
                                            r"CPU of it.*`pbind -Q`.*processor sets 2 were "
                                            r"left behind; remove them with `psrset -d 2`"):
        binder.close()
    assert libc.names().count("pset_destroy") == 1 + pset.DESTROY_ATTEMPTS
    assert binder.sets == [2] and 1 not in libc.psets and 2 in libc.psets
    assert binder.resources()["psets"] == [2]           # the state file keeps it
    libc.sticky.clear()
    assert binder.close() == []                         # a retry finishes the job
    assert libc.psets == {}


class CountingCpc(FakeLibs):
    """libcpc whose CPU bindings are processor bindings in ``kernel`` (a
    FakeLibc): cpc_bind_cpu processor-binds the counting LWP."""

    def __init__(self, kernel, log, **kwargs):
        super().__init__(psets={cpu: s for s, cpus in kernel.psets.items() for cpu in cpus},
                         **kwargs)
        self.kernel, self.log = kernel, log

    def _cpc_bind_cpu(self, handle, cpu, cpc_set, flags):
        self.kernel.cpu_bound.setdefault(cpu, set()).add("tumbler-cpc")
        return super()._cpc_bind_cpu(handle, cpu, cpc_set, flags)

    def _cpc_unbind(self, handle, cpc_set):
        self.kernel.cpu_bound.pop(self.set_cpu[cpc_set], None)
        self.log.append("cpc_unbind")
        return 0


def test_counters_are_closed_before_the_sets_are_destroyed(bound_tree):
    """hand_back_all (service/assembly.py, every --share space run's end)
    closes the counters before it hands the programs back: the counting
    LWPs' CPU bindings would make pset_destroy refuse the sets."""
    from tumbler.service.assembly import hand_back_all
    libc, log = FakeLibc(), []
    binder = backend(bound_tree, libc=libc).binder("pset")
    binder.setup(DOMAINS)
    counters = cpc.CpuCounters([0, 8], lib=CountingCpc(libc, log).lib())
    assert set(libc.cpu_bound) == {0, 8}

    class Run:
        journal = None

        def hand_back(self):
            log.append("sets destroyed")
            return len(binder.close())

    class Sharing:
        def close(self):
            counters.close()

    assert hand_back_all([Run()], Sharing()) == 0
    assert log == ["cpc_unbind", "cpc_unbind", "sets destroyed"]
    assert libc.names().count("pset_destroy") == 2 and "unbind_cpu" not in libc.names()
    assert libc.psets == {}


# -- LWPs born into tumbler's sets (lwp_create copies t_bind_pset) -------------

def test_lwp_created_while_bound_goes_back_to_its_process_s_original_set(bound_tree):
    libc = FakeLibc(psets={7: {14}})
    be = backend(bound_tree, libc=libc)
    binder = be.binder("pset")
    binder.setup(DOMAINS)                                    # sets 8 and 9
    fx.write_process(str(bound_tree), PID, {}, [lwp(1, bindpset=7), lwp(2, bindpset=7)])
    libc.bound = {(PID, 1): 7, (PID, 2): 7}
    saved = {tid: binder.save(PID, tid) for tid in (1, 2)}
    binder.bind(PID, 1, 0, DOMAINS[0])
    # LWP 5 was created by LWP 1 after that bind, so it was born in set 8
    fx.write_process(str(bound_tree), PID, {}, [lwp(1, bindpset=8), lwp(2, bindpset=7),
                                                lwp(5, bindpset=8), lwp(6, bindpset=8)])
    libc.bound.update({(PID, 1): 8, (PID, 5): 8, (PID, 6): 8})
    assert binder.save(PID, 5) == {"bindpset": 7, "bindpro": -1}     # not the default set
    binder.restore(PID, 1, saved[1])
    # LWP 6 was never saved (born after the last round): close() sends it
    # to set 7 before pset_destroy would unbind it to the default set.
    fx.write_process(str(bound_tree), PID, {}, [lwp(1, bindpset=7), lwp(2, bindpset=7),
                                                lwp(5, bindpset=8), lwp(6, bindpset=8)])
    binder.restore(PID, 5, binder.save(PID, 5))
    binder.close()
    assert libc.bound == {(PID, 1): 7, (PID, 2): 7, (PID, 5): 7, (PID, 6): 7}
    assert set(libc.psets) == {7}


def test_origin_is_the_default_set_when_the_lwps_disagreed():
    from tumbler.platform.illumos.pset import origin_of
    assert origin_of({7}) == 7 and origin_of({7, -1}) == -1 and origin_of(()) == -1


def test_restore_puts_a_late_lwp_in_its_process_s_set_not_the_default(bound_tree, tmp_path,
                                                                    illumos_boot):
    """The dead tumbler bound LWPs 1 and 2 (from set 7) to its set 8; LWP 5
    was created after its last write and inherited set 8."""
    from tumbler.state import restore_state
    fx.write_process(str(bound_tree), PID, {"start_ns": PROC_START},
                     [lwp(1, bindpset=8), lwp(2, bindpset=8), lwp(5, bindpset=8)])
    libc = FakeLibc(psets={7: {14}, 8: {0, 1, 2, 3}})
    libc.bound = {(PID, 1): 8, (PID, 2): 8, (PID, 5): 8}
    states = tmp_path / "state"
    states.mkdir()
    stale = write_state(states, [(1, 7), (2, 7)], psets=[8], pset_cpus={8: {0, 1, 2, 3}},
                        pids=[PID])
    report = restore_state(stale, backend(bound_tree, libc=libc))
    assert (report.restored, report.adopted, report.failed) == (2, 1, 0)
    assert libc.bound == {(PID, 1): 7, (PID, 2): 7, (PID, 5): 7}
    assert report.removed == ["processor set 8"] and set(libc.psets) == {7}


# -- topology from processor groups (pg_hw_perf kstats) ------------------------

def amd_like(sockets=2, ccx_per_socket=2, cores_per_ccx=4):
    """CPU dicts of an AMD-like machine as an older kernel reports it: no
    cache_id at all (or one per CPU); two threads per core."""
    cpus = fx.machine(sockets, ccx_per_socket, cores_per_ccx, 2)
    for cpu in cpus:
        del cpu["cache_id"]
    return cpus


def amd_groups(cpus_per_ccx=8, ccx=4, ccx_per_socket=2):
    groups = [("Socket", "%d-%d" % (s * cpus_per_ccx * ccx_per_socket,
                                     (s + 1) * cpus_per_ccx * ccx_per_socket - 1))
              for s in range(ccx // ccx_per_socket)]
    groups += [("Cache", "%d-%d" % (c * cpus_per_ccx, (c + 1) * cpus_per_ccx - 1))
               for c in range(ccx)]
    groups += [("Integer Pipeline", "%d-%d" % (2 * core, 2 * core + 1))
               for core in range(ccx * cpus_per_ccx // 2)]
    return groups


def test_amd_like_machine_without_cache_id_gets_its_llcs_from_processor_groups(tmp_path):
    fx.write_kstat(str(tmp_path), amd_like(), amd_groups())
    topo = backend(tmp_path).topology()
    assert topo.levels["llc"] == tuple(frozenset(range(8 * c, 8 * c + 8)) for c in range(4))
    assert topo.levels["package"] == (frozenset(range(16)), frozenset(range(16, 32)))
    assert topo.levels["core"][0] == frozenset({0, 1}) and len(topo.levels["core"]) == 16
    # the same machine without the pg kstats: no LLC level at all
    fx.write_kstat(str(tmp_path), amd_like())
    assert "llc" not in backend(tmp_path).topology().levels


def test_processor_groups_beat_a_cache_id_per_cpu(tmp_path):
    cpus = fx.machine(1, 1, 4, 2)
    for cpu in cpus:
        cpu["cache_id"] = cpu["id"]         # the old AMD cache_id: one LLC per CPU
    fx.write_kstat(str(tmp_path), cpus, [("Cache", "0-7"), ("Socket", "0-7")])
    assert backend(tmp_path).topology().levels["llc"] == (frozenset(range(8)),)


def test_processor_groups_on_a_sparc_like_machine(tmp_path):
    """No cache_id (x86 only); a "Cache" group per 8 strands, listed out of order."""
    cpus = fx.machine(1, 2, 2, 4)
    for cpu in cpus:
        del cpu["cache_id"]
    fx.write_kstat(str(tmp_path), cpus, [("Cache", "8-15"), ("Cache", "0,1-7"),
                                         ("Floating Point Unit", "0-3")])
    assert backend(tmp_path).topology().levels["llc"] == (frozenset(range(8)),
                                                          frozenset(range(8, 16)))


@pytest.mark.parametrize("groups", [
    [("Cache", "0-7", 9), ("Cache", "8-15")],       # a list cut short (ncpus says 9)
    [("Cache", ""), ("Cache", "8-15")],             # not filled in yet
    [("Cache", "0-7")],                             # CPUs 8-14 in no group
    [("Cache", "0-8"), ("Cache", "8-15")],          # overlap
], ids=["truncated", "empty", "partial", "overlap"])
def test_unusable_processor_groups_fall_back_to_cpu_info(tmp_path, groups):
    fx.write_kstat(str(tmp_path), fx.machine(2, 2, 2, 2, offline={15}), groups)
    topo = backend(tmp_path).topology()
    assert topo.levels["llc"] == (frozenset(range(0, 4)), frozenset(range(4, 8)),
                                  frozenset(range(8, 12)), frozenset(range(12, 15)))


def test_offline_cpus_are_cut_from_processor_groups(tmp_path):
    fx.write_kstat(str(tmp_path), fx.machine(2, 2, 2, 2, offline={15}),
                   [("Cache", "0-7"), ("Cache", "8-15")])
    assert backend(tmp_path).topology().levels["llc"] == (frozenset(range(8)),
                                                          frozenset(range(8, 15)))


def test_system_processor_groups_through_kstat_p(monkeypatch):
    asked = []

    def command(selector):
        asked.append(selector)
        return kstat.read_kstat_text(fx.pg_hw_perf_text([("Cache", "0-3")]), "pg_hw_perf")
    monkeypatch.setattr(kstat, "LibKstat", lambda: (_ for _ in ()).throw(OSError("no lib")))
    monkeypatch.setattr(kstat, "run_kstat_command", command)
    assert kstat.read_system_pg() == {1: {"class": "processor_group", "cpus": "0-3",
                                          "generation": 3, "hw_util": 0, "ncpus": 4,
                                          "parent_pg_id": -1, "pg_id": 1,
                                          "relationship": "Cache"}}
    assert asked == ["pg_hw_perf:::"]


def test_process_tree_from_psinfo_ppid(tree):
    """--children on illumos: every process of /proc, each one's parent
    from psinfo_t.pr_ppid (illumos-gate usr/src/uts/common/sys/procfs.h)."""
    fx.write_process(str(tree), PID, {"fname": "sh", "ppid": 1}, [lwp(1)])
    fx.write_process(str(tree), PID + 1, {"fname": "app", "ppid": PID}, [lwp(1), lwp(2)])
    b = backend(tree)
    assert sorted(b.process_ids()) == [PID, PID + 1]
    assert b.parent_of(PID + 1) == PID
    assert b.parent_of(PID) == 1
    with pytest.raises(NoSuchProcess):
        b.parent_of(PID + 2)
    assert b.newest_pid() is None       # no such token: every look lists /proc


def test_process_facts_for_service_rules(tree):
    """psinfo_t fields a service rule matches on (procfs.h offsets: pr_psargs
    152, pr_projid 264, pr_zoneid 276)."""
    fx.write_process(str(tree), PID, {"fname": "solver", "psargs": "./solver -n 4", "uid": 1001,
                                      "projid": 10, "zoneid": 3}, [lwp(1), lwp(2)])
    facts = backend(tree).process_facts(PID)
    assert (facts.comm, facts.cmdline, facts.uid, facts.threads) == ("solver", "./solver -n 4",
                                                                     1001, 2)
    assert (facts.project, facts.zone, facts.cgroup) == (10, 3, None)


def test_root_state_and_socket_live_in_var_run_on_illumos():
    """illumos has /var/run (tmpfs) and no /run."""
    from tumbler.state.paths import run_dir
    assert run_dir("sunos5") == "/var/run"
    assert run_dir("linux") == "/run"


# -- the service on illumos picks the processor-set binder -------------------------

def test_the_service_binds_with_processor_sets_on_illumos(tmp_path, monkeypatch, illumos_boot):
    """A rule selects a process of an illumos fixture tree: the service asks
    the backend for its default binder (pset; it asked for affinity, which
    illumos refuses, and so managed nothing), binds the LWPs into sets, and
    hands them back when it stops -- destroying the sets, after removing a
    processor binding one LWP made meanwhile (said in the log; that LWP
    could not be moved back while bound, which is said too)."""
    from tumbler.service import loop
    from tumbler.service.config import load_service_config
    root = tmp_path / "root"
    fx.write_kstat(str(root), fx.machine(2, 1, 4, 1))             # 2 sockets of 4 CPUs
    lwps = [lwp(tid, utime_ns=tid * S, rtime_ns=40 * S, sname="O", onpro=tid % 8)
            for tid in range(1, 5)]
    fx.write_process(str(root), PID, {"fname": "app", "psargs": "./app", "nlwp": 4,
                                      "start_ns": PROC_START, "uid": os.geteuid()}, lwps)
    libc = FakeLibc(cpus=range(8))
    be = IllumosBackend(str(root), libc=libc)
    monkeypatch.setattr(loop, "open_backend", lambda name, root: be)
    monkeypatch.setenv("TUMBLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tumbler.yaml").write_text(
        "programs:\n  - name: apps\n    match: {comm: app}\n    domains: 0-2/4-6\n")
    lines = []
    service = loop.Service(load_service_config(str(tmp_path / "tumbler.yaml")),
                           str(tmp_path / "tumbler.yaml"),
                           lambda priority, message: lines.append((priority, message)))
    facts = be.process_facts(PID)
    service._manage(PID, be.process(PID).start, facts, service.config.rules[0])
    assert list(service.programs) == [PID], lines
    controller = service.programs[PID].controller
    assert controller.binder.kind == "pset"
    assert sorted(libc.psets.values(), key=min) == [{0, 1, 2}, {4, 5, 6}]
    controller.tick(0.0)                                      # a round binds the LWPs
    assert set(libc.bound.values()) <= set(libc.psets) and libc.bound
    # LWP 3 binds itself to CPU 5 of the second set
    second = next(s for s, cpus in libc.psets.items() if 5 in cpus)
    fx.write_process(str(root), PID, {"fname": "app", "psargs": "./app", "nlwp": 4,
                                      "start_ns": PROC_START, "uid": os.geteuid()},
                     [dict(row, bindpset=libc.bound.get((PID, row["lwpid"]), -1),
                           bindpro=5 if row["lwpid"] == 3 else -1) for row in lwps])
    libc.cpu_bound = {5: {(PID, 3)}}
    # LWP 3 cannot leave the set while bound to CPU 5 (EBUSY): it is reported,
    # and goes to the default set -- its own -- when its set is destroyed
    assert service.stop() == 1
    assert libc.psets == {} and libc.bound == {}
    assert ("unbind_cpu", 5) in libc.calls
    warnings = [m for p, m in lines if p == loop.WARNING]
    assert len(warnings) == 2 and "pbind -u %d/3" % PID in warnings[0]
    assert warnings[1] == ("processor set %d could not be destroyed while LWPs were bound to "
                           "its CPUs: removed the processor binding of LWP %d/3 (CPU 5)"
                           % (second, PID))


def test_context_switches_from_lwpusage(tree):
    """pr_vctx and pr_ictx of lwp/LWPID/lwpusage, as the fixture packs them
    at their procfs.h offsets (392, 400)."""
    fx.write_process(str(tree), PID, {}, [lwp(1, vctx=12, ictx=3400), lwp(2)])
    b = backend(tree)
    assert b.counts_context_switches
    assert b.context_switches(PID, 1) == (12, 3400)
    assert b.context_switches(PID, 2) == (0, 0)
    with pytest.raises(NoSuchProcess):
        b.context_switches(PID, 9)


# -- LWPs asleep in a user-lock wait (issue 32) --------------------------------

# usr/src/uts/common/sys/syscall.h and sobject.h
SYS_LWP_PARK, SYS_NANOSLEEP, SYS_LWP_COND_WAIT = 77, 199, 170
SYS_LWP_MUTEX_TIMEDLOCK, SYS_LWP_SEMA_TIMEDWAIT, SYS_LWP_RWLOCK_SYS = 210, 211, 212
SOBJ_MUTEX, SOBJ_CV, SOBJ_USER, SOBJ_USER_PI = 1, 3, 5, 6


def test_lock_waiters_are_lwps_asleep_in_a_user_lock_wait(tree):
    """An LWP asleep (pr_sname 'S') in a system call that sleeps in the
    LMS_USER_LOCK microstate (pr_syscall), on the object it sleeps on then
    (pr_stype), is in an LCK sleep now: pr_ltime grows while it lasts."""
    waiting = [lwp(2, syscall=SYS_LWP_PARK, stype=SOBJ_CV),          # mutex, rwlock, cv
               lwp(3, syscall=SYS_LWP_COND_WAIT, stype=SOBJ_USER),   # process-shared cv
               lwp(4, syscall=SYS_LWP_MUTEX_TIMEDLOCK, stype=SOBJ_USER_PI),  # PI mutex
               lwp(5, syscall=SYS_LWP_RWLOCK_SYS, stype=SOBJ_USER)]  # process-shared rwlock
    others = [lwp(6, syscall=SYS_LWP_SEMA_TIMEDWAIT, stype=SOBJ_USER),   # a semaphore: SLP
              lwp(7, syscall=SYS_NANOSLEEP, stype=SOBJ_CV),
              lwp(8, sname="R", syscall=SYS_LWP_PARK),       # woken: on a run queue
              lwp(9, sname="O", syscall=SYS_LWP_PARK),       # not asleep yet
              lwp(10, sname="S", syscall=SYS_LWP_PARK, stype=SOBJ_MUTEX),   # a kernel lock
              lwp(11, syscall=0, stype=SOBJ_USER),           # not in a system call
              lwp(12, syscall=SYS_LWP_PARK, stype=SOBJ_CV)]  # not asked about
    fx.write_process(str(tree), PID, {"fname": "app"}, waiting + others,
                     zombies=[{"lwpid": 13, "syscall": SYS_LWP_PARK, "stype": SOBJ_CV}])
    b = backend(tree)
    before = time.monotonic_ns()
    found = b.lock_waiters(PID, list(range(2, 12)) + [13])
    assert sorted(found) == [2, 3, 4, 5]
    assert all(before <= ns <= time.monotonic_ns() for ns in found.values())
    assert (b.lwp_info(PID, 4).syscall, b.lwp_info(PID, 4).stype) == (
        SYS_LWP_MUTEX_TIMEDLOCK, SOBJ_USER_PI)
    with pytest.raises(NoSuchProcess):
        b.lock_waiters(PID + 1, [2])


def test_illumos_counts_the_pswitch_of_the_cpus_sys_kstats(tmp_path):
    (tmp_path / "kstat").write_text(
        "cpu:0:sys:cpu_nsec_idle\t700\ncpu:0:sys:pswitch\t1200\n"
        "cpu:1:sys:pswitch\t34\ncpu:2:sys:cpu_nsec_idle\t1\n")
    backend = IllumosBackend(str(tmp_path))
    assert backend.counts_cpu_switches
    assert backend.cpu_switches({0, 1}) == 1234
    with pytest.raises(Unsupported, match="CPUs 1,2"):
        backend.cpu_switches({1, 2})                # CPU 2 has no pswitch: off-line
