"""``tumbler topology``: the CPU domains at each level, and the choice of auto."""

import json
import time

import click

from ..balance.domains import choose_domains
from ..cpulist import format_cpulist
from ..platform import open_backend
from ..platform.base import LEVELS, PlatformError
from .options import examples, within

#: How long ``topology`` watches the CPUs' busy time (--sample's default).
DEFAULT_SAMPLE_MS = 200


@click.command("topology", short_help="Show the CPU domains and which ones tumbler would use.",
               epilog=examples(
                   "tumbler topology             # domains at each level, and auto's choice",
                   "tumbler topology --json      # the same, for scripts",
                   "tumbler topology --sample 0  # without watching what other work leaves"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--sample", "sample_ms", type=int, callback=within(0, 60_000),
              default=DEFAULT_SAMPLE_MS, metavar="MS",
              help="Watch the CPUs' busy time this long, 0 to 60000 ms, for what other "
                   "work leaves of them; 0: do not (default: %d)." % DEFAULT_SAMPLE_MS)
@click.pass_context
def topology_command(ctx, as_json, sample_ms):
    """Show the CPU domains at each level (packages, NUMA nodes, caches,
    cores) and the domains tumbler would group threads across."""
    backend = open_backend(ctx.obj["platform"], ctx.obj["root"])
    topo = backend.topology()
    allowed = own_allowed(backend, topo)
    choice = choose_domains(topo, allowed, "auto")
    free = free_shares(backend, sample_ms / 1000.0) if sample_ms else None
    capacity = None if free is None else [round(sum(free.get(c, 0.0) for c in d), 2)
                                          for d in choice.domains]
    if as_json:
        click.echo(json.dumps({
            "platform": backend.name,
            "online": format_cpulist(topo.online),
            "levels": {name: [format_cpulist(d) for d in topo.levels[name]]
                       for name in LEVELS if name in topo.levels},
            "auto": {"level": choice.level,
                     "domains": [format_cpulist(d) for d in choice.domains],
                     "capacity": capacity,
                     "note": choice.note},
            "free": None if free is None else {str(cpu): round(share, 3)
                                               for cpu, share in sorted(free.items())},
            "sample_ms": sample_ms if free is not None else None,
        }, indent=2))
        return
    click.echo("on-line CPUs: %s" % format_cpulist(topo.online))
    for name in LEVELS:
        if name in topo.levels:
            domains = topo.levels[name]
            click.echo("%-8s %2d domain%s  %s" % (name, len(domains), " " if len(domains) == 1
                                                 else "s", " / ".join(format_cpulist(d)
                                                                      for d in domains)))
        else:
            click.echo("%-8s not reported by this platform" % name)
    click.echo("auto: %s" % choice.note)
    if free is not None:
        click.echo("free over %d ms (the share of each CPU other work left idle; 1.00: all "
                   "of it): %s" % (sample_ms, "  ".join(
                       "cpu%d %.2f" % (cpu, share) for cpu, share in sorted(free.items()))))
        click.echo("auto's domains could use now: %s CPUs (what --capacity measured weighs "
                   "them by)" % " / ".join("%.2f" % c for c in capacity))


def free_shares(backend, interval_s, sleep=time.sleep):
    """Each CPU's share of time not busy over ``interval_s``: {cpu: 0..1};
    None where the platform cannot tell (or, on a fixture tree, where the
    counters do not move)."""
    try:
        before = backend.cpu_times()
        sleep(interval_s)
        after = backend.cpu_times()
    except PlatformError:
        return None
    free = {}
    for cpu, (busy, total) in after.items():
        if cpu not in before:
            continue
        spent = total - before[cpu][1]
        if spent <= 0:
            return None
        free[cpu] = min(1.0, max(0.0, 1.0 - (busy - before[cpu][0]) / spent))
    return free or None


def own_allowed(backend, topo):
    """The CPUs tumbler itself may use (on a fixture tree: every on-line one)."""
    if backend.root == "/":
        return backend.own_allowed()
    return topo.online
