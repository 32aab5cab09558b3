"""The exit summary's early and late spread, in bounded memory."""

import random

import pytest

from tumbler.balance.spreads import SpreadHistory, early_late


def filled(values, max_buckets):
    history = SpreadHistory(max_buckets)
    for value in values:
        history.append(value)
    return history


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 17, 63])
def test_exact_while_every_bucket_holds_one_value(count):
    rng = random.Random(count)
    values = [rng.random() for _ in range(count)]
    history = filled(values, max_buckets=32)
    assert history.width == 1
    assert history.means() == values
    assert history.early_late() == early_late(values)


def test_memory_stays_bounded_on_a_long_run():
    history = filled((i % 7 / 7 for i in range(100_000)), max_buckets=8)
    assert len(history.sums) < 16 and history.open_count < history.width
    assert history.count == 100_000
    # A day at 100 ms with the default bound: a few thousand floats.
    day = SpreadHistory()
    for _ in range(864_000):
        day.append(0.1)
    assert len(day.sums) < 2 * day.max_buckets
    assert day.early_late() == pytest.approx((0.1, 0.1))


@pytest.mark.parametrize("seed", range(20))
def test_within_one_bucket_of_the_exact_means(seed):
    rng = random.Random(seed)
    count = rng.randint(40, 5000)
    # A run that balances: spreads fall from ~0.5 to ~0.05, with noise.
    values = [max(0.0, 0.5 * (1 - i / count) + 0.05 + rng.gauss(0, 0.05))
              for i in range(count)]
    history = filled(values, max_buckets=rng.choice([4, 8, 16]))
    assert history.width > 1
    early, late = history.early_late()
    exact_early, exact_late = early_late(values)
    quarter = max(1, count // 4)
    bound = history.width * max(values) / quarter      # one bucket, misplaced
    assert abs(early - exact_early) <= bound
    assert abs(late - exact_late) <= bound
    assert early > late             # and the story it tells is the same


def test_buckets_aligned_with_the_quarters_are_exact():
    values = [1.0] * 64 + [3.0] * 64 + [5.0] * 64 + [7.0] * 64
    history = filled(values, max_buckets=4)
    assert history.width > 1 and 64 % history.width == 0
    assert history.early_late() == (1.0, 7.0)
