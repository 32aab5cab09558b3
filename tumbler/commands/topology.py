"""``tumbler topology``: the CPU domains at each level, and the choice of auto."""

import json

import click

from ..balance.domains import choose_domains
from ..cpulist import format_cpulist
from ..platform import open_backend
from ..platform.base import LEVELS


@click.command("topology")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def topology_command(ctx, as_json):
    """Show the CPU domains at each level and the level tumbler would pick."""
    backend = open_backend(ctx.obj["platform"], ctx.obj["root"])
    topo = backend.topology()
    allowed = own_allowed(backend, topo)
    choice = choose_domains(topo, allowed, "auto")
    if as_json:
        click.echo(json.dumps({
            "platform": backend.name,
            "online": format_cpulist(topo.online),
            "levels": {name: [format_cpulist(d) for d in topo.levels[name]]
                       for name in LEVELS if name in topo.levels},
            "auto": {"level": choice.level,
                     "domains": [format_cpulist(d) for d in choice.domains],
                     "note": choice.note},
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


def own_allowed(backend, topo):
    """The CPUs tumbler itself may use (on a fixture tree: every on-line one)."""
    if backend.root == "/":
        return backend.own_allowed()
    return topo.online
