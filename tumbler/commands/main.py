"""Command line: ``tumbler -p PID``, ``tumbler exec -- CMD`` and the
subcommands (``topology``, ``stat``, ``probe``, ``compare``, ``restore``,
``service``, ``status``, ``plot``; ``SUBCOMMANDS`` below).

Every error reaches the user as one line on stderr and a documented exit
status (see tumbler(8), EXIT STATUS): 0 success, 1 runtime failure
(unknown PID, missing privilege), 2 usage or config error; ``exec`` passes
through the command's status (128+N if killed by signal N, 126 if it
cannot be executed, 127 if not found).

A subcommand's module is imported only when it runs (``SUBCOMMANDS``):
``tumbler --version`` or ``tumbler exec`` load neither the probe runner
nor another platform's backend.
"""

import importlib
import sys

import click

from .. import __version__
from ..errors import TumblerError, UsageError
from ..platform import PLATFORMS
from ..platform.base import PlatformError
from .options import POLICY_HELP, balancing_options, examples, pid_option, settings
from .report import die

#: name -> (module, attribute) of each subcommand, in the order --help lists them.
SUBCOMMANDS = {
    "exec": (".main", "exec_command"),
    "topology": (".topology", "topology_command"),
    "stat": (".stat", "stat_command"),
    "probe": (".probe", "probe_command"),
    "compare": (".compare", "compare_command"),
    "restore": (".restore", "restore_command"),
    "service": (".service", "service_command"),
    "status": (".service", "status_command"),
    "plot": (".plot", "plot_command"),
}


class TumblerGroup(click.Group):
    """Loads each subcommand when it is used; maps every exception to one
    stderr line and an exit status."""

    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attribute = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module, __package__), attribute)

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
            # click lists a choice's values on lines of their own.
            message = " ".join(exc.format_message().split()).rstrip(".")
            _die("%s (see %s --help)" % (message, where), exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except (TumblerError, PlatformError) as exc:
            die(exc)


def _die(message, status):
    click.echo("tumbler: %s" % message, err=True)
    sys.exit(status)


@click.group(cls=TumblerGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]},
             epilog=POLICY_HELP + "\n\n" + examples(
                 "tumbler -p 1234                     # balance process 1234 until it exits",
                 "tumbler exec -- ./solver input.dat  # start a program and balance it",
                 "tumbler -v --duration 60 -p 1234    # a line per round, for a minute",
                 "tumbler topology                    # the domains tumbler groups across"))
@pid_option("Process to balance; repeat to balance several together.")
@balancing_options
# Diagnostics last: they read another machine's captured files.
@click.option("--root", default="/", metavar="DIR",
              help="Diagnostic: read DIR/proc, DIR/sys (DIR/kstat on illumos) "
                   "(default: /).")
@click.option("--platform", "platform_name", type=click.Choice(PLATFORMS), default=None,
              help="Diagnostic: the backend to use (default: the running OS's).")
@click.version_option(__version__, "-V", "--version", prog_name="tumbler")
@click.pass_context
def main(ctx, pids, root, platform_name, **options):
    """Balance the threads of multithreaded programs across CPU domains.

    \b
      tumbler [OPTIONS] -p PID [-p PID ...]
      tumbler [OPTIONS] exec [OPTIONS] -- CMD [ARGS...]
      tumbler topology [--json] [--sample MS]
      tumbler stat -p PID [--interval MS] [--count N] [--json]
      tumbler probe {locks|latency|migrations|all} -p PID [--duration SECONDS]
      tumbler compare [OPTIONS] -- CMD [ARGS...]
      tumbler restore [--all | -p PID ...]
      tumbler service [--config FILE] [--check FILE]
      tumbler status [--json]
      tumbler plot -o FILE.svg LOG.jsonl
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
    if options.get("share") == "space" and len(set(pids)) < 2:
        raise UsageError("--share space gives each of several programs CPUs of its own; "
                         "give two or more -p PID (one program: leave --share out)")
    from .run import run_attach
    sys.exit(run_attach(settings(ctx, options), list(pids)))


#: Balancing options exec does not take: it balances the one command it
#: starts (no other programs to share with, no PID 1 or kernel thread to
#: force).  Hidden from its --help and refused.
NOT_FOR_EXEC = ("share", "share_policy", "force")


@click.command("exec", context_settings={"allow_interspersed_args": False},
               short_help="Run CMD and balance it from its first thread on.",
               epilog=POLICY_HELP + "\n\n" + examples(
                   "tumbler exec -- ./solver input.dat     # balance it from its first thread",
                   "tumbler exec --policy speed -- ./app   # speed balancing only",
                   "tumbler --log run.jsonl exec -- ./app  # then: tumbler plot -o run.svg "
                   "run.jsonl"))
@balancing_options
@click.argument("command", nargs=-1, required=True, metavar="-- CMD [ARGS...]")
@click.pass_context
def exec_command(ctx, command, **options):
    """Run CMD and balance it (and, by default, its child processes) from
    its first thread on, until it exits; tumbler then exits with its
    status."""
    merged = dict(ctx.obj["options"])
    merged.update({k: v for k, v in options.items() if v is not None})
    # Given before "exec" too (tumbler --force exec -- CMD).
    for name in NOT_FOR_EXEC:
        if merged.get(name) is not None:
            raise UsageError("--%s does not apply to exec: it balances the command it "
                             "starts (other programs: tumbler -p PID)" % name.replace("_", "-"))
    from .run import run_exec
    sys.exit(run_exec(settings(ctx, merged), list(command)))


for _param in exec_command.params:
    if _param.name in NOT_FOR_EXEC:
        _param.hidden = True


def entry_point():
    main(prog_name="tumbler")


if __name__ == "__main__":
    entry_point()
