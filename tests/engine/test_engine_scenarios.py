"""Scenarios of issue 49, item 5, at the engine: the interactions of auto's
mechanisms that no single-mechanism test covers (churn of short-lived busy
threads, uneven oversubscription on many domains).  The engine is pure: the
threads are views as the loop would give them, the topology a fixture."""

from tumbler.engine import Domain
from tumbler.engine.merging import OVERSUBSCRIBED, merge_wanted, stay_merged
from tumbler.engine.policy import ThreadView, make_policy
from tumbler.engine.speed import SpeedParams

WALL = 100_000_000      # a 100 ms round
#: Switches per CPU-second of threads that yield at barriers (engine/policy.py).
YIELDING = 1300.0


def busy(tid, speed, cpu=None, domain=0, sleeps=0.0, switches=YIELDING):
    """A thread that never leaves the run queue and got ``speed`` of a CPU."""
    return ThreadView(tid=tid, load=speed, domain=domain, pinned_cpu=cpu,
                      exec_ns=int(speed * WALL), wall_ns=WALL, runnable=1.0,
                      sleeps_per_s=sleeps, switches_per_cpu_s=switches)


def newcomer(tid, domain=0):
    """A busy thread started since the last round: its sleeping and
    switching are not known yet (fewer than 0.3 s of readings)."""
    return busy(tid, 0.5, domain=domain, sleeps=None, switches=None)


def auto():
    return make_policy("auto", speed=SpeedParams(jitter=False), seed=1)


FOUR_CORES = [Domain(0, frozenset({0, 1, 2, 3}))]


def test_churn_of_short_lived_busy_threads_never_unpins_an_engaged_domain():
    """A program that keeps starting short busy threads beside 5 threads
    yielding at barriers on 4 cores: each newcomer is of unknown switching
    for its first 0.3 s.  Speed balancing stays engaged and keeps the
    crowd pinned; no newcomer hands the whole domain back (issue 49: "one
    new busy thread of unknown switching unpins a whole domain")."""
    policy = auto()
    crowd = [busy(t, 0.8 if t < 5 else 0.4) for t in range(1, 6)]
    first = policy.decide(crowd, FOUR_CORES)
    assert first.engaged == [0] and sorted(first.pins) == [1, 2, 3, 4, 5]
    where = dict(first.pins)
    released = pulls = 0
    for round_ in range(20):
        crowd = [busy(t, 0.8, where[t]) for t in range(1, 6)]
        # One short busy thread at a time, each gone by the next round.
        decision = policy.decide(crowd + [newcomer(100 + round_)], FOUR_CORES)
        assert decision.engaged == [0], round_
        released += sum(1 for tid, cpu in decision.pins.items() if tid < 100 and cpu is None)
        for tid, cpu in decision.pins.items():
            if tid < 100 and cpu is not None:
                pulls += cpu != where[tid]
                where[tid] = cpu
        policy.forget(100 + round_)
    assert released == 0
    # Speed balancing's own pulls only: at most one a round.
    assert pulls <= 20


#: The fixture machine of issue 49's case: eight LLCs of 8 CPUs each.
EIGHT_LLCS = [Domain(i, frozenset(range(8 * i, 8 * i + 8))) for i in range(8)]
LLC_CORES = [len(d.cpus) for d in EIGHT_LLCS]


def test_uneven_oversubscription_on_eight_llcs_merges_them_all_and_only_then():
    """65 busy threads on eight 8-CPU LLCs: the grouping can do no better
    than 9 + 8 x 7, the nine at 8/9 of a CPU each where the OS alone,
    merged, gives every one 64/65 -- so all eight merge (issue 49: "one
    uneven oversubscription turns grouping off for the whole program").
    The threshold of that is exact: one thread fewer, or enough for nine
    on every LLC, or one of the 65 sleeping, keeps the grouping."""
    def crowd(n, sleeping=0):
        return [busy(t, 1.0, domain=None, sleeps=20.0 if t < sleeping else 0.0)
                for t in range(n)]

    # Grouped, the 65 go 9 + 8 x 7 (the best a grouping can do) ...
    plan = auto().decide(crowd(65), EIGHT_LLCS).plan
    per_llc = sorted(list(plan.assignment.values()).count(d.index) for d in EIGHT_LLCS)
    assert per_llc == [8] * 7 + [9]
    # ... so the LLCs merge; not for 64 (8 each), 72 (9 each), nor 65
    # of which one sleeps at barriers (the OS already moves its co-runners).
    assert merge_wanted(crowd(65), LLC_CORES, None) == OVERSUBSCRIBED
    for even in (crowd(64), crowd(72), crowd(65, sleeping=1)):
        assert merge_wanted(even, LLC_CORES, None) is False, len(even)
    # Not judged while a busy thread's sleeping is unknown: nothing merges
    # on a crowd of threads just started.
    assert merge_wanted(crowd(64) + [newcomer(99, domain=None)], LLC_CORES, None) is None
    # ... unless it cannot change the answer: 65 or 66 busy threads, either
    # is uneven (a program that keeps starting short threads would keep
    # the judgement waiting for ever otherwise).
    assert merge_wanted(crowd(65) + [newcomer(99, domain=None)], LLC_CORES, None) \
        == OVERSUBSCRIBED
    assert merge_wanted(crowd(63) + [newcomer(99, domain=None)], LLC_CORES, None) is False
    # Merged: they stay merged while the 65 last, and split once one ends.
    assert stay_merged(crowd(65), LLC_CORES, None) == OVERSUBSCRIBED
    assert not stay_merged(crowd(64), LLC_CORES, None)
    # Merged, the 65 yielding threads on 64 CPUs are speed-balanced: pinned
    # 2 on one core, 1 on each other, and rotated through the shared one.
    merged = [Domain(0, frozenset(range(64)))]
    uneven = [busy(t, 0.5 if t < 2 else 1.0) for t in range(65)]
    decision = auto().decide(uneven, merged)
    assert decision.engaged == [0] and len(decision.pins) == 65
    assert len(set(decision.pins.values())) == 64


def test_churn_of_short_lived_busy_threads_moves_only_the_newcomers_once():
    """Grouping beside the same churn: each short busy thread is placed
    once when it comes; the program's persistent threads are never moved
    for it (no regrouping per newcomer), over every shape of two domains
    where the newcomer makes the grouping uneven or even."""
    for cpus, persistent in ((1, 2), (2, 3), (4, 4), (4, 5), (8, 9)):
        domains = [Domain(0, frozenset(range(cpus))),
                   Domain(1, frozenset(range(cpus, 2 * cpus)))]
        policy = auto()
        where = {t: t % 2 for t in range(1, persistent + 1)}
        moved = placed = 0
        for round_ in range(30):
            threads = [busy(t, 1.0, domain=where[t], switches=130.0) for t in where]
            threads.append(newcomer(100 + round_, domain=None)._replace(load=1.0))
            for move in policy.decide(threads, domains).plan.moves:
                if move.tid < 100:
                    moved += 1
                    where[move.tid] = move.dst
                else:
                    placed += 1
            policy.forget(100 + round_)
        assert (moved, placed) == (0, 30), (cpus, persistent)
