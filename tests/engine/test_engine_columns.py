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
