"""Command line: ``tumbler -p PID``, ``tumbler exec -- CMD``, ``tumbler topology``.

Every error reaches the user as one line on stderr and a documented exit
status (see tumbler(8), EXIT STATUS): 0 success, 1 runtime failure
(unknown PID, missing privilege), 2 usage or config error; ``exec`` passes
through the command's status (128+N if killed by signal N, 126 if it
cannot be executed, 127 if not found).
"""

import json
import os
import sys

import click

from .. import __version__
from ..config import BINDER_CHOICES, LEVEL_CHOICES, POLICY_CHOICES, load_config
from ..cpulist import format_cpulist, parse_domains
from ..errors import EXIT_FAILURE, TumblerError, UsageError
from ..platform import PLATFORMS, open_backend
from ..platform.base import LEVELS, AccessDenied, PlatformError

# Options shared by ``tumbler`` and ``tumbler exec``: given before or after
# ``exec``, the later one wins.
BALANCING_OPTIONS = (
    click.option("--level", type=click.Choice(LEVEL_CHOICES), default=None,
                 help="Topology level to group across (default auto)."),
    click.option("--domains", "domains_text", metavar="LIST", default=None,
                 help="Explicit domains: CPU lists separated by '/', e.g. 0-3,8-11/4-7,12-15."),
    click.option("--policy", type=click.Choice(POLICY_CHOICES), default=None,
                 help="auto, tumbler, speed or observe (default auto)."),
    click.option("--interval", "interval_ms", type=int, metavar="MS", default=None,
                 help="Fixed interval in ms instead of the variation-interval table."),
    click.option("--config", "config_path", metavar="FILE", default=None,
                 help="YAML configuration file."),
    click.option("--binder", type=click.Choice(BINDER_CHOICES), default=None,
                 help="How threads are bound: affinity (default) or cpuset; pset on illumos."),
    click.option("--log", "log_path", metavar="FILE", default=None,
                 help="Write one JSON object per interval to FILE."),
    click.option("-n", "--dry-run", is_flag=True, default=None,
                 help="Plan and log, move nothing."),
    click.option("--duration", type=float, metavar="SECONDS", default=None,
                 help="Stop balancing after SECONDS."),
    click.option("--force", is_flag=True, default=None,
                 help="Allow PID 1 and kernel threads as targets."),
    click.option("--probe", is_flag=True, default=None,
                 help="Trace lock waits, run-queue latency and migrations during the run "
                      "(bpftrace/DTrace)."),
    click.option("-q", "--quiet", is_flag=True, default=None, help="No summary."),
    click.option("-v", "--verbose", is_flag=True, default=None,
                 help="Print every interval's decision on stderr."),
)
OPTION_NAMES = ("level", "domains_text", "policy", "interval_ms", "config_path", "binder",
                "log_path", "dry_run", "duration", "force", "probe", "quiet", "verbose")


def balancing_options(func):
    for option in reversed(BALANCING_OPTIONS):
        func = option(func)
    return func


def fail(message, status=EXIT_FAILURE):
    raise TumblerError(message, status)


class TumblerGroup(click.Group):
    """Maps every exception to one stderr line and an exit status."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            sys.exit(130)
        except click.exceptions.UsageError as exc:
            # One line, like every other error (click's own adds the usage
            # text and a blank line).
            where = exc.ctx.command_path if exc.ctx is not None else "tumbler"
            _die("%s (see %s --help)" % (exc.format_message().rstrip("."), where),
                 exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except TumblerError as exc:
            _die(str(exc), exc.status)
        except AccessDenied as exc:
            _die("permission denied: %s (needs %s)" % (exc, exc.privilege), EXIT_FAILURE)
        except PlatformError as exc:
            _die(str(exc), EXIT_FAILURE)


def _die(message, status):
    click.echo("tumbler: %s" % message, err=True)
    sys.exit(status)


@click.group(cls=TumblerGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-p", "--pid", "pids", type=int, multiple=True, metavar="PID",
              help="Process to balance; repeat to balance several together.")
@click.option("--root", default="/", metavar="DIR", show_default=True,
              help="Diagnostic: read DIR/proc, DIR/sys (DIR/kstat on illumos).")
@click.option("--platform", "platform_name", type=click.Choice(PLATFORMS), default=None,
              help="Backend to use (default: the running OS).")
@balancing_options
@click.version_option(__version__, "-V", "--version", prog_name="tumbler")
@click.pass_context
def main(ctx, pids, root, platform_name, **options):
    """Balance the load of multithreaded programs across CPU domains.

    \b
      tumbler [OPTIONS] -p PID [-p PID ...]
      tumbler [OPTIONS] exec [OPTIONS] -- CMD [ARGS...]
      tumbler topology [--json]
      tumbler restore [--all | -p PID ...]
    """
    ctx.obj = {"root": root, "platform": platform_name, "options": options}
    if ctx.invoked_subcommand is not None:
        if pids:
            raise UsageError("-p/--pid cannot be combined with the %s command"
                             % ctx.invoked_subcommand)
        return
    if not pids:
        click.echo(ctx.get_usage(), err=True)
        raise UsageError("nothing to do: give -p PID or a command (see --help)")
    from .run import run_attach
    sys.exit(run_attach(_settings(ctx, options), list(pids)))


@main.command("exec", context_settings={"allow_interspersed_args": False})
@balancing_options
@click.argument("command", nargs=-1, required=True, metavar="-- CMD [ARGS...]")
@click.pass_context
def exec_command(ctx, command, **options):
    """Run CMD and balance it from its first threads on."""
    merged = dict(ctx.obj["options"])
    merged.update({k: v for k, v in options.items() if v is not None})
    from .run import run_exec
    sys.exit(run_exec(_settings(ctx, merged), list(command)))


@main.command("topology")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def topology_command(ctx, as_json):
    """Show the CPU domains at each level and the level tumbler would pick."""
    from ..balance.domains import choose_domains
    backend = open_backend(ctx.obj["platform"], ctx.obj["root"])
    topo = backend.topology()
    allowed = _own_allowed(backend, topo)
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


from .stat import stat_command      # noqa: E402  (commands register on main)
from .probe import probe_command    # noqa: E402
from .compare import compare_command   # noqa: E402  (imports balancing_options from here)
from .restore import restore_command  # noqa: E402

main.add_command(stat_command)
main.add_command(probe_command)
main.add_command(compare_command)
main.add_command(restore_command)


def _own_allowed(backend, topo):
    if backend.root == "/" and hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return topo.online


def _settings(ctx, options):
    """Merge config-file defaults and options into one validated settings dict."""
    config = load_config(options.get("config_path"))
    settings = {k: options.get(k) for k in OPTION_NAMES}
    settings["config"] = config
    settings["root"] = ctx.obj["root"]
    settings["platform"] = ctx.obj["platform"]
    settings["level"] = settings["level"] or config.level
    settings["policy"] = settings["policy"] or config.policy
    settings["binder"] = settings["binder"] or config.binder
    settings["dry_run"] = bool(settings["dry_run"])
    settings["force"] = bool(settings["force"])
    settings["quiet"] = bool(settings["quiet"])
    settings["verbose"] = bool(settings["verbose"])
    settings["probe"] = bool(settings["probe"])
    if settings["probe"] and settings["root"] != "/":
        raise UsageError("--probe traces the running system; it cannot be combined with --root")
    settings["domains"] = (parse_domains(settings["domains_text"])
                           if settings["domains_text"] is not None else None)
    if settings["domains"] is not None and options.get("level"):
        raise UsageError("--domains and --level exclude each other")
    interval = settings["interval_ms"]
    if interval is not None and not 10 <= interval <= 3_600_000:
        raise UsageError("--interval must be between 10 and 3600000 ms, not %d" % interval)
    duration = settings["duration"]
    if duration is not None and not (0 < duration < 10 ** 9):
        raise UsageError("--duration must be a positive number of seconds")
    return settings


def entry_point():
    main(prog_name="tumbler")


if __name__ == "__main__":
    entry_point()
