"""Left-out domains (``--capacity measured``): a domain other work keeps so
busy that one thread there would get less than every thread gets without
it gets no thread at all (grouping.py plans around it; balance/capacity.py
decides when it is out, tried again, back)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .columns import effective_load


def left_out(capacities: Sequence[float], loads: Sequence[float]) -> frozenset[int]:
    """The domains (by index) a plan should leave out: those too busy with
    other work to give one thread what it would get elsewhere.

    Wave grouping gives every domain at least one slot: a thread at least.
    A thread on domain d (measured capacity c, CPUs) gets at most c; left
    out, the other domains carry every thread, and each of the n threads
    gets min(C - c, L) / n, where C is the capacity of all the domains and
    L the threads' summed load (each at most one CPU, so never more than a
    CPU each).  A program that meets at barriers runs at the pace of its
    slowest thread, so d is left out when c < min(C - c, L) / n: at a
    capacity of 0.1 CPU (a high-priority hog keeps the rest), four threads
    on two one-CPU domains are better off sharing the other CPU at 0.25
    each.  Least capacity first, again after each one left out (C shrinks);
    the last domain is never left out.  A domain of at least one CPU never
    is (min(C - c, L) / n <= 1): CPU counts plan exactly as before.
    """
    return left_out_of_total(capacities, len(loads),
                             math.fsum(effective_load(load) for load in loads))


def left_out_of_total(capacities: Sequence[float], count: int,
                      total_load: float) -> frozenset[int]:
    """``left_out`` from the threads' number and summed load alone (what
    it depends on), as a quiet round has them."""
    remaining = math.fsum(capacities)
    out = []
    for index in sorted(range(len(capacities)), key=lambda i: (capacities[i], i)):
        if len(out) == len(capacities) - 1 or count == 0:
            break
        capacity = capacities[index]
        if capacity * count >= min(remaining - capacity, total_load):
            break
        out.append(index)
        remaining -= capacity
    return frozenset(out)
