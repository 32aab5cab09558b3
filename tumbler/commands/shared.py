"""What ``tumbler stat`` and ``tumbler probe`` both show, kept here so that
neither command imports the other: a thread's USR/SYS/LAT percentages from
two backend samples, the domains a balancing run would use, and their
text cells."""

from __future__ import annotations

import os

from ..balance.domains import choose_domains
from ..cpulist import format_cpulist, parse_domains
from ..errors import UsageError
from ..platform import microstate_percent
from ..platform.base import Sample, allowed_union
from ..records import record

_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def global_option(ctx, key, default=None):
    """An option given before the subcommand (``tumbler --level X stat``), or
    ``--root``/``--platform``; ``default`` where not given."""
    obj = ctx.obj or {}
    if key in ("root", "platform"):
        return obj.get(key, default)
    return (obj.get("options") or {}).get(key, default)


@record
class Snapshot:
    """A backend sample and, on Linux, the time since boot when it was taken."""

    sample: Sample
    uptime_ns: int | None


def snapshot(backend, pid):
    """Sample every thread of ``pid`` with details (usr/sys, last CPU)."""
    sample = backend.sample(pid, detail=True)
    return Snapshot(sample, backend.uptime_ns())


def is_same_thread(prev, cur):
    """True if ``prev`` is an earlier sample of the very thread ``cur`` (not
    another one that got the same id)."""
    return prev is not None and prev.tid == cur.tid and prev.start == cur.start


def _percent(part_ns, whole_ns):
    if part_ns is None:
        return None
    return max(part_ns, 0) * 100.0 / whole_ns


def linux_since_start(times, uptime_ns):
    """USR, SYS, LAT of a Linux thread over its whole life (% of its age)."""
    age_ns = uptime_ns - times.start * _NS_PER_TICK
    if age_ns <= 0:
        return {"usr": 0.0, "sys": 0.0, "lat": None if times.lat_ns is None else 0.0}
    return {"usr": _percent(times.usr_ns, age_ns), "sys": _percent(times.sys_ns, age_ns),
            "lat": _percent(times.lat_ns, age_ns)}


def linux_over_interval(prev, cur, elapsed_ns):
    """USR, SYS, LAT of a Linux thread between two samples (% of wall time)."""
    if elapsed_ns <= 0:
        return {"usr": 0.0, "sys": 0.0, "lat": None if cur.lat_ns is None else 0.0}

    def diff(now, before):
        return None if now is None or before is None else now - before
    return {"usr": _percent(diff(cur.usr_ns, prev.usr_ns), elapsed_ns),
            "sys": _percent(diff(cur.sys_ns, prev.sys_ns), elapsed_ns),
            "lat": _percent(diff(cur.lat_ns, prev.lat_ns), elapsed_ns)}


def thread_percentages(platform, prev, cur, elapsed_ns, uptime_ns):
    """Percentage columns (``STAT_COLUMNS[platform]``) of one thread.

    ``prev`` is the thread's previous ThreadTimes or None; when it is None
    or belongs to another thread with the same id, the columns cover the
    thread's life so far.  ``elapsed_ns`` is the wall time between the two
    samples (Linux), ``uptime_ns`` the time since boot at ``cur`` (Linux).
    """
    if platform == "illumos":
        return microstate_percent(prev if is_same_thread(prev, cur) else None, cur)
    if is_same_thread(prev, cur):
        return linux_over_interval(prev, cur, elapsed_ns)
    return linux_since_start(cur, uptime_ns)


def cpu_domain_map(choice):
    """``{cpu: domain index}`` of a DomainChoice."""
    return {cpu: index for index, cpus in enumerate(choice.domains) for cpu in cpus}


def domain_choice(backend, pids, level, domains_text):
    """The domains a balancing run of ``pids`` would use."""
    if domains_text is not None and level is not None:
        raise UsageError("--domains and --level exclude each other")
    explicit = parse_domains(domains_text) if domains_text is not None else None
    return choose_domains(backend.topology(), allowed_union(backend, pids),
                          level or "auto", explicit)


def format_domains(choice):
    return "domains: %s (%s)" % (", ".join(
        "%d = CPUs %s" % (i, format_cpulist(cpus)) for i, cpus in enumerate(choice.domains)),
        choice.note)


def format_cell(value, width=6, fmt="%.1f"):
    return ("-" if value is None else fmt % value).rjust(width)
