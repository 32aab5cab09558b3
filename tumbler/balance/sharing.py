"""Space sharing: each managed program gets CPUs of its own (``--share
space``; the service's ``sharing: {mode: space}``).

The engine (engine/share.py) decides how many *allocation units* each
program gets; this module turns that into CPU sets and hands each to the
program's controller (``Controller.reshape``), which then balances the
program inside its set exactly as it would on a machine of its own.

Pools.  Programs share only with programs that may use the same CPUs over
the same domains (same cgroup cpuset, same level): a *pool*.  Partitioning
a pool never gives a program a CPU outside what it may use, and programs
in different cpusets are left to share the way they already do.

Units.  A pool's allocation units are its domains (an LLC, a NUMA node,
a socket: the level the rule or ``--level`` chose), so that a program's
threads keep their caches to themselves; when programs outnumber domains,
single CPUs, in domain order (a program's CPUs then stay close together).
More programs than CPUs cannot have disjoint sets: the pool falls back to
time sharing (every program on every CPU), said once.

A program's set is its units' CPUs, grouped by the pool's domains: one
domain per pool domain it has CPUs in, so wave grouping still balances
it across sockets or caches.  A program alone in its pool has all of it,
unconfined -- exactly as with ``--share time``.

When.  A program arriving or leaving re-partitions its pool at once (it
came with threads that need CPUs; it left CPUs idle).  Otherwise every
``CHECK_S`` the pool is partitioned again from the programs' demand over
their load windows, and the new partition is adopted only if the engine
finds it beats the current one by more than the tolerance *and* the same
partition came out at the check before (the paper's "steady state: 2
periods", section 5: a program in a short phase does not move every other
program's threads).

Demand.  What the program's threads want: the sum of their loads as
demand (CPU time plus run-queue wait, each capped at one CPU:
engine.window), so that a program squeezed onto few CPUs still shows what
it would use.  A thread not yet measured counts as one busy CPU, as
initial placement assumes.  Hardware counters (LLC misses per cycle over
the interval since the last check, ``counters``: an llc.LlcMeter) feed
the paper's memory model where the platform has them; without them (this
VM has no PMU) the model stands on demand alone (engine/share.py).
"""

from ..cpulist import format_cpulist
from ..engine.share import (DEFAULT_TOLERANCE, EQUAL_QOS, ProgramDemand, partition,
                            qos_values)

#: Seconds between two checks of a pool's partition (two agreeing checks
#: are needed before a re-partition: a phase shorter than this moves nothing).
CHECK_S = 1.0


class _Member:
    __slots__ = ("key", "controller", "weight", "name", "cpus")

    def __init__(self, key, controller, weight, name):
        self.key = key
        self.controller = controller
        self.weight = weight
        self.name = name
        self.cpus = None            # the CPU set it was given, None: the whole pool


class _Pool:
    __slots__ = ("domains", "members", "units", "current", "proposed", "timeshared")

    def __init__(self, domains):
        self.domains = domains      # the pool's domains (CPU frozensets)
        self.members = []           # in arrival order: the greedy's tie-break
        self.units = None           # the allocation units' CPU sets
        self.current = None         # key -> unit indices
        self.proposed = None        # the last check's proposal, not yet adopted
        self.timeshared = False     # more programs than CPUs


class SpaceSharing:
    """The pools of the managed programs and their partitions."""

    def __init__(self, policy=EQUAL_QOS, tolerance=DEFAULT_TOLERANCE, log=None,
                 counters=None):
        self.policy = policy
        self.tolerance = tolerance
        self.log = log or (lambda message: None)
        self.counters = counters        # llc.LlcMeter, or None: demand alone
        self.pools = {}                 # tuple of domains -> _Pool
        self.repartitions = 0
        self._next_check = None

    # -- programs come and go ------------------------------------------------

    def join(self, key, controller, weight=1.0, name=None):
        """Share the machine with ``controller``'s program from now on:
        its pool is partitioned again at once."""
        domains = tuple(controller.choice.domains)
        pool = self.pools.get(domains)
        if pool is None:
            pool = self.pools[domains] = _Pool(domains)
        member = _Member(key, controller, weight, name or "PID %s" % (key,))
        pool.members.append(member)
        self._partition(pool, "%s arrived" % member.name)

    def leave(self, key):
        """The program is gone (or handed back): its CPUs go to the others now."""
        for domains, pool in list(self.pools.items()):
            member = next((m for m in pool.members if m.key == key), None)
            if member is None:
                continue
            pool.members.remove(member)
            if self.counters is not None:
                self.counters.forget(key)
            if not pool.members:
                del self.pools[domains]
            else:
                self._partition(pool, "%s left" % member.name)

    def close(self):
        """Release the counters (every exit path of a space-shared run)."""
        if self.counters is not None:
            self.counters.close()

    def cpus_of(self, key):
        """The CPUs the program was given, None while it has its whole pool."""
        for pool in self.pools.values():
            for member in pool.members:
                if member.key == key:
                    return member.cpus
        return None

    # -- the check -------------------------------------------------------------

    def tick(self, now):
        """Check every pool if it is time; returns when the next check is due."""
        if self._next_check is None:
            self._next_check = now + CHECK_S
        elif now >= self._next_check:
            for pool in list(self.pools.values()):
                self._check(pool)
            self._next_check = now + CHECK_S
        return self._next_check

    def _check(self, pool):
        if len(pool.members) < 2 or pool.timeshared or pool.current is None:
            return
        demands = self._demands(pool)
        proposal = partition(demands, [len(u) for u in pool.units], self.policy,
                             pool.current, self.tolerance)
        if proposal == pool.current:
            pool.proposed = None
            return
        if proposal != pool.proposed:
            pool.proposed = proposal        # steady state: wait for a second check
            return
        self._adopt(pool, proposal, demands, "demand changed")

    # -- partitioning ------------------------------------------------------------

    def _partition(self, pool, why):
        """Partition ``pool`` from scratch (programs came or went)."""
        pool.proposed = None
        members = pool.members
        if len(members) == 1:
            pool.units = pool.current = None
            pool.timeshared = False
            if members[0].cpus is not None:
                self._give(members[0], None, pool)
                self.log("space sharing: %s has CPUs %s again (alone in its pool; %s)"
                         % (members[0].name, _cpus(pool.domains), why))
            return
        units = [frozenset(d) for d in pool.domains]
        if len(members) > len(units):
            units = [frozenset([cpu]) for d in pool.domains for cpu in sorted(d)]
        if len(members) > len(units):
            if not pool.timeshared:
                self.log("space sharing: %d programs on %d CPUs cannot have CPUs of their "
                         "own; they share CPUs %s in time (%s)"
                         % (len(members), len(units), _cpus(pool.domains), why))
            pool.timeshared = True
            pool.units = pool.current = None
            for member in members:
                self._give(member, None, pool)
            return
        pool.timeshared = False
        if units != pool.units:
            pool.units, pool.current = units, None
        demands = self._demands(pool)
        proposal = partition(demands, [len(u) for u in units], self.policy, None,
                             self.tolerance)
        self._adopt(pool, proposal, demands, why)

    def _adopt(self, pool, proposal, demands, why):
        pool.current, pool.proposed = proposal, None
        self.repartitions += 1
        total = sum(len(u) for u in pool.units)
        sizes = {key: sum(len(pool.units[u]) for u in units) for key, units in proposal.items()}
        predicted = qos_values(demands, [sizes[d.key] for d in demands], total)
        parts = []
        for member, demand, value in zip(pool.members, demands, predicted):
            cpus = frozenset().union(*(pool.units[u] for u in proposal[member.key]))
            self._give(member, cpus, pool)
            llc = "" if demand.llc is None else ", LLC misses/cycle %.4f" % demand.llc
            parts.append("%s CPUs %s (demand %.1f%s, predicted QoS %.2f)"
                         % (member.name, format_cpulist(cpus), demand.demand, llc,
                            value))
        self.log("space sharing (%s, %s): %s" % (self.policy, why, "; ".join(parts)))

    def _give(self, member, cpus, pool):
        """Hand ``member``'s controller its new set (None: the whole pool)."""
        if cpus == member.cpus:
            return
        member.cpus = cpus
        if cpus is None:
            member.controller.reshape(pool.domains, confined=False)
        else:
            member.controller.reshape([d & cpus for d in pool.domains if d & cpus],
                                      confined=True)

    def _demands(self, pool):
        demands = []
        for member in pool.members:
            wanted = 0.0
            for thread in member.controller.threads.values():
                wanted += 1.0 if thread.load is None else min(max(thread.load, 0.0), 1.0)
            llc = None if self.counters is None else \
                self.counters.rate(member.key, member.controller)
            demands.append(ProgramDemand(member.key, wanted, member.weight, llc))
        return demands


def _cpus(domains):
    return format_cpulist(frozenset().union(*domains))
