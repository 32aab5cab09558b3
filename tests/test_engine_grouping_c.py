"""The optional C passes of wave grouping and slot mapping (_grouping.c)
against the Python they stand in for: the same results, and None for the
inputs they leave to Python."""

import random

import pytest

from tumbler.engine import mapping, wave

C_MODULE_MISSING = ("tumbler.engine._grouping was not built: scripts/setup.sh builds it "
                    "(it needs gcc and Python's headers, python3-dev)")


@pytest.fixture
def c_wave_deal():
    assert wave._c_wave_deal is not None, C_MODULE_MISSING
    return wave._c_wave_deal


@pytest.fixture
def c_kept_counts():
    assert mapping._c_kept_counts is not None, C_MODULE_MISSING
    return mapping._c_kept_counts


def random_loads(rng, count):
    tids = rng.sample(range(-5, 10 ** 6), count)
    # Few distinct loads: many ties, which must fall in ascending tid order.
    levels = [rng.choice([0.0, -0.0, 0.25, 0.5, 1.0, rng.random()]) for _ in range(4)]
    return {tid: rng.choice(levels) if rng.random() < 0.5 else rng.random() for tid in tids}


def test_wave_deal_is_sort_by_load_then_wave_groups(c_wave_deal):
    rng = random.Random(5)
    for case in range(500):
        loads = random_loads(rng, rng.choice([0, 1, 2, 3, 7, 64, 65, 300]))
        groups = rng.randint(1, 9)
        assert c_wave_deal(loads, groups) == \
            wave.wave_groups(wave.sort_by_load(loads), groups), case


@pytest.mark.parametrize("loads", [{1: 0.5, "a": 0.2}, {1: 0.5, 2: 1}, {True: 0.5},
                                   {2 ** 63: 0.5}, {1: float("nan")}, {1: float("inf")}])
def test_wave_deal_leaves_other_kinds_to_python(c_wave_deal, loads):
    assert c_wave_deal(loads, 2) is None


def test_wave_deal_rejects_bad_arguments(c_wave_deal):
    with pytest.raises(ValueError):
        c_wave_deal({1: 0.5}, 0)
    with pytest.raises(TypeError):
        c_wave_deal([(1, 0.5)], 2)


def python_kept_counts(slots, current, domain_count):
    return [mapping._kept_counts(list(map(current.get, slot)), domain_count) for slot in slots]


def test_kept_counts_are_what_python_counts(c_kept_counts):
    rng = random.Random(9)
    for case in range(500):
        domain_count = rng.randint(0, 12)
        tids = list(range(rng.randint(0, 80)))
        current = {tid: rng.choice([None, -1, domain_count, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
                   for tid in tids if rng.random() < 0.9}
        slots = [tids[i::3] for i in range(3)] + [[]]
        assert c_kept_counts(slots, current, domain_count) == \
            python_kept_counts(slots, current, domain_count), case


def test_kept_counts_leave_other_kinds_to_python(c_kept_counts):
    assert c_kept_counts([[1, 2]], {1: 0, 2: 1.0}, 2) is None
    assert c_kept_counts([[1]], {1: True}, 2) is None
    with pytest.raises(TypeError):
        c_kept_counts([[[1]]], {}, 2)           # an unhashable tid, as current.get says


@pytest.mark.parametrize("domain_counts", [(2, 2), (3, 3), (4, 4), (2, 5)])
def test_wave_slots_and_assign_slots_agree_with_and_without_c(monkeypatch, c_wave_deal,
                                                              c_kept_counts, domain_counts):
    rng = random.Random(sum(domain_counts))
    for case in range(100):
        capacities = [rng.randint(1, 4) for _ in range(rng.randint(*domain_counts))]
        loads = random_loads(rng, rng.randint(1, 70))
        current = {tid: rng.choice([None, *range(len(capacities))]) for tid in loads}
        answers = []
        for use_c in (True, False):
            monkeypatch.setattr(wave, "_c_wave_deal", c_wave_deal if use_c else None)
            monkeypatch.setattr(mapping, "_c_kept_counts", c_kept_counts if use_c else None)
            slots, units = wave.wave_slots(loads, capacities)
            answers.append((slots, units, mapping.assign_slots(slots, units, current, loads)))
        assert answers[0] == answers[1], case
