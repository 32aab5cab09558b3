"""The controller's per-thread numbers, on a scripted backend.

The controller keeps the load window's samples per process and measures
each thread against them (Eq. 1 over ``load_window``, from a thread's first
sighting if it was born since), plus its CPU time over the last round for
speed balancing.  These tests drive it with samples whose times are chosen,
so each expected load is exact.
"""

import re
import pytest

from support.scripted import MS, PID, ScriptedBackend
from tumbler.balance.controller import Controller
from tumbler.balance.domains import DomainChoice
from tumbler.balance.timings import Timings
from tumbler.engine.policy import ObservePolicy
from tumbler.platform.base import NullBinder


def controller_for(backend, window_ms=500):
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), ObservePolicy(), choice,
                            timings=Timings(load_window_ms=window_ms))
    controller.add_target(PID)
    return controller


def advance(backend, controller, ms, busy):
    """``ms`` of wall time in which each tid of ``busy`` runs its share."""
    backend.now += ms * MS
    for tid, share in busy.items():
        backend.run(tid, share * ms)
    controller.round()


def load(controller, tid):
    return controller.threads[(PID, tid)].load


def test_first_round_measures_from_when_the_thread_was_first_seen():
    backend = ScriptedBackend()
    backend.run(101, 0)
    controller = controller_for(backend)
    advance(backend, controller, 100, {101: 0.5})
    assert load(controller, 101) == pytest.approx(0.5)
    thread = controller.threads[(PID, 101)]
    assert (thread.exec_ns, thread.wall_ns) == (50 * MS, 100 * MS)


def test_load_is_taken_over_the_load_window_and_last_round_apart():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    controller = controller_for(backend, window_ms=300)
    for _ in range(5):                      # 500 ms at full load
        advance(backend, controller, 100, {101: 1.0})
    advance(backend, controller, 100, {})   # then 100 ms idle
    # Over the window (the newest sample at least 300 ms old: 300 ms ago)
    # the thread ran 200 of 300 ms; in the last round not at all.
    assert load(controller, 101) == pytest.approx(2 / 3)
    assert load(controller, 102) == 0.0
    thread = controller.threads[(PID, 101)]
    assert (thread.exec_ns, thread.wall_ns) == (0, 100 * MS)
    assert thread.runnable == pytest.approx(2 / 3)


def test_thread_born_inside_the_window_is_measured_from_its_birth():
    backend = ScriptedBackend()
    backend.run(101, 0)
    controller = controller_for(backend, window_ms=500)
    for _ in range(3):
        advance(backend, controller, 100, {101: 1.0})
    backend.run(102, 0)                     # born now, seen by the next round
    advance(backend, controller, 100, {101: 1.0})
    assert load(controller, 102) is None    # seen once: nothing to measure yet
    advance(backend, controller, 100, {101: 1.0, 102: 0.25})
    # Not against the process's oldest sample (which it is not in) but
    # against its first sighting, 100 ms ago.
    assert load(controller, 102) == pytest.approx(0.25)
    assert load(controller, 101) == pytest.approx(1.0)


def test_reused_tid_is_a_new_thread():
    backend = ScriptedBackend()
    backend.run(101, 0)
    controller = controller_for(backend)
    advance(backend, controller, 100, {101: 1.0})
    backend.threads[101] = [999, 0, 0]      # exited; its TID now names another thread
    advance(backend, controller, 100, {101: 0.5})
    thread = controller.threads[(PID, 101)]
    assert thread.start == 999
    assert thread.load is None              # measured from its own first sighting only
    advance(backend, controller, 100, {101: 0.5})
    assert load(controller, 101) == pytest.approx(0.5)


def test_vanished_threads_are_dropped_and_forgotten():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    controller = controller_for(backend)
    advance(backend, controller, 100, {101: 1.0, 102: 1.0})
    del backend.threads[102]
    advance(backend, controller, 100, {101: 1.0})
    assert (PID, 102) not in controller.threads
    assert 102 in backend.forgotten
    assert load(controller, 101) == pytest.approx(1.0)


def test_runnable_share_adds_run_queue_wait():
    backend = ScriptedBackend()
    backend.run(101, 0)
    controller = controller_for(backend)
    backend.now += 100 * MS
    backend.run(101, 40, lat_ms=50)
    controller.round()
    thread = controller.threads[(PID, 101)]
    assert thread.cpu == pytest.approx(0.4)         # received (Eq. 1)
    assert thread.runnable == pytest.approx(0.9)
    assert thread.load == pytest.approx(0.9)        # demand: received + queued


def test_load_is_demand_capped_at_one_cpu():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    controller = controller_for(backend)
    backend.now += 100 * MS
    backend.run(101, 40, lat_ms=70)                 # a sampling skew: 1.1 of wall
    backend.run(102, 30)
    controller.round()
    assert load(controller, 101) == 1.0
    assert controller.threads[(PID, 101)].cpu == pytest.approx(0.4)
    assert load(controller, 102) == pytest.approx(0.3)


def test_newcomers_are_placed_before_anyone_is_measured():
    """Threads placed a moment ago count as busy when more arrive, not at a
    load measured over the sliver of time since they started."""
    from tumbler.engine.policy import make_policy
    backend = ScriptedBackend()
    for tid in (100, 101, 102):             # the idle main thread, two workers
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("tumbler"), choice,
                            dry_run=True)
    controller.add_target(PID)
    domain = {tid: controller.threads[(PID, tid)].domain for tid in (100, 101, 102)}
    assert sorted(domain.values()) == [0, 0, 1]
    # 100 ms later: 101 and 102 busy, but the later-started one of them has
    # run only a third of the time so far; two more workers have appeared.
    late = 101 if domain[101] == domain[100] else 102
    early = 203 - late
    backend.now += 100 * MS
    backend.run(early, 100)
    backend.run(late, 30)
    backend.run(103, 0)
    backend.run(104, 0)
    controller.round()
    workers = {tid: controller.threads[(PID, tid)].domain for tid in (101, 102, 103, 104)}
    assert sorted(workers.values()) == [0, 0, 1, 1], workers


class OutsiderBackend(ScriptedBackend):
    """Thread 103 may only run on CPU 2, in no domain of {0} / {1}."""

    def allowed_cpus(self, pid, tid):
        return frozenset({2}) if tid == 103 else frozenset({0, 1, 2})


def test_thread_outside_every_domain_is_left_alone_and_counts_nowhere():
    """Two domains, three busy workers and one pinned outside both: rounds
    run (they used to raise in the engine), the outsider is never placed
    nor measured into a domain's load, and the warning comes once."""
    from tumbler.engine.policy import make_policy
    backend = OutsiderBackend()
    for tid in (100, 101, 102, 103):
        backend.run(tid, 0)
    warnings = []
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("tumbler"), choice,
                            warn=warnings.append)
    controller.add_target(PID)
    outsider = controller.threads[(PID, 103)]
    for _ in range(4):
        advance(backend, controller, 100, {100: 1.0, 101: 1.0, 102: 1.0, 103: 1.0})
    assert outsider.domain is None and outsider.saved is None
    plan = controller.last_decision.plan
    assert 103 not in plan.assignment
    assert sum(plan.domain_loads) == pytest.approx(3.0)
    assert len(warnings) == 1 and "thread 103" in warnings[0], warnings
    assert controller.stats.outsiders == 1


class EightCpuBackend(ScriptedBackend):
    def allowed_cpus(self, pid, tid):
        return frozenset(range(8))


def test_saturated_domains_are_balanced_by_demand_8_vs_4():
    """8 busy threads on a 4-CPU domain get 0.5 CPU each and queue the
    rest; 4 on the other 4-CPU domain get 1.0.  CPU received is 4.0 on
    both (Eq. 1 sees no imbalance, "spread 0.00"); demand is 8 vs 4, and
    the wave gives 6 / 6."""
    from tumbler.engine.policy import make_policy
    backend = EightCpuBackend()
    for tid in range(1, 13):
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset(range(4)), frozenset(range(4, 8))), "test")
    controller = Controller(backend, NullBinder(), make_policy("tumbler", tolerance=0.0),
                            choice, dry_run=True)
    controller.add_target(PID)
    for thread in controller.threads.values():      # as an earlier grouping left them
        thread.domain = 0 if thread.tid <= 8 else 1
    backend.now += 500 * MS
    for tid in range(1, 13):
        if tid <= 8:
            backend.run(tid, 250, lat_ms=250)
        else:
            backend.run(tid, 500)
    decision = controller.round()
    plan = decision.plan
    assert plan.domain_loads == pytest.approx([8.0, 4.0])
    assert plan.regroup, plan.reason
    counts = [list(plan.assignment.values()).count(d) for d in (0, 1)]
    assert counts == [6, 6]
    assert sum(controller.threads[(PID, tid)].cpu for tid in range(1, 13)) == pytest.approx(8.0)


def test_a_regrouping_is_held_until_the_last_one_is_a_load_window_old():
    """The loads a plan is made from reach back a load window: right after
    a regrouping they still describe the placement before it.  A policy
    that asks for moves every round gets them at most once a window
    (placements of unplaced threads are never held)."""
    from tumbler.engine.model import Move, Plan
    from tumbler.engine.model import Decision
    from tumbler.engine.policy import TumblerPolicy

    class FlipEveryRound(TumblerPolicy):
        def __init__(self):
            super().__init__(None)

        def decide(self, threads, domains, other=None):
            moves = [Move(t.tid, t.domain, 1 - (t.domain or 0)) for t in threads]
            plan = Plan(moves, {m.tid: m.dst for m in moves}, 0.0, 100, True, [0.0, 0.0],
                        [0.0, 0.0], 0.0, 0.0, "flip")
            return Decision(plan=plan, interval_ms=100, notes={})

    backend = ScriptedBackend()
    backend.run(101, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), FlipEveryRound(), choice,
                            timings=Timings(load_window_ms=300), dry_run=True)
    controller.add_target(PID)
    domains = []
    for _ in range(8):                      # 100 ms rounds
        advance(backend, controller, 100, {101: 0.5})
        domains.append(controller.threads[(PID, 101)].domain)
    # Placed at the first round (never held), then moved every third round.
    moves = [i for i in range(1, 8) if domains[i] != domains[i - 1]]
    assert moves == [3, 6], domains


def test_without_switch_counts_auto_leaves_crowded_threads_to_the_os_calmly():
    """A backend that cannot count context switches gives auto no evidence
    of barriers: three always-runnable threads on 2 cores are the OS's,
    and the rounds come at the calm watch, paced, not held at the judging
    pace (which would never end: the counts never come)."""
    from tumbler.engine.policy import WATCH_INTERVAL_MS, make_policy
    backend = ScriptedBackend()
    assert not backend.counts_context_switches
    for tid in (101, 102, 103):
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0, 1}),), "test")
    controller = Controller(backend, NullBinder(), make_policy("auto"), choice)
    controller.add_target(PID)
    for _ in range(8):      # 0.8 s: 2 CPUs among 3 threads, each waiting the rest
        backend.now += 100 * MS
        for tid, share in ((101, 0.5), (102, 0.5), (103, 1.0)):
            backend.run(tid, share * 100, lat_ms=(1 - share) * 100)
        decision = controller.round()
    assert decision.engaged == [] and decision.pins == {}
    # Nothing judged: the watch, paced (below) -- not held at the watch's
    # pace, as a crowd still being judged is.
    assert not decision.watching and decision.interval_ms > WATCH_INTERVAL_MS
    assert decision.notes[0] == "os: 3 runnable of 3 threads on 2 cores"


def _watched(policy, shares, rounds, born_at=None):
    """The intervals of ``rounds`` full rounds of a single 2-CPU domain
    whose always-runnable threads run ``shares`` each round, every round
    after the interval the last one chose; a thread is born before round
    ``born_at``."""
    backend = ScriptedBackend()
    for tid in shares:
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0, 1}),), "test")
    controller = Controller(backend, NullBinder(), policy, choice,
                            timings=Timings(quiet_rounds=False))
    controller.add_target(PID)
    intervals, interval = [], 100
    for index in range(rounds):
        if index == born_at:
            shares = {**shares, 999: 0.0}
            backend.run(999, 0)
        backend.now += interval * MS
        for tid, share in shares.items():
            backend.run(tid, share * interval, lat_ms=(1 - share) * interval)
        decision = controller.round()
        intervals.append(interval := decision.interval_ms)
    return intervals, controller


def test_auto_paces_a_single_domain_it_only_watches():
    """auto on one domain with nothing to do (three threads that only
    compute: no evidence of barriers) spaces its rounds twice as far each
    time, up to the variation table's idle interval; a thread born starts
    the pace again, and a fixed --interval is never paced."""
    from tumbler.engine.policy import WATCH_INTERVAL_MS, make_policy
    from tumbler.engine.variation import DEFAULT_IDLE_INTERVAL_MS
    shares = {101: 0.5, 102: 0.5, 103: 1.0}
    calm, controller = _watched(make_policy("auto"), shares, 7)
    assert calm == [WATCH_INTERVAL_MS, 2 * WATCH_INTERVAL_MS, DEFAULT_IDLE_INTERVAL_MS,
                    DEFAULT_IDLE_INTERVAL_MS, DEFAULT_IDLE_INTERVAL_MS,
                    DEFAULT_IDLE_INTERVAL_MS, DEFAULT_IDLE_INTERVAL_MS], calm
    # A round that engaged or pinned keeps its interval and restarts the pace.
    assert controller.quiet.paced_ms(WATCH_INTERVAL_MS, acting=True) == WATCH_INTERVAL_MS
    assert controller.quiet.paced_ms(WATCH_INTERVAL_MS) == WATCH_INTERVAL_MS
    born, _ = _watched(make_policy("auto"), shares, 6, born_at=4)
    assert born[3] == DEFAULT_IDLE_INTERVAL_MS and born[4] == WATCH_INTERVAL_MS, born
    fixed, _ = _watched(make_policy("auto", fixed_interval_ms=WATCH_INTERVAL_MS), shares, 6)
    assert fixed == [WATCH_INTERVAL_MS] * 6
    # The tumbler policy's intervals are the variation table's: not paced.
    table, _ = _watched(make_policy("tumbler"), shares, 6)
    assert max(table) <= DEFAULT_IDLE_INTERVAL_MS and table != calm


def _oversubscribed(level="explicit", policy="auto"):
    """Three always-runnable threads on two 1-CPU domains, under ``policy``."""
    from tumbler.engine.policy import make_policy
    backend = ScriptedBackend()
    for tid in (101, 102, 103):
        backend.run(tid, 0)
    choice = DomainChoice(level, (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy(policy), choice, dry_run=True)
    controller.add_target(PID)
    return backend, controller


def _run_rounds(backend, controller, n, shares):
    """``n`` 100 ms rounds; ``shares``: tid -> (CPU share, run-queue share)."""
    decisions = []
    for _ in range(n):
        backend.now += 100 * MS
        for tid, (cpu, wait) in shares.items():
            backend.run(tid, cpu * 100, lat_ms=wait * 100)
        decisions.append(controller.round())
    return decisions


def test_auto_merges_domains_oversubscribed_unevenly_and_splits_them_when_even():
    """3 busy threads on two 1-CPU domains stay 2 + 1 under grouping alone;
    auto merges the domains (the threads go back to the OS, which rotates
    them), then splits them again once only two stay runnable."""
    backend, controller = _oversubscribed()
    crowded = {101: (0.5, 0.5), 102: (0.5, 0.5), 103: (1.0, 0.0)}
    decisions = _run_rounds(backend, controller, 1, crowded)
    assert len(controller.domains) == 2         # placed 2 + 1 (or 1 + 2) first
    decisions = _run_rounds(backend, controller, 12, crowded)     # two load windows on
    merged = [d for d in decisions if "merged" in d.plan.reason]
    assert len(merged) == 1, [d.plan.reason for d in decisions]
    assert [d.cpus for d in controller.domains] == [frozenset({0, 1})]
    assert controller.choice.single         # all the program may use: the OS's
    assert {t.domain for t in controller.threads.values()} == {0}
    assert "domains 0 / 1 merged" in controller.choice.note
    # Stays merged while they stay oversubscribed, and through a passing
    # change: one thread idle for two rounds (a load window is five rounds,
    # the merge holds for two windows).
    decisions = _run_rounds(backend, controller, 10, {tid: (0.67, 0.33) for tid in crowded})
    decisions += _run_rounds(backend, controller, 2, {101: (1.0, 0.0), 102: (1.0, 0.0),
                                                       103: (0.0, 0.0)})
    decisions += _run_rounds(backend, controller, 10, {tid: (0.67, 0.33) for tid in crowded})
    assert len(controller.domains) == 1
    assert not any("split" in d.plan.reason for d in decisions)
    # One goes to sleep: two threads on two CPUs group evenly again.
    decisions = _run_rounds(backend, controller, 16, {101: (1.0, 0.0), 102: (1.0, 0.0),
                                                       103: (0.0, 0.0)})
    assert sum("split" in d.plan.reason for d in decisions) == 1
    assert [d.cpus for d in controller.domains] == [frozenset({0}), frozenset({1})]
    busy = [controller.threads[(PID, tid)].domain for tid in (101, 102)]
    assert sorted(busy) == [0, 1]


def test_numa_domains_and_the_tumbler_policy_never_merge():
    """The speed balancing paper blocks migrations across NUMA nodes; the
    tumbler policy is wave grouping alone."""
    for level, policy in (("numa", "auto"), ("package", "auto"), ("explicit", "tumbler")):
        backend, controller = _oversubscribed(level, policy)
        decisions = _run_rounds(backend, controller, 12,
                                {101: (0.5, 0.5), 102: (0.5, 0.5), 103: (1.0, 0.0)})
        assert len(controller.domains) == 2, (level, policy)
        assert not any("merged" in d.plan.reason for d in decisions)


class BusyCpusBackend(ScriptedBackend):
    """ScriptedBackend whose CPUs' busy time (/proc/stat's) the test sets."""

    def __init__(self):
        super().__init__()
        self.busy = {0: 0, 1: 0}

    def cpu_times(self):
        return {cpu: (busy, self.now) for cpu, busy in self.busy.items()}


def _busy_on_two_domains(tids):
    """auto (dry run) over two 1-CPU domains of a BusyCpusBackend whose
    program has threads ``tids``, added as the target: (backend,
    controller)."""
    from tumbler.engine.policy import make_policy
    backend = BusyCpusBackend()
    for tid in tids:
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("auto"), choice, dry_run=True)
    controller.add_target(PID)
    return backend, controller


def test_auto_merges_domains_other_work_crowds_and_splits_them_when_it_leaves():
    """Two busy threads on two 1-CPU domains and a hog on CPU 1: bound, the
    thread beside the hog gets half a CPU (the OS alone gives all three
    0.67); auto merges the domains, keeps them merged while the hog runs,
    and splits them once it has gone (engine/merging.py)."""
    backend, controller = _busy_on_two_domains((101, 102))

    def rounds(n, hog):
        decisions = []
        for _ in range(n):
            backend.now += 100 * MS
            merged = len(controller.domains) == 1
            for tid in (101, 102):
                thread = controller.threads.get((PID, tid))
                beside_hog = hog and (merged or (thread is not None and thread.domain == 1))
                cpu = 0.67 if hog and merged else 0.5 if beside_hog else 1.0
                backend.run(tid, cpu * 100, lat_ms=(1 - cpu) * 100)
                if merged or thread is None or thread.domain is None:
                    for each in (0, 1):         # the OS runs it on both CPUs
                        backend.busy[each] += round(cpu * 50 * MS)
                else:
                    backend.busy[thread.domain] += round(cpu * 100 * MS)
            if hog:
                backend.busy[1 if not merged else 0] += round((0.67 if merged else 0.5)
                                                              * 100 * MS)
            decisions.append(controller.round())
        return decisions

    # Placed once other work is read: half a load window after add_target.
    decisions = rounds(2, hog=False)
    assert [t.domain for t in controller.threads.values()] == [None, None]
    assert "nothing moved until other work is read" in decisions[-1].plan.reason
    decisions = rounds(1, hog=False)
    assert sorted(t.domain for t in controller.threads.values()) == [0, 1]
    decisions = rounds(5, hog=False)        # a window for the readings to settle
    decisions = rounds(12, hog=True)
    merged = [d for d in decisions if "merged" in d.plan.reason]
    assert len(merged) == 1, [d.plan.reason for d in decisions]
    # (the hog's CPU as read over a window it started in)
    assert re.search(r"other work \(0\.0 / 0\.[1-5] CPU\) competes with the program's threads",
                     merged[0].plan.reason), merged[0].plan.reason
    assert controller.choice.single and [d.cpus for d in controller.domains] == \
        [frozenset({0, 1})]
    # Merged while the hog runs (even though two threads group evenly),
    # the rounds paced as on any single domain auto only watches.
    decisions = rounds(20, hog=True)
    assert len(controller.domains) == 1
    assert not any("split" in d.plan.reason for d in decisions)
    assert [d.interval_ms for d in decisions[-3:]] == [800] * 3, \
        [d.interval_ms for d in decisions]
    # The hog goes: split after two load windows, one thread per domain;
    # while the split is judged, rounds at the watch's pace, not paced
    # further as a single domain's calm watch is.
    decisions = rounds(20, hog=False)
    assert sum("split" in d.plan.reason for d in decisions) == 1
    from tumbler.engine.policy import WATCH_INTERVAL_MS
    split = next(i for i, d in enumerate(decisions) if "split" in d.plan.reason)
    judged = [d.interval_ms for d in decisions[:split]]
    wanted = next(i for i, ms in enumerate(judged) if ms < 800)    # the split wanted
    assert len(judged) - wanted >= 3 and set(judged[wanted:]) == {WATCH_INTERVAL_MS}, judged
    assert [d.cpus for d in controller.domains] == [frozenset({0}), frozenset({1})]
    assert sorted(t.domain for t in controller.threads.values()) == [0, 1]


def test_auto_binds_nothing_before_it_has_read_other_work():
    """Three busy threads on two 1-CPU domains beside a hog on CPU 1 from
    the start (the OS gives each of the four 0.5 CPU).  Bound at once, two
    of them could share the hog's CPU (0.33 each) until a round merged the
    domains (3-4% of a 5 s barrier program, BENCHMARKS.md).  auto binds no
    thread until other work is read (half a load window after
    add_target), nor, the first time, while merging is judged: the
    domains merge with no thread bound."""
    tids = (101, 102, 103)
    backend, controller = _busy_on_two_domains(tids)
    assert [t.domain for t in controller.threads.values()] == [None] * 3
    placed, crowded, reasons = [], [], []
    for _ in range(16):
        backend.now += 100 * MS
        merged = len(controller.domains) == 1
        domain = {tid: None if merged else controller.threads[(PID, tid)].domain for tid in tids}
        on_hog_cpu = [tid for tid in tids if domain[tid] == 1]
        for tid in tids:
            cpu = (0.5 if domain[tid] is None else 1 / (1 + len(on_hog_cpu)) if domain[tid] == 1
                   else 1 / list(domain.values()).count(0))
            backend.run(tid, cpu * 100, lat_ms=(1 - cpu) * 100)
        backend.busy[0] += 100 * MS
        backend.busy[1] += 100 * MS
        reasons.append(controller.round().plan.reason)
        placed.append(not controller.choice.single and any(
            t.domain is not None for t in controller.threads.values()))
        crowded.append(not controller.choice.single and [
            t.domain for t in controller.threads.values()].count(1) >= 2)
    # add_target's sample is the first reading: 250 ms of 500 later, read;
    # then the first binding waits for the judgement of merging, which
    # merges them (more runnable threads than CPUs, 2 + 1): never bound.
    assert ["until other work is read" in r for r in reasons[:3]] == [True, True, False], reasons
    assert "while merging is judged" in reasons[2], reasons
    assert not any(placed) and not any(crowded), (placed, reasons)
    assert controller.choice.single, reasons


def test_rounds_that_bind_nothing_yet_come_when_it_can_be_decided():
    """Three busy threads and a main thread that only waits (spmd's shape)
    on two 1-CPU domains: their loads' CV asks the variation table for
    50 ms rounds, but until other work is read and while merging is
    judged auto binds nothing and waits for time to pass, not for
    rounds: the next round comes when what it waits for can be decided
    -- other work's first reading (half a load window after add_target's
    sample), the end of the merge's hold (a load window after the first
    judgement that asked for it) -- else WATCH_INTERVAL_MS while the
    readings that judge merging mature.  They came every 50 ms, then
    every 100 ms: 10 rounds to the merge; now 6, and the merge comes as
    soon (its readings and hold are times).  The loop here sleeps what
    each round asks."""
    busy, waiting = (101, 102, 103), 100
    backend, controller = _busy_on_two_domains((waiting,) + busy)
    elapsed, interval, rounds, merged_at = 0, 50, [], None
    while elapsed < 1500:
        backend.now += interval * MS
        elapsed += interval
        for tid in busy:
            backend.run(tid, 2 / 3 * interval, lat_ms=1 / 3 * interval)
        backend.busy[0] += interval * MS
        backend.busy[1] += interval * MS
        decision = controller.round()
        rounds.append((elapsed, decision.interval_ms, decision.plan.reason))
        if merged_at is None and controller.choice.single:
            merged_at = elapsed
        interval = decision.interval_ms
    deferred = [(at, ms) for at, ms, reason in rounds if "nothing moved" in reason]
    # The first round (50 ms) finds other work unread and asks for its
    # first reading's half window (250 ms after add_target's sample); its
    # judgement of merging already asked to merge (oversubscribed 2 + 1),
    # so the round that reads other work waits out the rest of that
    # judgement's hold (a load window from 50 ms), and the next merges.
    assert "until other work is read" in rounds[0][2], rounds
    assert "while merging is judged" in rounds[1][2], rounds
    assert deferred == [(50, 201), (251, 300)], rounds
    assert merged_at == 551, rounds


def test_a_round_that_binds_nothing_yet_leaves_nothing_engaged(monkeypatch):
    """While auto binds nothing (other work unread, merging judged), a
    round's pins are dropped; so is any engagement of speed balancing the
    policy decided in it: a domain it engaged there is judged as new the
    next round (it used to stay recorded, and was then kept engaged on a
    quarter of the evidence, with no look at the speeds).  The policy here
    engages every crowd it is shown."""
    from tumbler.engine.policy import AutoPolicy
    monkeypatch.setattr(AutoPolicy, "_crowd_switching",
                        staticmethod(lambda d, c, engaged=(): 1000.0))
    monkeypatch.setattr(AutoPolicy, "_engagement", lambda *args: "engaged for the test")
    busy = (101, 102, 103)
    backend, controller = _busy_on_two_domains(busy)
    backend.now += 100 * MS
    for tid in busy:
        backend.run(tid, 2 / 3 * 100, lat_ms=1 / 3 * 100)
    decision = controller.round()
    assert "nothing moved" in decision.plan.reason, decision.plan.reason
    assert decision.engaged == [] and decision.pins == {}
    assert not controller.policy.__dict__.get("_engaged"), controller.policy.__dict__


def test_a_tid_taken_again_before_the_round_drops_the_old_thread_is_placed_once():
    """A followed child exited and its TID names a new thread already
    (PID reuse, seen in test_security's ns_last_pid test): until the next
    round drops the old one, both are tracked.  Placing the new thread
    must not hand the engine the TID twice (it raised; tumbler died)."""
    from tumbler.balance.threads import TrackedThread
    from tumbler.engine.policy import make_policy
    backend = ScriptedBackend()
    for tid in (101, 102):
        backend.run(tid, 0)
    choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
    controller = Controller(backend, NullBinder(), make_policy("tumbler"), choice,
                            dry_run=True)
    controller.add_target(PID)
    assert sorted(t.domain for t in controller.threads.values()) == [0, 1]
    gone = TrackedThread(PID + 1, 102, 7, "gone", frozenset({0, 1}), frozenset({0, 1}),
                         (0, 0, 0), domain=1)
    controller.threads[(PID + 1, 102)] = gone     # the exited child's, same TID
    born = TrackedThread(PID + 2, 101, 9, "born", frozenset({0, 1}), frozenset({0, 1}),
                         (0, 0, 0))
    controller.threads[(PID + 2, 101)] = born
    controller.placer.place_new([born], controller.threads.values())
    assert born.domain in (0, 1)


def test_cpu_from_before_a_thread_was_bound_counts_apart_for_a_load_window():
    """Two busy threads bound 1 + 1 once other work is read: for the load
    window after, the part of their CPU from before (when the OS ran them
    on both CPUs) counts as not placed, shrinking round by round; no other
    work is seen meanwhile, and after the window nothing is kept."""
    backend, controller = _busy_on_two_domains((101, 102))
    apart = []
    for _ in range(10):
        backend.now += 100 * MS
        for tid in (101, 102):
            backend.run(tid, 100)
        backend.busy[0] += 100 * MS
        backend.busy[1] += 100 * MS
        controller.round()
        apart.append(round(controller.tracker.loads.received_all()[-1], 3))
        assert controller.other.held() == [0.0, 0.0]
    bound = next(i for i, t in enumerate(apart) if 0 < t < 2)
    assert sorted(t.domain for t in controller.threads.values()) == [0, 1]
    assert all(a > b for a, b in zip(apart[bound:bound + 3], apart[bound + 1:bound + 4])), apart
    assert apart[-1] == 0.0 and not controller.tracker.loads.placed_at, apart
