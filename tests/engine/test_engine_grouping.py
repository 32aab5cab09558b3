"""Wave grouping, fewest-move mapping and the tumbler policy (tumbler.engine)."""

import itertools
import random
from fractions import Fraction

import pytest

from tumbler.engine.grouping import deviation
from tumbler.engine import (
    Domain, Move, ThreadLoad, VariationTable, assign_slots, capacity_units, cv, hungarian,
    place_new, plan_tumbler, sort_by_load, spread, wave_groups, wave_slots,
)

TABLE = VariationTable()


def domains_of(*sizes):
    """Domains with consecutive CPU numbers: domains_of(6, 2) -> {0..5}, {6, 7}."""
    result, first = [], 0
    for index, size in enumerate(sizes):
        result.append(Domain(index, frozenset(range(first, first + size))))
        first += size
    return result


def group_means(groups, values):
    return [sum(values[i] for i in group) / len(group) for group in groups]


def apply(threads, plan, loads=None):
    """The threads as the next round sees them: bound where the plan put them."""
    return [ThreadLoad(t.tid, t.load if loads is None else loads[t.tid],
                       plan.assignment[t.tid], t.eligible) for t in threads]


# -- Algorithm 2, paper Fig. 3 ----------------------------------------------------

# 16 CPU utilisation values (%), already sorted in descending order as
# Algorithm 2 line 1 requires.
FIG3_UTILISATION = [95, 91, 88, 80, 74, 70, 62, 55, 50, 44, 40, 33, 27, 20, 14, 9]


def test_fig3_index_structure():
    groups = wave_groups(list(range(16)), 4)
    assert groups == [
        [0, 7, 8, 15],
        [1, 6, 9, 14],
        [2, 5, 10, 13],
        [3, 4, 11, 12],
    ]


@pytest.mark.parametrize("n, k", [(16, 4), (7, 3), (64, 4), (10, 1), (3, 5), (128, 6)])
def test_wave_follows_the_algorithm_2_formula(n, k):
    groups = wave_groups(list(range(n)), k)
    expected = [[] for _ in range(k)]
    for i in range(n):
        group = i % k if (i // k) % 2 == 0 else k - (i % k) - 1
        expected[group].append(i)
    assert groups == expected
    sizes = [len(group) for group in groups]
    assert sorted(itertools.chain(*groups)) == list(range(n))
    assert max(sizes) - min(sizes) <= 1


def test_fig3_group_means_are_much_closer_than_a_contiguous_split():
    values = FIG3_UTILISATION
    wave = group_means(wave_groups(list(range(16)), 4), values)
    contiguous = group_means([list(range(i, i + 4)) for i in range(0, 16, 4)], values)
    wave_range = max(wave) - min(wave)
    contiguous_range = max(contiguous) - min(contiguous)
    assert contiguous_range > 60
    assert wave_range < contiguous_range / 10
    assert cv(wave) < cv(contiguous) / 10


def test_wave_groups_rejects_bad_group_count():
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            wave_groups([1, 2, 3], k)


def test_sort_by_load_descending_and_ties_by_tid():
    loads = {30: 0.5, 10: 0.9, 20: 0.5, 5: 0.1, 40: 0.9}
    assert sort_by_load(loads) == [10, 40, 20, 30, 5]


# -- capacity units ------------------------------------------------------------------

@pytest.mark.parametrize("capacities, units", [
    ([6, 2], [3, 1]),
    ([8, 8, 8, 8], [1, 1, 1, 1]),
    ([4, 6], [2, 3]),
    ([12, 8, 4], [3, 2, 1]),
    ([7, 5], [7, 5]),
    ([3], [1]),
])
def test_capacity_units_divide_by_gcd(capacities, units):
    assert capacity_units(capacities) == units


@pytest.mark.parametrize("capacities, max_units", [
    ([63, 1], 16), ([97, 3], 64), ([100, 1, 1], 8), ([37, 23, 11, 5], 10),
    ([1] * 5 + [200], 8), ([50, 49], 64),
])
def test_capacity_units_respect_max_units_and_keep_proportions(capacities, max_units):
    units = capacity_units(capacities, max_units)
    assert sum(units) <= max_units
    assert all(unit >= 1 for unit in units)
    total = sum(capacities)
    seats = sum(units)
    quotas = [Fraction(capacity * seats, total) for capacity in capacities]
    # largest remainder keeps every domain within one unit of its quota; a
    # domain whose quota is below one is raised to one unit, at the expense
    # of one unit of some other domain
    raised = sum(1 for quota in quotas if quota < 1)
    for unit, quota in zip(units, quotas):
        assert abs(unit - quota) < 1 + raised


def test_capacity_units_largest_remainder_exact_values():
    # 97:3 over 64 seats: quotas 62.08 and 1.92 -> 62 and 2, then / gcd 2
    assert capacity_units([97, 3], 64) == [31, 1]
    # 50:49 over 64 seats: quotas 32.3 and 31.7 -> 32 and 32 -> 1 and 1
    assert capacity_units([50, 49], 64) == [1, 1]
    # 100:1:1 over 8 seats: quotas 7.84, .08, .08 -> 8, 0, 0 -> small ones raised to 1
    assert capacity_units([100, 1, 1], 8) == [6, 1, 1]


def test_capacity_units_reject_bad_input():
    with pytest.raises(ValueError):
        capacity_units([])
    with pytest.raises(ValueError):
        capacity_units([4, 0])
    assert capacity_units([4, 2.5]) == [8, 5]       # measured: hundredths of a CPU
    with pytest.raises(ValueError):
        capacity_units([4, float("nan")])
    with pytest.raises(ValueError, match="max_units"):
        capacity_units([1] * 5, 4)


# -- wave slots --------------------------------------------------------------------

def test_wave_slots_equal_capacities_is_algorithm_2():
    loads = {100 + i: value / 100 for i, value in enumerate(FIG3_UTILISATION)}
    slots, units = wave_slots(loads, [8, 8, 8, 8])
    assert units == [1, 1, 1, 1]
    assert slots == wave_groups(sort_by_load(loads), 4)


def test_wave_slots_unequal_capacities_three_to_one():
    rng = random.Random(7)
    loads = {tid: rng.uniform(0.1, 1.0) for tid in range(1, 33)}
    slots, units = wave_slots(loads, [6, 2])
    assert units == [3, 1]
    assert len(slots) == 4
    slot_loads = [sum(loads[tid] for tid in slot) for slot in slots]
    assert [len(slot) for slot in slots] == [8, 8, 8, 8]
    assert cv(slot_loads) < 0.05


def test_wave_slots_never_has_more_slots_than_threads():
    loads = {1: 0.9, 2: 0.5, 3: 0.4, 4: 0.1}
    slots, units = wave_slots(loads, [7, 5])
    assert sum(units) <= 4
    assert all(slot for slot in slots)


# -- Hungarian -------------------------------------------------------------------------

def brute_force_cost(cost):
    rows, cols = len(cost), len(cost[0])
    return min(sum(cost[r][c] for r, c in enumerate(choice))
               for choice in itertools.permutations(range(cols), rows))


def test_hungarian_known_example():
    cost = [[4, 1, 3], [2, 0, 5], [3, 2, 2]]
    assert hungarian(cost) == [1, 0, 2]


@pytest.mark.parametrize("seed", range(40))
def test_hungarian_matches_brute_force(seed):
    rng = random.Random(seed)
    rows = rng.randint(1, 6)
    cols = rng.randint(rows, 6)
    if seed % 2:
        cost = [[rng.randint(-20, 20) for _ in range(cols)] for _ in range(rows)]
    else:
        cost = [[rng.uniform(-5, 5) for _ in range(cols)] for _ in range(rows)]
    chosen = hungarian(cost)
    assert len(set(chosen)) == rows
    assert all(0 <= col < cols for col in chosen)
    total = sum(cost[r][c] for r, c in enumerate(chosen))
    assert total == pytest.approx(brute_force_cost(cost))


def test_hungarian_empty_and_bad_shapes():
    assert hungarian([]) == []
    with pytest.raises(ValueError, match="same length"):
        hungarian([[1, 2], [3]])
    with pytest.raises(ValueError, match="at least as many columns"):
        hungarian([[1], [2]])
    with pytest.raises(ValueError, match="finite"):
        hungarian([[1, float("inf")], [0, 1]])


# -- fewest-move mapping ------------------------------------------------------------------

def kept_threads(assignment, current):
    return sum(1 for tid, domain in assignment.items() if current.get(tid) == domain)


def test_assign_slots_rotated_balanced_arrangement_moves_nothing():
    loads = {tid: value / 100 for tid, value in enumerate(FIG3_UTILISATION)}
    slots, units = wave_slots(loads, [4, 4, 4, 4])
    # the program already sits in wave groups, but group g is on domain (g + 2) % 4
    current = {tid: (g + 2) % 4 for g, slot in enumerate(slots) for tid in slot}
    assignment = assign_slots(slots, units, current, loads)
    assert assignment == current


def test_assign_slots_with_nothing_placed_follows_slot_order():
    loads = {tid: 1.0 / tid for tid in range(1, 13)}
    slots, units = wave_slots(loads, [2, 2, 2])
    assignment = assign_slots(slots, units, {}, loads)
    assert assignment == {tid: g for g, slot in enumerate(slots) for tid in slot}


def test_assign_slots_ties_are_broken_by_slot_position():
    # threads 3 and 4 (slots 2 and 3) are both on domain 3: either slot could
    # stay there with the same gain; slot 3 keeps its own position
    slots = [[1], [2], [3], [4]]
    loads = dict.fromkeys(range(1, 5), 1.0)
    assignment = assign_slots(slots, [1, 1, 1, 1], {3: 3, 4: 3}, loads)
    assert assignment == {1: 0, 2: 1, 3: 2, 4: 3}


def test_assign_slots_sends_restricted_threads_where_they_may_run():
    slots = [[1, 2], [3, 4]]
    loads = dict.fromkeys(range(1, 5), 1.0)
    current = {1: 0, 2: 0, 3: 1, 4: 1}
    assert assign_slots(slots, [1, 1], current, loads) == current
    # thread 1 may only use domain 1: its slot goes there, even though that
    # moves all four threads instead of none
    restricted = assign_slots(slots, [1, 1], current, loads, {1: frozenset({1}), 3: None})
    assert restricted == {1: 1, 2: 1, 3: 0, 4: 0}


def test_assign_slots_gives_each_domain_its_units():
    loads = {tid: 0.5 + 0.01 * tid for tid in range(40)}
    slots, units = wave_slots(loads, [6, 2, 4])
    assert units == [3, 1, 2]
    current = {tid: 1 for tid in loads}            # all crammed on the small domain
    assignment = assign_slots(slots, units, current, loads)
    slots_per_domain = [0, 0, 0]
    for slot in slots:
        domains = {assignment[tid] for tid in slot}
        assert len(domains) == 1                   # a slot travels as a whole
        slots_per_domain[domains.pop()] += 1
    assert slots_per_domain == units


def test_assign_slots_prefers_keeping_the_heavy_threads():
    # two slots, each has one thread on domain 0 and one on domain 1: either
    # mapping keeps two threads, so the heavier pair must be the one kept
    slots = [[1, 4], [2, 3]]
    loads = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6}
    current = {1: 0, 2: 0, 3: 1, 4: 1}
    assignment = assign_slots(slots, [1, 1], current, loads)
    assert assignment == {1: 0, 4: 0, 2: 1, 3: 1}


@pytest.mark.parametrize("seed", range(60))
def test_assign_slots_keeps_the_maximum_possible_threads(seed):
    rng = random.Random(1000 + seed)
    slots = [None] * 8
    while len(slots) > 7:                      # keep the brute force small
        domain_count = rng.randint(2, 4)
        capacities = [rng.randint(1, 3) for _ in range(domain_count)]
        thread_count = rng.randint(domain_count, 14)
        loads = {tid: round(rng.uniform(0, 1.2), 3) for tid in range(thread_count)}
        current = {tid: rng.choice(list(range(domain_count)) + [None]) for tid in loads}
        slots, units = wave_slots(loads, capacities)
    assignment = assign_slots(slots, units, current, loads)

    copies = [d for d, count in enumerate(units) for _ in range(count)]
    best = None
    for permutation in set(itertools.permutations(copies)):
        candidate = {tid: permutation[s] for s, slot in enumerate(slots) for tid in slot}
        kept_load = round(sum(loads[t] for t, d in candidate.items() if current[t] == d), 6)
        key = (kept_threads(candidate, current), kept_load)
        best = key if best is None else max(best, key)
    kept_load = round(sum(loads[t] for t, d in assignment.items() if current[t] == d), 6)
    assert (kept_threads(assignment, current), kept_load) == best


@pytest.mark.parametrize("seed", range(200))
def test_assign_slots_counting_shortcut_agrees_with_the_full_cost(seed, monkeypatch):
    """Equal domains: when the number of kept threads alone decides, the
    shortcut gives exactly what the full cost (loads, position) gives."""
    from tumbler.engine import mapping
    rng = random.Random(5000 + seed)
    domain_count = rng.randint(1, 8)
    loads = {tid: rng.choice([0.0, 0.5, round(rng.uniform(0, 1.2), 3)])
             for tid in range(rng.randint(1, 40))}
    current = {tid: rng.choice(list(range(domain_count)) + [None]) for tid in loads}
    slots, units = wave_slots(loads, [1] * domain_count)
    shortcut = assign_slots(slots, units, current, loads)
    monkeypatch.setattr(mapping, "_decided_by_counts", lambda slots, kept: None)
    assert shortcut == assign_slots(slots, units, current, loads)


def test_kept_counts_decide_without_a_majority_in_every_slot():
    """Slot 0 keeps 2 threads on either domain; slot 1 keeps one on domain
    1.  No strict majority in slot 0, yet slot 0 -> 0, slot 1 -> 1 keeps 3
    threads and the other mapping 2: the counts decide, loads unread."""
    from tumbler.engine import mapping
    assert mapping._strict_majorities([[2, 2], [0, 1]]) is None
    assert mapping._unique_best_permutation([[2, 2], [0, 1]]) == [0, 1]
    assert mapping._unique_best_permutation([[1, 1], [1, 1]]) is None      # a tie
    assert mapping._unique_best_permutation([[0, 3, 1], [2, 0, 2], [1, 1, 0]]) == [1, 2, 0]
    slots = [[1, 2, 3, 4], [5, 6]]
    current = {1: 0, 2: 0, 3: 1, 4: 1, 5: None, 6: 1}

    class Unread(dict):
        def get(self, *args):
            raise AssertionError("loads read although the counts decide")
        __getitem__ = get
    assert assign_slots(slots, [1, 1], current, Unread()) == {1: 0, 2: 0, 3: 0, 4: 0,
                                                               5: 1, 6: 1}


def test_assign_slots_rejects_units_that_do_not_match_slots():
    with pytest.raises(ValueError, match="add up"):
        assign_slots([[1], [2]], [1, 2], {}, {1: 1.0, 2: 1.0})


# -- the policy: regroup, tolerance ------------------------------------------------------

def test_imbalance_above_tolerance_regroups_with_fewest_moves():
    loads = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6}
    threads = [ThreadLoad(1, 0.9, 0), ThreadLoad(2, 0.8, 0),
               ThreadLoad(3, 0.7, 1), ThreadLoad(4, 0.6, 1)]
    plan = plan_tumbler(threads, domains_of(4, 4), TABLE)
    assert plan.regroup
    assert plan.domain_loads == pytest.approx([1.7, 1.3])
    assert plan.spread_before == pytest.approx(0.2 / 1.5)
    # wave slots {1, 4} and {2, 3}; keeping 1 and 3 (1.6 of load) beats keeping 2 and 4
    assert plan.moves == [Move(2, 0, 1), Move(4, 1, 0)]
    assert plan.assignment == {1: 0, 4: 0, 2: 1, 3: 1}
    assert plan.predicted_loads == pytest.approx([1.5, 1.5])
    assert plan.spread_after == pytest.approx(0.0, abs=1e-12)
    assert plan.thread_cv == pytest.approx(cv(loads.values()))
    assert plan.interval_ms == 400                        # cv 0.149
    assert plan.reason == "regrouped: deviation 0.13 -> 0.00 (spread 0.13 -> 0.00), 2 moves"


def test_gain_below_tolerance_is_skipped():
    threads = [ThreadLoad(1, 0.9, 0), ThreadLoad(2, 0.8, 1),
               ThreadLoad(3, 0.7, 0), ThreadLoad(4, 0.6, 1)]
    domains = domains_of(4, 4)
    plan = plan_tumbler(threads, domains, TABLE)
    assert 0 < plan.spread_before < 0.10                  # 1.6 vs 1.4: gain 0.067
    assert plan.moves == []
    assert not plan.regroup
    assert plan.assignment == {1: 0, 2: 1, 3: 0, 4: 1}
    assert plan.predicted_loads == pytest.approx(plan.domain_loads)
    assert plan.spread_after == pytest.approx(plan.spread_before)
    assert plan.reason == "deviation 0.07 <= tolerance 0.10: keep groups"

    eager = plan_tumbler(threads, domains, TABLE, tolerance=0.0)
    assert eager.regroup
    assert len(eager.moves) == 2
    assert eager.spread_after == pytest.approx(0.0, abs=1e-12)


def test_one_overloaded_domain_moves_only_the_surplus():
    # tid i has load 1.0 - 0.1 i; wave slots are {0, 3, 4, 7} and {1, 2, 5, 6}.
    # Domain 0 holds its slot plus 1 and 2, so exactly 1 and 2 must leave.
    current = {0: 0, 3: 0, 4: 0, 7: 0, 1: 0, 2: 0, 5: 1, 6: 1}
    threads = [ThreadLoad(tid, 1.0 - 0.1 * tid, current[tid]) for tid in range(8)]
    plan = plan_tumbler(threads, domains_of(8, 8), TABLE)
    assert plan.regroup
    assert plan.moves == [Move(1, 0, 1), Move(2, 0, 1)]


def test_heavy_and_light_domains_swap_two_pairs():
    threads = ([ThreadLoad(tid, 1.0, 0) for tid in range(4)]
               + [ThreadLoad(tid, 0.5, 1) for tid in range(4, 8)])
    plan = plan_tumbler(threads, domains_of(8, 8), TABLE)
    assert plan.regroup
    assert len(plan.moves) == 4
    assert sorted((m.src, m.dst) for m in plan.moves) == [(0, 1), (0, 1), (1, 0), (1, 0)]
    assert all((m.src == 0) == (m.tid < 4) for m in plan.moves)
    assert plan.predicted_loads == pytest.approx([3.0, 3.0])


def test_balanced_program_sees_no_migrations_round_after_round():
    rng = random.Random(42)
    base = {tid: rng.uniform(0.2, 1.0) for tid in range(100, 132)}
    domains = domains_of(8, 8, 8, 8)
    threads = [ThreadLoad(tid, load, None) for tid, load in base.items()]
    first = plan_tumbler(threads, domains, TABLE)
    assert len(first.moves) == 32                          # everyone placed at once
    assert first.spread_after < 0.05
    threads = apply(threads, first)
    for _ in range(20):
        noisy = {tid: load * rng.uniform(0.97, 1.03) for tid, load in base.items()}
        plan = plan_tumbler([ThreadLoad(t.tid, noisy[t.tid], t.domain) for t in threads],
                            domains, TABLE)
        assert plan.thread_cv >= 0.05                      # grouping is considered...
        assert plan.moves == []                            # ...and rejected every time
        assert plan.assignment == {t.tid: t.domain for t in threads}


def test_regrouping_converges():
    rng = random.Random(3)
    loads = {tid: rng.uniform(0.05, 1.0) for tid in range(24)}
    threads = [ThreadLoad(tid, load, tid % 3 if load > 0.5 else 2) for tid, load in loads.items()]
    domains = domains_of(4, 4, 4)
    plan = plan_tumbler(threads, domains, TABLE)
    assert plan.regroup and plan.moves
    assert plan.spread_after < plan.spread_before - 0.10
    again = plan_tumbler(apply(threads, plan), domains, TABLE)
    assert again.moves == []
    assert again.spread_before == pytest.approx(plan.spread_after)


def test_low_cv_means_no_grouping():
    threads = [ThreadLoad(tid, 0.9 + 0.001 * tid, tid % 2) for tid in range(10)]
    plan = plan_tumbler(threads, domains_of(2, 2), TABLE)
    assert plan.thread_cv < 0.05
    assert (plan.interval_ms, plan.regroup, plan.moves) == (800, False, [])
    assert plan.reason == "cv %.2f < 0.05: no grouping" % plan.thread_cv


def test_single_domain_has_nothing_to_group():
    threads = [ThreadLoad(1, 1.0, 0), ThreadLoad(2, 0.1, 0), ThreadLoad(3, 0.5, None)]
    plan = plan_tumbler(threads, domains_of(4), TABLE)
    assert plan.moves == [Move(3, None, 0)]
    assert plan.assignment == {1: 0, 2: 0, 3: 0}
    assert not plan.regroup
    assert plan.interval_ms == 50                          # cv is high, interval still follows it
    assert plan.reason.startswith("single domain: nothing to group across")


def test_no_threads():
    plan = plan_tumbler([], domains_of(2, 2), TABLE)
    assert plan.moves == [] and plan.assignment == {}
    assert plan.spread_before == plan.spread_after == 0.0
    assert plan.interval_ms == 800


# -- unequal capacities -------------------------------------------------------------------

def test_unequal_capacities_get_three_to_one_shares():
    rng = random.Random(11)
    loads = {tid: rng.uniform(0.1, 1.0) for tid in range(1, 33)}
    threads = [ThreadLoad(tid, load, 1) for tid, load in loads.items()]   # all on the small one
    plan = plan_tumbler(threads, domains_of(6, 2), TABLE)
    assert plan.regroup
    counts = [sum(1 for d in plan.assignment.values() if d == domain) for domain in (0, 1)]
    assert counts == [24, 8]
    share = plan.predicted_loads[0] / sum(plan.predicted_loads)
    assert share == pytest.approx(0.75, abs=0.03)
    assert plan.spread_after < 0.05
    assert all(m.src == 1 and m.dst == 0 for m in plan.moves)
    assert len(plan.moves) == 24                       # only the threads that must leave


def test_spread_is_per_capacity():
    # 3 on 6 CPUs and 1 on 2 CPUs is the same 0.5 per CPU: perfectly even
    assert spread([3.0, 1.0], [6, 2]) == pytest.approx(0.0, abs=1e-12)
    assert spread([2.0, 2.0], [6, 2]) == pytest.approx(0.5)
    assert spread([0.0, 0.0], [6, 2]) == 0.0


# -- new and vanished threads -----------------------------------------------------------------

def test_new_threads_spread_in_proportion_to_capacity():
    new = [ThreadLoad(tid, 0.0, None) for tid in range(1, 9)]
    moves = place_new(new, [], domains_of(6, 2))
    assert all(m.src is None for m in moves)
    assert sorted(m.tid for m in moves) == list(range(1, 9))
    assert [sum(1 for m in moves if m.dst == d) for d in (0, 1)] == [6, 2]


def test_new_threads_count_at_least_the_mean_of_placed_threads():
    placed = [ThreadLoad(1, 1.0, 0), ThreadLoad(2, 1.0, 0), ThreadLoad(3, 1.0, 1)]
    # not measured long enough yet: 0.1 each; counted at face value all three
    # would pile onto domain 1 (1.1, 1.2, 1.3 < 2.0)
    new = [ThreadLoad(tid, 0.1, None) for tid in (10, 11, 12)]
    moves = place_new(new, placed, domains_of(4, 4))
    # each new thread counts as the mean 1.0: d1 first (1 -> 2), tie 2:2 -> d0, then d1
    assert moves == [Move(10, None, 1), Move(11, None, 0), Move(12, None, 1)]


def test_new_threads_are_placed_even_when_grouping_is_skipped():
    threads = [ThreadLoad(tid, 0.5, tid % 2) for tid in range(6)]
    threads += [ThreadLoad(tid, 0.5, None) for tid in (50, 51)]
    plan = plan_tumbler(threads, domains_of(4, 4), TABLE)
    assert plan.thread_cv < 0.05
    assert plan.moves == [Move(50, None, 0), Move(51, None, 1)]
    assert plan.reason == "cv 0.00 < 0.05: no grouping; placed 2 new threads"
    assert plan.predicted_loads == pytest.approx([2.0, 2.0])
    assert plan.domain_loads == pytest.approx([1.5, 1.5])   # unplaced threads don't count


def test_new_threads_are_placed_when_the_gain_is_below_tolerance():
    threads = [ThreadLoad(1, 0.9, 0), ThreadLoad(2, 0.8, 1),
               ThreadLoad(3, 0.7, 0), ThreadLoad(4, 0.6, 1), ThreadLoad(5, 0.1, None)]
    plan = plan_tumbler(threads, domains_of(4, 4), TABLE)
    assert not plan.regroup
    assert plan.moves == [Move(5, None, 1)]
    assert plan.reason.endswith("keep groups; placed 1 new thread")


def test_new_threads_get_moves_from_none_when_regrouping():
    threads = ([ThreadLoad(tid, 1.0, 0) for tid in range(4)]
               + [ThreadLoad(tid, 0.2, None) for tid in range(4, 8)])
    plan = plan_tumbler(threads, domains_of(8, 8), TABLE)
    new_moves = [m for m in plan.moves if m.tid >= 4]
    assert len(new_moves) == 4 and all(m.src is None for m in new_moves)
    assert set(plan.assignment) == set(range(8))


def test_vanished_threads_are_not_referenced():
    rng = random.Random(5)
    threads = [ThreadLoad(tid, rng.uniform(0.1, 1.0), tid % 4) for tid in range(40)]
    survivors = [t for t in threads if t.tid % 3]
    plan = plan_tumbler(survivors, domains_of(2, 2, 2, 2), VariationTable(), tolerance=0.0)
    alive = {t.tid for t in survivors}
    assert set(plan.assignment) == alive
    assert {m.tid for m in plan.moves} <= alive


# -- eligibility ----------------------------------------------------------------------------

def test_pinned_thread_is_never_moved_by_grouping():
    threads = [ThreadLoad(1, 1.0, 0, frozenset({0})), ThreadLoad(2, 0.9, 0),
               ThreadLoad(3, 0.2, 1), ThreadLoad(4, 0.1, 1)]
    plan = plan_tumbler(threads, domains_of(2, 2), TABLE, tolerance=0.0)
    assert plan.assignment[1] == 0
    assert all(m.tid != 1 for m in plan.moves)


def test_restricted_thread_takes_its_slot_to_an_eligible_domain():
    threads = [ThreadLoad(tid, 1.0 - 0.05 * tid, 0) for tid in range(12)]
    threads[0] = ThreadLoad(0, 1.0, 0, frozenset({2, 3}))
    plan = plan_tumbler(threads, domains_of(2, 2, 6, 2), TABLE)
    assert plan.assignment[0] in {2, 3}
    # its slot mate travels with it, so no domain is left with a hole
    assert plan.spread_after < 0.01


def test_thread_that_cannot_follow_its_slot_goes_to_the_lightest_eligible_domain():
    # wave slots {0, 5} {1, 4} {2, 3} (1.3, 1.25, 1.4); thread 0 pins its slot
    # to domain 0, where thread 5 may not run; slots {1, 4} and {2, 3} stay
    # with threads 1 and 2 on domains 1 and 2, so 5 goes to the lighter: 1
    threads = [ThreadLoad(0, 1.0, 0, frozenset({0})), ThreadLoad(1, 0.9, 1),
               ThreadLoad(2, 0.8, 2), ThreadLoad(3, 0.6, 0), ThreadLoad(4, 0.35, 0),
               ThreadLoad(5, 0.3, 1, frozenset({1, 2}))]
    plan = plan_tumbler(threads, domains_of(2, 2, 2), TABLE)
    assert plan.regroup
    assert plan.assignment == {0: 0, 1: 1, 4: 1, 5: 1, 2: 2, 3: 2}
    assert plan.moves == [Move(3, 0, 2), Move(4, 0, 1)]
    assert plan.predicted_loads == pytest.approx([1.0, 1.55, 1.4])


def test_thread_on_an_ineligible_domain_is_moved_off_even_without_grouping():
    threads = [ThreadLoad(tid, 0.5, tid % 2) for tid in range(4)]
    threads.append(ThreadLoad(9, 0.5, 0, frozenset({1})))
    plan = plan_tumbler(threads, domains_of(2, 2), TABLE)
    assert plan.moves == [Move(9, 0, 1)]
    assert "moved 1 thread off ineligible domains" in plan.reason


def test_new_thread_respects_eligible():
    placed = [ThreadLoad(1, 3.0, 1)]
    new = [ThreadLoad(2, 0.5, None, frozenset({1, 7}))]     # 7 is not a domain here
    assert place_new(new, placed, domains_of(2, 2)) == [Move(2, None, 1)]


@pytest.mark.parametrize("seed", range(30))
def test_plans_always_respect_eligible(seed):
    rng = random.Random(seed)
    domains = domains_of(*[rng.randint(1, 8) for _ in range(rng.randint(2, 5))])
    threads = []
    for tid in range(rng.randint(1, 40)):
        eligible = None
        if rng.random() < 0.4:
            eligible = frozenset(rng.sample(range(len(domains)), rng.randint(1, len(domains))))
        domain = rng.choice([None] + list(range(len(domains))))
        threads.append(ThreadLoad(tid, rng.uniform(0, 1.1), domain, eligible))
    plan = plan_tumbler(threads, domains, TABLE, tolerance=rng.choice([0.0, 0.1]))
    assert set(plan.assignment) == {t.tid for t in threads}
    for t in threads:
        if t.eligible is not None:
            assert plan.assignment[t.tid] in t.eligible
        if t.eligible is not None and len(t.eligible) == 1 and t.domain in t.eligible:
            assert plan.assignment[t.tid] == t.domain
    moved = {m.tid: m for m in plan.moves}
    for t in threads:
        if plan.assignment[t.tid] != t.domain:
            assert moved[t.tid] == Move(t.tid, t.domain, plan.assignment[t.tid])
        else:
            assert t.tid not in moved


# -- determinism and input checks -------------------------------------------------------------

def test_same_input_same_plan_whatever_the_order():
    rng = random.Random(9)
    threads = [ThreadLoad(tid, round(rng.uniform(0, 1), 1), rng.choice([None, 0, 1, 2]))
               for tid in range(30)]                         # many equal loads: ties matter
    domains = domains_of(4, 2, 2)
    reference = plan_tumbler(threads, domains, TABLE)
    assert plan_tumbler(threads, domains, TABLE) == reference
    shuffled = list(threads)
    random.Random(1).shuffle(shuffled)
    assert plan_tumbler(shuffled, list(reversed(domains)), TABLE) == reference


@pytest.mark.parametrize("threads, domains, message", [
    ([ThreadLoad(1, 0.5, 0), ThreadLoad(1, 0.2, 1)], domains_of(1, 1), "appears twice"),
    ([ThreadLoad(1, 0.5, 5)], domains_of(1, 1), "unknown domain"),
    ([ThreadLoad(1, float("nan"), 0)], domains_of(1, 1), "finite"),
    ([ThreadLoad(1, 0.5, None, frozenset({9}))], domains_of(1, 1), "not eligible"),
    ([ThreadLoad(1, 0.5, 0)], [Domain(0, {0}), Domain(2, {1})], "without gaps"),
    ([ThreadLoad(1, 0.5, 0)], [Domain(0, {0}), Domain(1, set())], "no CPUs"),
    ([ThreadLoad(1, 0.5, 0)], [], "at least one domain"),
])
def test_bad_input_is_rejected(threads, domains, message):
    with pytest.raises(ValueError, match=message):
        plan_tumbler(threads, domains, TABLE)


def test_bad_tolerance_is_rejected():
    with pytest.raises(ValueError, match="tolerance"):
        plan_tumbler([], domains_of(1, 1), TABLE, tolerance=-0.1)


def test_negative_load_counts_as_zero():
    threads = [ThreadLoad(1, -0.02, 0), ThreadLoad(2, 0.5, 1)]
    plan = plan_tumbler(threads, domains_of(1, 1), TABLE, tolerance=0.5)
    assert plan.domain_loads == pytest.approx([0.0, 0.5])


def test_equal_loads_left_uneven_by_exits_are_regrouped():
    # 8 equal threads were split 4+4; 3 exited on domain 1.  The thread CV is
    # 0 (no grouping by the table), but the domains are 4:1 and tumbler bound
    # them, so the OS cannot fix it: the plan must even them out.
    domains = [Domain(0, {0, 1}), Domain(1, {2, 3})]
    threads = [ThreadLoad(tid, 1.0, 0) for tid in range(4)] + [ThreadLoad(10, 1.0, 1)]
    plan = plan_tumbler(threads, domains, VariationTable())
    assert plan.thread_cv == 0
    counts = [list(plan.assignment.values()).count(d) for d in (0, 1)]
    assert sorted(counts) == [2, 3]
    # Wave slots fix group membership, so this takes 2 moves, not the 1 a
    # free choice could: both go from the crowded domain to the empty one.
    assert plan.regroup and 1 <= len(plan.moves) <= 2
    assert all(m.src == 0 and m.dst == 1 for m in plan.moves)


def test_opposite_moves_of_equal_loads_cancel():
    # Domain 0 holds loads 0.9, 0.5, 0.5; domain 1 holds 0.1, 0.5.  Any fix
    # moves a 0.5 to domain 1 and maybe a 0.5 back: the swap must cancel.
    domains = [Domain(0, {0}), Domain(1, {1})]
    threads = [ThreadLoad(1, 0.9, 0), ThreadLoad(2, 0.5, 0), ThreadLoad(3, 0.5, 0),
               ThreadLoad(4, 0.1, 1), ThreadLoad(5, 0.5, 1)]
    plan = plan_tumbler(threads, domains, VariationTable())
    routes = {(m.src, m.dst) for m in plan.moves}
    moved_loads = sorted(t.load for t in threads if t.tid in {m.tid for m in plan.moves})
    assert not ({(0, 1), (1, 0)} <= routes and moved_loads.count(0.5) >= 2)


def test_equal_loads_evenly_split_stay_put():
    domains = [Domain(0, {0, 1}), Domain(1, {2, 3})]
    threads = [ThreadLoad(tid, 1.0, tid % 2) for tid in range(6)]
    plan = plan_tumbler(threads, domains, VariationTable())
    assert plan.moves == [] and not plan.regroup


def test_an_idle_placed_thread_does_not_make_new_threads_look_light():
    # An idle main thread (0.0) and one busy worker (1.0) are placed; three
    # more workers arrive unmeasured.  Counted at the mean of all placed
    # threads (0.5) they would pile onto domain 0 (0.5, 1.0, 1.5 vs 1.0);
    # counted at the busy threads' mean (1.0) they spread 2:2.
    placed = [ThreadLoad(1, 0.0, 0), ThreadLoad(2, 1.0, 1)]
    new = [ThreadLoad(tid, 0.0, None) for tid in (3, 4, 5)]
    moves = place_new(new, placed, domains_of(1, 1))
    assert [m.dst for m in moves].count(0) == 2
    assert [m.dst for m in moves].count(1) == 1


# -- many domains (issue 13, defect 3) ---------------------------------------------

def test_more_domains_than_max_units_plan_one_slot_each():
    """128 single-CPU domains (--level core on a 128-core machine): every
    thread of a 4-per-domain load on the first half gets spread out, no
    error about max_units."""
    domains = domains_of(*[1] * 128)
    threads = [ThreadLoad(tid, 1.0, tid % 64) for tid in range(256)]
    plan = plan_tumbler(threads, domains, TABLE, tolerance=0.0)
    assert plan.regroup
    counts = [0] * 128
    for domain in plan.assignment.values():
        counts[domain] += 1
    assert counts == [2] * 128
    assert plan.spread_after == pytest.approx(0.0)


def test_wave_slots_never_fewer_slots_than_domains():
    slots, units = wave_slots({tid: 1.0 for tid in range(70)}, [1] * 70)
    assert units == [1] * 70 and len(slots) == 70
    slots, units = wave_slots({1: 1.0, 2: 0.5}, [1] * 65)
    assert units == [1] * 65 and len(slots) == 65


# -- swap cancellation is bounded by its total effect (issue 13, defect 4) ---------

def test_swap_cancellation_is_bounded_in_total():
    """100 threads at 0.03 on one 16-CPU domain, 100 at 0.015 on the other:
    every forward/backward pair differs by only 0.015, but cancelling them
    all would keep loads 3.0 vs 1.5.  Only pairs whose summed shift stays
    within 0.02 CPU per domain are cancelled."""
    threads = ([ThreadLoad(tid, 0.03, 0) for tid in range(100)]
               + [ThreadLoad(tid, 0.015, 1) for tid in range(100, 200)])
    plan = plan_tumbler(threads, domains_of(16, 16), TABLE)
    assert plan.regroup, plan.reason
    assert abs(plan.predicted_loads[0] - plan.predicted_loads[1]) <= 2 * 0.02 + 1e-9
    assert plan.spread_after < 0.01
    # Moves still pair up: as many threads go each way.
    assert sum(m.dst == 1 for m in plan.moves) == sum(m.dst == 0 for m in plan.moves)


def test_swap_cancellation_still_cancels_equal_loads():
    """Equal loads shift nothing however many pairs cancel: 4+4 equal
    threads split unevenly by a stale grouping move one thread, not a
    shuffle of pairs."""
    threads = ([ThreadLoad(tid, 0.5, 0) for tid in range(6)]
               + [ThreadLoad(tid, 0.5, 1) for tid in range(6, 8)])
    plan = plan_tumbler(threads, domains_of(2, 2), TABLE)
    assert plan.regroup
    assert len(plan.moves) == 2
    assert all(m.src == 0 and m.dst == 1 for m in plan.moves)



# -- the tolerance bounds every domain, as PMQS states it (issue 13, defect 5) ------

def test_one_outlier_domain_beyond_the_tolerance_is_balanced():
    """Four 4-CPU domains, one at 1.15 x the mean load per CPU and three
    at 0.95: the CV of the domain loads is 0.087, under a tolerance of
    0.10, so a CV rule keeps them; but one domain is 15% from the mean,
    beyond the 10% an admin reads.  It is balanced."""
    loads = [4.6, 3.8, 3.8, 3.8]            # mean 4.0 per domain, 1.0 per CPU
    threads, tid = [], 0
    for domain, load in enumerate(loads):
        for share in (load / 2, load / 2):
            threads.append(ThreadLoad(tid, share, domain))
            tid += 1
    # more, smaller threads, so that a regrouping can even them out
    threads = [ThreadLoad(t.tid * 10 + k, t.load / 4, t.domain)
               for t in threads for k in range(4)]
    domains = domains_of(4, 4, 4, 4)
    plan = plan_tumbler(threads, domains, TABLE)
    assert plan.spread_before < 0.10
    assert deviation(plan.domain_loads, [4, 4, 4, 4]) == pytest.approx(0.15)
    assert plan.regroup, plan.reason
    assert deviation(plan.predicted_loads, [4, 4, 4, 4]) <= 0.10


def test_deviation_is_distance_from_the_mean_load_per_cpu():
    assert deviation([3.0, 1.0], [1, 1]) == pytest.approx(0.5)
    assert deviation([6.0, 2.0], [6, 2]) == 0.0         # 1 CPU's worth per CPU on both
    assert deviation([0.0, 0.0], [1, 1]) == 0.0
    assert deviation([1.1, 0.9, 1.0, 1.0], [1, 1, 1, 1]) == pytest.approx(0.1)


def test_within_the_tolerance_nothing_moves_beyond_it_a_regrouping_into_it_is_taken():
    """A deviation of exactly the tolerance is kept (here 0.25, exact in
    binary); deviation 0.11 with a regrouping to 0.01 is taken: the gain
    0.10 is what a CV rule asked for, but what counts is that every domain
    ends within the tolerance."""
    kept = plan_tumbler([ThreadLoad(1, 1.25, 0), ThreadLoad(2, 0.75, 1)], domains_of(1, 1),
                        TABLE, tolerance=0.25)
    assert not kept.regroup
    assert kept.reason == "deviation 0.25 <= tolerance 0.25: keep groups"
    threads = [ThreadLoad(1, 0.6, 0), ThreadLoad(2, 0.51, 0), ThreadLoad(3, 0.5, 1),
               ThreadLoad(4, 0.39, 1)]
    plan = plan_tumbler(threads, domains_of(1, 1), TABLE)
    assert deviation(plan.domain_loads, [1, 1]) == pytest.approx(0.11)
    assert plan.regroup, plan.reason
    assert deviation(plan.predicted_loads, [1, 1]) == pytest.approx(0.01)
