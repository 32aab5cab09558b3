"""CV and the variation-interval table (paper Table IV)."""

import math

import pytest

from tumbler.engine.variation import DEFAULT_TABLE, VariationTable, cv


# -- cv ------------------------------------------------------------------------

def test_cv_is_population_stddev_over_mean():
    # mean 2, population variance ((1-2)^2 + (3-2)^2) / 2 = 1
    assert cv([1.0, 3.0]) == pytest.approx(0.5)
    # mean 5, population stddev 2 (the classic 2,4,4,4,5,5,7,9 example)
    assert cv([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2 / 5)


def test_cv_of_identical_values_is_zero():
    assert cv([0.7] * 10) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("values", [[], [0.9], [0.0, 0.0, 0.0], [-1.0, 1.0]])
def test_cv_is_zero_without_two_values_or_a_positive_mean(values):
    assert cv(values) == 0.0


def test_cv_accepts_any_iterable():
    assert cv(x for x in (1.0, 3.0)) == pytest.approx(0.5)


def test_cv_is_scale_free():
    loads = [0.1, 0.5, 0.9, 0.2]
    assert cv([10 * x for x in loads]) == pytest.approx(cv(loads))


# -- default table: every boundary of Table IV ------------------------------------

@pytest.mark.parametrize("value, expected", [
    (1.5, (50, True)),
    (0.40, (50, True)),
    (0.3999, (100, True)),
    (0.36, (100, True)),
    (0.3599, (150, True)),
    (0.35, (150, True)),
    (0.31, (150, True)),
    (0.3099, (200, True)),
    (0.21, (200, True)),
    (0.2099, (400, True)),
    (0.11, (400, True)),
    (0.1099, (800, True)),
    (0.05, (800, True)),
    (0.0499, (800, False)),
    (0.0, (800, False)),
])
def test_default_table_boundaries(value, expected):
    assert VariationTable().interval_for(value) == expected


def test_default_table_is_table_iv():
    assert DEFAULT_TABLE == ((0.40, 50), (0.36, 100), (0.31, 150), (0.21, 200),
                             (0.11, 400), (0.05, 800))
    table = VariationTable()
    assert table.rows == DEFAULT_TABLE
    assert table.idle_interval_ms == 800
    assert table.lowest_cv == 0.05


def test_interval_never_grows_as_cv_grows():
    table = VariationTable()
    intervals = [table.interval_for(i / 1000)[0] for i in range(0, 1000)]
    assert intervals == sorted(intervals, reverse=True)


def test_idle_interval_applies_only_below_the_lowest_row():
    table = VariationTable(idle_interval_ms=2000)
    assert table.interval_for(0.01) == (2000, False)
    assert table.interval_for(0.05) == (800, True)


def test_interval_for_rejects_nan():
    with pytest.raises(ValueError, match="cv must be a number"):
        VariationTable().interval_for(math.nan)


# -- custom tables ---------------------------------------------------------------

def test_custom_table():
    table = VariationTable(((0.5, 20), (0.2, 300)), idle_interval_ms=1000)
    assert table.interval_for(0.7) == (20, True)
    assert table.interval_for(0.5) == (20, True)
    assert table.interval_for(0.49) == (300, True)
    assert table.interval_for(0.2) == (300, True)
    assert table.interval_for(0.19) == (1000, False)


def test_single_row_with_zero_threshold_always_regroups():
    table = VariationTable([(0, 250)])
    assert table.interval_for(0.0) == (250, True)
    assert table.interval_for(3.0) == (250, True)


def test_from_mapping_with_dicts_and_pairs():
    from_dicts = VariationTable.from_mapping(
        [{"cv": 0.3, "interval_ms": 100}, {"cv": 0.1, "interval_ms": 500}], idle_interval_ms=900)
    from_pairs = VariationTable.from_mapping([[0.3, 100], [0.1, 500]], idle_interval_ms=900)
    assert from_dicts == from_pairs
    assert from_dicts.rows == ((0.3, 100), (0.1, 500))
    assert from_dicts.interval_for(0.2) == (500, True)
    assert from_dicts.interval_for(0.05) == (900, False)


def test_from_mapping_default_rows_equal_default_table():
    rows = [{"cv": threshold, "interval_ms": interval} for threshold, interval in DEFAULT_TABLE]
    assert VariationTable.from_mapping(rows) == VariationTable()


# -- invalid tables ----------------------------------------------------------------

@pytest.mark.parametrize("rows, message", [
    ([], "at least one row"),
    ([(0.1, 100), (0.3, 50)], "strictly descending"),
    ([(0.3, 100), (0.3, 50)], "strictly descending"),
    ([(0.3, 100), (-0.1, 50)], ">= 0"),
    ([(math.nan, 100)], "finite"),
    ([(math.inf, 100)], "finite"),
    ([("0.3", 100)], "finite number"),
    ([(True, 100)], "finite number"),
    ([(0.3, 0)], "positive integer"),
    ([(0.3, -50)], "positive integer"),
    ([(0.3, 50.5)], "positive integer"),
    ([(0.3, True)], "positive integer"),
    ([(0.3, 50, 1)], "expected"),
    (None, "sequence"),
])
def test_invalid_tables_are_rejected(rows, message):
    with pytest.raises(ValueError, match=message):
        VariationTable(rows)


@pytest.mark.parametrize("idle", [0, -1, 1.5, None, True])
def test_invalid_idle_interval_is_rejected(idle):
    with pytest.raises(ValueError, match="idle_interval_ms"):
        VariationTable(idle_interval_ms=idle)


@pytest.mark.parametrize("rows, message", [
    ({"cv": 0.3, "interval_ms": 100}, "list of rows"),
    ("0.3:100", "list of rows"),
    ([{"cv": 0.3}], "'cv' and 'interval_ms'"),
    ([{"cv": 0.3, "interval_ms": 100, "extra": 1}], "'cv' and 'interval_ms'"),
    ([[0.3]], r"row 1: expected"),
    ([[0.3, 100], 7], r"row 2: expected"),
    ([[0.1, 100], [0.3, 50]], "row 2: cv thresholds must be strictly descending"),
    ([{"cv": 0.3, "interval_ms": "100"}], "row 1: interval_ms"),
])
def test_from_mapping_rejects_bad_config(rows, message):
    with pytest.raises(ValueError, match=message):
        VariationTable.from_mapping(rows)
