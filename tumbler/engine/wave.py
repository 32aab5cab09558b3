"""Wave grouping (paper Algorithm 2) and its extension to unequal domains.

Algorithm 2 sorts the threads by load and deals them out to K groups like a
wave: left to right on even passes, right to left on odd passes.  Sorted
item ``i`` goes to group ``i % K`` when ``(i // K) % 2 == 0`` and to group
``K - (i % K) - 1`` otherwise.  With 16 threads and 4 groups (paper Fig. 3)
group 0 gets sorted items 0, 7, 8, 15; group 3 gets 3, 4, 11, 12.  Every
pass gives each group one thread, and the pass order alternates, so the
heaviest thread of one pass is paired with the lightest of the next: group
sizes differ by at most one and group sums stay close (a heavy group in one
pass is the light one in the next).  Sorting is O(N log N); dealing is O(N).
(A C version of the sort and deal saved under 1.4% of a full round's CPU at
64 threads and under 8% at 1,024, below the 10% that would pay for a C
module: it was removed, see BENCHMARKS.md.)

Unequal domains.  The paper assumes K identical sockets and N/K threads per
group.  A target process often gets unequal domains (cpusets, offline CPUs,
hybrid parts): say it may run on 6 CPUs of socket 0 and 2 of socket 1.
Socket 0 should then carry 3/4 of the load and of the threads.  We split
every domain into *capacity units* of equal size: capacities divided by
their gcd (6:2 -> 3:1), so K' = 3 + 1 = 4 units, and run Algorithm 2
unchanged over K' slots.  Every slot then carries about the same load and
thread count, and a domain with u units later receives u whole slots (the
mapping step chooses which), i.e. a share of load and threads proportional
to its capacity.  With equal capacities every domain has one unit, K' = K,
and this is exactly Algorithm 2.

Measured capacities (``--capacity measured``: what other work leaves of a
domain's CPUs, a fraction) are counted in hundredths of a CPU before the
gcd: 1.0 : 0.4 is 100 : 40, 5 : 2.

Bounds on K'.  Capacities without a useful common divisor (63:1, 7:5) would
give many slots; each slot becomes a row of the assignment problem solved
later (O(K'^3)), so ``capacity_units`` scales the units down to at most
``max_units`` (64, the largest machine of the paper) by largest-remainder
apportionment, never below one unit per domain.  ``wave_slots`` further
caps K' at the number of threads: with fewer threads than slots some slots
would stay empty, and empty slots no longer carry "about the same load", so
the mapping could pile all threads onto one domain's slots.  Neither cap
goes below K: every domain needs a slot of its own, so a machine of more
than 64 domains (``--level core`` on a large machine) plans with one slot
per domain, K' = K, and the unit scaling only merges units of big domains.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

#: Upper bound on the number of slots (rows of the assignment problem).
DEFAULT_MAX_UNITS = 64


def wave_groups(items, k) -> list[list]:
    """Deal an already-sorted sequence into ``k`` groups, paper Algorithm 2.

    Group g receives sorted positions g, 2k-1-g, 2k+g, 4k-1-g, ...: one
    item from every left-to-right pass (positions g mod 2k) and one from
    every right-to-left pass (positions 2k-1-g mod 2k), alternating.  Two
    strided slices and one interleave per group do the dealing in C, not
    one Python step per item (it runs every round, over every thread).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError("number of groups must be a positive integer, got %r" % (k,))
    if type(items) is not list:
        items = list(items)
    stride = 2 * k
    groups = []
    for g in range(k):
        forward = items[g::stride]
        backward = items[stride - 1 - g::stride]
        group = [None] * (len(forward) + len(backward))
        group[::2] = forward        # forward pass m comes before backward pass m
        group[1::2] = backward
        groups.append(group)
    return groups


def sort_by_load(loads: Mapping[Hashable, float]) -> list:
    """Thread ids by descending load; equal loads in ascending tid order."""
    try:
        # Two C-level sorts instead of a Python key per thread: by tid, then
        # stably by load (reverse=True keeps equal loads in tid order).
        return sorted(sorted(loads), key=loads.__getitem__, reverse=True)
    except TypeError:       # tids of types that do not compare: tie-break as before
        return sorted(loads, key=lambda tid: (-loads[tid], tid))


#: Measured (fractional) capacities are counted in units of 1/QUANTUM CPU.
QUANTUM = 100


def _checked_capacities(capacities):
    """Capacities as positive integers: CPU counts as they are (2.0 is 2:
    a plan from integral capacities is exactly the plan from CPU counts);
    if any is fractional (measured, balance/capacity.py), all in
    hundredths of a CPU, at least one."""
    capacities = list(capacities)
    if not capacities:
        raise ValueError("need at least one domain capacity")
    for capacity in capacities:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)) \
                or not capacity > 0 or capacity == float("inf"):
            raise ValueError("domain capacities must be positive numbers, got %r"
                             % (capacities,))
    if all(type(c) is int or c == int(c) for c in capacities):
        return [int(c) for c in capacities]
    return [max(1, round(c * QUANTUM)) for c in capacities]


def _divided_by_gcd(values):
    divisor = math.gcd(*values)
    return [value // divisor for value in values]


def _apportioned(weights, seats):
    """Largest-remainder apportionment of ``seats`` by ``weights``, min 1 each.

    Integer arithmetic throughout: the quota of weight w is w * seats / total.
    """
    total = sum(weights)
    units = [weight * seats // total for weight in weights]
    remainders = [weight * seats % total for weight in weights]
    left = seats - sum(units)
    for index in sorted(range(len(weights)), key=lambda i: (-remainders[i], i))[:left]:
        units[index] += 1
    # A small domain may round down to 0 units; it still needs a slot, taken
    # from the domain furthest above its quota (surplus = units - quota,
    # compared as units * total - weight * seats to stay in integers).
    for index in range(len(weights)):
        if units[index] == 0:
            donor = max(
                (i for i in range(len(weights)) if units[i] > 1),
                key=lambda i: (units[i] * total - weights[i] * seats, units[i], -i),
            )
            units[donor] -= 1
            units[index] = 1
    return units


def capacity_units(capacities: Sequence[int], max_units: int = DEFAULT_MAX_UNITS) -> list[int]:
    """Equal-sized units per domain: capacities / gcd, scaled to <= max_units."""
    capacities = _checked_capacities(capacities)
    if isinstance(max_units, bool) or not isinstance(max_units, int) or max_units < len(capacities):
        raise ValueError("max_units must be an integer >= the number of domains (%d), got %r"
                         % (len(capacities), max_units))
    return list(_units(tuple(capacities), max_units))


#: capacity_units' answers by its checked arguments: every regrouping asks
#: again for the same few domain sizes.  A dict, not functools.lru_cache:
#: functools' import (with collections) costs ~3 ms of CPU beside
#: ``exec``'s command.
_UNITS = {}
_UNITS_KEPT = 64


def _units(capacities: tuple[int, ...], max_units: int) -> tuple[int, ...]:
    """capacity_units of checked arguments, remembered (``_UNITS``)."""
    key = (capacities, max_units)
    units = _UNITS.get(key)
    if units is None:
        units = _divided_by_gcd(capacities)
        if sum(units) > max_units:
            units = _divided_by_gcd(_apportioned(units, max_units))
        if len(_UNITS) >= _UNITS_KEPT:
            _UNITS.clear()
        units = _UNITS[key] = tuple(units)
    return units


def wave_slots(loads: Mapping[Hashable, float], capacities: Sequence[int],
               max_units: int = DEFAULT_MAX_UNITS) -> tuple[list[list], list[int]]:
    """Wave-group threads into equal slots; return (slots, units per domain).

    ``slots[s]`` lists the tids of slot s; ``units[d]`` is how many slots
    domain d must receive.  ``sum(units) == len(slots)``.
    """
    if type(capacities) is not list:
        capacities = list(capacities)      # checked by capacity_units
    # Never fewer slots than domains: each domain needs at least one, and
    # capacity_units cannot give fewer (more than max_units domains plan too).
    slot_bound = max(len(capacities), min(max_units, len(loads)))
    units = capacity_units(capacities, slot_bound)
    slots = wave_groups(sort_by_load(loads), sum(units))
    return slots, units
