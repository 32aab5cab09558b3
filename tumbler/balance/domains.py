"""Choose the CPU domains threads are grouped across.

Domains come from ``--domains`` (explicit CPU lists) or from a level of the
topology.  Either way they are cut down to the CPUs the target may use (its
allowed CPUs, on-line ones only), because binding a thread outside them
would override a restriction someone else set.

``--level auto`` takes the highest of package, numa and llc that yields at
least two domains within the allowed CPUs: grouping across sockets first,
then nodes, then caches.  ``core`` is never chosen automatically -- pinning
thread groups to single cores takes placement inside a domain away from the
OS scheduler, which does that job well.  With one domain there is nothing to
group across; the caller says so in the log and the summary.
"""

from __future__ import annotations

from array import array

from ..cpulist import check_explicit, format_cpulist
from ..engine.model import Domain
from ..errors import UsageError
from ..platform.base import LEVELS
from ..records import record

AUTO_LEVELS = ("package", "numa", "llc")
#: Levels whose domains have memory of their own: threads moved across them
#: leave their memory behind, so ``auto`` never merges them (the speed
#: balancing paper blocks migrations across NUMA nodes, allows them across
#: caches; engine/policy.py, 5.).
MEMORY_LEVELS = ("package", "numa")


@record
class DomainChoice:
    level: str                       # "explicit", or a name from LEVELS
    domains: tuple[frozenset, ...]   # each already within the allowed CPUs
    note: str                        # why these, for the log and summary
    confined: bool = False           # space sharing gave the program only these CPUs

    @property
    def single(self):
        """Nothing to group across and nothing to bind: one domain that is
        all the program may use.  A program confined to one domain by space
        sharing (balance/sharing.py) still has every thread bound to it."""
        return len(self.domains) < 2 and not self.confined


class Layout:
    """The domains a run balances over now: the DomainChoice (``choice``),
    its Domain objects (``domains``, weighed when capacity is measured) and
    their CPUs per domain, by index, as the engine's sums take them
    (``capacities``).  The controller owns it and changes it (a reshape, a
    weighing); its components read it, so none keeps a copy that goes
    stale."""

    __slots__ = ("choice", "domains", "capacities")

    def __init__(self, choice):
        self.set(choice)

    def set(self, choice):
        """Balance over ``choice``'s domains from now on (unweighed)."""
        self.choice = choice
        self.domains = [Domain(i, cpus) for i, cpus in enumerate(choice.domains)]
        self.capacities = array("i", [len(d.cpus) for d in self.domains])


def choose_domains(topology, allowed, level="auto", explicit=None):
    """Return the DomainChoice for a target allowed to run on ``allowed``."""
    usable = frozenset(allowed) & topology.online
    if not usable:
        raise UsageError("the target may run on CPUs %s, none of which is on-line"
                         % format_cpulist(allowed))
    if explicit is not None:
        return _explicit(explicit, usable, topology.online)
    if level == "auto":
        for name in AUTO_LEVELS:
            domains = _restrict(topology.levels.get(name, ()), usable)
            if len(domains) >= 2:
                return DomainChoice(name, domains, "level %s (auto): %d domains"
                                    % (name, len(domains)))
        return DomainChoice("auto", (usable,),
                            "single domain (CPUs %s): one socket, NUMA node and cache, "
                            "%s" % (format_cpulist(usable), ONE_DOMAIN_SCOPE))
    if level not in LEVELS:
        raise UsageError("unknown level %r" % level)
    if level not in topology.levels:
        raise UsageError("this machine does not report the %s level" % level)
    domains = _restrict(topology.levels[level], usable)
    note = "level %s: %d domains" % (level, len(domains))
    if len(domains) < 2:
        note = "level %s gives a single domain (CPUs %s); %s" % (
            level, format_cpulist(usable), ONE_DOMAIN_SCOPE)
    return DomainChoice(level, domains, note)


#: What tumbler can and cannot do with one domain, said once (topology,
#: the exit summary, the first round under -v), not every round.
ONE_DOMAIN_SCOPE = ("nothing to group across.  Here tumbler can only speed-balance threads "
                    "that outnumber the cores: auto does when they wait at barriers, "
                    "--policy speed always")


def _restrict(domains, usable):
    cut = [frozenset(d) & usable for d in domains]
    return tuple(sorted((d for d in cut if d), key=min))


def _explicit(domains, usable, online):
    check_explicit(domains, usable, online)
    result = list(domains)
    note = "explicit domains: %s" % " / ".join(format_cpulist(d) for d in result)
    if len(result) < 2:
        note += " (a single domain); " + ONE_DOMAIN_SCOPE
    return DomainChoice("explicit", tuple(result), note)


def mergeable(choice):
    """Whether ``auto`` may merge ``choice``'s domains into one while the
    program is oversubscribed across them unevenly: two or more, neither
    NUMA nodes nor packages."""
    return len(choice.domains) > 1 and choice.level not in MEMORY_LEVELS
