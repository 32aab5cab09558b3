"""illumos CPU topology from the kstats (read by ``kstat``).

Packages and LLCs are the processor groups the kernel's CMT scheduler uses
(``pg_hw_perf`` kstats: "Socket" and "Cache" groups), which exist on x86 and
SPARC alike; a level is taken from them only when their groups cover every
on-line CPU without overlap.  Otherwise ``cpu_info`` is the fallback:
chip_id the package, cache_id the LLC -- x86 only, and on older kernels
computed right for Intel only (AMD CPUs each got an LLC of their own).
core_id (cpu_info) is the core.  CPUs whose state is "on-line" or "no-intr"
(runs threads, takes no interrupts) are on-line; the others are left out.
NUMA ("numa" level) is not reported: lgroups are only reachable through
liblgrp's lgrp_init/lgrp_cpus walk, which tumbler does not wrap; on illumos
x86 the package level coincides with the leaf lgroup on common two-socket
machines.
"""

from ...cpulist import parse_cpulist
from ...errors import UsageError
from ..base import Topology, Unsupported

#: cpu_info ``state`` values of CPUs that run threads (sys/processor.h PS_*).
RUNNING_STATES = ("on-line", "no-intr")


def topology_from_cpu_info(cpu_info, groups=None):
    """Topology from ``{cpuid: {"state", "chip_id", "core_id", "cache_id"}}``
    and the processor groups ``{pg id: {"relationship", "cpus", "ncpus"}}``."""
    online = frozenset(cpu for cpu, fields in cpu_info.items()
                       if fields.get("state") in RUNNING_STATES)
    if not online:
        raise Unsupported("the cpu_info kstats show no on-line CPU")
    levels = {}
    package = (_processor_groups(groups, "Socket", online)
               or _group_by(online, lambda cpu: cpu_info[cpu].get("chip_id")))
    if package:
        levels["package"] = package
    llc = (_processor_groups(groups, "Cache", online)
           or _group_by(online, lambda cpu: _within_chip(cpu_info[cpu], "cache_id")))
    if llc:
        levels["llc"] = llc
    core = _group_by(online, lambda cpu: _within_chip(cpu_info[cpu], "core_id"))
    levels["core"] = core or tuple(frozenset([cpu]) for cpu in sorted(online))
    return Topology(online=online, levels=levels)


def _processor_groups(groups, relationship, online):
    """The on-line CPUs of each processor group of ``relationship``, ordered
    by lowest CPU; () unless they cover every on-line CPU exactly once and
    every CPU list is whole (its length is the group's ncpus)."""
    found = []
    for fields in (groups or {}).values():
        if fields.get("relationship") != relationship:
            continue
        try:
            cpus = parse_cpulist(str(fields.get("cpus", "")))
        except UsageError:
            return ()           # not filled in yet, or garbled
        if len(cpus) != fields.get("ncpus"):
            return ()           # cut short: the kstat's buffer was too small
        if cpus & online:
            found.append(cpus & online)
    if sum(len(cpus) for cpus in found) != len(online) or frozenset().union(*found) != online:
        return ()
    return tuple(sorted(found, key=min))


def _within_chip(fields, key):
    """(chip_id, fields[key]): an LLC or a core never spans two packages."""
    value = fields.get(key)
    if not isinstance(value, int) or value < 0:
        return None
    return fields.get("chip_id"), value


def _group_by(online, key_of):
    """CPU groups with equal keys, ordered by lowest CPU; () if a key is missing."""
    groups = {}
    for cpu in online:
        key = key_of(cpu)
        if key is None:
            return ()
        groups.setdefault(key, set()).add(cpu)
    return tuple(sorted((frozenset(g) for g in groups.values()), key=min))
