"""compare's figures: the spread of a policy's wall times, its speedup
against ``default``, the paired verdict, and (``--together``) the spread
of the programs' slowdowns."""

import math
import statistics


def summarize(values):
    """{mean, median, min, max, cv} of ``values``; None when there are none.

    ``cv`` is the sample standard deviation over the mean: run-to-run
    noise, 0 for a single value or a zero mean.
    """
    values = list(values)
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "median": statistics.median(values), "min": min(values),
            "max": max(values), "cv": spread / mean if mean > 0 else 0.0}


#: Confidence of the verdict's interval, where the pairs allow it.
VERDICT_CONFIDENCE = 0.95


def median_interval(values, confidence=VERDICT_CONFIDENCE):
    """(low, high, confidence reached) of a distribution-free interval for
    the median of ``values``: the k-th smallest and k-th largest, k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 -- the
    sign test's interval.  With too few values for ``confidence`` (n < 6
    at 95%), [min, max] and the confidence it does reach, 1 - 2^(1-n)."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k = 0.0, 0
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2 ** n       # P(Binomial(n, 1/2) == k)
        if nxt > (1 - confidence) / 2:
            break
        tail, k = nxt, k + 1
    if k == 0:                  # even [min, max] misses the level asked
        return ordered[0], ordered[-1], 1 - 2.0 ** (1 - n)
    return ordered[k - 1], ordered[n - k], 1 - 2 * tail


def paired_verdict(default_runs, runs):
    """The verdict of the package doc for ``runs`` of a policy against
    ``default_runs`` (RunResults that exited 0), paired by run number;
    None without pairs."""
    default_wall = {r.run: r.wall_s for r in default_runs}
    ratios = [r.wall_s / default_wall[r.run] for r in runs
              if default_wall.get(r.run, 0) > 0]
    if not ratios:
        return None
    low, high, reached = median_interval(ratios)
    verdict = "faster" if high < 1 else "slower" if low > 1 else "no difference"
    return {"pairs": len(ratios), "ratio_median": statistics.median(ratios),
            "ratio_low": low, "ratio_high": high, "confidence": reached,
            "verdict": verdict}


def speedup(default_mean, mean):
    """default_mean / mean: above 1 means faster than default."""
    if default_mean is None or mean is None or not mean > 0:
        return None
    return default_mean / mean


def slowdown_spread(slowdowns):
    """{mean, stdev, max_over_min} of the programs' slowdowns (stdev: the
    population standard deviation, as the space-sharing paper reports the
    spread of its programs' QoS); None unless every one is known."""
    if not slowdowns or None in slowdowns:
        return None
    return {"mean": math.fsum(slowdowns) / len(slowdowns),
            "stdev": statistics.pstdev(slowdowns),
            "max_over_min": max(slowdowns) / min(slowdowns) if min(slowdowns) > 0 else None}
