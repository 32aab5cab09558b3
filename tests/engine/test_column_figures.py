"""engine/_columns.c's one pass over a round's thread columns against the
Python passes it stands in for (columns.py's checks, grouping.py's sums:
the reference), on random input: the same figures bit for bit -- its sums
are math.fsum's, its CV cv_of_floats' -- the same plans and decisions with
it and without it, and None (the Python passes) for every input it does
not take plainly."""

import math
import random
from collections import namedtuple

import pytest

from tumbler.engine import columns
from tumbler.engine.columns import Columns, checked_columns, runnable_at_least
from tumbler.engine.grouping import _column_sums, _effective_loads, plan_tumbler
from tumbler.engine.model import Domain, ThreadLoad, ThreadView, ThreadViews
from tumbler.engine.policy import AutoPolicy
from tumbler.engine.variation import VariationTable, cv_of_floats

pytestmark = pytest.mark.skipif(columns._c_column_figures is None,
                                reason="engine/_columns.c not built")
figures_of = columns._c_column_figures

EVERYWHERE = frozenset({0, 1, 2})
#: ThreadLoad's fields, taken as given (ThreadLoad makes a frozenset of ``eligible``).
Load = namedtuple("Load", "tid load domain eligible")
ShareView = namedtuple("ShareView", "tid runnable")


def random_load(rng):
    kind = rng.random()
    if kind < 0.1:
        return 0.0
    if kind < 0.2:
        return rng.random() * 2.0 ** rng.randint(-60, 60)       # far apart: many partials
    if kind < 0.3:
        return float(rng.randint(0, 4)) + 2.0 ** -rng.randint(40, 60)   # ties to round
    if kind < 0.35:
        return 2.0 ** -1070 * rng.random()                      # subnormal
    return rng.random()


def python_figures(tids, loads, domains, eligibles, domain_count, runnables=None, pinned=None):
    """What the Python passes find of the same columns."""
    effective = [load if load > 0.0 else 0.0 for load in loads]
    plain_shares = runnables is not None and all(
        type(share) is float and not math.isnan(share) for share in runnables)
    return (set(eligibles), None in domains, cv_of_floats(effective),
            _column_sums(effective, domains, domain_count),
            [domains.count(d) for d in range(domain_count)],
            None if None in domains else dict(zip(tids, domains)),
            max(runnables) if plain_shares else None,
            None if pinned is None else len(pinned) - pinned.count(None))


@pytest.mark.parametrize("seed", range(300))
def test_the_figures_are_the_python_passes_bit_for_bit(seed):
    rng = random.Random(seed)
    count = rng.choice([1, 2, 3, 10, 100, 1000])
    domain_count = rng.choice([1, 2, 3, 9, 12])
    tids = rng.sample(range(1, 10 * count + 10), count)
    if rng.random() < 0.5:
        tids.sort()
    loads = [random_load(rng) for _ in range(count)]
    domains = [None if rng.random() < 0.05 else rng.randrange(domain_count)
               for _ in range(count)]
    sets = [None, EVERYWHERE, frozenset({0}), frozenset({1, 2})]
    eligibles = [rng.choice(sets) if rng.random() < 0.2 else frozenset(EVERYWHERE)
                 for _ in range(count)]
    made = figures_of(tids, loads, domains, eligibles, domain_count)
    assert made is not None
    assert repr(made) == repr(python_figures(tids, loads, domains, eligibles, domain_count))
    # The views' runnable shares and pinned CPUs: auto's passes.
    runnables = [rng.choice([0.0, 0.5, 0.95, 1.0, -0.0]) if rng.random() < 0.5 else rng.random()
                 for _ in range(count)]
    if rng.random() < 0.3:
        runnables[rng.randrange(count)] = rng.choice([None, math.nan, 1, True, math.inf])
    pinned = [None if rng.random() < 0.9 else rng.randrange(4) for _ in range(count)]
    made = figures_of(tids, loads, domains, eligibles, domain_count, runnables, pinned)
    assert repr(made) == repr(python_figures(tids, loads, domains, eligibles, domain_count,
                                             runnables, pinned))
    assert made[-2] is None or (made[-2] < 0.9) == (runnable_at_least(
        [ShareView(i, share) for i, share in enumerate(runnables)], 0.9) == [])


@pytest.mark.parametrize("values", [
    [1.0, 2.0 ** -53, 2.0 ** -106],             # half-way, tipped up by the last
    [1.0, 2.0 ** -53, 2.0 ** -1074],
    [2.0 ** 52, 0.5, 2.0 ** -60],
    [2.0 ** 53, 1.0, 2.0 ** -40],
    [1e100, 1.0, 1e-100, 1e-200],
    [0.1] * 10,
    [0.0, 0.0],
    [2.0 ** -1074] * 3,
])
def test_the_sums_are_math_fsum_on_hard_cases(values):
    for order in (values, values[::-1]):
        made = figures_of(list(range(len(order))), list(order), [0] * len(order),
                          [None] * len(order), 1)
        assert repr(made[3]) == repr([math.fsum(order)])
        assert repr(made[2]) == repr(cv_of_floats(list(order)))


@pytest.mark.parametrize("tids, loads, domains, eligibles", [
    ([1, 2], [0.5, -0.1], [0, 1], [None, None]),        # negative: counted as 0 in Python
    ([1, 2], [0.5, 1], [0, 1], [None, None]),           # an int load
    ([1, 2], [0.5, True], [0, 1], [None, None]),
    ([1, 2], [0.5, math.nan], [0, 1], [None, None]),
    ([1, 2], [0.5, math.inf], [0, 1], [None, None]),
    ([1, 2], [0.5, 1e300], [0, 1], [None, None]),       # sums that might overflow
    ([1, 2], [0.5, 0.5], [0, True], [None, None]),      # True == 1, but not an index
    ([1, 2], [0.5, 0.5], [0, 2], [None, None]),         # an unknown domain
    ([1, 2], [0.5, 0.5], [0, -1], [None, None]),
    ([1, 2], [0.5, 0.5], [0, 1.0], [None, None]),
    ([3, 1, 3], [0.5, 0.5, 0.1], [0, 1, 0], [None] * 3),    # a TID twice, apart
    ([1, 1], [0.5, 0.5], [0, 1], [None, None]),
    ([1, 2.0], [0.5, 0.5], [0, 1], [None, None]),
    ([1, 2 ** 70], [0.5, 0.5], [0, 1], [None, None]),
    ([1, 2], [0.5, 0.5], [0, 1], [None, [0, 1]]),       # unhashable
    ([1, 2], [0.5, 0.5], [0, 1], [None, {0, 1}]),
    ([], [], [], []),
])
def test_what_the_pass_does_not_take_plainly_is_left_to_python(tids, loads, domains, eligibles):
    assert figures_of(tids, loads, domains, eligibles, 2) is None
    threads = [Load(*fields) for fields in zip(tids, loads, domains, eligibles)]
    assert Columns(threads, 2).figures is None


def plans_both_ways(run, monkeypatch):
    """(with the C pass, without it) of ``run()``: results, or the error."""
    def outcome():
        try:
            return repr(run())
        except (ValueError, TypeError, OverflowError) as error:
            return "%s: %s" % (type(error).__name__, error)
    with_c = outcome()
    with monkeypatch.context() as patch:
        patch.setattr(columns, "_c_column_figures", None)
        without = outcome()
    return with_c, without


def random_round(rng):
    domain_count = rng.choice([1, 2, 3, 4])
    domains = [Domain(i, frozenset(range(2 * i, 2 * i + rng.choice([1, 2]))),
                      rng.choice([None, None, None, 0.0, 0.5]) if domain_count > 1 else None)
               for i in range(domain_count)]
    if all(d.capacity == 0 for d in domains):
        domains[0] = Domain(0, domains[0].cpus)
    everywhere = frozenset(range(domain_count))
    odd_shares = rng.random() < 0.5     # else every runnable share a float below 0.9
    views = []
    for tid in rng.sample(range(100, 400), rng.choice([0, 1, 2, 5, 40, 200])):
        load = random_load(rng) if rng.random() < 0.97 else rng.choice([-0.01, 1, math.nan])
        domain = None if rng.random() < 0.05 else rng.randrange(domain_count)
        eligible = everywhere if rng.random() < 0.9 else frozenset(
            rng.sample(range(domain_count), rng.randint(1, domain_count)))
        runnable = rng.choice([None, 0.1, 0.5, 0.95, 1.0]) if odd_shares \
            and rng.random() < 0.2 else rng.random() * 0.8
        pinned = None if rng.random() < 0.95 else rng.randrange(2 * domain_count)
        views.append(ThreadView(tid, load, domain, eligible, pinned, 10 ** 7, 10 ** 8, runnable,
                                rng.choice([None, 0.0, 5.0]), rng.choice([None, 100.0, 900.0])))
    if rng.random() < 0.5:
        views.sort()
    made = ThreadViews(views)
    made.fields = tuple([getattr(v, name) for v in views] for name in (
        "tid", "load", "domain", "eligible", "runnable", "pinned_cpu"))
    return made, domains


@pytest.mark.parametrize("seed", range(400))
def test_plans_and_decisions_are_the_same_with_the_pass_and_without(seed, monkeypatch):
    rng = random.Random(seed)
    views, domains = random_round(rng)
    table, tolerance = VariationTable(), rng.choice([0.0, 0.1, 0.3])
    with_c, without = plans_both_ways(
        lambda: plan_tumbler(views, domains, table, tolerance), monkeypatch)
    assert with_c == without
    with_c, without = plans_both_ways(
        lambda: plan_tumbler([ThreadLoad(*v[:4]) for v in views], domains, table, tolerance),
        monkeypatch)
    assert with_c == without
    with_c, without = plans_both_ways(
        lambda: AutoPolicy(table, tolerance).decide(views, domains, [0.0] * len(domains)),
        monkeypatch)
    assert with_c == without


def test_the_usual_round_is_made_from_the_figures():
    """Plain views: the C pass's figures are what the plan is made from."""
    views = ThreadViews([ThreadView(tid, 0.01 * (tid % 7), tid % 2, EVERYWHERE)
                         for tid in range(1, 101)])
    views.fields = tuple([getattr(v, name) for v in views] for name in (
        "tid", "load", "domain", "eligible", "runnable", "pinned_cpu"))
    made = checked_columns(views, 3, views.fields)
    assert made.figures is not None and not made.figures.arriving
    assert made.figures.domain_threads == [50, 50, 0]
    assert _effective_loads(made) is made.raw_loads
    assert made.figures.runnable_max is None and made.figures.pinned == 0  # shares unknown
    assert made.figures.kept == dict(zip(made.tids, made.domains))
