"""Options shared by the balancing commands (``tumbler -p``, ``exec``,
``compare``) and the settings they make: defaults from the config file,
checked once, before anything is changed or started."""

import click

from ..config import (BINDER_CHOICES, CAPACITY_CHOICES, LEVEL_CHOICES, MAX_INTERVAL_MS,
                      MIN_INTERVAL_MS, POLICY_CHOICES, SHARE_CHOICES, SHARE_POLICY_CHOICES,
                      Config)
from .settings import make_settings


def within(low, high):
    """A click callback: an integer from ``low`` to ``high``, or a usage
    error that says so.  The help says the range in words ("1 to 10000"),
    as --interval's does, not as click's IntRange would ([1<=x<=10000])."""
    def check(ctx, param, value):
        if value is not None and not low <= value <= high:
            raise click.BadParameter("%d is not from %d to %d" % (value, low, high))
        return value
    return check


def examples(*lines):
    """A command's --help epilog: ``Examples:`` and ``lines`` as written
    (click's ``\\b`` keeps a paragraph from being re-wrapped)."""
    return "\b\nExamples:\n" + "\n".join("  " + line for line in lines)


#: One line per --policy choice, for the --help of the commands that take it.
POLICY_LINES = (
    "\b\nPolicies (--policy):",
    "  auto     group across domains; speed-balance where evidence says it helps",
    "  tumbler  group across domains only; the OS places threads inside each",
    "  speed    speed balancing only: threads take turns on a domain's cores",
    "  observe  measure and log; never move a thread",
)
POLICY_HELP = "\n".join(POLICY_LINES)


# -p, --level and --domains mean the same in every command that takes them;
# only the help, which says what each command does with them, differs.

def pid_option(help, name="pids", multiple=True, required=False):
    """``-p/--pid PID``: a process ID, one per -p unless ``multiple`` is false."""
    return click.option("-p", "--pid", name, type=int, multiple=multiple, required=required,
                        metavar="PID", help=help)


#: The defaults --help states: the config file's (config.Config), stated there only.
_DEFAULT = Config.DEFAULTS


def level_option(help="Topology level to group across (default: %s)." % _DEFAULT["level"]):
    return click.option("--level", type=click.Choice(LEVEL_CHOICES), default=None, help=help)


def domains_option(help="Explicit domains: CPU lists separated by '/', e.g. "
                        "0-3,8-11/4-7,12-15."):
    return click.option("--domains", "domains_text", metavar="LIST", default=None, help=help)


# Options shared by ``tumbler`` and ``tumbler exec``: given before or after
# ``exec``, the later one wins.
BALANCING_OPTIONS = (
    level_option(),
    domains_option(),
    click.option("--policy", type=click.Choice(POLICY_CHOICES), default=None,
                 help="How to balance: one of the policies below (default: %s)."
                      % _DEFAULT["policy"]),
    click.option("--share", type=click.Choice(SHARE_CHOICES), default=None,
                 help="Several -p programs: time, all of them on every CPU, or space, CPUs "
                      "of their own sized by --share-policy (default: %s)." % _DEFAULT["share"]),
    click.option("--share-policy", "share_policy", type=click.Choice(SHARE_POLICY_CHOICES),
                 default=None,
                 help="With --share space: equal-qos, equal slowdowns, or max-qos, least "
                      "total slowdown (default: %s)." % _DEFAULT["share_policy"]),
    click.option("--capacity", type=click.Choice(CAPACITY_CHOICES), default=None,
                 help="A domain's weight: cpus, its CPU count, or measured, its CPUs' "
                      "time not taken by other work (default: %s)." % _DEFAULT["capacity"]),
    click.option("--interval", "interval_ms", type=int, metavar="MS", default=None,
                 help="A fixed time between rounds, %d to %d ms (default: set each round by "
                      "how unevenly the threads load the CPUs)." % (MIN_INTERVAL_MS,
                                                                  MAX_INTERVAL_MS)),
    click.option("--config", "config_path", metavar="FILE", default=None,
                 help="YAML settings: a run's file, or the service's tumbler.yaml, whose "
                      "balancing: part is read."),
    click.option("--binder", type=click.Choice(BINDER_CHOICES), default=None,
                 help="How threads are bound: affinity or cpuset; pset on illumos "
                      "(default: affinity)."),
    click.option("--log", "log_path", metavar="FILE", default=None,
                 help="Write one JSON object per interval to FILE."),
    click.option("--summary-json", "summary_json", metavar="FILE", default=None,
                 help="Write the exit summary's figures as one JSON object to FILE."),
    click.option("-n", "--dry-run", is_flag=True, default=None,
                 help="Plan and log, move nothing."),
    click.option("--duration", type=float, metavar="SECONDS", default=None,
                 help="Stop balancing after SECONDS (default: when the program exits)."),
    click.option("--force", is_flag=True, default=None,
                 help="Allow PID 1 and kernel threads as targets."),
    click.option("--probe", is_flag=True, default=None,
                 help="Trace lock waits, run-queue latency and migrations during the run "
                      "(bpftrace/DTrace)."),
    click.option("--children/--no-children", default=None,
                 help="Balance the target's descendant processes with it (default: "
                      "yes for exec, no for -p)."),
    click.option("-q", "--quiet", is_flag=True, default=None,
                 help="Print no summary at the end."),
    click.option("-v", "--verbose", is_flag=True, default=None,
                 help="Print every interval's decision on stderr."),
)


def balancing_options(func):
    for option in reversed(BALANCING_OPTIONS):
        func = option(func)
    return func


def settings(ctx, options):
    """Merge config-file defaults and options into one validated Settings record."""
    return make_settings(options, ctx.obj["root"], ctx.obj["platform"])
