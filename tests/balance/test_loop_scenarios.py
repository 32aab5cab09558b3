"""Scenarios of issue 49, item 5, over the loop's components and scripted
backends, where this 2-CPU machine cannot show them with real threads
(or not without timing): switch counts on a machine larger than the
domain, privileged and not; merged domains beside light background work
while the program's own short threads exit."""

import errno
import sys

from support.scripted import MS, PID, ColumnBackend, MaskBinder, MaskedBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.otherwork import OtherWork
from tumbler.balance.placer import Placer
from tumbler.balance.speedstep import SpeedSteps
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker, TrackedThread
from tumbler.engine.merging import OTHER_WORK, stay_merged
from tumbler.engine.model import Domain
from tumbler.engine.policy import SYNC_SWITCHES_PER_CPU_S, make_policy
from tumbler.engine.speed import SpeedParams
from tumbler.platform.base import NullBinder
from tumbler.platform.linux.switches import CpuSwitches

#: The program's domain, CPUs 0-1 of a 4-CPU machine.
DOMAIN = frozenset({0, 1})
MACHINE = (0, 1, 2, 3)
#: Switches per CPU-second of threads that yield at barriers (engine/policy.py).
YIELDING = 1300


class FourCpus(MaskedBackend):
    """A 4-CPU machine whose switches are counted by the Linux backend's
    own CpuSwitches: per CPU where perf counters may be opened
    (``privileged``), else the machine's ``ctxt`` (every CPU's)."""

    counts_context_switches = counts_cpu_switches = True

    def __init__(self, privileged):
        super().__init__(cpus=DOMAIN)
        self.switches = {}                      # tid -> (voluntary, involuntary)
        self.on_cpu = dict.fromkeys(MACHINE, 0)     # cpu -> every task's switches there

        def open_counter(cpu):
            if not privileged:      # no CAP_PERFMON, perf_event_paranoid > 0
                raise OSError(errno.EACCES, "denied")
            return cpu
        self.counter = CpuSwitches(lambda: sum(self.on_cpu.values()), open_counter,
                                   read=lambda fd, size: self.on_cpu[fd].to_bytes(
                                       size, sys.byteorder),
                                   close=lambda fd: None)

    def context_switches(self, pid, tid):
        return self.switches[tid]

    def cpu_switches(self, cpus):
        return self.counter.count(cpus)


def judged(privileged, elsewhere_per_s):
    """auto's decision on 3 threads yielding at barriers (YIELDING switches
    per CPU-second, the OS giving them 0.5, 0.5 and 1.0 CPU) on CPUs 0-1
    of a 4-CPU machine whose CPUs 2-3 switch ``elsewhere_per_s`` times a
    second each, after 0.4 s of readings."""
    backend = FourCpus(privileged)
    choice = DomainChoice("explicit", (DOMAIN,), "test", True)
    layout, stats = Layout(choice), RunStats(0.0)
    machine = MachineWatch(backend)
    placer = Placer(backend, MaskBinder(backend), layout, machine, stats, lambda line: None)
    policy = make_policy("auto", speed=SpeedParams(jitter=False), seed=1)
    tracker = ThreadTracker(backend, placer.binder, make_policy("tumbler"), layout, machine,
                            stats, lambda line: None, bound_masks=placer.bound_masks,
                            load_window_ns=500 * MS)
    speed = SpeedSteps(backend, policy, layout, tracker, placer, stats, lambda: False)
    shares = {101: 0.5, 102: 0.5, 103: 1.0}
    threads = []
    for tid in shares:
        thread = TrackedThread(PID, tid, tid, "t%d" % tid, DOMAIN, DOMAIN, (0, 0, 0), domain=0)
        thread.load = thread.cpu = thread.runnable = 1.0
        backend.switches[tid] = (0, 0)
        threads.append(thread)
    domains = [Domain(0, DOMAIN)]
    first = policy.decide(speed.views(threads, crowded={0}), domains, [0.0])
    span_ms = 400
    for thread in threads:
        ran = int(shares[thread.tid] * span_ms)             # ms of CPU
        thread.prev_wall, thread.prev_run = span_ms * MS, ran * MS
        thread.exec_ns, thread.wall_ns = ran * MS, span_ms * MS
        backend.switches[thread.tid] = (0, YIELDING * ran // 1000)
        backend.on_cpu[0] += YIELDING * ran // 2000         # their switches, on CPUs 0-1
        backend.on_cpu[1] += YIELDING * ran // 2000
    for cpu in (2, 3):
        backend.on_cpu[cpu] += elsewhere_per_s * span_ms // 1000
    views = speed.views(threads, crowded={0})
    return first, views, policy.decide(views, domains, [0.0])


def test_unprivileged_switch_counts_on_a_larger_machine_only_keep_speed_balancing_out():
    """Without CAP_PERFMON the domain's switches are the machine's (/proc/
    stat ctxt): the switches of CPUs outside the domain count as other
    tasks' preempting the threads, and are taken off their rates -- which
    can keep speed balancing out, never bring it in.  Privileged, the
    domain's CPUs are counted alone: the rest of the machine changes
    nothing."""
    for privileged in (True, False):
        for elsewhere in (0, 50, 5000):
            first, views, decision = judged(privileged, elsewhere)
            assert first.engaged == [] and first.pins == {}     # too soon to tell
            rates = [v.switches_per_cpu_s for v in views]
            assert None not in rates            # judged: not watched for ever
            assert all(rate <= YIELDING for rate in rates)
            if privileged or elsewhere == 0:
                assert rates == [YIELDING] * 3, (privileged, elsewhere)
            else:
                # 2 CPUs x elsewhere per second over the threads' 2 CPU-seconds a second.
                assert rates == [max(0.0, YIELDING - elsewhere)] * 3, (privileged, elsewhere)
            engages = min(rates) >= SYNC_SWITCHES_PER_CPU_S
            assert decision.engaged == ([0] if engages else []), (privileged, elsewhere)
            assert sorted(decision.pins) == ([101, 102, 103] if engages else [])
    # A quiet rest of the machine leaves the evidence; a busy one takes it.
    assert judged(False, 50)[2].engaged == [0]
    assert judged(False, 5000)[2].engaged == []
    assert judged(True, 5000)[2].engaged == [0]


class ExitingThreads(ColumnBackend):
    """ColumnBackend whose process CPU time (``process_cpu_and_name``, as
    /proc/PID/stat's utime + stime, which keeps the CPU of threads that
    exited) the test's threads add to as they run."""

    def __init__(self):
        super().__init__()
        self.process_ns = 0

    def run(self, tid, run_ms, lat_ms=0, start=None):
        super().run(tid, run_ms, lat_ms, start)
        self.process_ns += run_ms * MS

    def process_cpu_and_name(self, pid):
        return self.process_ns, "scenario"


def merged_beside(background_ms, successor=False):
    """A program's domains merged into one (CPUs 0-1), its thread 101 busy
    on CPU 0, its short thread 102 busy on CPU 1 until it exits 50 ms after
    the third round (never sampled again), light background work of
    ``background_ms`` per 100 ms on CPU 1 all along, and with
    ``successor`` a busy thread 103 on CPU 1 from the round after: the
    other work read each round (100 ms apart, a 300 ms load window)."""
    backend = ExitingThreads()
    layout = Layout(DomainChoice("explicit", (DOMAIN,), "merged"))
    other = OtherWork(backend, layout, 300 * MS, None, merges=True)
    tracker = ThreadTracker(backend, NullBinder(), make_policy("auto"), layout,
                            MachineWatch(backend), RunStats(0.0), lambda line: None,
                            bound_masks=set(), load_window_ns=300 * MS,
                            other_meter=other.meter)
    backend.run(101, 0)
    backend.run(102, 0)
    tracker.add_target(PID)
    read = []
    for round_ in range(1, 10):
        backend.now += 100 * MS
        backend.run(101, 100)
        backend.busy[0] += 100 * MS
        backend.busy[1] += background_ms * MS
        if 102 in backend.threads:
            short = 100 if round_ < 4 else 50
            backend.run(102, short)
            backend.busy[1] += short * MS
            if round_ == 4:
                del backend.threads[102]
        elif successor:
            backend.run(103, 100)
            backend.busy[1] += 100 * MS
        tracker.update_loads(tracker.sample_all())
        read.append(other.measure(backend.now, tracker))
    assert (PID, 102) not in tracker.threads
    return read


def test_the_programs_own_threads_that_exit_are_no_other_work():
    """Merged domains split once other work leaves them (engine/merging.py,
    stay_merged); a thread of the program that exits leaves its CPU in the
    CPUs' busy time for a load window after it, seen or not by the rounds:
    it must not count as other work, or a program that keeps starting
    short threads stays merged for ever (issue 49, item 5).  Light
    background work below the dead band shows as none; above it, as
    itself, the exited thread added to it nowhere."""
    quiet = merged_beside(background_ms=5)              # 0.05 CPU
    assert quiet[2:] == [[0.0]] * 7
    # A newcomer busy from then on hides nothing and adds nothing.
    assert merged_beside(background_ms=5, successor=True)[2:] == [[0.0]] * 7
    assert stay_merged([], [1, 1], quiet[-1][0]) is False
    light = merged_beside(background_ms=20)             # 0.2 CPU
    assert light[2:] == [[0.2]] * 7
    assert stay_merged([], [1, 1], light[-1][0]) == OTHER_WORK
