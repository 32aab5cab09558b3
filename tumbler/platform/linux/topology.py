"""Linux CPU topology from /sys: packages, NUMA nodes, LLCs, cores."""

import os

from ...cpulist import parse_cpulist
from ...errors import UsageError
from ..base import Topology, Unsupported


def read_topology(sys_dir):
    """On-line CPUs and their packages, NUMA nodes, LLCs and cores from ``sys_dir``
(``/sys``, or a fixture tree's)."""
    cpu_dir = sys_dir + "/devices/system/cpu"
    try:
        online = _read_cpulist(cpu_dir + "/online")
    except OSError:
        raise Unsupported("cannot read %s/online: is /sys mounted?" % cpu_dir) from None
    levels = {}
    package = _group_by(online, lambda c: _read_cpulist_or_none(
        "%s/cpu%d/topology/package_cpus_list" % (cpu_dir, c))
        or _read_cpulist_or_none("%s/cpu%d/topology/core_siblings_list" % (cpu_dir, c)))
    if package:
        levels["package"] = package
    numa = _numa_nodes(sys_dir + "/devices/system/node", online)
    if numa:
        levels["numa"] = numa
    llc = _group_by(online, lambda c: _last_level_cache(cpu_dir, c))
    if llc:
        levels["llc"] = llc
    core = _group_by(online, lambda c: _read_cpulist_or_none(
        "%s/cpu%d/topology/core_cpus_list" % (cpu_dir, c))
        or _read_cpulist_or_none("%s/cpu%d/topology/thread_siblings_list" % (cpu_dir, c)))
    levels["core"] = core or tuple(frozenset([c]) for c in sorted(online))
    return Topology(online=online, levels=levels)


def _read_cpulist(path):
    with open(path) as f:
        text = f.read().strip()
    return parse_cpulist(text) if text else frozenset()


def _read_cpulist_or_none(path):
    try:
        return _read_cpulist(path)
    except (OSError, UsageError):
        return None


def _group_by(online, cpus_of):
    """Distinct CPU groups (restricted to ``online``) given each CPU's group."""
    groups = set()
    for cpu in online:
        group = cpus_of(cpu)
        if group is None:
            return ()
        group = frozenset(group) & online
        groups.add(group or frozenset([cpu]))
    return tuple(sorted(groups, key=min))


def _numa_nodes(node_dir, online):
    try:
        names = [n for n in os.listdir(node_dir) if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        return ()
    nodes = set()
    for name in names:
        cpus = _read_cpulist_or_none("%s/%s/cpulist" % (node_dir, name))
        if cpus and cpus & online:
            nodes.add(frozenset(cpus & online))
    return tuple(sorted(nodes, key=min))


def _last_level_cache(cpu_dir, cpu):
    """shared_cpu_list of the highest-level cache of ``cpu`` (its LLC)."""
    cache_dir = "%s/cpu%d/cache" % (cpu_dir, cpu)
    best_level, best = -1, None
    try:
        indexes = [n for n in os.listdir(cache_dir) if n.startswith("index")]
    except OSError:
        return None
    for index in indexes:
        try:
            with open("%s/%s/level" % (cache_dir, index)) as f:
                level = int(f.read())
            with open("%s/%s/type" % (cache_dir, index)) as f:
                kind = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or level <= best_level:
            continue
        shared = _read_cpulist_or_none("%s/%s/shared_cpu_list" % (cache_dir, index))
        if shared:
            best_level, best = level, shared
    return best
