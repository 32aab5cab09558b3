"""Space sharing's engine (tumbler/engine/share.py): the paper's greedy on
hand-made demand tables, disjoint non-empty sets, stability under noise."""

import random

import pytest

from tumbler.engine.share import (EQUAL_QOS, MAX_QOS, ProgramDemand, ShareModel, assign,
                                  llc_rate, partition, qos, sizes_for, speedup)


def programs(*demands, weights=None, llc=None):
    weights = weights or [1.0] * len(demands)
    llc = llc or [None] * len(demands)
    return [ProgramDemand("p%d" % i, d, w, m)
            for i, (d, w, m) in enumerate(zip(demands, weights, llc))]


# -- Algorithm 1 by hand -------------------------------------------------------------

@pytest.mark.parametrize("demands, units, policy, weights, expected", [
    # A wants 1 CPU, B 4, on 4 cores: B gets what A cannot use.
    ((1, 4), 4, EQUAL_QOS, None, [1, 3]),
    ((1, 4), 4, MAX_QOS, None, [1, 3]),
    # The case, 2 and 8 CPU-bound threads.  On 4 cores equal-qos
    # gives B the units that raise its QoS towards A's (QoS 0.5 and
    # 0.375); max-qos gives A its second core first (+0.5 against B's
    # +0.125), then B the rest (QoS 1 and 0.25: sum 1.25 against 0.875).
    ((2, 8), 4, EQUAL_QOS, None, [1, 3]),
    ((2, 8), 4, MAX_QOS, None, [2, 2]),
    # ... with B's rule weighing 5, max-qos values B's +0.125 at 0.625.
    ((2, 8), 4, MAX_QOS, (1, 5), [1, 3]),
    # On 10 cores both end at what each can use: A 2, B 8.
    ((2, 8), 10, EQUAL_QOS, None, [2, 8]),
    ((2, 8), 10, MAX_QOS, None, [2, 8]),
    # On this VM's 2 cores: one each, whatever the policy.
    ((2, 8), 2, EQUAL_QOS, None, [1, 1]),
    ((2, 8), 2, MAX_QOS, None, [1, 1]),
    # Equal programs get equal shares (ties go to the smaller share).
    ((6, 6), 6, EQUAL_QOS, None, [3, 3]),
    ((6, 6), 6, MAX_QOS, None, [3, 3]),
    ((4, 4, 4), 6, MAX_QOS, None, [2, 2, 2]),
])
def test_greedy_gives_the_papers_allocations(demands, units, policy, weights, expected):
    assert sizes_for(programs(*demands, weights=weights), [1] * units, policy) == expected


def test_units_of_several_cpus_are_handed_out_whole():
    # Two 4-CPU LLCs, two programs: one each, whatever they want.
    assert sizes_for(programs(2, 8), [4, 4], EQUAL_QOS) == [1, 1]
    # Three LLCs of 2: the one wanting 8 gets two of them under equal-qos.
    assert sizes_for(programs(2, 8), [2, 2, 2], EQUAL_QOS) == [1, 2]


# -- the model ---------------------------------------------------------------------------

def test_without_counters_speedup_is_cpus_capped_at_demand():
    p = ProgramDemand("a", 2.5)
    assert [speedup(p, n, 0.0) for n in (0, 1, 2, 3, 8)] == [0.0, 1.0, 2.0, 2.5, 2.5]
    assert qos(p, 1, 0.0, 8) == pytest.approx(1 / 2.5)
    assert qos(ProgramDemand("idle", 0.0), 1, 0.0, 8) == 1.0


def test_memory_contention_lowers_speedup_and_is_capped():
    model = ShareModel(latency=200.0, memories=1, latency_cap=2000.0)
    heavy = ProgramDemand("m", 8, llc=0.001)
    light = ProgramDemand("c", 8, llc=0.0)
    # Alone on 4 cores the queue is fed by 4 x 0.001 misses per cycle.
    alone = speedup(heavy, 4, 0.004, model)
    crowded = speedup(heavy, 4, 0.004 + 0.003, model)
    assert 0 < crowded < alone < 4
    # Saturated memory: T(n) held at the cap, the speedup stays positive.
    saturated = speedup(heavy, 4, 1.0, model)
    assert saturated == pytest.approx(4 * (1 + 0.001 / (1 / 200 - 0.001)) / (1 + 0.001 * 2000))
    assert speedup(light, 4, 1.0, model) == 4.0      # no misses: no contention


def test_llc_rate_from_recorded_counter_values():
    # perf_event_open read-outs of one interval: LLC misses and cycles.
    assert llc_rate(1_200_000, 3_000_000_000) == pytest.approx(4e-4)
    assert llc_rate(5, 0) is None
    assert llc_rate(-1, 10) == 0.0


def test_recorded_counters_shape_the_allocation():
    """Two programs that could each use 6 cores, on 6; one misses the LLC
    once per 2,000 cycles per core (recorded counters), the other never.
    By hand (L = 200 cycles, one memory): the first's QoS on 1..6 cores is
    0.1875, 0.3704, 0.5469, 0.7143, 0.8681, 1 -- concave, each core adds
    0.183, 0.177, 0.167, 0.154, 0.132 -- the second's n/6 (0.167 per
    core).  Max-qos gives the first its 2nd, 3rd and 4th core (each adds
    more than 1/6) and the second the last: 4 and 2.  Equal-qos
    alternates (compute, memory, compute, memory): 3 and 3."""
    model = ShareModel(latency=200.0, memories=1, latency_cap=1000.0)
    misses = llc_rate(1_500_000, 3_000_000_000)         # 1 per 2,000 cycles
    table = [ProgramDemand("memory", 6, llc=misses), ProgramDemand("compute", 6, llc=0.0)]
    curve = [qos(table[0], n, misses * n, 6, model) for n in range(1, 7)]
    assert [round(q, 4) for q in curve] == [0.1875, 0.3704, 0.5469, 0.7143, 0.8681, 1.0]
    assert sizes_for(table, [1] * 6, MAX_QOS, model) == [4, 2]
    assert sizes_for(table, [1] * 6, EQUAL_QOS, model) == [3, 3]


# -- invariants ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("policy", [EQUAL_QOS, MAX_QOS])
def test_sets_are_disjoint_non_empty_and_cover_every_unit(seed, policy):
    rng = random.Random(seed)
    n_units = rng.randint(1, 12)
    units = [rng.choice((1, 2, 4)) for _ in range(n_units)]
    table = [ProgramDemand(pid, rng.choice((0.0, 0.3, 1, 2.5, 8)), rng.choice((1, 2)),
                           rng.choice((None, 0.0, 0.002)))
             for pid in range(rng.randint(1, n_units))]
    sets = partition(table, units, policy)
    assert set(sets) == {p.key for p in table}
    held = [u for s in sets.values() for u in s]
    assert all(sets.values())                           # never an empty set
    assert sorted(held) == list(range(n_units))         # disjoint, every unit used
    assert partition(table, units, policy) == sets      # deterministic


def test_programs_outnumbering_units_are_refused():
    with pytest.raises(ValueError, match="3 programs cannot have disjoint sets of 2 units"):
        partition(programs(1, 1, 1), [1, 1])
    with pytest.raises(ValueError, match="unknown sharing policy"):
        partition(programs(1), [1], policy="fair")
    with pytest.raises(ValueError, match="weight"):
        partition(programs(1, weights=[0]), [1])


# -- stability -------------------------------------------------------------------------------

def test_noise_below_the_tolerance_keeps_the_partition():
    units = [1] * 8
    first = partition(programs(2, 6), units, EQUAL_QOS)
    rng = random.Random(7)
    for _ in range(50):
        noisy = programs(2 * rng.uniform(0.97, 1.03), 6 * rng.uniform(0.97, 1.03))
        assert partition(noisy, units, EQUAL_QOS, current=first) == first


def test_a_real_change_repartitions_keeping_what_it_can():
    units = [1] * 8
    first = partition(programs(2, 6), units, EQUAL_QOS)
    assert [len(first[k]) for k in ("p0", "p1")] == [2, 6]
    # The first program now wants 6 CPUs, the second 2: sizes swap, and
    # each keeps the units it held that its new size allows.
    second = partition(programs(6, 2), units, EQUAL_QOS, current=first)
    assert [len(second[k]) for k in ("p0", "p1")] == [6, 2]
    assert set(first["p0"]) <= set(second["p0"])
    assert set(second["p1"]) <= set(first["p1"])


def test_arrival_repartitions_at_once():
    units = [1] * 6
    first = partition(programs(6, 6)[:1], units, EQUAL_QOS)
    assert first == {"p0": (0, 1, 2, 3, 4, 5)}
    # A second program: current names other programs, so it is not kept.
    both = partition(programs(6, 6), units, EQUAL_QOS, current=first)
    assert [len(both[k]) for k in ("p0", "p1")] == [3, 3]
    assert both["p0"] == (0, 1, 2)


def test_assign_keeps_held_units_lowest_first():
    current = {"a": (0, 1), "b": (2, 3)}
    assert assign(["a", "b"], [1, 3], 4, current) == {"a": (0,), "b": (1, 2, 3)}
    assert assign(["a", "b"], [3, 1], 4, current) == {"a": (0, 1, 3), "b": (2,)}
    with pytest.raises(ValueError):
        assign(["a"], [2], 3)
