"""The exit summary printed on stderr after a balancing run, and the same
figures as one JSON object (``--summary-json FILE``, see summary_record).

"Early" and "late" spread are the mean per-domain load spread (CV of
per-capacity domain loads, as measured before each round's moves) over the
first and the last quarter of the rounds: a run that balanced well shows a
late figure well below the early one.
"""

import math

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


def summary_lines(controller, wall_s, cpu_s, end_reason):
    stats = controller.stats
    rate = stats.migrations / wall_s if wall_s > 0 else 0.0
    lines = [
        "ran %.1f s (%s): %d intervals (%d quiet), %d threads seen, %d migrations (%.1f/s), "
        "policy %s%s"
        % (wall_s, end_reason, stats.intervals, stats.quiet, stats.threads_seen,
           stats.migrations, rate, controller.policy.name,
           ", dry run" if controller.dry_run else ""),
        controller.choice.note,
    ]
    if stats.pins:
        lines.append("speed balancing: %d core changes (%.1f/s)"
                     % (stats.pins, stats.pins / wall_s if wall_s > 0 else 0.0))
    early, late = stats.spreads.early_late()
    if early is not None:
        lines.append("domain load spread (CV): early %.2f, late %.2f" % (early, late))
    share = 100.0 * cpu_s / wall_s if wall_s > 0 else 0.0
    lines.append("own CPU time %.3f s (%.2f%% of one CPU)" % (cpu_s, share))
    return lines


def summary_record(controller, wall_s, cpu_s, end_reason):
    """The figures of summary_lines as a JSON-ready dict, for our own
    commands (``compare`` reads it) and scripts; keys are stable:

    ``wall_s`` balancing's wall time, ``end_reason``, ``intervals``,
    ``quiet_intervals``, ``threads_seen``, ``migrations``, ``core_changes``
    (speed balancing's), ``policy``, ``dry_run``, ``domain_note``,
    ``spread_early`` and ``spread_late`` (null without rounds), ``own_cpu_s``
    (tumbler's CPU time from the start of balancing to the restore).
    """
    stats = controller.stats
    early, late = stats.spreads.early_late()
    return {"wall_s": wall_s, "end_reason": end_reason, "intervals": stats.intervals,
            "quiet_intervals": stats.quiet, "threads_seen": stats.threads_seen,
            "migrations": stats.migrations, "core_changes": stats.pins,
            "policy": controller.policy.name, "dry_run": bool(controller.dry_run),
            "domain_note": controller.choice.note, "spread_early": early,
            "spread_late": late, "own_cpu_s": cpu_s}
