"""``tumbler stat``: per-thread microstates on fixture trees and for real.

Fixture trees give exact percentages (illumos: the example tree of
tests/support/illumos_fixtures.py; Linux: a minimal /proc and /sys built here).
The real run compares a spinning and a sleeping thread with each other,
never against a clock.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import types

import pytest

from support import illumos_fixtures as fx
from support.helpers import wait_for_threads
from support.helpers import run_in_process as run
from tumbler.commands.main import main
from tumbler.balance.domains import choose_domains
from tumbler.platform import open_backend
from tumbler.platform.base import Sample, ThreadTimes
from tumbler.platform.illumos import backend as illumos_backend
from tumbler.commands.shared import (Snapshot, linux_over_interval, snapshot,
                                     thread_percentages)
from tumbler.commands.stat import collect_reports, report_record, stat_command

if "stat" not in main.commands:
    main.add_command(stat_command)

SECOND = 1_000_000_000
TICK = os.sysconf("SC_CLK_TCK")
REPORT_KEYS = {"report", "pid", "name", "platform", "since_start", "elapsed_s", "columns",
               "capacity",
               "level", "domains", "threads"}
THREAD_KEYS = {"tid", "name", "state", "cpu", "domain"}


def run_json(*args):
    status, out, err = run(*args, "--json")
    assert status == 0, err
    return json.loads(out)


def by_name(report):
    return {row["name"]: row for row in report["threads"]}


# -- illumos fixture ---------------------------------------------------------------

@pytest.fixture
def illumos_root(tmp_path):
    return fx.build_example_tree(str(tmp_path / "illumos"))


def illumos(root, *args):
    return ("--platform", "illumos", "--root", root, "stat", "-p", str(fx.EXAMPLE_PID)) + args


def test_illumos_first_report_is_prstat_totals_since_creation(illumos_root):
    (report,) = run_json(*illumos(illumos_root))
    assert set(report) == REPORT_KEYS
    assert report["columns"] == ["usr", "sys", "trp", "tfl", "dfl", "lck", "slp", "lat"]
    assert report["since_start"] is True and report["elapsed_s"] is None
    assert (report["pid"], report["name"], report["platform"]) == (4242, "worker", "illumos")
    # 2 sockets: CPUs 0-7 and 8-14 (15 is off-line).
    assert report["level"] == "package" and report["domains"] == ["0-7", "8-14"]
    rows = by_name(report)
    assert [r["tid"] for r in report["threads"]] == [1, 2, 3, 4]
    for row in report["threads"]:
        assert set(row) == THREAD_KEYS | set(report["columns"])
    # compute-0: usr 30 s, sys 1, lck 2, slp 5, lat 2 -> pr_rtime 40 s.
    assert rows["compute-0"] == {"tid": 2, "name": "compute-0", "state": "R", "cpu": 2,
                                 "domain": 0, "usr": 75.0, "sys": 2.5, "trp": 0.0,
                                 "tfl": 0.0, "dfl": 0.0, "lck": 5.0, "slp": 12.5, "lat": 5.0}
    # compute-1: 18 + 2 + 6 + 12 + 1 = 39 s, on CPU 8 (second socket).
    c1 = rows["compute-1"]
    assert (c1["usr"], c1["sys"], c1["lck"], c1["slp"], c1["lat"]) == (
        46.15, 5.13, 15.38, 30.77, 2.56)
    assert (c1["cpu"], c1["domain"]) == (8, 1)
    # main: 2 + 0.5 + 37 + 0.1 = 39.6 s; io: 1 + 3 + 35 + 0.2 = 39.2 s.
    assert (rows["main"]["usr"], rows["main"]["slp"], rows["main"]["domain"]) == (5.05, 93.43, 0)
    assert (rows["io"]["sys"], rows["io"]["slp"], rows["io"]["domain"]) == (7.65, 89.29, 1)


def test_illumos_text_table(illumos_root):
    status, out, err = run(*illumos(illumos_root))
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == ("domains: 0 = CPUs 0-7, 1 = CPUs 8-14 "
                        "(level package (auto): 2 domains)")
    assert lines[1] == "PID 4242 (worker): 4 threads, % of each thread's life so far"
    assert lines[2].split() == ["TID", "NAME", "USR", "SYS", "TRP", "TFL", "DFL", "LCK",
                                "SLP", "LAT", "CPU", "DOMAIN"]
    assert lines[4].split() == ["2", "compute-0", "75.0", "2.5", "0.0", "0.0", "0.0", "5.0",
                                "12.5", "5.0", "2", "0"]
    assert len(lines) == 7 and err == ""


def test_illumos_later_reports_are_deltas_over_the_interval(illumos_root, monkeypatch):
    # The samples' own clock (the backend's monotonic_ns): 250 ms a sample.
    ticks = iter(range(10**9, 10**10, 250_000_000))
    monkeypatch.setattr(illumos_backend, "time",
                        types.SimpleNamespace(monotonic_ns=lambda: next(ticks)))
    status, out, err = run(*illumos(illumos_root, "--count", "3", "--interval", "10"),
                           "--json")
    assert status == 0, err
    reports = json.loads(out)
    assert [r["report"] for r in reports] == [1, 2, 3]
    assert [r["since_start"] for r in reports] == [True, False, False]
    for report in reports[1:]:
        # the time between the samples, not the --interval asked for (10 ms)
        assert report["elapsed_s"] == 0.25
        # Nothing changed in the tree between the samples.
        for row in report["threads"]:
            assert all(row[c] == 0.0 for c in report["columns"]), row


def test_illumos_delta_is_the_change_over_pr_rtime(illumos_root):
    backend = open_backend("illumos", illumos_root)
    info = backend.process(fx.EXAMPLE_PID)
    choice = choose_domains(backend.topology(), backend.topology().online)
    before = snapshot(backend, fx.EXAMPLE_PID)
    lwps = fx.example_lwps()
    # compute-0 runs 1 s in user mode and sleeps 1 s; compute-1 waits 3 s on
    # a lock and 1 s for a CPU; LWP 4 exits and a new LWP 4 replaces it.
    lwps[1].update(utime_ns=lwps[1]["utime_ns"] + SECOND,
                   slptime_ns=lwps[1]["slptime_ns"] + SECOND,
                   rtime_ns=lwps[1]["rtime_ns"] + 2 * SECOND)
    lwps[2].update(ltime_ns=lwps[2]["ltime_ns"] + 3 * SECOND,
                   wtime_ns=lwps[2]["wtime_ns"] + SECOND,
                   rtime_ns=lwps[2]["rtime_ns"] + 4 * SECOND)
    lwps[3] = dict(lwpid=4, lwpname="io-2", utime_ns=SECOND, stime_ns=SECOND,
                   slptime_ns=2 * SECOND, rtime_ns=4 * SECOND, create_ns=2000 * SECOND,
                   onpro=12, sname="S")
    fx.write_process(illumos_root, fx.EXAMPLE_PID, {"fname": "worker", "uid": 1000}, lwps)
    after = snapshot(backend, fx.EXAMPLE_PID)
    rows = by_name(report_record(2, "illumos", info, before, after, choice))
    assert (rows["compute-0"]["usr"], rows["compute-0"]["slp"],
            rows["compute-0"]["lat"]) == (50.0, 50.0, 0.0)
    assert (rows["compute-1"]["lck"], rows["compute-1"]["lat"],
            rows["compute-1"]["usr"]) == (75.0, 25.0, 0.0)
    # The new LWP 4 is shown over its own life, not against the old one's times.
    assert (rows["io-2"]["usr"], rows["io-2"]["sys"], rows["io-2"]["slp"]) == (25.0, 25.0, 50.0)
    assert (rows["io-2"]["cpu"], rows["io-2"]["domain"]) == (12, 1)
    assert rows["main"]["usr"] == 0.0


@pytest.mark.parametrize("args, domains, level, domain_of", [
    (("--level", "llc"), ["0-3", "4-7", "8-11", "12-14"], "llc",
     {"main": 0, "compute-0": 0, "compute-1": 2, "io": 2}),
    (("--domains", "0-8/9-14"), ["0-8", "9-14"], "explicit",
     {"main": 0, "compute-0": 0, "compute-1": 0, "io": 1}),
])
def test_domain_column_follows_level_and_domains(illumos_root, args, domains, level, domain_of):
    (report,) = run_json(*illumos(illumos_root, *args))
    assert report["domains"] == domains and report["level"] == level
    assert {name: row["domain"] for name, row in by_name(report).items()} == domain_of


def test_global_domains_option_applies_to_stat(illumos_root):
    (report,) = run_json("--platform", "illumos", "--root", illumos_root, "--domains",
                         "0-1/2-14", "stat", "-p", str(fx.EXAMPLE_PID))
    assert report["domains"] == ["0-1", "2-14"]
    assert by_name(report)["compute-0"]["domain"] == 1


def test_process_exiting_between_reports_ends_them(illumos_root):
    backend = open_backend("illumos", illumos_root)
    info = backend.process(fx.EXAMPLE_PID)
    choice = choose_domains(backend.topology(), backend.topology().online)
    reports = []

    def process_exits(seconds):
        shutil.rmtree(os.path.join(illumos_root, "proc", str(fx.EXAMPLE_PID)))

    complete = collect_reports(backend, fx.EXAMPLE_PID, 3, 10, choice, reports.append, info,
                               sleep=process_exits)
    assert complete is False
    assert [r["report"] for r in reports] == [1]


# -- Linux fixture -----------------------------------------------------------------

def stat_line(pid, comm, state="S", utime=0, stime=0, start=0, cpu=0, flags=0x400040):
    fields = ["0"] * 50
    fields[0], fields[6] = state, str(flags)
    fields[11], fields[12], fields[19], fields[36] = str(utime), str(stime), str(start), str(cpu)
    return "%d (%s) %s\n" % (pid, comm, " ".join(fields))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


LINUX_PID = 300
# tid: (comm, state, utime s, stime s, start s after boot, cpu, run_delay s)
LINUX_THREADS = {
    300: ("server", "S", 50, 10, 900, 3, 5),
    301: ("worker one", "R", 1, 0, 990, 0, 0.5),
}


def build_linux_tree(root):
    """4 CPUs in 2 packages (0-1, 2-3), /proc/uptime 1000 s, process 300."""
    write(root + "/proc/uptime", "1000.00 1800.00\n")
    cpu_dir = root + "/sys/devices/system/cpu"
    write(cpu_dir + "/online", "0-3\n")
    for cpu in range(4):
        write("%s/cpu%d/topology/package_cpus_list" % (cpu_dir, cpu), "0-1\n" if cpu < 2
              else "2-3\n")
    status = "Name:\tserver\nTgid:\t%d\nPid:\t%d\nUid:\t1000\t1000\t1000\t1000\n" \
             "Cpus_allowed_list:\t0-3\n" % (LINUX_PID, LINUX_PID)
    base = "%s/proc/%d" % (root, LINUX_PID)
    write(base + "/status", status)
    for tid, (comm, state, usr, sys_, start, cpu, delay) in LINUX_THREADS.items():
        line = stat_line(tid, comm, state, usr * TICK, sys_ * TICK, start * TICK, cpu)
        if tid == LINUX_PID:
            write(base + "/stat", line)
        task = "%s/task/%d" % (base, tid)
        write(task + "/stat", line)
        write(task + "/status", status)
        write(task + "/schedstat", "%d %d 100\n" % ((usr + sys_) * SECOND, delay * SECOND))
    return root


@pytest.fixture
def linux_root(tmp_path):
    return build_linux_tree(str(tmp_path / "linux"))


def test_linux_first_report_is_times_over_thread_age(linux_root):
    reports = run_json("--platform", "linux", "--root", linux_root, "stat", "-p",
                       str(LINUX_PID), "--count", "2", "--interval", "10")
    first, second = reports
    assert first["columns"] == ["usr", "sys", "lat"] and first["platform"] == "linux"
    assert first["domains"] == ["0-1", "2-3"] and first["level"] == "package"
    rows = {row["tid"]: row for row in first["threads"]}
    # Started 900 s after boot, now 1000 s: 100 s old; 50 s user, 10 s
    # system, 5 s waiting for a CPU.
    assert rows[300] == {"tid": 300, "name": "server", "state": "S", "cpu": 3, "domain": 1,
                         "usr": 50.0, "sys": 10.0, "lat": 5.0}
    # 10 s old: 1 s user, 0.5 s waiting; the comm may hold a space.
    assert rows[301] == {"tid": 301, "name": "worker one", "state": "R", "cpu": 0,
                         "domain": 0, "usr": 10.0, "sys": 0.0, "lat": 5.0}
    assert second["since_start"] is False
    assert all(row[c] == 0.0 for row in second["threads"] for c in ("usr", "sys", "lat"))


def test_linux_text_report(linux_root):
    status, out, err = run("--root", linux_root, "--platform", "linux", "stat", "-p",
                           str(LINUX_PID))
    assert status == 0, err
    lines = out.splitlines()
    assert lines[2].split() == ["TID", "NAME", "USR", "SYS", "LAT", "CPU", "DOMAIN"]
    assert lines[3].split() == ["300", "server", "50.0", "10.0", "5.0", "3", "1"]
    assert lines[4].split() == ["301", "worker", "one", "10.0", "0.0", "5.0", "0", "0"]


def linux_times(tid, start, usr_s, sys_s, lat_s, cpu=0):
    return ThreadTimes(tid=tid, start=start, name="t%d" % tid, run_ns=(usr_s + sys_s) * SECOND,
                       usr_ns=int(usr_s * SECOND), sys_ns=int(sys_s * SECOND),
                       lat_ns=int(lat_s * SECOND), cpu=cpu, state="R")


def test_linux_delta_uses_wall_time_and_a_reused_tid_starts_over():
    prev = linux_times(7, 100, 1, 1, 1)
    cur = linux_times(7, 100, 1.5, 1.25, 1.1)
    assert linux_over_interval(prev, cur, SECOND) == pytest.approx(
        {"usr": 50.0, "sys": 25.0, "lat": 10.0})
    # Same TID, another start time: a new thread, measured over its age
    # (uptime 20 s, started at tick 10 s worth -> 10 s old).
    reused = linux_times(7, 10 * TICK, 2, 1, 0.5)
    assert thread_percentages("linux", prev, reused, SECOND, 20 * SECOND) == pytest.approx(
        {"usr": 20.0, "sys": 10.0, "lat": 5.0})
    # Without schedstat there is no LAT.
    blind = ThreadTimes(tid=7, start=100, name="t", run_ns=0, usr_ns=SECOND, sys_ns=0)
    assert linux_over_interval(blind, blind, SECOND)["lat"] is None


def test_linux_report_record_from_samples():
    class Info:
        pid, name = 9, "nine"
    choice = choose_domains(type("T", (), {"online": frozenset({0, 1}),
                                           "levels": {}})(), {0, 1}, "auto", [{0}, {1}])
    before = Snapshot(Sample(9, 5 * SECOND, {9: linux_times(9, 0, 1, 0, 0),
                                             10: linux_times(10, 0, 1, 0, 0)}), 50 * SECOND)
    after = Snapshot(Sample(9, 7 * SECOND, {9: linux_times(9, 0, 2, 0, 1, cpu=1),
                                            11: linux_times(11, 40 * TICK, 5, 0, 0)}),
                     52 * SECOND)
    record = report_record(2, "linux", Info, before, after, choice)
    assert record["elapsed_s"] == 2.0 and record["domains"] == ["0", "1"]
    rows = {row["tid"]: row for row in record["threads"]}
    assert set(rows) == {9, 11}                 # 10 exited
    assert (rows[9]["usr"], rows[9]["lat"], rows[9]["domain"]) == (50.0, 50.0, 1)
    assert rows[11]["usr"] == 41.67             # 5 s of its 12 s life


# -- errors --------------------------------------------------------------------------

def test_unknown_process_is_one_line_and_status_1(linux_root):
    status, out, err = run("--platform", "linux", "--root", linux_root, "stat", "-p", "4")
    assert status == 1 and out == ""
    assert err == "tumbler: no such process: 4\n"


def test_uptime_comes_from_the_backend(linux_root, illumos_root):
    """Linux counts thread start times from boot (Backend.uptime_ns reads
    /proc/uptime); illumos measures an LWP's life itself: None."""
    assert open_backend("linux", linux_root).uptime_ns() == 1000 * SECOND
    assert open_backend("illumos", illumos_root).uptime_ns() is None


def test_unreadable_uptime_is_one_line_and_status_1(linux_root):
    os.remove(linux_root + "/proc/uptime")
    status, out, err = run("--platform", "linux", "--root", linux_root, "stat", "-p",
                           str(LINUX_PID), "--json")
    assert status == 1 and out == ""
    assert err == "tumbler: cannot read %s/proc/uptime: No such file or directory\n" % linux_root


@pytest.mark.parametrize("args, words", [
    (("--interval", "5"), "--interval must be between 10 and 3600000 ms"),
    (("--count", "0"), "--count must be at least 1"),
    (("--level", "llc", "--domains", "0/1"), "--domains and --level exclude each other"),
    (("--domains", "0/9"), "--domains: CPU 9 is not on-line"),
    (("--domains", "0,1/1"), "CPU 1 is in two domains"),
    (("--level", "numa"), "does not report the numa level"),
])
def test_usage_errors_are_one_line_and_status_2(linux_root, args, words):
    status, out, err = run("--platform", "linux", "--root", linux_root, "stat", "-p",
                           str(LINUX_PID), *args)
    assert status == 2 and out == ""
    assert err.startswith("tumbler: ") and words in err and err.count("\n") == 1, err


def test_missing_pid_option_is_a_usage_error(linux_root):
    status, _, err = run("--platform", "linux", "--root", linux_root, "stat")
    assert status == 2 and "-p" in err


# -- the real machine ----------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_real_spinning_thread_is_busy_and_sleeping_thread_is_not(duty):
    proc = subprocess.Popen([duty, "600", "100", "0"])
    try:
        wait_for_threads(proc.pid, 3)
        tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % proc.pid))
        spinner = tids[1]
        # Let the spinner accumulate CPU time so the life-so-far figures
        # are not dominated by the 1-tick resolution of its start time.
        while read_run_ns(proc.pid, spinner) < SECOND // 2:
            time.sleep(0.05)
        reports = run_json("stat", "-p", str(proc.pid), "--count", "2", "--interval", "300")
    finally:
        proc.kill()
        proc.wait()
    for report in reports:
        rows = by_name(report)
        spin, sleep = rows["duty-0"], rows["duty-1"]
        # A spinning thread is always either running or waiting for a CPU
        # (how the two split depends on what else the machine runs); the
        # sleeper is neither most of the time.
        assert spin["usr"] + spin["sys"] + spin["lat"] > 80, report
        assert sleep["usr"] + sleep["sys"] + sleep["lat"] < 15, report
        assert spin["usr"] + spin["sys"] > 3 * (sleep["usr"] + sleep["sys"]) + 1, report
        assert spin["domain"] is not None and spin["cpu"] in range(os.cpu_count())
    assert [r["since_start"] for r in reports] == [True, False]
    assert 0 < reports[1]["elapsed_s"]


def read_run_ns(pid, tid):
    with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
        return int(f.read().split()[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_real_thread_id_is_refused_with_its_process(duty):
    proc = subprocess.Popen([duty, "600", "0"])
    try:
        wait_for_threads(proc.pid, 2)
        tid = max(int(t) for t in os.listdir("/proc/%d/task" % proc.pid))
        status, out, err = run("stat", "-p", str(tid))
    finally:
        proc.kill()
        proc.wait()
    assert status == 2 and out == ""
    assert err == ("tumbler: %d is a thread of process %d, not a process: give -p %d\n"
                   % (tid, proc.pid, proc.pid))
