"""Values the balancing engine reads and returns.

The engine never touches the OS.  The controller describes the world with
``Domain`` (a set of CPUs the engine may put threads on: a socket, a NUMA node
or an LLC) and ``ThreadLoad`` (one thread's load over the last interval and
the domain it is bound to now), and gets back a ``Plan``: the ``Move``s to
make, the resulting thread -> domain assignment, and the numbers behind the
decision so that it can be logged and explained.  A policy (policy.py)
reads one ``ThreadView`` per thread and returns a ``Decision``: the plan,
the pins and the time to the next round.

Conventions shared by every engine module:

* Domain indices are ``0 .. len(domains) - 1``; every per-domain list
  (``Plan.domain_loads``, ``Plan.predicted_loads``) is indexed by them.
* A thread's load is its CPU fraction over the last interval (paper Eq. 1:
  delta(usr + sys) / delta(wall)).  Sampling noise can push it slightly out of
  0..1; the engine accepts that, and counts a negative load (a counter glitch)
  as 0.
* ``ThreadLoad.domain is None`` means "not placed by us yet" (a new thread).
* ``ThreadLoad.eligible`` restricts a thread to some domains (derived from the
  CPUs it is allowed on); ``None`` means any domain.
"""

from __future__ import annotations

from ..records import record


@record
class _DomainFields:
    index: int
    cpus: frozenset[int]
    measured: float | None = None   # capacity measured (balance/capacity.py), None: CPUs,
                                    # 0: left out (no thread is planned there)


class Domain(_DomainFields):
    """A group of CPUs that threads are bound to as a whole.

    Named tuples and plain classes here, not dataclasses: see
    platform/base.py.  ``cpus`` is stored as a frozenset whatever iterable
    is given, so a Domain stays hashable."""

    __slots__ = ()

    def __new__(cls, index, cpus, measured=None):
        cpus = frozenset(cpus)
        if measured is not None and not 0 <= measured <= len(cpus):
            raise ValueError("domain %d: a measured capacity must be in [0, %d], not %r"
                             % (index, len(cpus), measured))
        return tuple.__new__(cls, (index, cpus, measured))

    @property
    def capacity(self):
        """The weight of the domain's share of load: how many CPUs it offers
        (an int), or what other work leaves of them (a float, ``measured``;
        0.0: too little for a thread, the domain is left out of the plan)."""
        return len(self.cpus) if self.measured is None else self.measured


@record
class _ThreadLoadFields:
    tid: int
    load: float
    domain: int | None
    eligible: frozenset[int] | None = None


class ThreadLoad(_ThreadLoadFields):
    """One thread's load over the last interval and where it is bound now.

    A named tuple, not a dataclass: the controller builds one per thread per
    round, and a frozen dataclass costs several times more to build.
    ``eligible`` is stored as a frozenset whatever iterable is given.
    """

    __slots__ = ()

    def __new__(cls, tid, load, domain, eligible=None):
        if eligible is not None and type(eligible) is not frozenset:
            eligible = frozenset(eligible)
        return tuple.__new__(cls, (tid, load, domain, eligible))


@record
class Move:
    """Bind thread ``tid`` to domain ``dst``; ``src`` is None for a new thread.

    A named tuple: a regrouping of thousands of threads makes thousands."""

    tid: int
    src: int | None
    dst: int


class Plan:
    """What the engine decided for one interval, and why.

    ``domain_loads`` are the summed loads per domain before the plan (threads
    not yet placed do not count), ``predicted_loads`` the same sums after it.
    ``spread_*`` are the coefficients of variation of the per-capacity domain
    loads (``load / capacity``) before and after.  Mutable: the policy sets
    the interval and the controller adds to the reason.
    """

    __slots__ = ("moves", "assignment", "thread_cv", "interval_ms", "regroup",
                 "domain_loads", "predicted_loads", "spread_before", "spread_after", "reason")

    def __init__(self, moves: list[Move], assignment: dict[int, int], thread_cv: float,
                 interval_ms: int, regroup: bool, domain_loads: list[float],
                 predicted_loads: list[float], spread_before: float, spread_after: float,
                 reason: str):
        self.moves = moves
        self.assignment = assignment
        self.thread_cv = thread_cv
        self.interval_ms = interval_ms
        self.regroup = regroup
        self.domain_loads = domain_loads
        self.predicted_loads = predicted_loads
        self.spread_before = spread_before
        self.spread_after = spread_after
        self.reason = reason

    def replace(self, **changes) -> "Plan":
        """A copy with ``changes``."""
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return Plan(**values)

    def __eq__(self, other):
        return type(other) is Plan and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None

    def __repr__(self):
        return "Plan(%s)" % ", ".join("%s=%r" % (name, getattr(self, name))
                                      for name in self.__slots__)


@record
class ThreadView:
    """What the controller knows of one thread this round.

    Its first four fields are those of ``ThreadLoad``, so the engine takes
    views as they are (a named tuple: one is built per thread per round).
    """

    tid: int
    load: float                     # CPU share over the load window (Eq. 1)
    domain: int | None              # domain bound to now (None: not placed)
    eligible: frozenset | None = None
    pinned_cpu: int | None = None
    exec_ns: int = 0                # CPU time over the last round
    wall_ns: int = 0                # length of the last round
    runnable: float | None = None
    sleeps_per_s: float | None = None   # None: not measured
    # Context switches per CPU-second, less what other tasks' wake-ups on
    # the domain's CPUs explain (balance/speedstep.py); None: not known yet.
    switches_per_cpu_s: float | None = None


class ThreadViews(list):
    """A round's views (ThreadView) made by one pass that gave their fields
    as columns too (the loop's, balance/_rounds.c): ``fields`` is (tids,
    loads, domains, eligibles, runnables, pinned CPUs), lists in the
    views' order, which the engine's passes take instead of a pass over
    the views each (columns.py).  Never changed once made.  A plain list
    of views is taken the same way, its fields read by those passes."""

    __slots__ = ("fields",)


class Decision:
    """One full round's decision.

    ``interval_ms`` is the time to the next full round (sampling every
    thread, grouping, judging).  While speed balancing is engaged in some
    domains (``engaged``), ``speed_interval_ms`` is the time to its next
    step: between full rounds the controller samples only the threads
    speed balancing pinned in those domains and calls ``speed_step``.
    ``pins``: tid -> CPU (None: the whole domain again); ``notes``: domain
    -> mechanism and why; ``engaged``: the domains speed-balanced;
    ``watching``: some domain's crowd is being judged, or its synchronising
    threads outnumber its cores and only their even speeds kept speed
    balancing out (auto): the next window must be as short as this one, to
    judge it or to show unevenness again.
    """

    __slots__ = ("plan", "pins", "interval_ms", "notes", "engaged", "speed_interval_ms",
                 "watching")

    def __init__(self, plan: Plan, pins: dict[int, int | None] | None = None,
                 interval_ms: int = 100, notes: dict[int, str] | None = None,
                 engaged: list[int] | None = None, speed_interval_ms: int | None = None,
                 watching: bool = False):
        self.plan = plan
        self.watching = watching
        self.pins = {} if pins is None else pins
        self.interval_ms = interval_ms
        self.notes = {} if notes is None else notes
        self.engaged = [] if engaged is None else engaged
        self.speed_interval_ms = speed_interval_ms

    def __repr__(self):
        return "Decision(%s)" % ", ".join("%s=%r" % (name, getattr(self, name))
                                          for name in self.__slots__)
