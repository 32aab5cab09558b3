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

import illumos_fixtures as fx
from d_model import Program
from tumbler.platform.illumos.backend import IllumosBackend

PROBES = Path(__file__).resolve().parent.parent / "probes" / "illumos"
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


def test_locktime_counts_a_sleep_only_once_the_lwp_runs():
    trace = Trace()
    trace.fire(100, "sched:::sleep", tid=2, curthread={"t_mstate": LMS_USER_LOCK})
    trace.lwp_fires(500, "sched:::enqueue", 2, about=2)
    run = Program(script("locktime"), PID).run(trace.events)
    assert run.aggregation("@lock_ns") == {}             # queued, not yet on a CPU
    run.run([dict(probe="sched:::on-cpu", timestamp=900, pid=PID, tid=2, cpu=1)])
    assert run.aggregation("@lock_ns") == {(PID, 2): 400}


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
