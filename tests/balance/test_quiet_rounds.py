"""Quiet rounds (controller.py) against full rounds, on a scripted backend.

A quiet round must decide what a full round would have decided, and leave
behind -- once a full round takes over -- exactly the per-thread numbers a
full round would have left.  Each test runs the same script of CPU times
through a controller with quiet rounds and one without, and compares every
round's decision and the threads' numbers at the end.
"""

import random
from array import array

import pytest

from support.scripted import MS, PID, ColumnBackend
from tumbler.balance.controller import Controller
from tumbler.balance.quiet import QuietRound
from tumbler.balance.domains import DomainChoice
from tumbler.balance.otherwork import OtherWorkCounting
from tumbler.balance.timings import Timings
from tumbler.engine.policy import make_policy
from tumbler.platform.base import NoSuchProcess, NullBinder, Sample, ThreadTimes


#: The wrapper shell of a process tree (``sh -c prog``): one idle thread.
SHELL_PID, SHELL_TID = 99, 201


class TreeBackend(ColumnBackend):
    """ColumnBackend with a second process, the program's wrapper shell,
    each process read at its own moment (a few us apart, varying from
    round to round, as one pass over /proc reads them): each target's
    threads are measured over their own window."""

    def __init__(self):
        super().__init__()
        self.shell = {SHELL_TID: [SHELL_TID, 3 * MS, 0]}

    def clock(self, pid):
        return self.now + (pid % 7) * 1000 + (self.now // MS) % 5 * 300

    def _threads_of(self, pid):
        if pid == SHELL_PID:
            return self.shell
        if pid == PID:
            return self.threads
        raise NoSuchProcess(pid)

    def thread_ids(self, pid):
        return sorted(self._threads_of(pid))

    def process_state(self, pid, fresh=False):
        self._threads_of(pid)
        return False, None

    def sample(self, pid):
        return Sample(pid, self.clock(pid), {
            tid: ThreadTimes(tid, start, "t%d" % tid, run, None, None, lat)
            for tid, (start, run, lat) in sorted(self._threads_of(pid).items())})

    def columns_reader(self, pid, tids):
        tids = list(tids)

        def reader(run, lat):
            threads = self._threads_of(pid)
            if sorted(threads) != sorted(tids):
                return None
            self.column_reads += 1
            for i, tid in enumerate(tids):
                _, run[i], lat[i] = threads[tid]
            return self.clock(pid)
        return reader


def run_script(script, quiet, policy="auto", domains=({0}, {1}), window_ms=300, other=None,
               tree=False):
    """Run ``script`` (a list of (ms, {tid: share}, {tid: wait share}, born,
    gone)) and return every round's decision as plain data, the threads'
    numbers at the end and the run's stats.  ``other``: --capacity
    measured, with other work on the CPUs, a function of the step's
    number giving {cpu: busy share} (domain i is CPU i).  ``tree``: the
    program has a wrapper shell, a second target (TreeBackend)."""
    backend = TreeBackend() if tree else ColumnBackend()
    for tid in range(101, 109):
        backend.run(tid, 0)
    choice = DomainChoice("explicit", tuple(frozenset(d) for d in domains), "test")
    controller = Controller(backend, NullBinder(), make_policy(policy), choice,
                            timings=Timings(load_window_ms=window_ms, quiet_rounds=quiet),
                            counting=OtherWorkCounting("cpus" if other is None else "measured"))
    controller.add_target(PID)
    if tree:
        controller.add_target(SHELL_PID)
    rounds = []
    for step, (ms, busy, waiting, born, gone) in enumerate(script):
        if other is not None:
            # Each CPU busy with the other work and the threads placed on
            # it (a thread not placed yet runs on both, half each).
            for cpu, share in other(step).items():
                backend.busy[cpu] += round(share * ms * MS)
            for tid, share in busy.items():
                thread = controller.threads.get((PID, tid))
                if thread is not None and thread.domain is not None:
                    backend.busy[thread.domain] += round(share * ms * MS)
                else:
                    for cpu in (0, 1):
                        backend.busy[cpu] += round(share * ms * MS / 2)
        backend.now += ms * MS
        for tid in born:
            backend.run(tid, 0, start=tid + 1000)
        for tid in gone:
            del backend.threads[tid]
        for tid, share in busy.items():
            if tid in backend.threads:      # whole nanoseconds, as the kernel counts
                backend.threads[tid][1] += round(share * ms * MS)
                backend.threads[tid][2] += round(waiting.get(tid, 0) * ms * MS)
        returned = controller.round()
        decision = controller.last_decision
        assert returned.interval_ms == decision.interval_ms
        plan = decision.plan
        rounds.append({
            "quiet": type(returned) is QuietRound, "interval": decision.interval_ms,
            "moves": plan.moves, "pins": decision.pins, "reason": plan.reason,
            "notes": decision.notes, "engaged": decision.engaged,
            "cv": plan.thread_cv, "loads": plan.domain_loads, "spread": plan.spread_before,
            "assignment": dict(plan.assignment),
            "capacities": [d.capacity for d in controller.domains]})
    controller.quiet.leave()
    threads = {tid: (t.start, t.load, t.runnable, t.exec_ns, t.wall_ns, t.prev_wall,
                     t.prev_run, t.domain)
               for (_, tid), t in sorted(controller.threads.items())}
    return rounds, threads, controller.stats


def compare(script, **options):
    """Run ``script`` with and without quiet rounds: every decision the
    same; returns which rounds were quiet."""
    quiet_rounds, quiet_threads, quiet_stats = run_script(script, True, **options)
    full_rounds, full_threads, full_stats = run_script(script, False, **options)
    assert full_stats.quiet == 0
    was_quiet = [r["quiet"] for r in quiet_rounds]
    assert len(quiet_rounds) == len(full_rounds)
    for number, (quiet, full) in enumerate(zip(quiet_rounds, full_rounds)):
        # Sums in C are compensated, math.fsum's exact: the last bit may differ.
        for key in ("cv", "loads", "spread"):
            quiet[key] = pytest.approx(quiet[key], rel=1e-12, abs=1e-15)
        del quiet["quiet"], full["quiet"]
        assert quiet == full, "round %d" % number
    assert quiet_threads == full_threads
    assert quiet_stats.spreads.means() == \
        pytest.approx(full_stats.spreads.means(), rel=1e-12, abs=1e-15)
    return was_quiet


EVEN = {tid: 0.2 for tid in range(101, 109)}


def steady(rounds, busy=EVEN, waiting=None):
    return [(100, busy, waiting or {}, (), ())] * rounds


def test_steady_program_gets_quiet_rounds_deciding_as_full_ones():
    quiet = compare(steady(12))
    # The first rounds are full: nothing bound before other work is read
    # (round 1), then a load window while the CPU the threads got before
    # they were bound counts apart; then every round is quiet.
    assert quiet[:5] == [False] * 5
    assert all(quiet[5:]), quiet


def test_steady_other_work_keeps_rounds_quiet_with_measured_capacity():
    """Other work takes 0.4 of CPU 1: the domains are weighed 1 : 0.6, the
    8 threads of 0.2 go 5 : 3, and quiet rounds weigh the domains so too,
    deciding as full rounds do; when the other work ends, the capacity
    moves back and full rounds weigh the domains anew."""
    def other(step):
        return {1: 0.4 if step < 15 else 0.0}
    rounds, _, _ = run_script(steady(30), True, other=other)
    assert rounds[12]["capacities"] == [1, pytest.approx(0.6)]
    assert sorted(rounds[12]["assignment"].values()).count(1) == 3
    assert rounds[-1]["capacities"] == [1, 1]
    quiet = compare(steady(30), other=other)
    assert any(quiet[5:15]) and any(quiet[20:]), quiet
    assert not all(quiet[15:20]), quiet          # the change is a full round's


def test_a_left_out_domain_and_its_trial_are_for_full_rounds():
    """A hog keeps 0.97 of CPU 1: its domain is left out, tried again after
    RETRY_WINDOWS load windows, and -- the trial showing the same hog --
    left out again.  Only full rounds run meanwhile (they alone end a
    trial), deciding as they would without quiet rounds."""
    from tumbler.balance.capacity import RETRY_WINDOWS, TRIAL_WINDOWS
    steps = (RETRY_WINDOWS + TRIAL_WINDOWS + 5) * 3      # window 300 ms, steps of 100
    rounds, _, _ = run_script(steady(steps), True, other=lambda step: {1: 0.97})
    out = [r["capacities"][1] for r in rounds]
    trial = [i for i, c in enumerate(out) if 0.0 < c < 1]
    assert trial and out[trial[-1] + 1:] and all(c == 0.0 for c in out[trial[-1] + 1:]), out
    assert not any(r["quiet"] for r in rounds[out.index(0.0):])
    compare(steady(steps), other=lambda step: {1: 0.97})


def test_born_and_exited_threads_end_quiet_rounds():
    script = (steady(6) + [(100, EVEN, {}, (120,), ())] + steady(6)
              + [(100, EVEN, {}, (), (120,))] + steady(6))
    quiet = compare(script)
    assert quiet[6] is False and quiet[13] is False     # the round that sees the change
    assert any(quiet[8:13]) and any(quiet[15:])         # and quiet again after


def test_a_spread_over_the_tolerance_ends_quiet_rounds():
    # The threads of one domain get busier: 1.6 CPUs against 0.8.  Full
    # rounds regroup (wave grouping evens them out); then quiet again.
    assignment = run_script(steady(1), False)[0][0]["assignment"]
    busier = {tid: 0.4 for tid, domain in assignment.items() if domain == 0}
    quiet = compare(steady(6) + steady(8, {**EVEN, **busier}))
    # auto places the threads once other work is read (round 1; half of
    # the 300 ms window after add_target); full rounds while the CPU they
    # got before counts apart (a load window), quiet from round 5.
    assert quiet[:5] == [False] * 5 and all(quiet[5:6]), quiet
    assert not all(quiet[6:9])
    assert all(quiet[-3:])


def test_crowded_domain_ends_quiet_rounds_for_auto():
    # Everybody always runnable (run + wait = the whole interval): more
    # runnable threads than cores, which is speed balancing's business.
    crowded = {tid: 0.25 for tid in range(101, 109)}
    waits = {tid: 0.75 for tid in range(101, 109)}
    quiet = compare(steady(6) + steady(6, crowded, waits))
    assert quiet[:5] == [False] * 5 and all(quiet[5:6]), quiet     # (as above)
    # Quiet until the 300 ms window shows them runnable, full from then on.
    assert not any(quiet[9:])


@pytest.mark.parametrize("policy", ["tumbler", "auto"])
def test_policies_decide_alike_quiet_or_not(policy):
    rng = random.Random(7)
    script = []
    for step in range(40):
        busy = {tid: rng.choice([0.2, 0.21, 0.19]) for tid in range(101, 109)}
        if step % 13 == 12:
            busy[101 + step % 8] = 0.9
        script.append((rng.choice([50, 100, 200]), busy, {}, (), ()))
    quiet = compare(script, policy=policy)
    assert any(quiet)


@pytest.mark.parametrize("policy", ["tumbler", "auto"])
def test_a_process_tree_gets_quiet_rounds_deciding_as_full_ones(policy):
    """A program behind a wrapper shell (two targets, each read at its own
    moment): quiet rounds cover both, and decide as full rounds do --
    through a regrouping, a born and an exited thread."""
    assignment = run_script(steady(1), False)[0][0]["assignment"]
    busier = {tid: 0.4 for tid, domain in assignment.items() if domain == 0}
    script = (steady(6) + [(100, EVEN, {}, (120,), ())] + steady(6)
              + steady(8, {**EVEN, **busier}) + [(100, EVEN, {}, (), (120,))] + steady(6))
    quiet = compare(script, policy=policy, tree=True)
    assert all(quiet[5 if policy == "auto" else 3:6]), quiet        # (see the first test)
    assert quiet[6] is False            # the round that sees the new thread
    assert any(quiet[8:13]) and any(quiet[-4:]), quiet
    rounds, threads, stats = run_script(steady(10), True, policy=policy, tree=True)
    assert stats.quiet >= 5
    assert sorted(rounds[-1]["assignment"]) == list(range(101, 109)) + [SHELL_TID]


def test_speed_policy_never_has_quiet_rounds():
    assert not any(compare(steady(8), policy="speed"))


@pytest.mark.parametrize("policy", ["tumbler", "auto", "observe"])
def test_single_domain_watches_quietly(policy):
    quiet = compare(steady(8), domains=({0, 1},), policy=policy)
    assert all(quiet[3:])


def test_observe_on_several_domains_places_nobody_so_is_never_quiet():
    # Its threads stay unplaced (it moves nothing): every round, plan_tumbler
    # has threads to place, which only a full round does.
    assert not any(compare(steady(8), policy="observe"))


def test_leaving_quiet_rounds_measures_the_last_quiet_round():
    """The numbers a full round reads from the threads after quiet rounds
    (the last round's CPU time, the window's load) are those of the last
    quiet round, not of the full round before them."""
    rounds, threads, stats = run_script(steady(5) + steady(3, {**EVEN, 101: 0.6}),
                                        True, policy="tumbler")
    assert stats.quiet >= 3
    start, load, _, exec_ns, wall_ns, _, _, _ = threads[101]
    assert (exec_ns, wall_ns) == (60 * MS, 100 * MS)
    assert load == pytest.approx(0.6)       # 300 ms window, all of it at 0.6


def test_quiet_round_reads_no_thread_objects():
    """A quiet round reads the columns only: no per-thread sample."""
    backend = ColumnBackend()
    for tid in range(101, 105):
        backend.run(tid, 0)
    samples = []
    original = backend.sample
    backend.sample = lambda pid: samples.append(pid) or original(pid)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("tumbler"), choice,
                            timings=Timings(load_window_ms=300))
    controller.add_target(PID)
    for _ in range(10):
        backend.now += 100 * MS
        for tid in range(101, 105):
            backend.run(tid, 20)
        controller.round()
    assert controller.stats.quiet >= 6
    assert len(samples) == 1 + controller.stats.intervals - controller.stats.quiet
    assert backend.column_reads == controller.stats.quiet


def test_no_quiet_rounds_with_observers_or_when_disabled():
    class Observer:
        def write_round(self, controller, plan, applied):
            pass
    backend = ColumnBackend()
    backend.run(101, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    for controller in (Controller(backend, NullBinder(), make_policy("auto"), choice,
                                  observers=[Observer()]),
                       Controller(backend, NullBinder(), make_policy("auto"), choice,
                                  timings=Timings(quiet_rounds=False))):
        controller.add_target(PID)
        for _ in range(6):
            backend.now += 100 * MS
            backend.run(101, 20)
            controller.round()
        assert controller.stats.quiet == 0
        assert backend.column_reads == 0


def test_window_base_is_the_same_for_quiet_and_full_rounds():
    """LoadWindow.window_start finds the base sample before the new one is added
    (quiet rounds) as after (full rounds)."""
    backend = ColumnBackend()
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("auto"), choice,
                            timings=Timings(load_window_ms=300))

    class At:
        def __init__(self, wall_ns):
            self.wall_ns = wall_ns
    for walls in ([0, 100], [0, 100, 200, 300], [0, 50, 100, 350, 400], [0, 400]):
        history = [At(w * MS) for w in walls]
        now = walls[-1] * MS + 100 * MS
        window = controller.tracker.loads
        before = window.window_start(history, now, appended=False)
        after = window.window_start(history + [At(now)], now, appended=True)
        assert before == after
        assert before <= len(history) - 1


def test_columns_of_a_sample_missing_a_thread_are_none():
    from tumbler.balance.quiet import Roster
    from tumbler.platform.base import Sample, ThreadTimes

    class Thread:
        def __init__(self, tid):
            self.tid, self.start, self.domain, self.first = tid, tid, 0, (0, 0, 0)
    roster = Roster(PID, [Thread(1), Thread(2)], reader=None, assignment={1: 0, 2: 0},
                    read=None)
    full = Sample(PID, 5, {1: ThreadTimes(1, 1, "a", 10, lat_ns=3),
                           2: ThreadTimes(2, 2, "b", 20, lat_ns=4)})
    assert roster.base_columns(full) == (array("q", [10, 20]), array("q", [3, 4]))
    missing = Sample(PID, 6, {1: ThreadTimes(1, 1, "a", 10, lat_ns=3)})
    assert roster.base_columns(missing) is None
    reused = Sample(PID, 7, {1: ThreadTimes(1, 1, "a", 10, lat_ns=3),
                             2: ThreadTimes(2, 99, "c", 20, lat_ns=4)})
    assert roster.base_columns(reused) is None


@pytest.mark.parametrize("policy", ["tumbler", "auto"])
def test_a_quiet_round_that_cannot_decide_lends_its_reads_to_the_full_round(policy):
    """A quiet round reads every thread, then finds that a full round must
    decide (here: one domain's threads got busier, a spread over the
    tolerance); the full round that follows at once takes those reads as
    its sample: every thread is read once in every round, not twice
    (issue 47).  The decisions stay a full round's (compare)."""
    assignment = run_script(steady(1), False, policy=policy)[0][0]["assignment"]
    busier = {tid: 0.4 for tid, domain in assignment.items() if domain == 0}
    script = steady(6) + steady(8, {**EVEN, **busier})
    compare(script, policy=policy)
    backend = ColumnBackend()
    for tid in range(101, 109):
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy(policy), choice,
                            timings=Timings(load_window_ms=300))
    controller.add_target(PID)
    reads, kinds = [], []
    for ms, busy, _, _, _ in script:
        backend.now += ms * MS
        for tid, share in busy.items():
            backend.threads[tid][1] += round(share * ms * MS)
        before = backend.thread_reads + 8 * backend.column_reads
        kinds.append(type(controller.round()) is QuietRound)
        reads.append(backend.thread_reads + 8 * backend.column_reads - before)
    failed = [n for n in range(1, len(kinds)) if kinds[n - 1] and not kinds[n]]
    assert failed, kinds            # a full round right after a quiet one
    assert reads == [8] * len(script), (reads, kinds)
