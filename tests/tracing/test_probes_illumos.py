"""The illumos DTrace scripts run on traces of kernel events (d_model.py):
no dtrace runs here.

A trace fires the probes as the illumos-gate sources fire them on each
path (cited where the path is built), and the kernel's microstate
accounting of the same events -- what ``/proc/PID/lusage`` then holds as
``pr_ltime`` -- is written to a fixture tree next to it: locktime.d must
report, LWP by LWP, what the backend reads there as LCK.  Verified against
the sources only, like the scripts.
"""

import itertools
from pathlib import Path

import pytest

from support import illumos_fixtures as fx
from support.d_model import Program
from support.helpers import REPO
from tumbler.platform.illumos.backend import IllumosBackend

PROBES = Path(REPO) / "probes" / "illumos"
PID = 4242
OTHER_PID = 77                  # the process of a waker: not traced

# usr/src/uts/common/sys/msacct.h
LMS_SYSTEM, LMS_USER_LOCK = 1, 6


def script(name):
    return (PROBES / (name + ".d")).read_text()


class Trace:
    """Probe firings of one process's LWPs, and what the kernel charges.

    ``ltime[tid]``: LCK as restore_mstate() (usr/src/uts/common/os/
    msacct.c) charges it -- for a sleep begun in LMS_USER_LOCK, from
    new_mstate(LMS_SLEEP) to t_waitrq, which setbackdq()/setfrontdq()
    (usr/src/uts/common/disp/disp.c) set at the first enqueue."""

    def __init__(self):
        self.events = []
        self.ltime = {}
        self.sleeps = {}

    def fire(self, t, probe, pid=PID, tid=0, cpu=0, **fields):
        self.events.append(dict(probe=probe, timestamp=t, pid=pid, tid=tid, cpu=cpu,
                                **fields))

    def lwp_fires(self, t, probe, tid, about=None, **fields):
        """A sched probe about LWP ``about`` of PID, fired by someone else."""
        self.fire(t, probe, pid=OTHER_PID, tid=1,
                  args=[{"pr_lwpid": about}, {"pr_pid": PID}], **fields)

    def sleep(self, tid, t, syscall, mstate, woken, path, runs, cpu=0, subcode=0,
              requeued=None):
        """LWP ``tid`` sleeps at ``t`` inside ``syscall`` in microstate
        ``mstate``, is made runnable at ``woken`` along ``path`` (which
        decides whether sched:::wakeup fires), perhaps requeued (a priority
        change: dequeue and enqueue) at ``requeued``, and runs at ``runs``."""
        self.fire(t - 500, "syscall::%s:entry" % syscall, tid=tid, cpu=cpu, arg0=subcode)
        self.fire(t, "sched:::sleep", tid=tid, cpu=cpu, curthread={"t_mstate": mstate})
        self.fire(t + 1, "sched:::off-cpu", tid=tid, cpu=cpu)
        if path in ("cv_signal", "cv_wakeup", "lwp_release", "turnstile_wakeup"):
            self.lwp_fires(woken, "sched:::wakeup", tid, about=tid)
        # lwp_unsleep and turnstile_unsleep (timeouts, signals) fire no wakeup
        self.lwp_fires(woken, "sched:::enqueue", tid, about=tid)
        if requeued is not None:
            self.lwp_fires(requeued, "sched:::dequeue", tid, about=tid)
            self.lwp_fires(requeued, "sched:::enqueue", tid, about=tid)
        self.fire(runs, "sched:::dequeue", pid=OTHER_PID, tid=1, cpu=cpu,
                  args=[{"pr_lwpid": tid}, {"pr_pid": PID}])
        self.fire(runs, "sched:::on-cpu", tid=tid, cpu=cpu)
        self.fire(runs + 700, "syscall::%s:return" % syscall, tid=tid, cpu=cpu)
        if mstate == LMS_USER_LOCK:
            self.ltime[tid] = self.ltime.get(tid, 0) + woken - t
            self.sleeps[tid] = self.sleeps.get(tid, 0) + 1
        else:
            self.ltime.setdefault(tid, 0)

    def lwp_exit(self, t, tid, cpu=0):
        self.fire(t, "proc:::lwp-exit", tid=tid, cpu=cpu)


def every_path():
    """One LWP per way into and out of a user-lock sleep (and two sleeps
    that are not LCK)."""
    trace = Trace()
    ms = 1_000_000
    # lwp_park, woken by lwp_unpark: cv_signal() fires wakeup (condvar.c)
    trace.sleep(2, 10 * ms, "lwp_park", LMS_USER_LOCK, 13 * ms, "cv_signal", 14 * ms)
    # lwp_park's timeout: the callout's cv_wakeup() fires wakeup too
    trace.sleep(3, 11 * ms, "lwp_park", LMS_USER_LOCK, 31 * ms, "cv_wakeup", 33 * ms)
    # a process-shared condition variable: lwp_cond_wait, signalled
    # (lwp_release() fires wakeup)
    trace.sleep(4, 12 * ms, "lwp_cond_wait", LMS_USER_LOCK, 19 * ms, "lwp_release", 25 * ms)
    # ... and timed out: lwp_timer -> setrun() -> lwp_unsleep(): no wakeup
    trace.sleep(5, 12 * ms, "lwp_cond_wait", LMS_USER_LOCK, 52 * ms, "lwp_unsleep", 53 * ms)
    # a priority-inheritance mutex, interrupted by a signal:
    # turnstile_unsleep() (turnstile.c): no wakeup
    trace.sleep(6, 14 * ms, "lwp_mutex_timedlock", LMS_USER_LOCK, 17 * ms,
                "turnstile_unsleep", 18 * ms)
    # a process-shared rwlock granted to a writer, requeued by a priority
    # change before it runs: t_waitrq keeps the first enqueue
    trace.sleep(7, 15 * ms, "lwp_rwlock_sys", LMS_USER_LOCK, 16 * ms, "lwp_release", 30 * ms,
                subcode=1, requeued=22 * ms)
    # the same LWP sleeps again: both sleeps count
    trace.sleep(7, 40 * ms, "lwp_park", LMS_USER_LOCK, 41 * ms, "cv_signal", 41 * ms + 5)
    # a semaphore (lwp_sema_timedwait never enters LMS_USER_LOCK): SLP
    trace.sleep(8, 10 * ms, "lwp_sema_timedwait", LMS_SYSTEM, 20 * ms, "lwp_release", 21 * ms)
    # nanosleep: SLP
    trace.sleep(9, 10 * ms, "nanosleep", LMS_SYSTEM, 20 * ms, "cv_wakeup", 20 * ms)
    trace.events.sort(key=lambda e: e["timestamp"])      # stable: same-time order kept
    return trace


def lusage_fixture(tmp_path, trace):
    """A /proc tree whose lusage holds the trace's LWPs with the kernel's pr_ltime."""
    fx.write_kstat(str(tmp_path), fx.machine(1, 1, 2, 1))
    lwps = [{"lwpid": tid, "ltime_ns": ns, "rtime_ns": 60_000_000, "create_ns": tid}
            for tid, ns in sorted(trace.ltime.items())]
    fx.write_process(str(tmp_path), PID, {"fname": "app"}, lwps)
    return IllumosBackend(str(tmp_path))


def test_locktime_agrees_with_the_microstate_lck_on_every_path(tmp_path):
    trace = every_path()
    lck = {tid: t.micro["lck"]
           for tid, t in lusage_fixture(tmp_path, trace).sample(PID).threads.items()}
    assert lck[8] == lck[9] == 0 and all(lck[tid] > 0 for tid in range(2, 8))
    run = Program(script("locktime"), PID).run(trace.events)
    measured = {tid: ns for (pid, tid), ns in run.aggregation("@lock_ns").items()}
    assert {tid: measured.get(tid, 0) for tid in lck} == lck
    counts = {tid: n for (pid, tid), n in run.aggregation("@lock_count").items()}
    assert counts == trace.sleeps and counts[7] == 2


def test_locktime_needs_no_wakeup_probe_and_no_system_call_probe():
    # The paths that fire no wakeup (lwp_unsleep, turnstile_unsleep) are
    # covered only if the sleep ends at the enqueue; and the microstate, not
    # a list of system calls, decides what is a user-lock sleep.
    trace = every_path()
    bare = [e for e in trace.events if e["probe"] in ("sched:::sleep", "sched:::enqueue",
                                                      "sched:::on-cpu")]
    run = Program(script("locktime"), PID).run(bare)
    assert {tid: ns for (_, tid), ns in run.aggregation("@lock_ns").items()} == {
        tid: ns for tid, ns in trace.ltime.items() if ns}


def test_locktime_counts_a_sleep_as_it_goes():
    """A sleep adds -timestamp when it begins and the enqueue's timestamp
    when it ends: asleep, the value plus the print's time is the sleep so
    far; ended, the sleep itself, whether or not the LWP has run since."""
    trace = Trace()
    trace.fire(100, "sched:::sleep", tid=2, curthread={"t_mstate": LMS_USER_LOCK})
    run = Program(script("locktime"), PID).run(trace.events)
    assert run.aggregation("@lock_ns") == {(PID, 2): -100}     # asleep since 100
    assert run.aggregation("@lock_count") == {(PID, 2): 1}     # a sleep begun
    run.run([dict(probe="sched:::enqueue", timestamp=500, pid=OTHER_PID, tid=1, cpu=0,
                  args=[{"pr_lwpid": 2}, {"pr_pid": PID}])])
    assert run.aggregation("@lock_ns") == {(PID, 2): 400}      # queued: LAT now
    run.run([dict(probe="sched:::on-cpu", timestamp=900, pid=PID, tid=2, cpu=1)])
    assert run.aggregation("@lock_ns") == {(PID, 2): 400} and run.dynamic() == 0


def test_runqlat_counts_a_wait_as_it_goes():
    trace = Trace()
    trace.lwp_fires(100, "sched:::enqueue", 2, about=2)
    run = Program(script("runqlat"), PID).run(trace.events)
    assert run.aggregation("@runq_ns") == {(PID, 2): -100}
    assert run.aggregation("@runq_count") == {}
    run.run([dict(probe="sched:::dequeue", timestamp=300, pid=OTHER_PID, tid=1, cpu=0,
                  args=[{"pr_lwpid": 2}, {"pr_pid": PID}]),
             dict(probe="sched:::on-cpu", timestamp=310, pid=PID, tid=2, cpu=0)])
    assert run.aggregation("@runq_ns") == {(PID, 2): 200}
    assert run.aggregation("@runq_count") == {(PID, 2): 1} and run.dynamic() == 0


def test_other_processes_lwps_are_not_counted():
    trace = Trace()
    trace.fire(100, "sched:::sleep", pid=OTHER_PID, tid=2,
               curthread={"t_mstate": LMS_USER_LOCK})
    trace.fire(200, "sched:::enqueue", pid=0, tid=0,
               args=[{"pr_lwpid": 2}, {"pr_pid": OTHER_PID}])
    trace.fire(300, "sched:::on-cpu", pid=OTHER_PID, tid=2)
    run = Program(script("locktime"), PID).run(trace.events)
    assert run.aggregation("@lock_ns") == {} and run.dynamic() == 0


# -- dynamic variables: freed when an LWP exits ----------------------------------

def short_lived_lwps(count=50):
    """``count`` LWPs that each run on two CPUs, sleep on a lock, wait on
    a run queue and exit: what a program that keeps creating threads does."""
    trace = Trace()
    clock = itertools.count(1000, 1000)
    for tid in range(2, 2 + count):
        cpu = tid % 4
        trace.lwp_fires(next(clock), "sched:::enqueue", tid, about=tid)
        trace.fire(next(clock), "sched:::on-cpu", tid=tid, cpu=cpu)
        trace.fire(next(clock), "sched:::sleep", tid=tid, cpu=cpu,
                   curthread={"t_mstate": LMS_USER_LOCK})
        trace.lwp_fires(next(clock), "sched:::enqueue", tid, about=tid)
        trace.lwp_fires(next(clock), "sched:::dequeue", tid, about=tid)
        trace.fire(next(clock), "sched:::on-cpu", tid=tid, cpu=(cpu + 1) % 4)
        trace.lwp_exit(next(clock), tid, cpu=(cpu + 1) % 4)
    return trace


@pytest.mark.parametrize("name", ["locktime", "runqlat", "migrations"])
def test_nothing_is_left_in_dynamic_variable_space_once_the_lwps_exit(name):
    assert Program(script(name), PID).run(short_lived_lwps().events).dynamic() == 0


def test_migrations_keeps_self_last_for_an_lwps_life_and_frees_it_at_exit():
    events = short_lived_lwps().events
    alive = Program(script("migrations"), PID).run(
        [e for e in events if e["probe"] != "proc:::lwp-exit"])
    assert alive.dynamic() == 50                        # one self->last per LWP
    text = script("migrations")
    clause = text[text.index("\nproc:::lwp-exit"):]
    clause = clause[:clause.index("}") + 1]
    assert "/pid == $target/" in clause and "self->last = 0;" in clause


def test_migrations_counts_moves_and_domain_crossings():
    text = script("migrations").replace("/* TUMBLER-PRELUDE */",
                                        "dom[0] = 1; dom[1] = 1; dom[2] = 2; dom[3] = 2;")
    prelude = Program(text, PID)
    prelude.run([dict(probe="dtrace:::BEGIN", timestamp=0, pid=0, tid=0, cpu=0)])
    trace = Trace()
    for t, cpu in enumerate([0, 0, 1, 2, 2, 3, 0]):
        trace.fire(t, "sched:::on-cpu", tid=5, cpu=cpu)
    prelude.run(trace.events)
    assert prelude.aggregation("@migrations") == {(PID, 5): 4}       # 0->1->2, 2->3->0
    assert prelude.aggregation("@cross_domain") == {(PID, 5): 2}     # 1->2 and 3->0


# -- as it happens: every print against what the kernel keeps then (issue 32) --

MS = 1_000_000


def printa_lines(run, name, field_aggs):
    """What the tick clause prints: printa of the two aggregations (keys of
    either, a missing value 0)."""
    aggs = [run.aggregation(a) for _, a in field_aggs]
    lines = []
    for key in sorted(set().union(*aggs)):
        values = " ".join("%s=%d" % (f, agg.get(key, 0))
                          for (f, _), agg in zip(field_aggs, aggs))
        lines.append("%s pid=%d tid=%d %s" % (name, key[0], key[1], values))
    return lines


def traced_prints(trace, prints, start=5 * MS, listed=(), waiters=None):
    """Run locktime.d and runqlat.d on ``trace`` and feed what they print
    at each time of ``prints`` (ns) to a ProbeStream: ``[(at, values)]``.
    ``listed``: the LWPs ProbeSession lists to locktime.d (its prelude);
    ``waiters``: those it then finds asleep in a lock wait."""
    from tumbler.tracing import parse, scripts
    lock = Program(scripts.with_prelude("illumos", PROBES / "locktime.d",
                                        scripts.dtrace_prelude("locktime", None, PID, listed)),
                   PID)
    runq = Program(script("runqlat"), PID)
    for program in (lock, runq):
        program.run([dict(probe="dtrace:::BEGIN", timestamp=start, pid=0, tid=0, cpu=0)])
    stream = parse.ProbeStream("dtrace")
    stream.feed("tumbler-probe locktime ready %d" % start)
    stream.feed("tumbler-probe runqlat ready %d" % start)
    stream.expect_blocked(waiters or {})
    out, done = [], 0
    events = sorted(trace.events, key=lambda e: e["timestamp"])
    for at in prints:
        batch = [e for e in events[done:] if e["timestamp"] <= at]
        done += len(batch)
        lock.run(batch)
        runq.run(batch)
        for line in printa_lines(lock, "locktime", (("ns", "@lock_ns"), ("count", "@lock_count"),
                                                    ("seen", "@lock_seen"))):
            stream.feed(line)
        stream.feed("tumbler-probe locktime period %d" % at)
        for line in printa_lines(runq, "runqlat", (("ns", "@runq_ns"), ("count", "@runq_count"))):
            stream.feed(line)
        stream.feed("tumbler-probe runqlat period %d" % at)
        out.append((at, stream.values()))
    return out


def long_waits():
    """LWP 2 sleeps on a lock from 10 ms to 350 ms (enqueued then, runs at
    360); LWP 3 waits on a run queue from 50 ms to 250 ms; LWP 4 sleeps on
    a lock from 120 to 130 ms.  Prints every 100 ms."""
    trace = Trace()
    trace.sleep(2, 10 * MS, "lwp_park", LMS_USER_LOCK, 350 * MS, "cv_signal", 360 * MS)
    trace.lwp_fires(50 * MS, "sched:::enqueue", 3, about=3)
    trace.lwp_fires(250 * MS, "sched:::dequeue", 3, about=3)
    trace.fire(250 * MS, "sched:::on-cpu", tid=3)
    trace.sleep(4, 120 * MS, "lwp_cond_wait", LMS_USER_LOCK, 130 * MS, "lwp_release", 131 * MS)
    return trace


def prgetusage(at, lwp):
    """pr_ltime and pr_wtime at ``at`` as prgetusage() (usr/src/uts/common/
    fs/proc/prsubr.c) gives them: the ended sleeps and waits, plus the one
    in progress (a sleep in the user-lock state up to t_waitrq or now; a
    wait on a queue since t_waitrq)."""
    ltime = sum(max(0, min(at, end) - begin) for begin, end in lwp.get("sleeps", ()))
    wtime = sum(max(0, min(at, end) - begin) for begin, end in lwp.get("queued", ()))
    return ltime, wtime


KERNEL = {2: {"sleeps": [(10 * MS, 350 * MS)], "queued": [(350 * MS, 360 * MS)]},
          3: {"queued": [(50 * MS, 250 * MS)]},
          4: {"sleeps": [(120 * MS, 130 * MS)], "queued": [(130 * MS, 131 * MS)]}}


def test_waits_show_in_every_print_they_span_never_above_the_interval():
    """A lock sleep and a run-queue wait that span several prints show, in
    each interval, the part of them inside it -- what pr_ltime and
    pr_wtime grew by -- never the whole wait at its end (which made an
    interval hold more than it lasted)."""
    from tumbler.tracing import parse
    prints = traced_prints(long_waits(), [100 * MS, 200 * MS, 300 * MS, 400 * MS])
    last_at, last = 5 * MS, {}
    for at, values in prints:
        span = at - last_at
        for (pid, tid), rec in parse.delta(values, last).items():
            assert rec["lock_ns"] <= span and rec["runq_ns"] <= span, (at, tid, rec)
            was, now = prgetusage(last_at, KERNEL[tid]), prgetusage(at, KERNEL[tid])
            assert (rec["lock_ns"], rec["runq_ns"]) == (now[0] - was[0], now[1] - was[1]), \
                (at, tid, rec)
        last_at, last = at, values
    # LWP 2: 90 ms, then the whole of the next two intervals, then 50 ms
    assert [parse.delta(v, p)[(PID, 2)]["lock_ns"] for (_, v), (_, p)
            in zip(prints[1:], prints)] == [100 * MS, 100 * MS, 50 * MS]


def test_probe_check_on_illumos_agrees_over_waits_in_progress(tmp_path):
    """--check's window, from the print at 100 ms to the one at 400 ms,
    against the LWPs' lusage read right after each: the waits in progress
    at both ends count in both the same way."""
    import types
    from tumbler.commands.probe import Window, probe_record
    from tumbler.commands.shared import Snapshot
    prints = dict(traced_prints(long_waits(), [100 * MS, 200 * MS, 300 * MS, 400 * MS]))
    fx.write_kstat(str(tmp_path), fx.machine(1, 1, 2, 1))
    backend = IllumosBackend(str(tmp_path))

    def sample(at):
        lwps = [{"lwpid": tid, "create_ns": 1, "rtime_ns": at - 1,
                 "ltime_ns": prgetusage(at, lwp)[0], "wtime_ns": prgetusage(at, lwp)[1],
                 "sname": "S"} for tid, lwp in sorted(KERNEL.items())]
        fx.write_process(str(tmp_path), PID, {"fname": "app"}, lwps)
        return backend.sample(PID)

    from tumbler.tracing import parse
    before, after = sample(100 * MS), sample(400 * MS)
    window = Window({PID: Snapshot(before, None)}, {PID: Snapshot(after, None)},
                    parse.delta(prints[400 * MS], prints[100 * MS]),
                    {"locks": 0.3, "latency": 0.3}, 0.3, "duration")
    record = probe_record("illumos", ("locks", "latency"),
                          [types.SimpleNamespace(pid=PID, name="app")], window,
                          types.SimpleNamespace(level="explicit", domains=[frozenset({0, 1})]),
                          0, check=True)
    figures = {(f["what"], f["thread"]): (f["probe"], f["kernel"], f["ok"])
               for f in record["check"]["figures"]}
    assert figures[("LCK", 2)] == (83.33, 83.33, True)       # 250 of 300 ms
    assert figures[("LAT", 3)][0] == figures[("LAT", 3)][1] == 50.0
    assert record["check"]["ok"] is True, figures


# -- a sleep already in progress when tracing starts (issue 32 item 2) ---------

def waiting_lwps(tmp_path):
    """/proc as ProbeSession reads it once the probes are on: LWP 2 asleep
    in lwp_park on its condition variable (an LCK sleep), LWP 3 asleep in
    nanosleep (SLP), LWP 4 on a CPU."""
    fx.write_kstat(str(tmp_path), fx.machine(1, 1, 2, 1))
    fx.write_process(str(tmp_path), PID, {"fname": "app"}, [
        {"lwpid": 2, "create_ns": 1, "sname": "S", "syscall": 77, "stype": 3},
        {"lwpid": 3, "create_ns": 1, "sname": "S", "syscall": 199, "stype": 3},
        {"lwpid": 4, "create_ns": 1, "sname": "O", "syscall": 0}])
    return IllumosBackend(str(tmp_path))


def test_a_sleep_in_progress_at_the_start_counts_from_the_start(tmp_path):
    """No probe fires for LWP 2, asleep on a lock since before the start,
    until its enqueue 250 ms after tumbler's check: each interval holds
    what pr_ltime grew by in it -- 2's sleep from the start to its enqueue,
    3's nanosleep nothing, 4 its own sleep, seen by the script."""
    import time
    from tumbler.tracing import parse
    backend = waiting_lwps(tmp_path)
    start = time.monotonic_ns()             # the "ready" line: BEGIN
    waiters = {(PID, tid): ns for tid, ns in backend.lock_waiters(PID, [2, 3, 4]).items()}
    assert list(waiters) == [(PID, 2)]
    t0 = waiters[(PID, 2)]
    trace = Trace()
    trace.lwp_fires(t0 + 250 * MS, "sched:::enqueue", 2, about=2)
    trace.lwp_fires(t0 + 260 * MS, "sched:::dequeue", 2, about=2)
    trace.fire(t0 + 260 * MS, "sched:::on-cpu", tid=2)
    trace.lwp_fires(t0 + 150 * MS, "sched:::enqueue", 3, about=3)
    trace.fire(t0 + 151 * MS, "sched:::on-cpu", tid=3)
    trace.sleep(4, t0 + 120 * MS, "lwp_cond_wait", LMS_USER_LOCK, t0 + 130 * MS, "lwp_release",
                t0 + 131 * MS)
    kernel = {2: {"sleeps": [(start - 50 * MS, t0 + 250 * MS)]}, 3: {},
              4: {"sleeps": [(t0 + 120 * MS, t0 + 130 * MS)]}}
    prints = traced_prints(trace, [t0 + n * 100 * MS for n in (1, 2, 3, 4)], start=start,
                           listed=[2, 3, 4], waiters=waiters)
    last_at, last = start, {}
    for at, values in prints:
        for tid, lwp in kernel.items():
            rec = parse.delta(values, last).get((PID, tid), {"lock_ns": 0})
            assert rec["lock_ns"] == prgetusage(at, lwp)[0] - prgetusage(last_at, lwp)[0], \
                (at - t0, tid, rec)
        last_at, last = at, values
    final = prints[-1][1]
    assert final[(PID, 2)]["lock_ns"] == t0 + 250 * MS - start
    assert (final[(PID, 2)]["lock_count"], final[(PID, 4)]["lock_count"]) == (1, 1)


def test_a_wait_the_script_saw_begin_is_not_counted_from_the_start_too(tmp_path):
    """An LWP found asleep whose sleep the script saw begin after the start
    (an event before the check) is counted once, by the script."""
    backend = waiting_lwps(tmp_path)
    waiters = {(PID, tid): ns for tid, ns in backend.lock_waiters(PID, [2]).items()}
    checked = waiters[(PID, 2)]
    start = checked - 100 * MS
    trace = Trace()
    trace.fire(start + 10 * MS, "sched:::sleep", tid=2, curthread={"t_mstate": LMS_USER_LOCK})
    trace.fire(start + 10 * MS + 1, "sched:::off-cpu", tid=2)
    trace.lwp_fires(checked + 50 * MS, "sched:::enqueue", 2, about=2)
    (_, values), = traced_prints(trace, [checked + 100 * MS], start=start, listed=[2],
                                 waiters=waiters)
    assert values[(PID, 2)]["lock_ns"] == checked + 40 * MS - start
    assert values[(PID, 2)]["lock_count"] == 1


FAKE_DTRACE = """#!%s
# Stands for dtrace running locktime.d on a process none of whose LWPs has
# an event: prints what the script prints then, from its TUMBLER-PRELUDE.
import re, signal, sys, time
args = sys.argv[1:]
text = "".join(open(args[i + 1]).read() for i, a in enumerate(args) if a == "-s")
open(%r, "w").write(text)
listed = re.findall(r"locktime_unseen\\[(\\d+), (\\d+)\\] = 1;", text)
print("tumbler-probe locktime ready %%d" %% time.monotonic_ns(), flush=True)
done = []
signal.signal(signal.SIGINT, lambda *a: done.append(1))
while True:
    time.sleep(int(args[-1]) / 1000.0)
    for pid, tid in listed:
        print("locktime pid=%%s tid=%%s ns=0 count=0 seen=0" %% (pid, tid))
    print("tumbler-probe locktime %%s %%d" %% ("final" if done else "period",
                                            time.monotonic_ns()), flush=True)
    if done:
        break
"""


def test_probe_session_on_illumos_counts_an_lwp_asleep_since_the_start(tmp_path, monkeypatch):
    """ProbeSession lists the process's LWPs in locktime.d's prelude, finds
    those asleep in a lock wait once dtrace is ready, and counts them from
    the start while the script shows no event of them."""
    import sys
    from tumbler.tracing import session as probe
    backend = waiting_lwps(tmp_path)
    fake, seen = tmp_path / "dtrace", tmp_path / "scripts.d"
    fake.write_text(FAKE_DTRACE % (sys.executable, str(seen)))
    fake.chmod(0o755)
    monkeypatch.setattr(probe, "check_tool", lambda platform_name: str(fake))
    with probe.ProbeSession("illumos", period_ms=20, backend=backend) as s:
        s.start([PID], {"locks"})
        values, spans = s.next_reading()
        final = s.stop()
    assert "locktime_unseen[%d, 2] = 1; @lock_seen[%d, 2] = sum(0);" % (PID, PID) in \
        seen.read_text()
    start, at = spans["locks"]
    assert values[(PID, 2)]["lock_ns"] == at - start > 0
    assert values[(PID, 3)]["lock_ns"] == values[(PID, 4)]["lock_ns"] == 0
    assert final[(PID, 2)]["lock_ns"] >= values[(PID, 2)]["lock_ns"]
    assert final[(PID, 2)]["lock_count"] == 1
