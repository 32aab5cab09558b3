"""The "tumbler" policy: one planning round of the balancing loop.

Each interval the controller hands us every live thread of the target with
its load (paper Eq. 1) and its current domain; we return a Plan.  Threads
that vanished are simply absent from the input, so a plan never names them.

1. Interval.  ``thread_cv`` = CV of all thread loads; the variation-interval
   table (variation.py, paper Table IV) gives the next interval and whether
   to regroup at all (CV >= 0.05 by default).
2. Nothing to group.  With fewer than two domains, or a CV below the lowest
   table row, the current groups are kept -- unless the domains themselves
   are out of balance by more than ``tolerance`` (step 4): threads of equal
   load can still sit unevenly (say 4+4 threads bound, then 3 exit on one
   side), and since tumbler bound them, the OS can no longer even them out.
3. Candidate groups.  Otherwise the threads are wave-grouped into
   capacity-sized slots (wave.py, Algorithm 2 generalised to unequal
   domains) and the slots mapped to domains so that slots land where their
   threads may run and then the most threads stay where they are
   (mapping.py, exact assignment).  A thread eligible for exactly one
   domain is pinned there: grouping never moves it elsewhere.  When a slot
   mixes threads with incompatible restrictions, a thread whose slot landed
   on a domain it may not use goes to the eligible domain with the least
   per-capacity load after adding it (heaviest such thread first; ties: its
   current domain, then the lowest index).
4. Error tolerance, as PMQS's LBP states it (papers/pmqs-load-balancers.md,
   section 6): a domain is balanced when its load per CPU is within
   ``tolerance`` (default 0.10, LBP-10) of the mean load per CPU (all the
   load over all the CPUs).  ``deviation`` is the largest such relative
   distance over the domains.  While it is at most the tolerance the
   groups are kept and nothing migrates: balancing every small deviation
   (LBC) over-corrects and oscillates, and a program that is already
   balanced sees no migrations round after round, even though a fresh wave
   grouping of noisy loads would shuffle it.  Beyond it, the candidate is
   adopted if it brings every domain within the tolerance, or, when it
   cannot (a few heavy threads), if it lowers the deviation by at least
   the tolerance; otherwise nothing migrates.  The paper's own rule agrees:
   "when thread migrations are not expected to yield any benefit, they
   will not be performed" (section 3.4).  "Keeping the current groups"
   still places new threads (step 6), so the comparison is made against
   that.  (An earlier rule compared the CV of the domain loads with the
   tolerance, which lets a single domain of K deviate by up to
   sqrt(K-1) x tolerance: 17% at K=4, 26% at K=8.)  "Spread", the CV of the
   per-capacity domain loads (load / CPUs), is still what the log and the
   summary report.
5. Moves are only the threads whose domain changes, ordered by tid; two
   opposite moves of near-equal loads (within 0.02 CPU) cancel out, since
   swapping them changes no domain's load -- as long as all the cancelled
   pairs together shift no domain's load by more than 0.02 CPU: a hundred
   pairs of 0.03 and 0.015 each differ by little, but cancelling all of
   them would keep a 1.5 CPU imbalance.
6. Initial placement (PMQS "IP").  A thread with no domain yet, or sitting
   on a domain it is no longer eligible for, is always placed in this
   round, even when regrouping is skipped: ``place_new`` puts it on the
   domain with the least per-capacity load.  Until a thread has been
   measured its load is assumed to be at least the mean load of the placed
   busy threads (those of at least 0.05 CPU: an idle main thread waiting in
   join says nothing about how busy its workers will be), so a burst of new
   threads spreads out in proportion to capacity instead of piling onto the
   currently lightest domain.

Left-out domains.  A domain of capacity 0 gets no thread: wave grouping
runs over the others, and threads on it are placed like new ones
(``--capacity measured`` sets it, from ``left_out``: a domain other work
keeps so busy that one thread there would get less than every thread gets
without it; see that function).

Cost.  This runs every interval over every thread (10,000 threads at a
50 ms interval must not cost a CPU), so the per-thread work is done in
C-level passes over columns of the input (``map``, ``compress``,
``dict(zip())``, ``sorted`` with a C key) rather than a Python step per
thread and check; input validation takes the slow, per-thread path only
when a quick pass finds something to report.  ``benchmarks/overhead.py``
measures it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from numbers import Real
from operator import attrgetter, eq, ne

from .mapping import assign_slots
from .model import Domain, Move, Plan, ThreadLoad
from .variation import VariationTable, cv
from .wave import sort_by_load, wave_slots

#: Default error tolerance: no domain's load per CPU further than this
#: fraction from the mean, PMQS LBP-10.
DEFAULT_TOLERANCE = 0.10

#: Two opposite moves of threads whose loads differ by at most this many
#: CPUs cancel out, and all cancelled pairs together shift each domain's
#: load by at most this many CPUs (see _cancel_swaps).
SWAP_EPSILON = 0.02

#: Gains smaller than this are float noise, not an improvement.
_NO_GAIN = 1e-9

#: Load assumed for a new thread when neither it nor the placed threads have
#: shown any load: one full CPU, so new threads count as threads at all.
_UNKNOWN_LOAD = 1.0

#: Threads below this load (CPUs) are idle -- a main thread waiting in
#: join: placed, they say nothing about how busy a new thread will be (and
#: the speed policy leaves them unpinned, see policy.py).
IDLE_LOAD = 0.05

#: Up to this many domains, per-domain sums take one C-level pass per domain.
_FEW_DOMAINS = 8

_TID = attrgetter("tid")
_LOAD = attrgetter("load")
_DOMAIN = attrgetter("domain")
_ELIGIBLE = attrgetter("eligible")


# -- input checks ------------------------------------------------------------

def _ordered_domains(domains: Sequence[Domain]) -> list[Domain]:
    ordered = sorted(domains, key=lambda domain: domain.index)
    if not ordered:
        raise ValueError("need at least one domain")
    indices = [domain.index for domain in ordered]
    if indices != list(range(len(ordered))):
        raise ValueError("domain indices must be 0..%d without gaps or repeats, got %r"
                         % (len(ordered) - 1, indices))
    for domain in ordered:
        if not domain.cpus:
            raise ValueError("domain %d has no CPUs" % domain.index)
    if not any(domain.capacity > 0 for domain in ordered):
        raise ValueError("every domain is left out (capacity 0)")
    return ordered


#: The fields a tuple type must start with to be read as columns by zip().
_LOAD_FIELDS = ("tid", "load", "domain", "eligible")
_tuple_types_seen: dict[type, bool] = {}


class _Columns:
    """The threads of one call as columns (one sequence per field), so that
    per-thread work can be done in C-level passes over them."""

    __slots__ = ("tids", "raw_loads", "domains", "eligibles", "restricted")

    def __init__(self, threads: list[ThreadLoad], domain_count: int):
        if threads and all(map(_starts_with_load_fields, set(map(type, threads)))):
            # ThreadLoad and the policy's ThreadView: one transposing pass.
            self.tids, self.raw_loads, self.domains, self.eligibles = \
                list(zip(*threads))[:4]
        else:
            self.tids = list(map(_TID, threads))
            self.raw_loads = list(map(_LOAD, threads))
            self.domains = list(map(_DOMAIN, threads))
            self.eligibles = list(map(_ELIGIBLE, threads))
        self.restricted = _some_restricted(self.eligibles, domain_count)


def _starts_with_load_fields(kind: type) -> bool:
    """Whether ``kind`` is a named tuple whose first fields are ThreadLoad's."""
    known = _tuple_types_seen.get(kind)
    if known is None:
        known = (issubclass(kind, tuple)
                 and tuple(getattr(kind, "_fields", ())[:4]) == _LOAD_FIELDS)
        _tuple_types_seen[kind] = known
    return known


def _some_restricted(eligibles: list[frozenset | None], domain_count: int) -> bool:
    """Whether some thread may not use some domain.

    If not, every eligibility check passes -- an ``eligible`` set holding
    every domain acts exactly as None (the controller always passes sets)
    -- and the checks are skipped.  Few distinct sets exist, so they are
    looked at once each.
    """
    try:
        distinct = set(eligibles)
    except TypeError:                   # unhashable: take the careful path
        return True
    distinct.discard(None)
    return any(not all(domain in eligible for domain in range(domain_count))
               for eligible in distinct)


def _checked_threads(threads: Sequence[ThreadLoad], domain_count: int) -> list[ThreadLoad]:
    threads = list(threads)
    _checked_columns(threads, domain_count)
    return threads


def _checked_columns(threads: list[ThreadLoad], domain_count: int) -> _Columns:
    """The columns of ``threads``; ValueError names the first invalid thread."""
    columns = _Columns(threads, domain_count)
    if not _plainly_valid(columns, domain_count):
        _raise_first_problem(threads, domain_count)
    return columns


def _plainly_valid(columns: _Columns, domain_count: int) -> bool:
    """True if C-level passes show every thread is valid; False means "look
    closer" (see _raise_first_problem), not necessarily invalid."""
    try:
        if len(set(columns.tids)) != len(columns.tids):
            return False
        loads = columns.raw_loads
        # A finite sum means finite loads (an inf or nan makes it inf or nan;
        # an overflow raises): one pass instead of isfinite per load.
        if not set(map(type, loads)) <= {float, int} or not math.isfinite(math.fsum(loads)):
            return False
        if not set(columns.domains) <= {None, *range(domain_count)}:
            return False
        distinct = set(columns.eligibles)
        distinct.discard(None)
        return all(any(0 <= d < domain_count for d in eligible) for eligible in distinct)
    except (TypeError, ValueError, OverflowError):
        return False


def _raise_first_problem(threads: list[ThreadLoad], domain_count: int) -> None:
    """Check thread by thread; raise for the first problem found, if any."""
    seen = set()
    for thread in threads:
        if thread.tid in seen:
            raise ValueError("thread %r appears twice" % (thread.tid,))
        seen.add(thread.tid)
        if (isinstance(thread.load, bool) or not isinstance(thread.load, Real)
                or not math.isfinite(thread.load)):
            raise ValueError("thread %r: load must be a finite number, got %r"
                             % (thread.tid, thread.load))
        if thread.domain is not None and not 0 <= thread.domain < domain_count:
            raise ValueError("thread %r is on unknown domain %r" % (thread.tid, thread.domain))
        if not _eligible_domains(thread, domain_count):
            raise ValueError("thread %r is not eligible for any domain (eligible %r)"
                             % (thread.tid, sorted(thread.eligible)))


# -- small decisions -----------------------------------------------------------

def _effective_load(load: float) -> float:
    """A negative load is a counter glitch: it weighs nothing."""
    return max(0.0, float(load))


def _effective_loads(columns: _Columns) -> list[float]:
    """_effective_load of every thread (a comprehension: max() per item is
    several times slower)."""
    loads = columns.raw_loads
    if loads and min(loads) >= 0.0 and set(map(type, loads)) == {float}:
        return loads        # the usual case: already what we want
    return [load if load > 0.0 else 0.0 for load in map(float, loads)]


def _eligible_domains(thread: ThreadLoad, domain_count: int) -> list[int]:
    if thread.eligible is None:
        return list(range(domain_count))
    return sorted(d for d in thread.eligible if 0 <= d < domain_count)


def _may_use(thread: ThreadLoad, domain: int) -> bool:
    return thread.eligible is None or domain in thread.eligible


def _needs_placement(thread: ThreadLoad) -> bool:
    return thread.domain is None or not _may_use(thread, thread.domain)


def _arrivals(threads: list[ThreadLoad], columns: _Columns) -> list[ThreadLoad]:
    """The threads that need a domain this round (see _needs_placement)."""
    if not columns.restricted and None not in columns.domains:
        return []
    return [thread for thread in threads if _needs_placement(thread)]


def _pinned_domain(thread: ThreadLoad, domain_count: int) -> int | None:
    """The only domain a thread may use, or None when it has a choice."""
    eligible = _eligible_domains(thread, domain_count)
    return eligible[0] if len(eligible) == 1 else None


def _summed_loads(assignment: Mapping[int, int | None], loads: Mapping[int, float],
                  domain_count: int) -> list[float]:
    """Summed load per domain (threads assigned None count nowhere)."""
    return _column_sums(list(map(loads.__getitem__, assignment)), list(assignment.values()),
                        domain_count)


def _column_sums(values: list[float], domains: list[int | None],
                 domain_count: int) -> list[float]:
    """Sum of ``values[i]`` per ``domains[i]`` (None counts nowhere)."""
    if domain_count <= _FEW_DOMAINS:
        return [math.fsum(compress(values, map(eq, domains, repeat(domain))))
                for domain in range(domain_count)]
    sums = [[] for _ in range(domain_count)]
    for value, domain in zip(values, domains):
        if domain is not None:
            sums[domain].append(value)
    return [math.fsum(part) for part in sums]


def spread(domain_loads: Sequence[float], capacities: Sequence[int]) -> float:
    """CV of per-capacity domain loads; 0 when there is no load at all."""
    return cv(load / capacity for load, capacity in zip(domain_loads, capacities))


def deviation(domain_loads: Sequence[float], capacities: Sequence[int]) -> float:
    """Largest relative distance of a domain's load per CPU from the mean
    load per CPU (all the load over all the CPUs): what the tolerance
    bounds (step 4 of the module docstring).  0 when there is no load."""
    mean = math.fsum(domain_loads) / sum(capacities)
    if not mean > 0.0:
        return 0.0
    return max(abs(load / capacity - mean) for load, capacity in
               zip(domain_loads, capacities)) / mean


def _lightest_after_adding(candidates, load, domain_loads, capacities, preferred=None):
    """Domain whose per-capacity load is least once ``load`` is added to it
    (a left-out domain, capacity 0, only when there is no other)."""
    return min(candidates, key=lambda d: (
        (domain_loads[d] + load) / capacities[d] if capacities[d] > 0 else math.inf,
        d != preferred, d))


def _assumed_load(thread: ThreadLoad, placed_mean: float) -> float:
    assumed = max(_effective_load(thread.load), placed_mean)
    return assumed if assumed > 0.0 else _UNKNOWN_LOAD


# -- initial placement -----------------------------------------------------------

def place_new(new_threads: Sequence[ThreadLoad], placed: Sequence[ThreadLoad],
              domains: Sequence[Domain]) -> list[Move]:
    """Initial placement: put each new thread at once on the lightest domain.

    "Lightest" is the least per-capacity load after adding the thread.  A
    new thread counts as max(its load, mean load of the busy placed threads),
    and as 1.0 CPU if that is still 0 (nothing known), so several new
    threads spread out in proportion to capacity.  Heaviest first (ties by
    tid); ties between domains go to the lowest index.  ``eligible`` is
    respected.  ``src`` of each move is the thread's current domain (None
    for a thread never placed).  Moves are returned in placement order.
    """
    ordered = _ordered_domains(domains)
    capacities = [domain.capacity for domain in ordered]
    placed = [thread for thread in _checked_threads(placed, len(ordered))
              if thread.domain is not None]
    new_threads = _checked_threads(new_threads, len(ordered))
    return _placements(new_threads, placed, capacities)


def _placements(new_threads: list[ThreadLoad], placed: list[ThreadLoad],
                capacities: list[int]) -> list[Move]:
    """place_new on checked input: every thread of ``placed`` has a domain."""
    placed_loads = [_effective_load(thread.load) for thread in placed]
    busy = [load for load in placed_loads if load >= IDLE_LOAD]
    placed_mean = math.fsum(busy) / len(busy) if busy else 0.0
    domain_loads = [0.0] * len(capacities)
    for thread, load in zip(placed, placed_loads):
        domain_loads[thread.domain] += load
    assumed = {thread.tid: _assumed_load(thread, placed_mean) for thread in new_threads}
    by_tid = {thread.tid: thread for thread in new_threads}
    moves = []
    for tid in sort_by_load(assumed):
        thread = by_tid[tid]
        target = _lightest_after_adding(_eligible_domains(thread, len(capacities)),
                                        assumed[tid], domain_loads, capacities)
        domain_loads[target] += assumed[tid]
        moves.append(Move(tid, thread.domain, target))
    return moves


# -- left-out domains -------------------------------------------------------------

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
                             math.fsum(_effective_load(load) for load in loads))


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


# -- the two candidate assignments -------------------------------------------------

def _kept_assignment(threads: list[ThreadLoad], arriving: list[ThreadLoad],
                     capacities: list[int]) -> dict[int, int]:
    """Everyone stays; threads that need a domain get one by initial placement."""
    if not arriving:
        return dict(zip(map(_TID, threads), map(_DOMAIN, threads)))
    arriving_tids = {thread.tid for thread in arriving}
    staying = [thread for thread in threads if thread.tid not in arriving_tids]
    assignment = {thread.tid: thread.domain for thread in staying}
    for move in _placements(arriving, staying, capacities):
        assignment[move.tid] = move.dst
    return assignment


def _regrouped_assignment(threads: list[ThreadLoad], columns: _Columns,
                          capacities: list[int], loads: Mapping[int, float]) -> dict[int, int]:
    """Wave grouping + fewest-move mapping, then the eligibility constraints."""
    if not columns.restricted:
        # Nothing pinned, nothing barred, no misfits: only the mapping is left.
        where_now = dict(zip(columns.tids, columns.domains))
        if None in columns.domains:
            where_now = {tid: domain for tid, domain in where_now.items() if domain is not None}
        slots, units = wave_slots(loads, capacities)
        return assign_slots(slots, units, where_now, loads)
    domain_count = len(capacities)
    pinned = {}
    where_now = {}
    for thread in threads:
        pin = _pinned_domain(thread, domain_count)
        if pin is not None:
            pinned[thread.tid] = pin
            where_now[thread.tid] = pin     # it will be there whatever we do
        elif not _needs_placement(thread):
            where_now[thread.tid] = thread.domain
    slots, units = wave_slots(loads, capacities)
    target = assign_slots(slots, units, where_now, loads,
                          {thread.tid: thread.eligible for thread in threads})
    target.update(pinned)
    by_tid = {thread.tid: thread for thread in threads}
    misfits = {tid for tid, domain in target.items() if not _may_use(by_tid[tid], domain)}
    settled = {tid: domain for tid, domain in target.items() if tid not in misfits}
    domain_loads = _summed_loads(settled, loads, domain_count)
    for tid in sort_by_load({tid: loads[tid] for tid in misfits}):
        thread = by_tid[tid]
        domain = _lightest_after_adding(_eligible_domains(thread, domain_count), loads[tid],
                                        domain_loads, capacities, preferred=thread.domain)
        domain_loads[domain] += loads[tid]
        target[tid] = domain
    return target


def _cancel_swaps(columns: _Columns, target: dict[int, int],
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


def _movers_by_route(columns: _Columns, destinations: list[int]) -> dict[tuple, list]:
    """(src, dst) -> tids of the placed threads moving from src to dst, for
    threads still allowed on src (a thread evicted from src has to go)."""
    moving = list(map(ne, destinations, columns.domains))
    if not columns.restricted and None not in columns.domains:
        tids = list(compress(columns.tids, moving))
        sources = list(compress(columns.domains, moving))
        targets = list(compress(destinations, moving))
        if len(set(sources)) <= _FEW_DOMAINS:
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


def _moves(threads: list[ThreadLoad], columns: _Columns,
           assignment: Mapping[int, int]) -> list[Move]:
    destinations = list(map(assignment.__getitem__, columns.tids))
    moving = list(map(ne, destinations, columns.domains))
    moves = list(map(Move, compress(columns.tids, moving), compress(columns.domains, moving),
                     compress(destinations, moving)))
    moves.sort(key=_TID)
    return moves


def _placement_note(threads: list[ThreadLoad], arriving: list[ThreadLoad],
                    moved_off: int = 0) -> str:
    """``moved_off``: how many of the threads without a domain were on a
    left-out domain (see _plan_around_left_out), not new."""
    new = sum(1 for thread in arriving if thread.domain is None) - moved_off
    evicted = len(arriving) - new - moved_off   # placed, but on a domain it may no longer use
    notes = []
    if new:
        notes.append("placed %d new thread%s" % (new, "" if new == 1 else "s"))
    if evicted:
        notes.append("moved %d thread%s off ineligible domains"
                     % (evicted, "" if evicted == 1 else "s"))
    if moved_off:
        notes.append("moved %d thread%s off left-out domains"
                     % (moved_off, "" if moved_off == 1 else "s"))
    return "; " + ", ".join(notes) if notes else ""


def _worth_regrouping(kept: float, regrouped: float, tolerance: float) -> bool:
    """Migrate only for a real gain (deviations kept -> regrouped) that brings
    every domain within the tolerance or is at least the tolerance."""
    gain = kept - regrouped
    return gain > _NO_GAIN and (regrouped <= tolerance or gain >= tolerance)


def _kept_reason(kept: float, regrouped: float, tolerance: float) -> str:
    gain = kept - regrouped
    if gain > _NO_GAIN:
        return ("predicted deviation %.2f -> %.2f: gain < tolerance %.2f: keep groups"
                % (kept, regrouped, tolerance))
    return "no predicted gain: keep groups"


def _single_domain_plan(columns: _Columns, table: VariationTable) -> Plan:
    """One domain with every thread on it: nothing to group or to place.

    The CV and the summed load are computed for the log only.  Speed
    balancing runs a round every 20 ms on such machines; this keeps the
    grouping half of it to a few C-level passes.
    """
    effective = _effective_loads(columns)
    thread_cv = cv(effective)
    interval_ms, _ = table.interval_for(thread_cv)
    load = math.fsum(effective)
    return Plan(moves=[], assignment=dict.fromkeys(columns.tids, 0), thread_cv=thread_cv,
                interval_ms=interval_ms, regroup=False, domain_loads=[load],
                predicted_loads=[load], spread_before=0.0, spread_after=0.0,
                reason="single domain: nothing to group across")


def keeps_groups(domain_count: int, kept_deviation: float, tolerance: float) -> bool:
    """Whether plan_tumbler keeps the groups of placed threads without
    computing a regrouping: one domain, or every domain within the
    tolerance of the mean (``deviation``; steps 2 and 4 of the module
    docstring).  The controller's quiet rounds decide with this too
    (policy.quiet_verdict)."""
    return domain_count < 2 or kept_deviation <= tolerance


def _kept_groups_reason(domain_count: int, thread_cv: float, kept: float,
                        table: VariationTable, tolerance: float) -> str:
    """Why keeps_groups kept them (``kept``: the deviation)."""
    if domain_count < 2:
        return "single domain: nothing to group across"
    if thread_cv < table.lowest_cv:
        return "cv %.2f < %.2f: no grouping" % (thread_cv, table.lowest_cv)
    return "deviation %.2f <= tolerance %.2f: keep groups" % (kept, tolerance)


def plan_kept_groups(domain_loads: Sequence[float], thread_cv: float, kept_spread: float,
                     assignment: dict[int, int], capacities: Sequence[int],
                     table: VariationTable,
                     tolerance: float = DEFAULT_TOLERANCE) -> Plan | None:
    """The plan ``plan_tumbler`` makes for threads that are all placed, on
    domains of ``capacities`` CPUs whose summed loads are ``domain_loads``,
    with spread ``kept_spread``, when the loads have CV ``thread_cv`` and it
    keeps the groups without computing a regrouping -- or None when it
    would compute one.

    ``assignment`` (thread -> domain, unchanged) is taken as it is.
    """
    domain_count = len(capacities)
    kept_deviation = deviation(domain_loads, capacities) if domain_count > 1 else 0.0
    if not keeps_groups(domain_count, kept_deviation, tolerance):
        return None
    loads = list(domain_loads)
    return Plan(moves=[], assignment=assignment, thread_cv=thread_cv,
                interval_ms=table.interval_for(thread_cv)[0], regroup=False,
                domain_loads=loads, predicted_loads=list(loads), spread_before=kept_spread,
                spread_after=kept_spread, reason=_kept_groups_reason(
                    domain_count, thread_cv, kept_deviation, table, tolerance))


# -- the policy ------------------------------------------------------------------

def plan_tumbler(threads: Sequence[ThreadLoad], domains: Sequence[Domain],
                 table: VariationTable, tolerance: float = DEFAULT_TOLERANCE) -> Plan:
    """Plan one round of the tumbler policy (see the module docstring)."""
    if (isinstance(tolerance, bool) or not isinstance(tolerance, Real)
            or not math.isfinite(tolerance) or tolerance < 0):
        raise ValueError("tolerance must be a finite number >= 0, got %r" % (tolerance,))
    ordered = _ordered_domains(domains)
    threads = list(threads)
    columns = _checked_columns(threads, len(ordered))
    if any(domain.capacity == 0 for domain in ordered):
        return _plan_around_left_out(threads, columns, ordered, table, tolerance)
    return _plan(threads, columns, ordered, table, tolerance)


def _plan_around_left_out(threads: list[ThreadLoad], columns: _Columns,
                          ordered: list[Domain], table: VariationTable,
                          tolerance: float) -> Plan:
    """plan_tumbler with left-out domains (capacity 0, see ``left_out``):
    the plan of the other domains, numbered 0.. among themselves, in which
    the threads on a left-out domain need a domain like new ones; mapped
    back to the real indices.  A thread that may use only left-out domains
    stays where it is (or goes to the first it may use): leaving a domain
    out is our preference, the thread's affinity is not ours to widen."""
    usable = [domain for domain in ordered if domain.capacity > 0]
    real = [domain.index for domain in usable]          # planned index -> real
    planned_index = {index: i for i, index in enumerate(real)}
    planned, stuck, moved_off = [], {}, 0
    for thread in threads:
        eligible = thread.eligible
        if eligible is not None:
            eligible = frozenset(planned_index[d] for d in eligible if d in planned_index)
            if not eligible:
                may_use = _eligible_domains(thread, len(ordered))
                stuck[thread.tid] = (thread.domain if thread.domain in may_use
                                     else may_use[0] if may_use else thread.domain)
                continue
        domain = planned_index.get(thread.domain)
        if domain is None and thread.domain is not None:
            moved_off += 1
        planned.append(ThreadLoad(thread.tid, thread.load, domain, eligible))
    sub = _plan(planned, _checked_columns(planned, len(usable)),
                [Domain(i, domain.cpus, domain.measured) for i, domain in enumerate(usable)],
                table, tolerance, moved_off)
    assignment = {tid: None if domain is None else real[domain]
                  for tid, domain in sub.assignment.items()}
    assignment.update(stuck)
    moves = [Move(thread.tid, thread.domain, assignment[thread.tid]) for thread in threads
             if assignment[thread.tid] != thread.domain]
    moves.sort(key=_TID)
    effective = _effective_loads(columns)
    left = [domain.index for domain in ordered if domain.capacity == 0]
    return Plan(moves=moves, assignment=assignment, thread_cv=sub.thread_cv,
                interval_ms=sub.interval_ms, regroup=sub.regroup,
                domain_loads=_column_sums(effective, columns.domains, len(ordered)),
                predicted_loads=_summed_loads(assignment, dict(zip(columns.tids, effective)),
                                              len(ordered)),
                spread_before=sub.spread_before, spread_after=sub.spread_after,
                reason="domain%s %s left out; %s" % (
                    "" if len(left) == 1 else "s", ",".join(map(str, left)), sub.reason))


def _plan(threads: list[ThreadLoad], columns: _Columns, ordered: list[Domain],
          table: VariationTable, tolerance: float, moved_off: int = 0) -> Plan:
    """plan_tumbler on checked input, every domain of some capacity;
    ``moved_off``: see _placement_note."""
    capacities = [domain.capacity for domain in ordered]
    if len(ordered) < 2 and None not in columns.domains:
        return _single_domain_plan(columns, table)
    effective = _effective_loads(columns)
    thread_cv = cv(effective)
    interval_ms, _ = table.interval_for(thread_cv)
    domain_loads = _column_sums(effective, columns.domains, len(ordered))
    spread_before = spread(domain_loads, capacities)

    def plan(assignment, predicted, predicted_spread, regroup, reason, moves=None):
        # ``assignment`` is always a dict built for this plan: no copy needed;
        # ``predicted`` its summed loads per domain, ``predicted_spread``
        # their spread; ``moves`` None: the threads whose domain changes.
        if moves is None:
            moves = _moves(threads, columns, assignment)
        return Plan(moves=moves, assignment=assignment,
                    thread_cv=thread_cv, interval_ms=interval_ms, regroup=regroup,
                    domain_loads=domain_loads, predicted_loads=predicted,
                    spread_before=spread_before, spread_after=predicted_spread,
                    reason=reason)

    arriving = _arrivals(threads, columns)
    loads = dict(zip(columns.tids, effective)) if arriving else None
    if arriving:
        kept = _kept_assignment(threads, arriving, capacities)
        kept_loads = _summed_loads(kept, loads, len(ordered))
        spread_kept = spread(kept_loads, capacities)
        kept_moves = None
    else:
        # Nobody arriving: the kept loads are the current ones, already
        # summed, and nobody moves -- the usual round is this cheap.
        kept = dict(zip(columns.tids, columns.domains))
        kept_loads, spread_kept, kept_moves = list(domain_loads), spread_before, []
    note = _placement_note(threads, arriving, moved_off)
    deviation_kept = deviation(kept_loads, capacities)
    if keeps_groups(len(ordered), deviation_kept, tolerance):
        return plan(kept, kept_loads, spread_kept, False, _kept_groups_reason(
            len(ordered), thread_cv, deviation_kept, table, tolerance) + note, kept_moves)

    if loads is None:
        loads = dict(zip(columns.tids, effective))
    regrouped = _cancel_swaps(columns, _regrouped_assignment(threads, columns, capacities, loads),
                              loads)
    regrouped_loads = _summed_loads(regrouped, loads, len(ordered))
    regrouped_spread = spread(regrouped_loads, capacities)
    deviation_regrouped = deviation(regrouped_loads, capacities)
    if not _worth_regrouping(deviation_kept, deviation_regrouped, tolerance):
        return plan(kept, kept_loads, spread_kept, False,
                    _kept_reason(deviation_kept, deviation_regrouped, tolerance) + note,
                    kept_moves)
    result = plan(regrouped, regrouped_loads, regrouped_spread, True, "")
    result.reason = "regrouped: deviation %.2f -> %.2f (spread %.2f -> %.2f), %d move%s" % (
        deviation(domain_loads, capacities), deviation_regrouped, spread_before,
        result.spread_after, len(result.moves), "" if len(result.moves) == 1 else "s")
    return result
