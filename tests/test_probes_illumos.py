"""The illumos DTrace scripts run on traces of kernel events (d_model.py):
no dtrace runs here.  Traces fire the probes as the illumos-gate sources
fire them; verified against the sources only, like the scripts.
"""

import itertools
from pathlib import Path

import pytest

from d_model import Program

PROBES = Path(__file__).resolve().parent.parent / "probes" / "illumos"
PID = 4242
OTHER_PID = 77                  # the process of a waker: not traced

# usr/src/uts/common/sys/msacct.h
LMS_USER_LOCK = 6


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
