"""engine/columns.py's passes against their plain readings, on random
input: ``runnable_at_least`` (one pass finds that no thread is, a None
takes the careful path) and grouping's ``cv_of_floats`` against ``cv``;
and the checks still name the first invalid thread."""

import math
import random
from collections import namedtuple

import pytest

from tumbler.engine.columns import checked_columns, runnable_at_least
from tumbler.engine.model import ThreadLoad
from tumbler.engine.variation import cv, cv_of_floats

View = namedtuple("View", "tid runnable")
SHARES = (None, 0.0, 0.5, 0.89999, 0.9, 0.95, 1.0, 1, 0, True, float("nan"), float("inf"))


def reference(threads, share):
    return [t for t in threads if t.runnable is not None and t.runnable >= share]


@pytest.mark.parametrize("seed", range(200))
def test_runnable_at_least_is_the_plain_filter(seed):
    rng = random.Random(seed)
    threads = [View(i, rng.choice(SHARES) if rng.random() < 0.3 else rng.random())
               for i in range(rng.choice([0, 1, 2, 7, 64]))]
    for share in (0.9, 0.0, 1.0):
        assert runnable_at_least(threads, share) == reference(threads, share)


def test_runnable_at_least_of_a_share_of_another_kind_still_raises():
    with pytest.raises(TypeError):
        runnable_at_least([View(1, "x"), View(2, 0.5)], 0.9)


@pytest.mark.parametrize("seed", range(100))
def test_cv_of_floats_is_cv(seed):
    rng = random.Random(seed)
    data = [rng.choice([0.0, rng.random(), rng.random() * 1e-6, 3.0])
            for _ in range(rng.choice([0, 1, 2, 5, 100]))]
    assert repr(cv_of_floats(list(data))) == repr(cv(data))


@pytest.mark.parametrize("bad, message", [
    (float("nan"), "load must be a finite number"),
    (float("inf"), "load must be a finite number"),
    (True, "load must be a finite number"),
])
def test_an_invalid_load_is_named_after_the_passes_fail(bad, message):
    threads = [ThreadLoad(1, 0.5, 0, None), ThreadLoad(2, bad, 1, None)]
    with pytest.raises(ValueError, match=message):
        checked_columns(threads, 2)


def test_finite_loads_whose_sum_overflows_are_valid():
    big = 1.5e308
    columns = checked_columns([ThreadLoad(1, big, 0, None), ThreadLoad(2, big, 1, None)], 2)
    assert columns.raw_loads == [big, big] and math.isinf(sum(columns.raw_loads))


def test_unhashable_eligibles_take_the_careful_path():
    Load = namedtuple("Load", "tid load domain eligible")      # ThreadLoad's fields, as given
    columns = checked_columns([Load(1, 0.5, 0, [0, 1]), Load(2, 0.5, 1, [1])], 2)
    assert columns.restricted and columns.distinct_eligibles is None
    with pytest.raises(ValueError, match="not eligible for any domain"):
        checked_columns([Load(1, 0.5, 0, [0, 1]), Load(2, 0.5, 1, [5])], 2)


def views_with_fields(views):
    """``views`` as ThreadViews, their fields as columns (what the loop's
    C view pass gives: balance/_rounds.c)."""
    from tumbler.engine.model import ThreadViews
    made = ThreadViews(views)
    made.fields = tuple([getattr(v, name) for v in views] for name in (
        "tid", "load", "domain", "eligible", "runnable", "pinned_cpu"))
    return made


@pytest.mark.parametrize("policy", ["tumbler", "auto", "speed"])
@pytest.mark.parametrize("seed", range(30))
def test_views_with_their_fields_as_columns_decide_as_a_plain_list(policy, seed):
    """The engine's passes take ThreadViews' columns instead of reading the
    views: the same decisions, bit for bit, round after round."""
    from tumbler.engine.model import Domain, ThreadView
    from tumbler.engine.policy import make_policy
    rng = random.Random(seed)
    domains = [Domain(i, frozenset({2 * i, 2 * i + 1})) for i in range(rng.choice((1, 2, 3)))]
    count = rng.choice((1, 3, 8, 40))
    plain, columns = make_policy(policy, seed=seed), make_policy(policy, seed=seed)
    placed = {}
    for _ in range(6):
        views = [ThreadView(
            tid, rng.choice((0.0, 1.0, rng.random())), placed.get(tid),
            rng.choice((None, frozenset(range(len(domains))), frozenset({0}))),
            None, rng.randrange(0, 10**8), 10**8,
            rng.choice((None, rng.random(), 0.95, 1.0)),
            rng.choice((None, 0.0, 50.0)), rng.choice((None, 10.0, 500.0)))
            for tid in range(count)]
        other = rng.choice((None, [0.0] * len(domains), [0.4] + [0.0] * (len(domains) - 1)))
        expected = plain.decide(list(views), domains, other)
        got = columns.decide(views_with_fields(views), domains, other)
        assert (got.plan.assignment, got.plan.moves, got.plan.thread_cv, got.plan.domain_loads,
                got.plan.reason, got.pins, got.engaged, got.interval_ms, got.notes) == \
            (expected.plan.assignment, expected.plan.moves, expected.plan.thread_cv,
             expected.plan.domain_loads, expected.plan.reason, expected.pins, expected.engaged,
             expected.interval_ms, expected.notes)
        placed = dict(got.plan.assignment)


def test_columns_that_do_not_match_the_views_are_not_taken():
    from tumbler.engine.columns import view_fields
    from tumbler.engine.model import ThreadView
    views = views_with_fields([ThreadView(1, 0.5, 0), ThreadView(2, 0.1, 1)])
    assert view_fields(views) is views.fields
    views.append(ThreadView(3, 0.2, 0))         # changed after: the views are read
    assert view_fields(views) is None
    assert view_fields(list(views)) is None
