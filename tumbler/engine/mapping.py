"""Which wave slot goes to which domain: fewest migrations, solved exactly.

Wave grouping (wave.py) decides which threads travel together, not where.
Any slot can go to any domain as long as domain d receives exactly
``units[d]`` slots, so we pick the mapping that leaves the most threads
where they already are (paper section 3.3: "typically only a subset of
threads need to be migrated ... because many threads are already bound to
the set of cores on the CPUs where we want them to be").

This is an assignment problem.  Columns are *domain copies*: domain d
appears ``units[d]`` times, so the matrix is square (slots x slots).  The
cost of giving slot s to a copy of domain d is, lexicographically:

1. the number of threads of s that may not run on d (optional ``eligible``
   sets: a slot holding a thread restricted to some domains should land on
   one of them, or that thread has to leave its slot later and leaves a
   hole in the balance);
2. minus the number of threads of s that are in d now (each one is a
   migration saved);
3. minus the summed load of those threads (prefer keeping the busy ones,
   whose caches are warmest);
4. a preference for the copy with the same position as the slot, only so
   that a program with nothing placed yet gets slot i -> domain i, like the
   paper ("the first group is assigned to CPU(0), the second to CPU(1)").

The levels are folded into one integer cost with weights large enough that
the sum of a lower level over all slots never outweighs one unit of a
higher level.  The staying load of each (slot, domain) is summed exactly
(math.fsum) and quantised to micro-units, so the arithmetic is exact and
the result does not depend on float rounding or the order of the threads.
The Hungarian (Kuhn-Munkres) algorithm with potentials solves the problem
exactly in O(n^2 m); with at most 64 slots that is about 260 000 steps
(more slots only on machines of more than 64 domains, one slot each).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence, Set
from itertools import compress, permutations, repeat
from numbers import Real
from operator import eq

#: Loads are compared in millionths of a CPU.
LOAD_QUANTUM = 1_000_000

#: Up to this many domains, per-domain counts take one C-level pass each.
_FEW_DOMAINS = 8

#: Up to this many equal domains, the threads kept by every slot -> domain
#: permutation are compared directly (5! = 120 sums of 5).
_PERMUTED_DOMAINS = 5


def _checked_matrix(cost):
    rows = [list(row) for row in cost]
    if not rows:
        return rows, 0
    width = len(rows[0])
    for row in rows:
        if len(row) != width:
            raise ValueError("cost matrix rows must all have the same length")
        for value in row:
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError("cost matrix entries must be finite numbers, got %r" % (value,))
    if len(rows) > width:
        raise ValueError("cost matrix needs at least as many columns as rows (%d x %d)"
                         % (len(rows), width))
    return rows, width


def hungarian(cost) -> list[int]:
    """Minimum-cost assignment: the column chosen for each row.

    ``cost`` is an n x m matrix with n <= m; every row gets a distinct
    column.  Exact for integer costs.  Shortest augmenting paths with row
    and column potentials (Kuhn-Munkres, Jonker-Volgenant style), O(n^2 m).
    """
    rows, width = _checked_matrix(cost)
    n = len(rows)
    if n == 0:
        return []
    infinity = math.inf
    # 1-based internally; column 0 is a virtual column used to start a path.
    row_potential = [0] * (n + 1)
    col_potential = [0] * (width + 1)
    row_of_col = [0] * (width + 1)       # 0 = column free
    previous_col = [0] * (width + 1)     # back-pointers of the augmenting path
    for row in range(1, n + 1):
        row_of_col[0] = row
        col = 0
        slack = [infinity] * (width + 1)
        visited = [False] * (width + 1)
        while True:
            visited[col] = True
            current_row = row_of_col[col]
            costs = rows[current_row - 1]
            potential = row_potential[current_row]
            delta = infinity
            next_col = 0
            for j in range(1, width + 1):
                if visited[j]:
                    continue
                reduced = costs[j - 1] - potential - col_potential[j]
                if reduced < slack[j]:
                    slack[j] = reduced
                    previous_col[j] = col
                if slack[j] < delta:
                    delta = slack[j]
                    next_col = j
            for j in range(width + 1):
                if visited[j]:
                    row_potential[row_of_col[j]] += delta
                    col_potential[j] -= delta
                else:
                    slack[j] -= delta
            col = next_col
            if row_of_col[col] == 0:
                break
        while col:
            prior = previous_col[col]
            row_of_col[col] = row_of_col[prior]
            col = prior
    column_of_row = [0] * n
    for j in range(1, width + 1):
        if row_of_col[j]:
            column_of_row[row_of_col[j] - 1] = j - 1
    return column_of_row


def _two_by_two(cost) -> list[int] | None:
    """The assignment of a 2 x 2 problem with a unique optimum (two equal
    domains, the common case); None on a tie, left to ``hungarian``."""
    (a, b), (c, d) = cost
    if a + d < b + c:
        return [0, 1]
    if a + d > b + c:
        return [1, 0]
    return None


def _slot_loads(slot, loads) -> list[float]:
    """Loads of the threads of ``slot``, at least 0 (0 for a thread without
    a load)."""
    values = list(map(loads.get, slot, repeat(0.0)))
    if not set(map(type, values)) <= {float}:
        values = list(map(float, values))
    if values and min(values) < 0.0:
        values = [value if value > 0.0 else 0.0 for value in values]
    return values


def _quantised(load: float) -> int:
    """A summed load in millionths of a CPU: integers add up exactly."""
    return round(load * LOAD_QUANTUM)


def _current_domains(slots, current):
    """Per slot, the domain each of its threads is in now (None: not placed)."""
    return [list(map(current.get, slot)) for slot in slots]


def _kept_counts(where, domain_count):
    """Per domain: how many of the threads whose domains are ``where`` are there."""
    if domain_count <= _FEW_DOMAINS:
        return [where.count(domain) for domain in range(domain_count)]
    count = [0] * domain_count
    for domain in where:
        if domain is not None and 0 <= domain < domain_count:
            count[domain] += 1
    return count


def _staying_loads(where, count, values, domain_count):
    """Per domain: the summed load (``values``) of the threads of a slot
    that are there now (``where``: their domains now; ``count``: its
    _kept_counts), quantised (see _quantised).

    Sums are taken per (slot, domain) with math.fsum, which is exact before
    its one rounding, so the result does not depend on the order of the
    threads; C-level passes, as this covers every thread every regrouping.
    """
    if domain_count <= _FEW_DOMAINS:
        return [_quantised(math.fsum(compress(values, map(eq, where, repeat(domain)))))
                if count[domain] else 0 for domain in range(domain_count)]
    parts = [[] for _ in range(domain_count)]
    for domain, value in zip(where, values):
        if domain is not None and 0 <= domain < domain_count:
            parts[domain].append(value)
    return [_quantised(math.fsum(part)) for part in parts]


def _thread_assignment(slots, domain_of_slot):
    """tid -> domain from each slot's domain (a thread in two slots: the later)."""
    if not slots:
        return {}
    # Filling one dict in place: a dict per slot merged in costs a third more.
    assignment = dict.fromkeys(slots[0], domain_of_slot[0])
    for slot, domain in zip(slots[1:], domain_of_slot[1:]):
        assignment.update(zip(slot, repeat(domain)))
    return assignment


def _decided_by_counts(slots, kept) -> dict[Hashable, int] | None:
    """The assignment when the number of threads kept alone decides it.

    With equal domains (one slot each) and no eligibility limits, the
    second cost level -- threads kept in place, ``kept[slot][domain]`` --
    usually settles it: when one slot -> domain mapping keeps strictly more
    threads than every other, it is what the full cost picks too (the
    levels below only break ties), and the loads need not be summed at
    all.  None otherwise.
    """
    chosen = _strict_majorities(kept)
    if chosen is None and len(kept) <= _PERMUTED_DOMAINS:
        chosen = _unique_best_permutation(kept)
    if chosen is None:
        return None
    return _thread_assignment(slots, chosen)


def _strict_majorities(kept) -> list[int] | None:
    """Each slot's domain when every slot has most of its placed threads in
    one domain, strictly, and those domains are all different: that mapping
    keeps the most threads in every slot at once, so no other keeps as many."""
    chosen = []
    for counts in kept:
        most = max(counts)
        if counts.count(most) != 1:
            return None
        chosen.append(counts.index(most))
    return chosen if len(set(chosen)) == len(kept) else None


def _unique_best_permutation(kept) -> list[int] | None:
    """The slot -> domain permutation keeping the most threads, if every
    other keeps fewer (len(kept)! of them: few domains only)."""
    best = runner_up = -1
    best_permutation = None
    for permutation in permutations(range(len(kept))):
        total = sum(map(list.__getitem__, kept, permutation))
        if total > best:
            best, runner_up, best_permutation = total, best, permutation
        elif total > runner_up:
            runner_up = total
    return list(best_permutation) if best > runner_up else None


def _barred(slot, eligible, domain_count):
    """Per domain: how many threads of ``slot`` may not run there."""
    barred = [0] * domain_count
    for tid in slot:
        allowed = eligible.get(tid)
        if allowed is not None:
            for other in range(domain_count):
                barred[other] += other not in allowed
    return barred


def _checked_units(units_per_domain, slot_count):
    units = list(units_per_domain)
    for unit in units:
        if isinstance(unit, bool) or not isinstance(unit, int) or unit < 0:
            raise ValueError("units per domain must be non-negative integers, got %r" % (units,))
    if sum(units) != slot_count:
        raise ValueError("units per domain %r must add up to the number of slots (%d)"
                         % (units, slot_count))
    return units


def assign_slots(slots: Sequence[Sequence[Hashable]], units_per_domain: Sequence[int],
                 current: Mapping[Hashable, int | None],
                 loads: Mapping[Hashable, float],
                 eligible: Mapping[Hashable, Set[int] | None] | None = None,
                 ) -> dict[Hashable, int]:
    """Map every thread of every slot to a domain, keeping most threads in place.

    Domain d receives exactly ``units_per_domain[d]`` slots.  ``current``
    gives each thread's domain now (None or absent: not placed, never counts
    as staying).  ``eligible`` optionally gives the domains a thread may use
    (None or absent: any); slots go to domains their threads may use
    whenever possible.  Returns tid -> domain index.
    """
    units = _checked_units(units_per_domain, len(slots))
    eligible = eligible or {}
    domain_count = len(units)
    where = _current_domains(slots, current)
    kept = [_kept_counts(domains, domain_count) for domains in where]
    if not eligible and units == [1] * domain_count:
        decided = _decided_by_counts(slots, kept)
        if decided is not None:
            return decided
    column_domain = [domain for domain, count in enumerate(units) for _ in range(count)]
    staying = [_staying_loads(where[position], kept[position], _slot_loads(slot, loads),
                              domain_count) for position, slot in enumerate(slots)]
    stay_weight = sum(map(len, slots)) + 1        # > any number of threads kept
    # > any summed staying load: each slot contributes one of its domains'.
    load_weight = sum(map(sum, staying)) + 1
    position_weight = len(slots) + 1              # > any number of off-position slots
    cost = []
    for position, slot in enumerate(slots):
        staying_count, staying_load = kept[position], staying[position]
        barred = _barred(slot, eligible, domain_count) if eligible else [0] * domain_count
        row = []
        for column, domain in enumerate(column_domain):
            level = barred[domain] * stay_weight - staying_count[domain]
            level = level * load_weight - staying_load[domain]
            row.append(level * position_weight + (column != position))
        cost.append(row)
    chosen = _two_by_two(cost) if len(cost) == 2 else None
    if chosen is None:
        chosen = hungarian(cost)
    return _thread_assignment(slots, [column_domain[column] for column in chosen])
