"""How often to regroup: the variation-interval table (paper Table IV).

Tumbler measures how unevenly the threads of a program load the CPU with the
coefficient of variation (CV = population stddev / mean) of their per-thread
loads.  A program whose threads differ a lot, or change a lot (high lock
contention, pipelines), needs its groups recomputed often; a program whose
threads are nearly identical needs no grouping at all.  The table maps the CV
to the next grouping interval:

    CV >= 0.40          ->  50 ms   regroup
    0.36 <= CV < 0.40   -> 100 ms   regroup
    0.31 <= CV < 0.36   -> 150 ms   regroup
    0.21 <= CV < 0.31   -> 200 ms   regroup
    0.11 <= CV < 0.21   -> 400 ms   regroup
    0.05 <= CV < 0.11   -> 800 ms   regroup
    CV < 0.05           -> idle interval (800 ms), no grouping

The paper prints the rows as ranges with gaps between them (0.40--0.36,
0.35--0.31, ...); we key every row by its lowest CV instead, so that every CV
falls in exactly one row: a row applies from its threshold up to the
threshold of the row above.  Below the lowest threshold the program is
balanced by construction (paper: "Tumbler does not apply thread grouping"
for IM, whose CV is below 0.05) and we only keep monitoring, at
``idle_interval_ms``.

Monitoring and grouping share one interval (paper section 3.1), so the
interval returned here is also the next sampling interval.

What the CV is taken of departs from the paper twice.  Table IV was tuned
on utilisation (Eq. 1) measured over the grouping interval; tumbler's
loads are demand (CPU time plus run-queue wait, capped at one CPU: see
controller.py) over a load window of at least 500 ms.  The window smooths
the CV: on the bundled ``skewed`` and ``pipeline`` workloads (BENCHMARKS.md,
issue 13) its 90th percentile is 0.76 and 1.16 with the window against
1.79 and 1.37 per interval, and the rounds that regroup fall from 45 to 6
and from 48 to 4.  The row chosen does not change there: every round's CV
is above 0.40 either way (an idle main thread alone puts it there), so
both run at 50 ms.  Demand lowers the median CV a little (0.62 -> 0.57,
1.25 -> 1.10) by counting a queued thread's wait.
"""

import math
from itertools import repeat
from numbers import Real
from operator import mul, sub

#: (lowest CV of the row, grouping interval in ms), highest CV first.
DEFAULT_TABLE = (
    (0.40, 50),
    (0.36, 100),
    (0.31, 150),
    (0.21, 200),
    (0.11, 400),
    (0.05, 800),
)

#: Interval used while the CV is below every row: keep watching, slowly.
DEFAULT_IDLE_INTERVAL_MS = 800


def cv(values) -> float:
    """Coefficient of variation: population stddev / mean.

    0.0 when there are fewer than two values or the mean is not positive
    (no load, nothing to balance).
    """
    data = values if type(values) in (list, tuple) else list(values)
    if len(data) < 2:
        return 0.0
    if set(map(type, data)) != {float}:
        data = list(map(float, data))
    return cv_of_floats(data)


def cv_of_floats(data: list[float]) -> float:
    """``cv`` of a list of floats, none of them checked (grouping's
    effective loads, floats by construction: one pass fewer)."""
    if len(data) < 2:
        return 0.0
    mean = math.fsum(data) / len(data)
    if not mean > 0.0:
        return 0.0
    # C-level passes (d * d is exactly (value - mean) ** 2).
    deviations = list(map(sub, data, repeat(mean)))
    variance = math.fsum(map(mul, deviations, deviations)) / len(data)
    return math.sqrt(variance) / mean


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _checked_interval(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("%s must be a positive integer number of milliseconds, got %r"
                         % (what, value))
    return value


def _checked_rows(rows):
    try:
        rows = [tuple(row) for row in rows]
    except TypeError:
        raise ValueError("variation table must be a sequence of (cv, interval_ms) rows, got %r"
                         % (rows,)) from None
    if not rows:
        raise ValueError("variation table needs at least one row")
    checked = []
    for number, row in enumerate(rows, 1):
        if len(row) != 2:
            raise ValueError("variation table row %d: expected (cv, interval_ms), got %r"
                             % (number, row))
        threshold, interval = row
        if not _is_number(threshold) or not math.isfinite(threshold) or threshold < 0:
            raise ValueError("variation table row %d: cv threshold must be a finite number >= 0, "
                             "got %r" % (number, threshold))
        _checked_interval(interval, "variation table row %d: interval_ms" % number)
        if checked and not threshold < checked[-1][0]:
            raise ValueError("variation table row %d: cv thresholds must be strictly descending "
                             "(%r follows %r)" % (number, threshold, checked[-1][0]))
        checked.append((float(threshold), interval))
    return tuple(checked)


class VariationTable:
    """Maps the CV of thread loads to (next interval in ms, regroup or not)."""

    def __init__(self, rows=DEFAULT_TABLE, idle_interval_ms=DEFAULT_IDLE_INTERVAL_MS):
        self.rows = _checked_rows(rows)
        self.idle_interval_ms = _checked_interval(idle_interval_ms, "idle_interval_ms")

    @property
    def lowest_cv(self) -> float:
        """Below this CV the threads are left as they are."""
        return self.rows[-1][0]

    def interval_for(self, cv_value):
        """Return ``(interval_ms, regroup)`` for a CV of thread loads."""
        if type(cv_value) is not float and not _is_number(cv_value) or math.isnan(cv_value):
            raise ValueError("cv must be a number, got %r" % (cv_value,))
        for threshold, interval in self.rows:
            if cv_value >= threshold:
                return interval, True
        return self.idle_interval_ms, False

    @classmethod
    def from_mapping(cls, rows, idle_interval_ms=DEFAULT_IDLE_INTERVAL_MS):
        """Build a table from YAML data.

        ``rows`` is a list of ``{"cv": x, "interval_ms": y}`` mappings or of
        ``[x, y]`` pairs, highest CV first (the same order as Table IV).
        """
        if isinstance(rows, (str, bytes)) or not isinstance(rows, (list, tuple)):
            raise ValueError("variation table must be a list of rows, got %r" % (rows,))
        pairs = []
        for number, row in enumerate(rows, 1):
            if isinstance(row, dict):
                keys = set(row)
                if keys != {"cv", "interval_ms"}:
                    raise ValueError("variation table row %d: expected keys 'cv' and "
                                     "'interval_ms', got %s" % (number, sorted(map(str, keys))))
                pairs.append((row["cv"], row["interval_ms"]))
            elif isinstance(row, (list, tuple)) and len(row) == 2:
                pairs.append(tuple(row))
            else:
                raise ValueError("variation table row %d: expected {cv: x, interval_ms: y} "
                                 "or [x, y], got %r" % (number, row))
        return cls(pairs, idle_interval_ms)

    def __eq__(self, other):
        if not isinstance(other, VariationTable):
            return NotImplemented
        return (self.rows, self.idle_interval_ms) == (other.rows, other.idle_interval_ms)

    def __repr__(self):
        return "VariationTable(rows=%r, idle_interval_ms=%r)" % (self.rows, self.idle_interval_ms)
