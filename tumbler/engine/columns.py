"""The threads of one planning round as columns, and their checks
(grouping.py's input).

grouping.py runs every interval over every thread, so its per-thread work
is done in C-level passes over one sequence per field (``Columns``); the
input is checked by such passes too, and only when they find something to
report thread by thread, to name the first invalid one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress, repeat
from numbers import Real
from operator import attrgetter, ge, itemgetter

from ..records import record
from .model import Domain, ThreadLoad, ThreadViews

try:
    from ._columns import column_figures as _c_column_figures
except ImportError:                     # not built: the Python passes
    _c_column_figures = None

#: Up to this many domains, per-domain sums take one C-level pass per domain.
FEW_DOMAINS = 8

TID = attrgetter("tid")
_LOAD = attrgetter("load")
DOMAIN = attrgetter("domain")
_ELIGIBLE = attrgetter("eligible")
_RUNNABLE = attrgetter("runnable")
_PINNED_CPU = attrgetter("pinned_cpu")
#: A named tuple's first four fields (ThreadLoad's), by position.
_FIELDS = tuple(map(itemgetter, range(4)))


def ordered_domains(domains: Sequence[Domain]) -> list[Domain]:
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
_FLOATS = frozenset({float})


@record
class ColumnFigures:
    """What _columns.c's one pass found of columns every check passes on
    plainly (its loads floats, none negative: their own effective loads)."""

    distinct_eligibles: set         # set(eligibles)
    arriving: bool                  # None in domains: some thread needs placing
    thread_cv: float                # cv_of_floats(loads)
    domain_loads: list              # _column_sums(loads, domains, domain_count)
    domain_threads: list            # [domains.count(d) for d in range(domain_count)]
    kept: dict | None               # dict(zip(tids, domains)); None if arriving
    runnable_max: float | None      # max(runnables): all floats, none NaN; else None
    pinned: int | None              # pinned CPUs not None (None: not given)


class Columns:
    """The threads of one call as columns (one sequence per field), so that
    per-thread work can be done in C-level passes over them.

    ``figures``: the ColumnFigures of one C pass (_columns.c) over them,
    when it is built and the input is plainly valid; else None, and the
    Python passes (checks here, sums in grouping.py: the reference) run."""

    __slots__ = ("tids", "raw_loads", "domains", "eligibles", "restricted", "load_types",
                 "distinct_eligibles", "figures")

    def __init__(self, threads: list[ThreadLoad], domain_count: int, fields=None):
        if fields is not None:
            # ThreadViews' columns, made with the views (model.py).
            self.tids, self.raw_loads, self.domains, self.eligibles = fields[:4]
        elif threads and all(map(_starts_with_load_fields, set(map(type, threads)))):
            # ThreadLoad and the policy's ThreadView: a pass per field by
            # position (transposing all ten of a view's fields with
            # zip(*threads) cost twice as much).
            self.tids, self.raw_loads, self.domains, self.eligibles = \
                [list(map(field, threads)) for field in _FIELDS]
        else:
            self.tids = list(map(TID, threads))
            self.raw_loads = list(map(_LOAD, threads))
            self.domains = list(map(DOMAIN, threads))
            self.eligibles = list(map(_ELIGIBLE, threads))
        self.figures = _figures(self, domain_count, fields)
        if self.figures is not None:
            self.load_types = _FLOATS
            self.distinct_eligibles = self.figures.distinct_eligibles
        else:
            # Asked by the checks and by grouping's passes: found once.
            self.load_types = set(map(type, self.raw_loads))
            try:
                self.distinct_eligibles = set(self.eligibles)
            except TypeError:               # unhashable: the careful paths
                self.distinct_eligibles = None
        self.restricted = _some_restricted(self.distinct_eligibles, domain_count)

    def some_unplaced(self) -> bool:
        """Whether some thread has no domain (None)."""
        figures = self.figures
        return figures.arriving if figures is not None else None in self.domains


def _figures(columns: Columns, domain_count: int, views: tuple | None) -> ColumnFigures | None:
    """The C pass's figures of ``columns`` (lists), or None; ``views``: the
    views' fields (ThreadViews.fields), whose runnable shares and pinned
    CPUs it looks at too, or None."""
    fields = (columns.tids, columns.raw_loads, columns.domains, columns.eligibles)
    if _c_column_figures is None or not all(type(field) is list for field in fields):
        return None
    extra = views[4:6] if views is not None and len(views) >= 6 else (None, None)
    figures = _c_column_figures(*fields, domain_count, *extra)
    # tuple.__new__: a named tuple's own _make is a Python call.
    return None if figures is None else tuple.__new__(ColumnFigures, figures)


def _starts_with_load_fields(kind: type) -> bool:
    """Whether ``kind`` is a named tuple whose first fields are ThreadLoad's."""
    known = _tuple_types_seen.get(kind)
    if known is None:
        known = (issubclass(kind, tuple)
                 and tuple(getattr(kind, "_fields", ())[:4]) == _LOAD_FIELDS)
        _tuple_types_seen[kind] = known
    return known


def _some_restricted(distinct: set | None, domain_count: int) -> bool:
    """Whether some thread may not use some domain, from the distinct
    ``eligible`` values (None: some unhashable -- the careful path).

    If not, every eligibility check passes -- an ``eligible`` set holding
    every domain acts exactly as None (the controller always passes sets)
    -- and the checks are skipped.  Few distinct sets exist, so they are
    looked at once each.
    """
    if distinct is None:
        return True
    return any(not all(domain in eligible for domain in range(domain_count))
               for eligible in distinct if eligible is not None)


def checked_threads(threads: Sequence[ThreadLoad], domain_count: int) -> list[ThreadLoad]:
    threads = list(threads)
    checked_columns(threads, domain_count)
    return threads


def view_fields(threads) -> tuple | None:
    """The columns ``threads`` came with (ThreadViews.fields), or None."""
    if type(threads) is ThreadViews:
        fields = threads.fields
        if len(fields[0]) == len(threads):
            return fields
    return None


def checked_columns(threads: list[ThreadLoad], domain_count: int, fields=None) -> Columns:
    """The columns of ``threads`` (``fields``: as view_fields gave them);
    ValueError names the first invalid thread."""
    columns = Columns(threads, domain_count, fields)
    if not _plainly_valid(columns, domain_count):
        _raise_first_problem(threads, domain_count)
    return columns


def _plainly_valid(columns: Columns, domain_count: int) -> bool:
    """True if C-level passes show every thread is valid; False means "look
    closer" (see _raise_first_problem), not necessarily invalid."""
    try:
        # The C pass checked TIDs, loads and domains, if it made figures.
        if columns.figures is None and not _plain_fields(columns, domain_count):
            return False
        distinct = columns.distinct_eligibles
        if distinct is None:
            return False
        return all(any(0 <= d < domain_count for d in eligible)
                   for eligible in distinct if eligible is not None)
    except (TypeError, ValueError, OverflowError):
        return False


def _plain_fields(columns: Columns, domain_count: int) -> bool:
    """_plainly_valid's passes over the TIDs, loads and domains (what the
    C pass checks as it goes)."""
    if len(set(columns.tids)) != len(columns.tids):
        return False
    # A finite sum means finite loads (an inf or nan makes it inf or
    # nan; so does an overflow of finite ones, and then the loads are
    # looked at one by one and found valid): one pass instead of
    # isfinite per load.
    if not columns.load_types <= {float, int} or not math.isfinite(sum(columns.raw_loads)):
        return False
    return set(columns.domains) <= {None, *range(domain_count)}


def threads_per_domain(columns: Columns, assignment: dict, moves: list,
                       domain_count: int) -> list[int]:
    """How many threads ``assignment`` (a plan's, of the threads of
    ``columns``) puts on each domain.  A plan without ``moves`` leaves
    every thread on its domain: the counts the C pass made."""
    figures = columns.figures
    if figures is not None and not moves and len(figures.domain_threads) == domain_count:
        return figures.domain_threads
    where = list(assignment.values())
    return [where.count(index) for index in range(domain_count)]


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
        if not eligible_domains(thread, domain_count):
            raise ValueError("thread %r is not eligible for any domain (eligible %r)"
                             % (thread.tid, sorted(thread.eligible)))


def eligible_domains(thread: ThreadLoad, domain_count: int) -> list[int]:
    if thread.eligible is None:
        return list(range(domain_count))
    return sorted(d for d in thread.eligible if 0 <= d < domain_count)


def effective_load(load: float) -> float:
    """A negative load is a counter glitch: it weighs nothing."""
    return max(0.0, float(load))


def runnable_at_least(threads: Sequence, share: float, columns: Columns | None = None) -> list:
    """The ``threads`` (policy views) whose runnable share is known and at
    least ``share``, in order -- C-level passes when every share is known
    (auto and merging ask it every round, of every thread); ``columns``:
    the threads' Columns, whose C pass may have found the answer."""
    figures = None if columns is None else columns.figures
    if figures is not None and figures.runnable_max is not None \
            and figures.runnable_max < share:
        return []
    fields = view_fields(threads)
    shares = fields[4] if fields is not None else list(map(_RUNNABLE, threads))
    try:
        # Usually no thread is: one pass finds it (max raises on a None,
        # and is at least every number that follows a number; a NaN first
        # leaves it NaN, which is not below ``share``).
        if not shares or max(shares) < share:
            return []
    except TypeError:                   # a share not known yet (None)
        return [t for t, known in zip(threads, shares) if known is not None and known >= share]
    return list(compress(threads, map(ge, shares, repeat(share))))


def pinned_threads(threads: Sequence, columns: Columns | None = None) -> list:
    """The ``threads`` (policy views) pinned to a CPU, in order
    (``columns``: as for runnable_at_least)."""
    figures = None if columns is None else columns.figures
    if figures is not None and figures.pinned == 0:
        return []
    fields = view_fields(threads)
    cpus = fields[5] if fields is not None else list(map(_PINNED_CPU, threads))
    if cpus.count(None) == len(cpus):
        return []
    return [t for t, cpu in zip(threads, cpus) if cpu is not None]
