"""Space sharing: disjoint CPU sets for several programs (issue 18).

Time sharing (tumbler's default, and the OS's) lets every managed program
run on every CPU: a program of 32 threads then takes eight times the CPU
of one of 4, whatever either needs, and they evict each other's caches.
Space sharing gives each program a set of *allocation units* of its own
-- the domains of the chosen level (an LLC, a NUMA node), or single cores
when programs outnumber domains -- sized by a performance model under a
policy (the space-shared scheduling paper, ``../shared/papers/
space-shared-scheduling.md``, section 4):

*Model* (paper Eq. 1-3).  A program's speedup on ``n`` CPUs is

    SpeedUp(n) = n (1 + LLC T1) / (1 + LLC T(n)),   capped at its demand

where ``LLC`` is its last-level cache misses per cycle per core,
``T(n) = 1 / (1/L - LLC_ALL / memories)`` the memory service time (an
M/M/1 queue fed by every program's misses, ``LLC_ALL``), held at
``latency_cap`` once the queue would saturate (the paper's threshold),
and ``T1`` the same with the program alone on one core.  Without
counters (``llc`` None; this VM has no PMU) the model stands on demand
alone: ``SpeedUp(n) = min(n, demand)``, where ``demand`` is how many CPUs
the program's threads want (the sum of their loads as demand: CPU time
plus run-queue wait, ``engine.window.demand``).  A program never gets
more from CPUs than its runnable threads can use.

*QoS* (Eq. 4) is a program's speedup on what it is given over its
speedup alone on the whole machine: 1 means no slowdown.

*Policies* (Algorithm 1, a greedy over allocation units): every program
first gets one unit; each further unit goes to the program for which the
policy's measure is best afterwards -- ``equal-qos``: the smallest
variance of the programs' QoS divided by their weights (the paper's
"balancing QoS"); ``max-qos``: the largest sum of weight x QoS.  Ties go
to the program with fewer CPUs, then to the earlier one, so equal
programs get equal shares.  Units go out in a fixed order, and a program
keeps the units it held wherever the new sizes allow (the paper: "always
allocates ... in the same order in order to minimize the number of
migrations").

*Stability*: a new partition replaces the current one only if it improves
the policy's measure by more than ``tolerance``; programs arriving or
leaving re-partition at once (``partition(..., current=None)``).

Pure and deterministic: no OS, no clock.
"""

from __future__ import annotations

import math

from ..records import record

EQUAL_QOS = "equal-qos"
MAX_QOS = "max-qos"
POLICIES = (EQUAL_QOS, MAX_QOS)

#: A new partition must improve the policy's measure by more than this to
#: replace the current one: the spread of QoS (standard deviation) for
#: equal-qos, the mean QoS per program for max-qos.
DEFAULT_TOLERANCE = 0.05


@record
class ShareModel:
    """The memory model's constants (paper Eq. 2-3), in cycles."""

    latency: float = 200.0          # L: a memory access's latency without contention
    memories: int = 1               # memory controllers the accesses spread over
    latency_cap: float = 2000.0     # the threshold T(n) is held at (paper 4.3)


@record
class ProgramDemand:
    """One program, as the partition sees it."""

    key: object                     # what the caller names it by (a PID)
    demand: float                   # CPUs its runnable threads want (>= 0)
    weight: float = 1.0             # the rule's weight (> 0)
    llc: float | None = None        # LLC misses per cycle per core; None: no PMU


def llc_rate(misses, cycles):
    """Per-core LLC miss rate from a program's counters over an interval
    (perf_event_open's LLC misses and cycles; illumos libcpc's): misses
    per cycle, or None when nothing ran (no cycles)."""
    if cycles <= 0:
        return None
    return max(0, misses) / cycles


def _service_time(model, llc_all):
    """T = 1 / (1/L - LLC_ALL/memories), held at the cap once the queue
    saturates (the denominator reaches 1/cap or below)."""
    headroom = 1.0 / model.latency - llc_all / model.memories
    if headroom <= 1.0 / model.latency_cap:
        return model.latency_cap
    return 1.0 / headroom


def speedup(program, cpus, llc_all, model=ShareModel()):
    """SpeedUp(cpus) of ``program`` with every program's misses summing to
    ``llc_all`` (see the module doc); 0 on no CPUs."""
    if cpus <= 0 or program.demand <= 0:
        return 0.0
    usable = min(float(cpus), program.demand)
    if program.llc is None or program.llc <= 0:
        return usable
    alone_one = _service_time(model, program.llc)
    shared = _service_time(model, llc_all)
    return usable * (1.0 + program.llc * alone_one) / (1.0 + program.llc * shared)


def qos(program, cpus, llc_all, total_cpus, model=ShareModel()):
    """Eq. 4: speedup on ``cpus`` (among the others) over speedup alone on
    all ``total_cpus``.  A program that wants nothing loses nothing: 1."""
    alone = speedup(program, total_cpus, _llc_alone(program, total_cpus), model)
    if alone <= 0:
        return 1.0
    return speedup(program, cpus, llc_all, model) / alone


def _llc_alone(program, cpus):
    return (program.llc or 0.0) * min(float(cpus), max(program.demand, 0.0))


def _llc_all(programs, sizes):
    return math.fsum((p.llc or 0.0) * min(float(n), max(p.demand, 0.0))
                     for p, n in zip(programs, sizes))


def qos_values(programs, sizes, total_cpus, model=ShareModel()):
    """Each program's QoS (Eq. 4) when given ``sizes`` CPUs, in order."""
    llc_all = _llc_all(programs, sizes)
    return [qos(p, n, llc_all, total_cpus, model) for p, n in zip(programs, sizes)]


def measure(programs, sizes, total_cpus, policy, model=ShareModel()):
    """The policy's figure of merit for programs given ``sizes`` CPUs
    (higher is better): minus the variance of QoS/weight for equal-qos,
    the sum of weight x QoS for max-qos."""
    values = qos_values(programs, sizes, total_cpus, model)
    if policy == EQUAL_QOS:
        scaled = [v / p.weight for v, p in zip(values, programs)]
        mean = math.fsum(scaled) / len(scaled)
        return -math.fsum((v - mean) ** 2 for v in scaled) / len(scaled)
    return math.fsum(v * p.weight for v, p in zip(values, programs))


def sizes_for(programs, units, policy, model=ShareModel()):
    """Algorithm 1: how many units each program gets (a list, in the
    order of ``programs``); ``units`` are the units' CPU counts, handed
    out in order.  Needs at least as many units as programs."""
    _check(programs, units, policy)
    total = sum(units)
    counts = [1] * len(programs)
    cpus = list(units[:len(programs)])
    for unit in units[len(programs):]:
        best = None
        for i in range(len(programs)):
            trial = cpus[:]
            trial[i] += unit
            key = (measure(programs, trial, total, policy, model), -cpus[i], -i)
            if best is None or key > best[0]:
                best = (key, i)
        i = best[1]
        counts[i] += 1
        cpus[i] += unit
    return counts


def assign(keys, counts, unit_count, current=None):
    """Which units (indices into the unit list) each program gets:
    ``counts[i]`` units for ``keys[i]``, disjoint, covering all of them.
    A program keeps as many of the units it holds in ``current`` (key ->
    unit indices) as its new count allows, lowest first; the rest go out
    in unit order."""
    if sum(counts) != unit_count:
        raise ValueError("counts %r do not add up to %d units" % (counts, unit_count))
    current = current or {}
    taken = set()
    result = {}
    for key, count in zip(keys, counts):
        kept = [u for u in sorted(current.get(key, ())) if 0 <= u < unit_count
                and u not in taken][:count]
        result[key] = kept
        taken.update(kept)
    free = [u for u in range(unit_count) if u not in taken]
    for key, count in zip(keys, counts):
        need = count - len(result[key])
        result[key] = tuple(sorted(result[key] + free[:need]))
        del free[:need]
    return result


def partition(programs, units, policy=EQUAL_QOS, current=None, tolerance=DEFAULT_TOLERANCE,
              model=ShareModel()):
    """Disjoint unit sets for ``programs`` (a sequence of ProgramDemand):
    key -> tuple of unit indices.  ``units``: the CPU count of each
    allocation unit.  ``current`` (key -> unit indices, for the same
    programs): kept unless the new sizes improve the policy's measure by
    more than ``tolerance`` (see DEFAULT_TOLERANCE); None (programs came
    or went) re-partitions at once.  Raises ValueError if programs
    outnumber units (the caller then uses smaller units, or time
    sharing)."""
    programs = list(programs)
    if not programs:
        return {}
    counts = sizes_for(programs, units, policy, model)
    keys = [p.key for p in programs]
    proposed = assign(keys, counts, len(units), current)
    if current is not None and _same_programs(keys, current, len(units)):
        held = [sum(units[u] for u in current[k]) for k in keys]
        new = [sum(units[u] for u in proposed[k]) for k in keys]
        if _gain(programs, held, new, sum(units), policy, model) <= tolerance:
            return {k: tuple(sorted(current[k])) for k in keys}
    return proposed


def _same_programs(keys, current, unit_count):
    """Whether ``current`` is a partition of all units among exactly these programs."""
    if set(current) != set(keys):
        return False
    held = [u for k in keys for u in current[k]]
    return sorted(held) == list(range(unit_count)) and all(current[k] for k in keys)


def _gain(programs, held, new, total, policy, model):
    """How much the new sizes improve on the held ones, on the tolerance's
    scale: the drop in QoS spread (standard deviation) for equal-qos, the
    rise of mean weighted QoS for max-qos."""
    before = measure(programs, held, total, policy, model)
    after = measure(programs, new, total, policy, model)
    if policy == EQUAL_QOS:
        return math.sqrt(-before) - math.sqrt(-after)
    return (after - before) / len(programs)


def _check(programs, units, policy):
    if policy not in POLICIES:
        raise ValueError("unknown sharing policy %r (known: %s)" % (policy, ", ".join(POLICIES)))
    if len(programs) > len(units):
        raise ValueError("%d programs cannot have disjoint sets of %d units"
                         % (len(programs), len(units)))
    if any(not isinstance(n, int) or n < 1 for n in units):
        raise ValueError("every unit needs at least one CPU: %r" % (units,))
    for p in programs:
        if not p.weight > 0:
            raise ValueError("weight of %r must be positive, not %r" % (p.key, p.weight))
        if not p.demand >= 0:
            raise ValueError("demand of %r must be >= 0, not %r" % (p.key, p.demand))
