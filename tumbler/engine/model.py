"""Values the balancing engine reads and returns.

The engine never touches the OS.  The controller describes the world with
``Domain`` (a set of CPUs the engine may put threads on: a socket, a NUMA node
or an LLC) and ``ThreadLoad`` (one thread's load over the last interval and
the domain it is bound to now), and gets back a ``Plan``: the ``Move``s to
make, the resulting thread -> domain assignment, and the numbers behind the
decision so that it can be logged and explained.

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
