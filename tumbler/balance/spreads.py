"""What the exit summary reports of a run (``RunStats``, which every
component of the controller counts in), and every round's domain load
spread, kept for the summary's "early" and "late" figures (the mean over
the first and the last quarter of the rounds) in bounded memory."""

import math

from .mechanisms import MechanismLog


#: SpreadHistory keeps at most twice this many buckets.
MAX_BUCKETS = 2048


def early_late(values):
    """Mean of the first and last quarter of ``values`` (each >= 1 item)."""
    if not values:
        return None, None
    quarter = max(1, len(values) // 4)
    return (math.fsum(values[:quarter]) / quarter,
            math.fsum(values[-quarter:]) / quarter)


class SpreadHistory:
    """Every round's spread, for early_late, in bounded memory.

    A list of every value would grow with the run: a float a round is
    ~30 MB a day at 100 ms.  Instead consecutive values are kept as
    buckets of ``width`` values each (their sum), plus the bucket being
    filled; when there are ``2 * max_buckets`` full buckets, neighbours
    merge pairwise and ``width`` doubles.  Until then every bucket is one
    value and early_late is exact; after, a quarter's boundary may cut a
    bucket, whose values count as equal shares of its sum -- an error of
    at most one bucket, 1/max_buckets of the run.
    """

    def __init__(self, max_buckets=MAX_BUCKETS):
        self.max_buckets = max_buckets
        self.width = 1              # values per full bucket
        self.sums = []              # of the full buckets
        self.open_sum = 0.0         # the bucket being filled
        self.open_count = 0
        self.count = 0

    def append(self, value):
        self.count += 1
        if self.width == 1:
            self.sums.append(value)
        else:
            self.open_sum += value
            self.open_count += 1
            if self.open_count < self.width:
                return
            self.sums.append(self.open_sum)
            self.open_sum, self.open_count = 0.0, 0
        if len(self.sums) >= 2 * self.max_buckets:
            sums = self.sums
            self.sums = [sums[i] + sums[i + 1] for i in range(0, len(sums), 2)]
            self.width *= 2

    def means(self):
        """The mean of each bucket, oldest first (the values while width is 1)."""
        means = [total / self.width for total in self.sums]
        if self.open_count:
            means.append(self.open_sum / self.open_count)
        return means

    def _sum_of_first(self, count):
        """The sum of the first ``count`` values, cutting a bucket pro rata."""
        whole, part = divmod(count, self.width)
        total = math.fsum(self.sums[:whole])
        if part:
            if whole < len(self.sums):
                total += self.sums[whole] * part / self.width
            else:           # inside the open bucket
                total += self.open_sum * part / self.open_count
        return total

    def early_late(self):
        """Mean of the first and last quarter of the values appended."""
        if self.width == 1:
            return early_late(self.sums)
        quarter = max(1, self.count // 4)
        everything = self._sum_of_first(self.count)
        return (self._sum_of_first(quarter) / quarter,
                (everything - self._sum_of_first(self.count - quarter)) / quarter)


class RunStats:
    """What the exit summary reports of a run (observers/summary.py)."""

    __slots__ = ("started", "intervals", "quiet", "threads_seen", "processes_seen",
                 "migrations", "threads_moved", "pins", "spreads", "warnings", "outsiders",
                 "priority", "startup_s", "mechanisms")

    def __init__(self, started):
        self.started = started
        self.intervals = 0
        self.quiet = 0                  # of them, quiet rounds
        self.threads_seen = 0
        self.processes_seen = set()     # their PIDs (exec's sh -c and children too)
        self.migrations = 0             # moves between domains
        self.threads_moved = 0          # threads moved at least once (a count: a set
                                        # of them grew with a service's churn)
        self.pins = 0                   # speed balancing's core changes
        self.spreads = SpreadHistory()  # every round's spread (before its moves)
        self.warnings = 0
        self.outsiders = 0              # threads allowed no CPU of any domain, left alone
        self.priority = None            # () -> how the loop ran, for the summary (run.py)
        self.startup_s = 0.0            # wall time from tumbler's start to balancing
        self.mechanisms = MechanismLog()    # what acted in each domain, and when
