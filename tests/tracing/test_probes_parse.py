"""Probe output parsers, script structure, script lookup and tool checks.

Pure tests: recorded bpftrace output and hand-written DTrace output from
tests/data/probes/ (see its README.md); no tracing tool is run.
"""

import json
import os
import re
import time
import types
from pathlib import Path

import pytest

from support import helpers
from support.d_model import split_script
from tumbler.tracing import parse as pp
from tumbler.tracing import process as probe_process
from tumbler.tracing import scripts
from tumbler.tracing import session as probe
from tumbler.tracing import tool as probe_tool
from tumbler.errors import TumblerError, UsageError
from tumbler.platform.linux import procfs

REPO = Path(helpers.REPO)
DATA = REPO / "tests" / "data" / "probes"
PROBES = REPO / "probes"


def read(name):
    return (DATA / name).read_text()


# -- bpftrace JSON ----------------------------------------------------------

def notes(name):
    """The recorder's first line: which process and threads are what."""
    first = read(name).splitlines()[0]
    assert first.startswith("# ")
    return json.loads(first[2:])


def last_map(name, map_name):
    """The last print of one map in a recording."""
    lines = [l for l in read(name).splitlines() if '"%s"' % map_name in l]
    return json.loads(lines[-1])["data"][map_name]


def last_time(name, mark="final"):
    return int(re.findall(r"tumbler-probe \w+ %s (\d+)" % mark, read(name))[-1])


def test_locktime_recording_final_values():
    text = read("locktime.ndjson")
    snap = pp.parse_output(text, "json")
    lw = notes("locktime.ndjson")
    contended, alone = lw["contended"], lw["alone"]
    tids = {pid: sorted(t for p, t in snap if p == pid) for pid in (contended, alone)}
    assert [len(tids[contended]), len(tids[alone])] == [4, 2]
    # Three threads on one mutex: each blocked a while, in many waits; the
    # thread that never finds it taken and the main threads never block.
    for tid in tids[contended][1:]:
        assert snap[(contended, tid)]["lock_ns"] > 50e6 and snap[(contended, tid)]["lock_count"] > 5
    assert snap[(contended, contended)]["lock_ns"] == snap[(alone, tids[alone][1])]["lock_ns"] == 0
    # "late" blocked in the second period and stayed blocked: its wait in
    # progress counts up to the final print (printed as minus its start).
    late = snap[(lw["lockwait"], lw["late"])]
    began = -last_map("locktime.ndjson", "@lock_ns")["%d,%d" % (lw["lockwait"], lw["late"])]
    assert late == dict(pp.empty_record(), lock_ns=last_time("locktime.ndjson") - began,
                        lock_count=1)
    # "held" was blocked before the start and had no event since: nothing
    # shows it unless the reader says it saw it blocked (see below).
    assert snap[(lw["lockwait"], lw["held"])]["lock_ns"] == 0
    # the [0, 0] placeholder that keeps maps printed is not a thread
    assert not any(pid == 0 for pid, _ in snap)


def test_runqlat_recording_two_processes():
    snap = pp.parse_output(read("runqlat.ndjson"), "json")
    totals = pp.process_totals(snap)
    assert set(totals) == {2953, 2957}
    crowded, sleepers = totals[2953], totals[2957]
    # waits in progress (printed as minus their start) count up to the print
    last, at = last_map("runqlat.ndjson", "@runq_ns"), last_time("runqlat.ndjson")
    assert any(v < 0 for v in last.values())
    assert crowded["runq_ns"] == sum(v if v >= 0 else v + at for k, v in last.items()
                                     if k.startswith("2953,"))
    assert sleepers["runq_count"] > 400
    # three spinners sharing a CPU wait far longer per wakeup than sleepers
    assert crowded["runq_ns"] / crowded["runq_count"] > 100 * (
        sleepers["runq_ns"] / sleepers["runq_count"])
    assert all(r["lock_ns"] == r["migrations"] == 0 for r in snap.values())


def test_migrations_recording_cross_domain():
    snap = pp.parse_output(read("migrations.ndjson"), "json")
    assert snap == {
        (18920, 18921): dict(pp.empty_record(), migrations=5, cross_domain=5),
        (18920, 18922): dict(pp.empty_record(), migrations=5, cross_domain=5),
    }


def test_recorded_streams_have_markers_in_order():
    for name, script in (("locktime.ndjson", "locktime"), ("runqlat.ndjson", "runqlat"),
                         ("migrations.ndjson", "migrations")):
        stream = pp.ProbeStream("json")
        events = [e for e in map(stream.feed, read(name).splitlines()) if e]
        assert events[0][0] == "attached"
        assert events[1][:3] == ("marker", script, "ready")
        assert events[-1][:3] == ("marker", script, "final")
        # every marker says when (CLOCK_MONOTONIC ns), in order
        times = [e[3] for e in events if e[0] == "marker"]
        assert times == sorted(times) and times[0] > 0
        assert stream.spans() == {script: (times[0], times[-1])}
        assert stream.ready == stream.final == {script}
        text = read(name)
        assert stream.periods[script] == text.count(script + " period") + 1 >= 5
        assert stream.lost_events == 0


def test_values_change_only_at_markers():
    stream = pp.ProbeStream("json")
    committed = [stream.values()]
    for line in read("locktime.ndjson").splitlines():
        before = stream.values()
        event = stream.feed(line)
        if event and event[0] == "marker" and event[2] != "ready":
            committed.append(stream.values())
        else:
            # a map alone is not visible until its period's marker
            assert stream.values() == before
    text = read("locktime.ndjson")
    assert committed[0] == {}
    assert len(committed) == 1 + text.count("locktime period") + text.count("locktime final")
    # cumulative: every committed value is >= the one before
    for older, newer in zip(committed[1:], committed[2:]):
        assert set(older) == set(newer)
        for key, rec in older.items():
            assert all(newer[key][f] >= rec[f] for f in pp.FIELDS)
    assert committed[-1] != committed[1]


def test_truncated_period_is_not_visible():
    lines = read("runqlat.ndjson").splitlines()
    last_marker = max(i for i, l in enumerate(lines) if "runqlat period" in l)
    complete = pp.parse_output("\n".join(lines[:last_marker + 1]), "json")
    # the final maps are there but their marker is cut off
    cut = [l for l in lines if "runqlat final" not in l]
    assert pp.parse_output("\n".join(cut), "json") == complete
    stream = pp.ProbeStream("json")
    for line in cut:
        stream.feed(line)
    assert stream.spans()["runqlat"][1] == last_time("runqlat.ndjson", "period")
    assert last_time("runqlat.ndjson", "period") < last_time("runqlat.ndjson")


def test_delta_gives_interval_values():
    lines = read("locktime.ndjson").splitlines()
    markers = [i for i, l in enumerate(lines) if "locktime period" in l]
    first = pp.parse_output("\n".join(lines[:markers[0] + 1]), "json")
    second = pp.parse_output("\n".join(lines[:markers[1] + 1]), "json")
    d = pp.delta(second, first)
    key = (notes("locktime.ndjson")["contended"], notes("locktime.ndjson")["contended"] + 1)
    assert d[key]["lock_ns"] == second[key]["lock_ns"] - first[key]["lock_ns"] > 0
    assert d[key]["lock_count"] == second[key]["lock_count"] - first[key]["lock_count"]
    # a thread absent before counts from zero; a value that went down
    # (restarted probe) counts from zero too
    assert pp.delta({(1, 2): dict(pp.empty_record(), lock_ns=7)}, {}) == {
        (1, 2): dict(pp.empty_record(), lock_ns=7)}
    assert pp.delta({(1, 2): dict(pp.empty_record(), lock_ns=7)},
                    {(1, 2): dict(pp.empty_record(), lock_ns=9)})[(1, 2)]["lock_ns"] == 7


# -- lock time as it happens ------------------------------------------------------

def test_recorded_wait_in_progress_at_the_start_counts_from_the_start():
    """"held" was blocked before the probes came and had no event since:
    once the reader says it saw it asleep in a lock wait after the start,
    it counts from the start to each print -- 100% of every interval."""
    lw = notes("locktime.ndjson")
    key = (lw["lockwait"], lw["held"])
    stream = pp.ProbeStream("json")
    stream.expect_blocked({key: lw["checked"]})
    prev, prev_at = {}, None
    for line in read("locktime.ndjson").splitlines():
        event = stream.feed(line)
        if event and event[0] == "marker" and event[2] != "ready":
            start, at = stream.spans()["locktime"]
            now = stream.values()
            assert now[key]["lock_ns"] == at - start and now[key]["lock_count"] == 1
            d = pp.delta(now, prev)
            span = at - (prev_at or start)
            for rec in d.values():
                assert rec["lock_ns"] <= span          # nobody above 100% of an interval
            prev, prev_at = now, at


def jline(name, values):
    return json.dumps({"type": "map", "data": {name: dict(
        ("%d,%d" % k, v) for k, v in [((0, 0), 0)] + list(values.items()))}})


def mark(mark, ns, script="locktime"):
    return json.dumps({"type": "printf", "data": "tumbler-probe %s %s %d\n" % (script, mark, ns)})


def lock_print(stream, at, ns=None, seen=None, pre=None, count=None):
    for name, values in (("@lock_count", count), ("@lock_ns", ns), ("@lock_seen", seen),
                         ("@lock_pre", pre)):
        stream.feed(jline(name, values or {}))
    stream.feed(mark("period", at))
    return stream.values()


K = (7, 8)


def test_a_wait_in_progress_counts_up_to_each_print():
    stream = pp.ProbeStream("json")
    stream.feed(mark("ready", 1000))
    # blocked since 1500, after 200 ns of ended waits: printed as 200 - 1500
    snap = lock_print(stream, 2000, ns={K: 200 - 1500}, seen={K: 1100}, count={K: 3})
    assert snap[K]["lock_ns"] == 200 + 500 and snap[K]["lock_count"] == 3
    snap = lock_print(stream, 3000, ns={K: 200 - 1500}, seen={K: 1100}, count={K: 3})
    assert snap[K]["lock_ns"] == 200 + 1500
    # it ended at 3200
    snap = lock_print(stream, 4000, ns={K: 200 + 1700}, seen={K: 1100}, count={K: 3})
    assert snap[K]["lock_ns"] == 1900


def test_no_interval_holds_more_than_it_lasted_and_values_never_go_down():
    stream = pp.ProbeStream("json")
    stream.feed(mark("ready", 1000))
    # maps read a little after the marker's time: 1100 ns where 1000 passed
    snap = lock_print(stream, 2000, ns={K: 1100}, seen={K: 1000})
    assert snap[K]["lock_ns"] == 1000               # capped at the interval
    snap = lock_print(stream, 3000, ns={K: 1100}, seen={K: 1000})
    assert snap[K]["lock_ns"] == 1100               # the rest, in the next one
    snap = lock_print(stream, 4000, ns={K: 1050}, seen={K: 1000})
    assert snap[K]["lock_ns"] == 1100               # never down


def test_reader_seen_waiter_checks():
    blocked, woke_early, gone, counted = (7, 8), (7, 9), (7, 10), (7, 11)
    stream = pp.ProbeStream("json")
    stream.feed(mark("ready", 1000))
    stream.expect_blocked({blocked: 1200, woke_early: 1200, gone: 1200, counted: 1200})
    snap = lock_print(stream, 2000, seen={blocked: 0, woke_early: 1150, counted: 0})
    assert snap[blocked] == dict(pp.empty_record(), lock_ns=1000, lock_count=1)
    # an event before the reader looked: its wait at the look began after
    # the start, and the script counts it itself
    assert snap[woke_early]["lock_ns"] == 0
    # no longer listed in @lock_seen: it exited
    assert gone not in snap
    # woken at 2500: counted up to then; once the script has counted the
    # wait itself (@lock_pre, at the futex call's return), that stands alone
    snap = lock_print(stream, 3000, seen={blocked: 2500, woke_early: 1150, counted: 0})
    assert snap[blocked]["lock_ns"] == 1500
    snap = lock_print(stream, 4000, seen={blocked: 2500, woke_early: 1150, counted: 3500},
                      pre={blocked: 1500, counted: 2500}, count={blocked: 1, counted: 1})
    assert snap[blocked] == dict(pp.empty_record(), lock_ns=1500, lock_count=1)
    assert snap[counted] == dict(pp.empty_record(), lock_ns=2500, lock_count=1)
    assert stream._blocked == {}


def test_prints_after_the_stop_are_ignored():
    stream = pp.ProbeStream("json")
    stream.feed(mark("ready", 1000))
    lock_print(stream, 2000, ns={K: -1500})
    stream.stop_at(2500)
    snap = lock_print(stream, 3000, ns={K: -1500})
    assert snap[K]["lock_ns"] == 500 and stream.spans() == {"locktime": (1000, 2000)}


@pytest.mark.parametrize("key", ["4242,4243", "4242, 4243", "(4242, 4243)"])
def test_map_key_spellings_of_bpftrace_versions(key):
    line = '{"type": "map", "data": {"@runq_ns": {"0,0": 0, "%s": 12}}}' % key
    assert pp.parse_bpftrace_line(line) == ("map", "runqlat", {"runq_ns": {(4242, 4243): 12}})


def test_a_tuple_map_gives_fields_that_change_together():
    line = '{"type": "map", "data": {"@migrations": {"0,0": [0,0], "7,8": [31,4]}}}'
    assert pp.parse_bpftrace_line(line) == (
        "map", "migrations", {"migrations": {(7, 8): 31}, "cross_domain": {(7, 8): 4}})
    for bad in ('[31]', '31', '[31,"x"]', '[31,4,5]'):
        with pytest.raises(pp.ParseError):
            pp.parse_bpftrace_line('{"type": "map", "data": {"@migrations": {"7,8": %s}}}' % bad)


def test_bpftrace_lines_of_no_interest_or_malformed():
    assert pp.parse_bpftrace_line("") is None
    assert pp.parse_bpftrace_line("Attaching 8 probes...") is None
    assert pp.parse_bpftrace_line('{"type": "map", "data": {"@other": {"1": 2}}}') is None
    assert pp.parse_bpftrace_line('{"type": "printf", "data": "hello\\n"}') is None
    assert pp.parse_bpftrace_line('{"type": "lost_events", "data": {"events": 3}}') == ("lost", 3)
    assert pp.parse_bpftrace_line('{"type": "attached_probes", "count": 6, "data": {"probes": 6}}') == ("attached", 6)
    with pytest.raises(pp.ParseError):
        pp.parse_bpftrace_line('{"type": "map", "data": {"@lock_ns": {"17": 5}}}')
    with pytest.raises(pp.ParseError):
        pp.parse_bpftrace_line('{"type": "map", "data": {"@lock_ns": {"1,2": "x"}}}')
    with pytest.raises(pp.ParseError):
        pp.parse_bpftrace_line('{"type": "map", "data": {"@lock_ns": 5}}')


# -- DTrace text --------------------------------------------------------------

def test_dtrace_hand_written_sample():
    stream = pp.ProbeStream("dtrace")
    for line in read("illumos.txt").splitlines():
        stream.feed(line)
    assert stream.ready == stream.final == set(pp.SCRIPTS)
    snap = stream.values()
    assert snap[(4242, 2)] == {"lock_ns": 16777216, "lock_count": 10,
                               "runq_ns": 3670016, "runq_count": 28,
                               "migrations": 3, "cross_domain": 1}
    assert snap[(4242, 3)]["migrations"] == 9
    assert snap[(4242, 4)] == dict(pp.empty_record(), lock_ns=1024, lock_count=1)
    assert snap[(4242, 1)] == dict(pp.empty_record(), runq_ns=20480, runq_count=1)


def test_dtrace_records_wait_for_their_marker():
    stream = pp.ProbeStream("dtrace")
    stream.feed("runqlat pid=7 tid=1 ns=100 count=2")
    assert stream.values() == {}
    stream.feed("tumbler-probe runqlat period")
    assert stream.values() == {(7, 1): dict(pp.empty_record(), runq_ns=100, runq_count=2)}
    stream.feed("runqlat pid=7 tid=1 ns=300 count=5")
    stream.feed("migrations pid=7 tid=1 count=4 cross=1")
    stream.feed("tumbler-probe migrations period")
    assert stream.values()[(7, 1)]["runq_ns"] == 100      # runqlat not committed
    assert stream.values()[(7, 1)]["migrations"] == 4


def test_dtrace_malformed_and_foreign_lines():
    assert pp.parse_dtrace_line("") is None
    assert pp.parse_dtrace_line("dtrace: pid 4242 has exited") is None
    assert pp.parse_dtrace_line("  4242   2   17") is None
    with pytest.raises(pp.ParseError):
        pp.parse_dtrace_line("locktime pid=1 tid=2 ns=3")
    with pytest.raises(pp.ParseError):
        pp.parse_dtrace_line("migrations pid=1 count=2 cross=0")


def test_helpers():
    snap = {(1, 10): dict(pp.empty_record(), lock_ns=5), (1, 11): dict(pp.empty_record(), lock_ns=7),
            (2, 10): dict(pp.empty_record(), migrations=3)}
    assert pp.process_totals(snap)[1]["lock_ns"] == 12
    assert pp.process_totals(snap)[2]["migrations"] == 3
    assert set(pp.by_tid(snap, 1)) == {10, 11}
    merged = pp.merge({(1, 10): dict(pp.empty_record(), lock_ns=5)},
                      {(1, 10): dict(pp.empty_record(), runq_ns=2)})
    assert merged[(1, 10)]["lock_ns"] == 5 and merged[(1, 10)]["runq_ns"] == 2


# -- script structure -----------------------------------------------------------

def bt(name):
    return (PROBES / "linux" / (name + ".bt")).read_text()


def d(name):
    return (PROBES / "illumos" / (name + ".d")).read_text()


def header(text):
    m = re.search(r"/\*(.*?)\*/", text, re.S)
    assert m, "no header comment"
    return m.group(1)


def checked_header(text, shebang, usage):
    """The header comment of a probe script that starts with ``shebang``
    and whose header shows ``usage`` and an example."""
    assert text.startswith(shebang + "\n")
    head = header(text)
    assert usage in head
    assert "Example of usage" in head
    return head


@pytest.mark.parametrize("name", pp.SCRIPTS)
def test_bt_header_and_outputs(name):
    text = bt(name)
    head = checked_header(text, "#!/usr/bin/env bpftrace", "USAGE: %s.bt PID PERIOD_MS" % name)
    assert "tumbler-probe %s ready" % name in head
    code = text[text.index("*/"):]
    assert code.count("// TUMBLER-PRELUDE") == 1
    assert "interval:ms:$2" in code and "@target[$1] = 1;" in code
    # markers say when (nsecs), "ready" when counting starts, from the
    # probe declared last (attached last)
    for mark in ("period", "final"):
        assert 'printf("tumbler-probe %s %s %%lld\\n", nsecs);' % (name, mark) in code
    last = code[code.rindex("\n}\n", 0, len(code) - 2):]
    assert "interval:ms:10\n/@start == 0/" in last
    assert 'printf("tumbler-probe %s ready %%lld\\n", @start);' % name in last
    # every clause but task_newtask, the exit cleanup, BEGIN and END waits for @start
    for head in re.findall(r"^((?:tracepoint|interval|profile)[^{]*)\{", code, re.M):
        if "task_newtask" not in head and "sched_process_exit" not in head:
            assert "@start" in head, head
    # every map it prints is one the parser knows, for this script, keyed [pid, tid]
    printed = set(re.findall(r"print\((@\w+)\)", code))
    assert printed == {m for m, (s, _) in pp.MAP_FIELD.items() if s == name}
    for m in printed:
        assert any("%s[0, 0] = %s;" % (m, v) in code for v in ("0", "sum(0)", "(0, 0)"))
        assert "clear(%s);" % m in code
    # the example output uses the same map names
    for m in re.findall(r"^ \* (@\w+)\[", head, re.M):
        assert m in printed


def test_bt_probe_names():
    assert "tracepoint:syscalls:sys_enter_futex" in bt("locktime")
    assert "tracepoint:syscalls:sys_exit_futex" in bt("locktime")
    assert "(args->op & 0x7f)" not in bt("locktime")    # masked once, into $op
    assert "args->op & 0x7f" in bt("locktime")
    for probe_name in ("tracepoint:sched:sched_wakeup,", "tracepoint:sched:sched_wakeup_new",
                       "tracepoint:sched:sched_switch", "tracepoint:task:task_newtask"):
        assert probe_name in bt("runqlat")
    assert "tracepoint:sched:sched_migrate_task" in bt("migrations")
    assert "args->orig_cpu" in bt("migrations") and "args->dest_cpu" in bt("migrations")


SAMPLE_VALUES = {"pid": 4242, "tid": 3, "ns": 1000, "count": 7, "cross": 2, "seen": 5}


@pytest.mark.parametrize("name", pp.SCRIPTS)
def test_d_scripts_print_what_the_parser_reads(name):
    text = d(name)
    head = checked_header(text, "#!/usr/sbin/dtrace -qs",
                          "USAGE: dtrace -q -p PID -s %s.d PERIOD_MS" % name)
    code = text[text.index("*/", text.index("Example of usage")):]
    assert "dtrace:::BEGIN" in code and "dtrace:::END" in code
    assert "profile:::tick-10ms" in code and "$1 / 10" in code
    assert "#pragma D option quiet" in code
    # each marker says when it was printed: the values of waits in
    # progress are taken as of then
    for mark in pp.MARKS:
        assert 'printf("tumbler-probe %s %s %%d\\n", timestamp);' % (name, mark) in code
    formats = re.findall(r'printa\(\s*"([^"]*)\\n",((?:\s*@\w+,?)+)\)', code)
    assert len(formats) == 2, formats                   # tick and END
    for fmt, aggs in formats:
        assert fmt.startswith(name + " pid=%d tid=%d ")
        # fill the format as printa would and parse it back
        line = re.sub(r"(\w+)=%@?d", lambda m: "%s=%d" % (m.group(1), SAMPLE_VALUES[m.group(1)]), fmt)
        event = pp.parse_dtrace_line(line)
        assert event[0] == "record" and event[1] == name and event[2] == (4242, 3)
        fields = pp.FIELDS_OF_SCRIPT[name]
        optional = set(pp.DTRACE_OPTIONAL_NAMES.get(name, {}).values())
        assert set(fields) <= set(event[3]) <= set(fields) | optional
        aggs = re.findall(r"@\w+", aggs)
        assert len(aggs) == fmt.count("%@d")
        for agg in aggs:
            assert "%s[pid, tid]" % agg in code and "trunc(%s);" % agg in code
    # the example output in the header parses too
    for line in re.findall(r"^ \* (%s pid=.*)$" % name, head, re.M):
        assert pp.parse_dtrace_line(line)[0] == "record"


def test_d_probe_names():
    lock = d("locktime")
    code = lock.split("*/", 1)[1]
    # LCK as restore_mstate() charges it: sleeps begun in LMS_USER_LOCK
    # (msacct.h: 6), from sched:::sleep to the first enqueue, counted on-cpu
    for p in ("sched:::sleep", "sched:::enqueue", "sched:::on-cpu", "proc:::lwp-exit"):
        assert "\n" + p in code
    assert "inline int LMS_USER_LOCK = 6;" in code
    assert "curthread->t_mstate == LMS_USER_LOCK" in code
    for absent in ("plockstat", "sched:::wakeup", "syscall::"):
        assert absent not in code
    runq = d("runqlat")
    assert "sched:::enqueue" in runq and "sched:::on-cpu" in runq
    assert "args[1]->pr_pid == $target" in runq and "args[0]->pr_lwpid" in runq
    mig = d("migrations")
    assert "sched:::on-cpu" in mig and "self->last = cpu + 1;" in mig
    assert mig.count("/* TUMBLER-PRELUDE */") == 1 and "int dom[int];" in mig
    # scripts share one dtrace: their global variables must not collide
    for name in pp.SCRIPTS:
        for var in re.findall(r"^\s*([a-z_]+(?:_ticks|_ts))\b", d(name), re.M):
            assert var.startswith(name + "_")


# -- preludes -------------------------------------------------------------------

def test_bpftrace_prelude_lines():
    text = scripts.bpftrace_prelude("migrations", (10, 20), {10: [10, 11], 20: [20, 21]},
                                   {0: 0, 1: 1})
    assert text == ("@target[20] = 1; @tgid[11] = 10; @tgid[20] = 20; "
                    "@tgid[21] = 20; @dom[0] = 1; @dom[1] = 2;")
    # locktime: the threads listed, each also in @lock_seen (a thread that
    # leaves it has exited)
    assert scripts.bpftrace_prelude("locktime", (10, 20), {10: [10, 11]}, {0: 0}) == (
        "@target[20] = 1; @lock_seen[10, 10] = 0; @tgid[11] = 10; @lock_seen[10, 11] = 0; "
        "@tgid[20] = 20;")
    # no thread list (too many threads): still the other processes' main threads
    assert scripts.bpftrace_prelude("runqlat", (10, 20), {}, None) == (
        "@target[20] = 1; @tgid[20] = 20;")


def test_with_prelude_inserts_at_the_mark():
    path = scripts.find_script("linux", "migrations")
    text = scripts.with_prelude("linux", path, "@dom[0] = 1;")
    begin = text[text.index("\nBEGIN\n"):text.index("printf(\"tumbler-probe migrations ready")]
    assert "\t@dom[0] = 1; // TUMBLER-PRELUDE\n" in begin
    # same line numbers as the file, for the tool's error messages
    assert text.count("\n") == path.read_text().count("\n")
    dtext = scripts.with_prelude("illumos", scripts.find_script("illumos", "migrations"),
                                scripts.dtrace_prelude("migrations", {0: 0, 3: 1}))
    assert "\tdom[0] = 1; dom[3] = 2; /* TUMBLER-PRELUDE */\n" in dtext
    assert scripts.dtrace_prelude("runqlat", {0: 0}) == ""


def test_with_prelude_needs_exactly_one_mark(tmp_path):
    p = tmp_path / "x.bt"
    p.write_text("BEGIN { }\n")
    with pytest.raises(TumblerError, match="TUMBLER-PRELUDE"):
        scripts.with_prelude("linux", p, "@x[1] = 1;")


# -- waits in progress at the start: what /proc shows ---------------------------

def test_futex_wait_ops_are_the_ones_locktime_counts():
    from tumbler.platform.linux import procfs as linux
    text = bt("locktime")
    ops = {int(op) for op in re.findall(r"\$op == (\d+)", text)}
    assert ops == linux.FUTEX_WAIT_OPS
    assert "sys_enter_futex_waitv" in text and linux.FUTEX_WAITV_SYSCALL == 449


def write_task(root, pid, tid, syscall, state):
    base = root / "proc" / str(pid) / "task" / str(tid)
    base.mkdir(parents=True)
    (base / "syscall").write_text(syscall + "\n")
    (base / "stat").write_text("%d (w) %s 1 1 1 0 -1 4194368 0 0 0 0 0 0 0 0 20 0 3 0 "
                               "5000 0 0\n" % (tid, state))


def test_lock_waiters_read_syscall_and_state(tmp_path, monkeypatch):
    from tumbler.platform.linux.backend import LinuxBackend
    monkeypatch.setattr(os, "uname", lambda: types.SimpleNamespace(machine="x86_64"))
    rest = "0x0 0x0 0x0 0x0 0x7ffd 0x7f12"
    write_task(tmp_path, 9, 10, "202 0x5568 0x80 0x2 " + rest, "S")     # FUTEX_WAIT_PRIVATE
    write_task(tmp_path, 9, 11, "202 0x5568 0x189 0x0 " + rest, "S")    # WAIT_BITSET|PRIVATE|RT
    write_task(tmp_path, 9, 12, "202 0x5568 0x81 0x1 " + rest, "S")     # FUTEX_WAKE: no wait
    write_task(tmp_path, 9, 13, "449 0x7f00 0x1 0x0 " + rest, "S")      # futex_waitv
    write_task(tmp_path, 9, 14, "202 0x5568 0x80 0x2 " + rest, "R")     # woken, not yet back
    write_task(tmp_path, 9, 15, "230 0x0 0x0 0x7ffd " + rest, "S")      # clock_nanosleep
    write_task(tmp_path, 9, 16, "running", "R")
    write_task(tmp_path, 9, 17, "202 0x5568 0x86 0x0 " + rest, "D")     # LOCK_PI, in D
    backend = LinuxBackend(str(tmp_path))
    before = time.monotonic_ns()
    found = backend.lock_waiters(9, range(10, 19))           # 18: gone
    assert sorted(found) == [10, 11, 13, 17]
    assert all(before <= ns <= time.monotonic_ns() for ns in found.values())
    # another machine's numbers: aarch64's futex is 98
    monkeypatch.setattr(os, "uname", lambda: types.SimpleNamespace(machine="aarch64"))
    assert sorted(backend.lock_waiters(9, range(10, 19))) == [13]


def test_waitv_lines_go_on_kernels_without_futex_waitv():
    path = scripts.find_script("linux", "locktime")
    text = scripts.with_prelude("linux", path, "", scripts.WAITV_MARK)
    assert "futex_waitv" not in text.split("*/", 1)[1]
    assert text.count("\n") == path.read_text().count("\n")       # same line numbers
    assert "tracepoint:syscalls:sys_exit_futex\n/@start" in text


# -- finding scripts ------------------------------------------------------------

def test_find_script_in_checkout():
    assert scripts.find_script("linux", "runqlat") == PROBES / "linux" / "runqlat.bt"
    assert scripts.find_script("illumos", "locktime") == PROBES / "illumos" / "locktime.d"


def test_find_script_env_first_then_checkout(tmp_path, monkeypatch):
    (tmp_path / "linux").mkdir()
    (tmp_path / "linux" / "locktime.bt").write_text("// mine\n")
    monkeypatch.setenv("TUMBLER_PROBES", str(tmp_path))
    assert scripts.find_script("linux", "locktime") == tmp_path / "linux" / "locktime.bt"
    assert scripts.find_script("linux", "runqlat") == PROBES / "linux" / "runqlat.bt"
    assert scripts.probe_dirs()[0] == tmp_path


def test_find_script_installed_prefix(tmp_path, monkeypatch):
    share = tmp_path / "share" / "tumbler" / "probes" / "illumos"
    share.mkdir(parents=True)
    (share / "runqlat.d").write_text("/* */\n")
    monkeypatch.delenv("TUMBLER_PROBES", raising=False)
    monkeypatch.setattr(scripts.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(scripts, "__file__", str(tmp_path / "lib" / "tumbler" / "probe.py"))
    assert scripts.find_script("illumos", "runqlat") == share / "runqlat.d"
    with pytest.raises(TumblerError, match="locktime.d not found"):
        scripts.find_script("illumos", "locktime")


def test_find_script_rejects_unknown_names():
    with pytest.raises(UsageError):
        scripts.find_script("linux", "offcpu")
    with pytest.raises(UsageError):
        scripts.find_script("freebsd", "runqlat")


# -- tool checks ------------------------------------------------------------------

def one_line(exc_info):
    msg = str(exc_info.value)
    assert "\n" not in msg and msg
    return msg


def test_check_tool_bpftrace_missing(monkeypatch):
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: None)
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("linux")
    assert "apt-get install bpftrace" in one_line(info)


def test_check_tool_needs_privilege(monkeypatch):
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(probe_tool.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(procfs, "has_capability", lambda bit: False)
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("linux")
    assert "CAP_BPF" in one_line(info) and "root" in one_line(info)
    # CAP_BPF + CAP_PERFMON is enough
    monkeypatch.setattr(procfs, "has_capability", lambda bit: bit in (38, 39))
    monkeypatch.setattr(probe_tool, "_tracefs_ready", lambda: True)
    assert probe_tool.check_tool("linux") == "/usr/bin/bpftrace"


def test_check_tool_tracefs_not_mounted(monkeypatch):
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(probe_tool.os, "geteuid", lambda: 0)
    monkeypatch.setattr(probe_tool, "_tracefs_ready", lambda: False)
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("linux")
    assert "mount -t tracefs nodev /sys/kernel/" in one_line(info)


def test_ensure_tracefs_not_root_does_nothing(monkeypatch):
    monkeypatch.setattr(probe_tool, "_tracefs_ready", lambda: False)
    monkeypatch.setattr(probe_tool.os, "geteuid", lambda: 1000)
    assert probe_tool.ensure_tracefs() is None


def test_check_tool_dtrace(monkeypatch):
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: None)
    monkeypatch.setattr(probe_tool.os.path, "exists", lambda p: False)
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("illumos")
    assert "dtrace not found" in one_line(info)
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: "/usr/sbin/dtrace")
    monkeypatch.setattr(probe_tool.os, "geteuid", lambda: 100)
    missing = ["dtrace_kernel"]
    monkeypatch.setattr(probe_tool, "_illumos_missing_privileges", lambda: missing)
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("illumos")
    assert "dtrace_kernel" in one_line(info)
    missing = []
    assert probe_tool.check_tool("illumos") == "/usr/sbin/dtrace"


def test_check_tool_in_a_non_global_zone_says_root_will_not_do(monkeypatch):
    from tumbler.platform.illumos import zone
    monkeypatch.setattr(probe_tool.shutil, "which", lambda name: "/usr/sbin/dtrace")
    monkeypatch.setattr(probe_tool.os, "geteuid", lambda: 0)         # root, all the same
    monkeypatch.setattr(zone, "zone_name", lambda: "web1")
    with pytest.raises(TumblerError) as info:
        probe_tool.check_tool("illumos")
    message = one_line(info)
    assert "dtrace_kernel" in message and "web1" in message and "global zone" in message
    assert "run as root" not in message
    monkeypatch.setattr(zone, "zone_name", lambda: "global")
    assert probe_tool.check_tool("illumos") == "/usr/sbin/dtrace"


# -- session arguments ----------------------------------------------------------

def test_session_rejects_bad_arguments():
    with pytest.raises(UsageError):
        probe.ProbeSession("linux", period_ms=5)
    with pytest.raises(UsageError):
        probe.ProbeSession("beos")
    s = probe.ProbeSession("linux")
    with pytest.raises(UsageError, match="kinds"):
        s.start([1], {"locks", "cache-misses"})
    with pytest.raises(UsageError):
        s.start([], {"locks"})
    with pytest.raises(UsageError):
        s.start([1], {"migrations"}, {0: -1})
    with pytest.raises(TumblerError, match="not started"):
        s.snapshot()
    with pytest.raises(UsageError):
        probe.run_window([1], ["locks"], 0)


# -- D thread-local variables ---------------------------------------------------
#
# libdtrace cooks each clause's predicate, in program order, before the
# clauses after it: a thread-local (self->NAME) read in a predicate must be
# declared at top level (``self int NAME;``) or assigned in the body of an
# EARLIER clause, else dtrace refuses the script with "self->NAME has not yet
# been declared or assigned" (illumos-gate usr/src/lib/libdtrace/common/
# dt_cook.c, dt_cook_var).  No dtrace runs here, so this is checked statically.

_SELF_DECLARATION = re.compile(r"^\s*self\s+[\w\s*]*?\b(\w+)\s*(?:\[[^\]]*\])?\s*$", re.S)
_SELF_READ = re.compile(r"self->(\w+)")
_SELF_ASSIGNED = re.compile(r"self->(\w+)\s*(?:\[[^\]]*\])?\s*(?:=(?!=)|[-+*/%&|^]=|\+\+|--)"
                            r"|(?:\+\+|--)\s*self->(\w+)")


def d_program(text):
    """(thread-locals declared at top level, [(predicate, body)] in program
    order) of a D script; clauses are ``probe-spec [/predicate/] { body }``."""
    declarations, heads, _ = split_script(text)
    declared = {m.group(1) for m in map(_SELF_DECLARATION.match, declarations) if m}
    clauses = [(head[head.index("/") + 1:head.rindex("/")] if "/" in head else "", body)
               for head, body in heads]
    return declared, clauses


def undeclared_thread_locals(text):
    """self->NAME read in a predicate before any declaration or assignment."""
    declared, clauses = d_program(text)
    known, missing = set(declared), []
    for predicate, body in clauses:
        missing += [name for name in _SELF_READ.findall(predicate) if name not in known]
        known |= {a or b for a, b in _SELF_ASSIGNED.findall(body)}
    return missing


def test_thread_local_check_catches_a_read_before_any_assignment():
    late = "a:::b\n/self->x/\n{ n++; }\n\nc:::d\n{ self->x = 1; }\n"
    assert undeclared_thread_locals(late) == ["x"]
    assert undeclared_thread_locals("self int x;\n" + late) == []
    early = "c:::d\n{ self->x[arg0] = timestamp; }\na:::b\n/self->x[arg0] && $1 / 10/\n{ }\n"
    assert undeclared_thread_locals(early) == []
    # a comparison is no assignment, and a clause's own body comes after its predicate
    assert undeclared_thread_locals("a:::b\n/self->y == 1/\n{ self->y = 2; }\n") == ["y"]
    assert undeclared_thread_locals("c:::d\n{ n = self->y == 1; }\na:::b\n/self->y/\n{}") == ["y"]


@pytest.mark.parametrize("path", sorted((PROBES / "illumos").glob("*.d")),
                         ids=lambda p: p.name)
def test_d_thread_locals_are_declared_before_a_predicate_reads_them(path):
    assert undeclared_thread_locals(path.read_text()) == []


# -- a reading after a moment is a print made after it ----------------------------

def test_next_reading_takes_a_print_made_after_the_call_not_one_arriving_after_it():
    """A print made just before the call can arrive after it, its maps read
    before what happened up to the call: the wait goes on to the next print
    made after it (test_probe_cmd's cross-domain count was once 7 of 8:
    the final values missed a move tumbler had seen done)."""
    import threading
    child = probe_process.TracingProcess("migrations", ["bpftrace"], ["migrations"], "json")
    child.take_line(mark("ready", 1, "migrations"), 1)
    since = time.monotonic_ns()
    key = (7, 8)

    def pair_line(n):
        return json.dumps({"type": "map", "data": {"@migrations": {"0,0": [0, 0],
                                                                   "7,8": [n, n]}}})

    def tool():
        time.sleep(0.05)
        child.take_line(pair_line(7), time.monotonic_ns())
        child.take_line(mark("period", since - 1_000_000, "migrations"), time.monotonic_ns())
        time.sleep(0.05)
        child.take_line(pair_line(8), time.monotonic_ns())
        child.take_line(mark("period", since + 90_000_000, "migrations"), time.monotonic_ns())

    thread = threading.Thread(target=tool)
    thread.start()
    try:
        assert child.wait_print(since, time.monotonic() + 10)
        values, spans = child.values()
    finally:
        thread.join()
    assert values[key]["cross_domain"] == 8
    assert spans["migrations"][1] == since + 90_000_000
    # a print as of the moment itself will do; none at all times out
    assert child.wait_print(since + 90_000_000, time.monotonic() + 1)
    assert not child.wait_print(since + 90_000_001, time.monotonic() + 0.1)
