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
