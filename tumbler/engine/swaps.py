"""Step 5 of grouping.py: two opposite moves of near-equal loads cancel out.

Wave grouping fixes which threads share a group, not which domain keeps
whom, so evening out equal threads can move one thread each way where
none needs to.  Two opposite moves of near-equal loads (within 0.02 CPU)
cancel out, since swapping them changes no domain's load -- as long as
all the cancelled pairs together shift no domain's load by more than 0.02
CPU: a hundred pairs of 0.03 and 0.015 each differ by little, but
cancelling all of them would keep a 1.5 CPU imbalance.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, repeat
from operator import eq, ne

from .columns import FEW_DOMAINS, Columns

#: Two opposite moves of threads whose loads differ by at most this many
#: CPUs cancel out, and all cancelled pairs together shift each domain's
#: load by at most this many CPUs (see cancel_swaps).  Measured
#: (BENCHMARKS.md, "auto's thresholds against what threads show"): equal
#: threads' loads over one 500 ms window differ by 0.002-0.008 (median),
#: 0.007-0.012 at the 90th percentile on a quiet machine and 0.009-0.020
#: on a loaded one (spin and yield barriers, 3 on 2 CPUs; sleeping
#: barriers, 2 on 2): a swap of equal threads is within it nine times in
#: ten.  At most the tolerance of a 1-CPU domain (grouping.py,
#: DEFAULT_TOLERANCE x 1 CPU), or cancelled pairs could keep a domain out
#: of it.  Supported: [0.012, 0.10); 0.02 is the loaded 90th percentile.
SWAP_EPSILON = 0.02


def cancel_swaps(columns: Columns, target: dict[int, int],
                  loads: Mapping[int, float]) -> dict[int, int]:
    """Drop pairs of opposite moves that would only swap near-equal loads.

    Wave grouping fixes which threads share a group, so evening out equal
    threads split 4:1 can move one thread from each side where moving one
    would do.  A move X->Y paired with a move Y->X of a thread whose load is
    within ``SWAP_EPSILON`` CPUs changes the domain loads by at most that
    much: both stay.  Each forward mover, lightest first, is paired with the
    lightest unpaired backward mover within ``SWAP_EPSILON`` of it.

    The cancelled pairs' differences add up, so their total is bounded too:
    a pair is cancelled only while the summed shift it and the pairs
    cancelled before it leave on each of the two domains stays within
    ``SWAP_EPSILON`` (otherwise 100 pairs of 0.03 and 0.015 would keep
    1.5 CPUs of imbalance the regrouping removes).  Routes are taken in
    (src, dst) order and pairs in the order above: deterministic.
    """
    destinations = list(map(target.__getitem__, columns.tids))
    by_route = _movers_by_route(columns, destinations)
    result = dict(target)
    drift = {}          # domain -> load the cancelled pairs left there, CPUs
    for (src, dst), forward in sorted(by_route.items()):
        if src > dst or (dst, src) not in by_route:
            continue
        for tid, match in _near_equal_pairs(forward, by_route[(dst, src)], loads):
            shift = loads[tid] - loads[match]   # src keeps tid, does not get match
            src_drift = drift.get(src, 0.0) + shift
            dst_drift = drift.get(dst, 0.0) - shift
            if abs(src_drift) > SWAP_EPSILON or abs(dst_drift) > SWAP_EPSILON:
                continue
            drift[src], drift[dst] = src_drift, dst_drift
            result[tid], result[match] = src, dst
    return result


def _movers_by_route(columns: Columns, destinations: list[int]) -> dict[tuple, list]:
    """(src, dst) -> tids of the placed threads moving from src to dst, for
    threads still allowed on src (a thread evicted from src has to go)."""
    moving = list(map(ne, destinations, columns.domains))
    if not columns.restricted and None not in columns.domains:
        tids = list(compress(columns.tids, moving))
        sources = list(compress(columns.domains, moving))
        targets = list(compress(destinations, moving))
        if len(set(sources)) <= FEW_DOMAINS:
            return _split_by_route(tids, sources, targets)
    by_route = {}
    for tid, src, dst, eligible in compress(zip(columns.tids, columns.domains, destinations,
                                                columns.eligibles), moving):
        if src is not None and (eligible is None or src in eligible):
            by_route.setdefault((src, dst), []).append(tid)
    return by_route


def _split_by_route(tids, sources, targets):
    """Group movers by (source, target) with one C-level pass per source and
    per target: few domains, many threads."""
    by_route = {}
    for src in set(sources):
        from_src = list(map(eq, sources, repeat(src)))
        src_tids = list(compress(tids, from_src))
        src_targets = list(compress(targets, from_src))
        for dst in set(src_targets):
            by_route[(src, dst)] = list(compress(src_tids, map(eq, src_targets, repeat(dst))))
    return by_route


def _near_equal_pairs(forward, backward, loads):
    """(forward tid, backward tid) pairs: each forward tid in (load, tid)
    order takes the first unpaired backward tid, in (load, tid) order, whose
    load is within SWAP_EPSILON of its own.

    Both lists are sorted, so one pointer walks ``backward`` once: a
    backward load too far below the current forward load is too far below
    every later, heavier one too, and the first one not too far below is
    either close enough or (like all after it) too far above.
    """
    forward = _by_load_then_tid(forward, loads)
    backward = _by_load_then_tid(backward, loads)
    backward_loads = list(map(loads.__getitem__, backward))
    end = len(backward)
    pairs = []
    j = 0
    for tid, load in zip(forward, map(loads.__getitem__, forward)):
        while j < end and backward_loads[j] < load \
                and abs(backward_loads[j] - load) > SWAP_EPSILON:
            j += 1
        if j < end and abs(backward_loads[j] - load) <= SWAP_EPSILON:
            pairs.append((tid, backward[j]))
            j += 1
    return pairs


def _by_load_then_tid(tids, loads):
    """``tids`` sorted by (load, tid), ascending, with C-level keys."""
    try:
        return sorted(sorted(tids), key=loads.__getitem__)
    except TypeError:       # tids that do not compare with each other
        return sorted(tids, key=lambda tid: (loads[tid], tid))
