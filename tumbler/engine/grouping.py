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
   opposite moves of near-equal loads cancel out (swaps.py).
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
(``--capacity measured`` sets it, from leftout.py: a domain other work
keeps so busy that one thread there would get less than every thread gets
without it; see that function).

Cost.  This runs every interval over every thread (10,000 threads at a
50 ms interval must not cost a CPU), so the per-thread work is done in
C-level passes over columns of the input (``map``, ``compress``,
``dict(zip())``, ``sorted`` with a C key) rather than a Python step per
thread and check (columns.py; the usual round's checks and sums are one C
pass, _columns.c, when built).  ``benchmarks/overhead.py`` measures it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from numbers import Real
from operator import eq, ne

from .columns import (DOMAIN, FEW_DOMAINS, TID, Columns, checked_columns, checked_threads,
                      effective_load, eligible_domains, ordered_domains, view_fields)
from .mapping import assign_slots
from .model import Domain, Move, Plan, ThreadLoad
from .swaps import cancel_swaps
from .variation import VariationTable, cv, cv_of_floats
from .wave import sort_by_load, wave_slots

#: Default error tolerance: no domain's load per CPU further than this
#: fraction from the mean, PMQS LBP-10.
DEFAULT_TOLERANCE = 0.10

#: Gains smaller than this are float noise, not an improvement (derived:
#: sums of floats near 1 round at ~1e-13; a real gain is >= 1e-6 CPU).
_NO_GAIN = 1e-9

#: Load assumed for a new thread when neither it nor the placed threads have
#: shown any load: one full CPU, so new threads count as threads at all
#: (reasoned: the most a thread can want; equal unknown threads spread in
#: proportion to capacity whatever the value).
_UNKNOWN_LOAD = 1.0

#: Threads below this load (CPUs) are idle -- a main thread waiting in
#: join: placed, they say nothing about how busy a new thread will be (and
#: the speed policy leaves them unpinned, see policy.py).  Measured
#: (BENCHMARKS.md, "auto's thresholds against what threads show"): a main
#: thread in join 0.000-0.002 CPU; workers of barrier programs 0.458 at
#: least (quiet machine), 0.14 (loaded; once 0.016).  Supported: (0.002, 0.14).
IDLE_LOAD = 0.05


# -- small decisions -----------------------------------------------------------

def _effective_loads(columns: Columns) -> list[float]:
    """effective_load of every thread, floats all (a comprehension: max()
    per item is several times slower)."""
    loads = columns.raw_loads
    if columns.figures is not None:
        return loads        # floats, none negative: the C pass saw them
    if loads and columns.load_types == {float} and min(loads) >= 0.0:
        return loads        # the usual case: already what we want
    return [load if load > 0.0 else 0.0 for load in map(float, loads)]


def _may_use(thread: ThreadLoad, domain: int) -> bool:
    return thread.eligible is None or domain in thread.eligible


def _needs_placement(thread: ThreadLoad) -> bool:
    return thread.domain is None or not _may_use(thread, thread.domain)


def _arrivals(threads: list[ThreadLoad], columns: Columns) -> list[ThreadLoad]:
    """The threads that need a domain this round (see _needs_placement)."""
    if not columns.restricted and not columns.some_unplaced():
        return []
    return [thread for thread in threads if _needs_placement(thread)]


def _pinned_domain(thread: ThreadLoad, domain_count: int) -> int | None:
    """The only domain a thread may use, or None when it has a choice."""
    eligible = eligible_domains(thread, domain_count)
    return eligible[0] if len(eligible) == 1 else None


def _summed_loads(assignment: Mapping[int, int | None], loads: Mapping[int, float],
                  domain_count: int) -> list[float]:
    """Summed load per domain (threads assigned None count nowhere)."""
    return _column_sums(list(map(loads.__getitem__, assignment)), list(assignment.values()),
                        domain_count)


def _cv_and_domain_loads(columns: Columns, effective: list[float],
                         domain_count: int) -> tuple[float, list[float]]:
    """The CV of the ``effective`` loads and each domain's summed load: the
    C pass's figures when it made them (the same floats), else the passes
    here."""
    figures = columns.figures
    thread_cv = cv_of_floats(effective) if figures is None else figures.thread_cv
    return thread_cv, _domain_loads(columns, effective, domain_count)


def _domain_loads(columns: Columns, effective: list[float], domain_count: int) -> list[float]:
    """Each domain's summed ``effective`` load: the C pass's, or the sums here."""
    figures = columns.figures
    if figures is not None:
        return list(figures.domain_loads)
    return _column_sums(effective, columns.domains, domain_count)


def _column_sums(values: list[float], domains: list[int | None],
                 domain_count: int) -> list[float]:
    """Sum of ``values[i]`` per ``domains[i]`` (None counts nowhere)."""
    if domain_count <= FEW_DOMAINS:
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
    assumed = max(effective_load(thread.load), placed_mean)
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
    ordered = ordered_domains(domains)
    capacities = [domain.capacity for domain in ordered]
    placed = [thread for thread in checked_threads(placed, len(ordered))
              if thread.domain is not None]
    new_threads = checked_threads(new_threads, len(ordered))
    return _placements(new_threads, placed, capacities)


def _placements(new_threads: list[ThreadLoad], placed: list[ThreadLoad],
                capacities: list[int]) -> list[Move]:
    """place_new on checked input: every thread of ``placed`` has a domain."""
    placed_loads = [effective_load(thread.load) for thread in placed]
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
        target = _lightest_after_adding(eligible_domains(thread, len(capacities)),
                                        assumed[tid], domain_loads, capacities)
        domain_loads[target] += assumed[tid]
        moves.append(Move(tid, thread.domain, target))
    return moves


# -- the two candidate assignments -------------------------------------------------

def _kept_assignment(threads: list[ThreadLoad], arriving: list[ThreadLoad],
                     capacities: list[int]) -> dict[int, int]:
    """Everyone stays; threads that need a domain get one by initial placement."""
    if not arriving:
        return dict(zip(map(TID, threads), map(DOMAIN, threads)))
    arriving_tids = {thread.tid for thread in arriving}
    staying = [thread for thread in threads if thread.tid not in arriving_tids]
    assignment = {thread.tid: thread.domain for thread in staying}
    for move in _placements(arriving, staying, capacities):
        assignment[move.tid] = move.dst
    return assignment


def _kept_as_placed(columns: Columns) -> dict[int, int]:
    """Every thread where it is (all placed): the C pass's dict, made once
    for the plan that takes it, or dict(zip())."""
    figures = columns.figures
    if figures is not None and figures.kept is not None:
        kept, columns.figures = figures.kept, figures._replace(kept=None)
        return kept
    return dict(zip(columns.tids, columns.domains))


def _regrouped_assignment(threads: list[ThreadLoad], columns: Columns,
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
        domain = _lightest_after_adding(eligible_domains(thread, domain_count), loads[tid],
                                        domain_loads, capacities, preferred=thread.domain)
        domain_loads[domain] += loads[tid]
        target[tid] = domain
    return target


def _moves(threads: list[ThreadLoad], columns: Columns,
           assignment: Mapping[int, int]) -> list[Move]:
    destinations = list(map(assignment.__getitem__, columns.tids))
    moving = list(map(ne, destinations, columns.domains))
    moves = list(map(Move, compress(columns.tids, moving), compress(columns.domains, moving),
                     compress(destinations, moving)))
    moves.sort(key=TID)
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


def _single_domain_plan(columns: Columns, table: VariationTable) -> Plan:
    """One domain with every thread on it: nothing to group or to place.

    The CV and the summed load are computed for the log only.  Speed
    balancing runs a round every 20 ms on such machines; this keeps the
    grouping half of it to a few C-level passes.
    """
    thread_cv, (load,) = _cv_and_domain_loads(columns, _effective_loads(columns), 1)
    interval_ms, _ = table.interval_for(thread_cv)
    assignment = dict.fromkeys(columns.tids, 0) if columns.figures is None \
        else _kept_as_placed(columns)       # every domain 0, an int: the same dict
    return Plan(moves=[], assignment=assignment, thread_cv=thread_cv,
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
    return planned(threads, domains, table, tolerance)[0]


def planned(threads: Sequence[ThreadLoad], domains: Sequence[Domain], table: VariationTable,
            tolerance: float = DEFAULT_TOLERANCE) -> tuple[Plan, Columns]:
    """plan_tumbler's Plan, and the threads' Columns it was made from (the
    policy counts from them: columns.py, threads_per_domain)."""
    # A float is looked at directly: the Real check is an ABC's, slow.
    if type(tolerance) is not float or not 0.0 <= tolerance < math.inf:
        if (isinstance(tolerance, bool) or not isinstance(tolerance, Real)
                or not math.isfinite(tolerance) or tolerance < 0):
            raise ValueError("tolerance must be a finite number >= 0, got %r" % (tolerance,))
    ordered = ordered_domains(domains)
    fields = view_fields(threads)
    # ThreadViews are a list never changed once made: no copy needed.
    threads = threads if fields is not None else list(threads)
    columns = checked_columns(threads, len(ordered), fields)
    if any(domain.capacity == 0 for domain in ordered):
        return _plan_around_left_out(threads, columns, ordered, table, tolerance), columns
    return _plan(threads, columns, ordered, table, tolerance), columns


def _plan_around_left_out(threads: list[ThreadLoad], columns: Columns,
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
                may_use = eligible_domains(thread, len(ordered))
                stuck[thread.tid] = (thread.domain if thread.domain in may_use
                                     else may_use[0] if may_use else thread.domain)
                continue
        domain = planned_index.get(thread.domain)
        if domain is None and thread.domain is not None:
            moved_off += 1
        planned.append(ThreadLoad(thread.tid, thread.load, domain, eligible))
    sub = _plan(planned, checked_columns(planned, len(usable)),
                [Domain(i, domain.cpus, domain.measured) for i, domain in enumerate(usable)],
                table, tolerance, moved_off)
    assignment = {tid: None if domain is None else real[domain]
                  for tid, domain in sub.assignment.items()}
    assignment.update(stuck)
    moves = [Move(thread.tid, thread.domain, assignment[thread.tid]) for thread in threads
             if assignment[thread.tid] != thread.domain]
    moves.sort(key=TID)
    effective = _effective_loads(columns)
    left = [domain.index for domain in ordered if domain.capacity == 0]
    return Plan(moves=moves, assignment=assignment, thread_cv=sub.thread_cv,
                interval_ms=sub.interval_ms, regroup=sub.regroup,
                domain_loads=_domain_loads(columns, effective, len(ordered)),
                predicted_loads=_summed_loads(assignment, dict(zip(columns.tids, effective)),
                                              len(ordered)),
                spread_before=sub.spread_before, spread_after=sub.spread_after,
                reason="domain%s %s left out; %s" % (
                    "" if len(left) == 1 else "s", ",".join(map(str, left)), sub.reason))


def _plan(threads: list[ThreadLoad], columns: Columns, ordered: list[Domain],
          table: VariationTable, tolerance: float, moved_off: int = 0) -> Plan:
    """plan_tumbler on checked input, every domain of some capacity;
    ``moved_off``: see _placement_note."""
    capacities = [domain.capacity for domain in ordered]
    if len(ordered) < 2 and not columns.some_unplaced():
        return _single_domain_plan(columns, table)
    effective = _effective_loads(columns)
    thread_cv, domain_loads = _cv_and_domain_loads(columns, effective, len(ordered))
    interval_ms, _ = table.interval_for(thread_cv)
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
        kept = _kept_as_placed(columns)
        kept_loads, spread_kept, kept_moves = list(domain_loads), spread_before, []
    note = _placement_note(threads, arriving, moved_off)
    deviation_kept = deviation(kept_loads, capacities)
    if keeps_groups(len(ordered), deviation_kept, tolerance):
        return plan(kept, kept_loads, spread_kept, False, _kept_groups_reason(
            len(ordered), thread_cv, deviation_kept, table, tolerance) + note, kept_moves)

    if loads is None:
        loads = dict(zip(columns.tids, effective))
    regrouped = cancel_swaps(columns, _regrouped_assignment(threads, columns, capacities, loads),
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
