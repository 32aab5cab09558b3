"""Options shared by the balancing commands (``tumbler -p``, ``exec``,
``compare``) and the settings they make: defaults from the config file,
checked once, before anything is changed or started."""

import click

from ..config import (BINDER_CHOICES, CAPACITY_CHOICES, LEVEL_CHOICES, POLICY_CHOICES,
                      SHARE_CHOICES, SHARE_POLICY_CHOICES)
from .settings import make_settings


# -p, --level and --domains mean the same in every command that takes them;
# only the help, which says what each command does with them, differs.

def pid_option(help, name="pids", multiple=True, required=False):
    """``-p/--pid PID``: a process ID, one per -p unless ``multiple`` is false."""
    return click.option("-p", "--pid", name, type=int, multiple=multiple, required=required,
                        metavar="PID", help=help)


def level_option(help="Topology level to group across (default auto)."):
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
                 help="auto, tumbler, speed or observe (default auto)."),
    click.option("--share", type=click.Choice(SHARE_CHOICES), default=None,
                 help="Several -p programs: time (default, all on every CPU) or space "
                      "(CPUs of their own, sized by the --share-policy option)."),
    click.option("--share-policy", "share_policy", type=click.Choice(SHARE_POLICY_CHOICES),
                 default=None,
                 help="With --share space: equal-qos (default: equal slowdowns) or max-qos "
                      "(least total slowdown)."),
    click.option("--capacity", type=click.Choice(CAPACITY_CHOICES), default=None,
                 help="A domain's weight: cpus (default: its CPU count) or measured (its "
                      "CPUs' time not taken by other work)."),
    click.option("--interval", "interval_ms", type=int, metavar="MS", default=None,
                 help="Fixed interval in ms instead of the variation-interval table."),
    click.option("--config", "config_path", metavar="FILE", default=None,
                 help="YAML configuration file."),
    click.option("--binder", type=click.Choice(BINDER_CHOICES), default=None,
                 help="How threads are bound: affinity (default) or cpuset; pset on illumos."),
    click.option("--log", "log_path", metavar="FILE", default=None,
                 help="Write one JSON object per interval to FILE."),
    click.option("--summary-json", "summary_json", metavar="FILE", default=None,
                 help="Write the exit summary's figures as one JSON object to FILE."),
    click.option("-n", "--dry-run", is_flag=True, default=None,
                 help="Plan and log, move nothing."),
    click.option("--duration", type=float, metavar="SECONDS", default=None,
                 help="Stop balancing after SECONDS."),
    click.option("--force", is_flag=True, default=None,
                 help="Allow PID 1 and kernel threads as targets."),
    click.option("--probe", is_flag=True, default=None,
                 help="Trace lock waits, run-queue latency and migrations during the run "
                      "(bpftrace/DTrace)."),
    click.option("--children/--no-children", default=None,
                 help="Balance the target's descendant processes with it (default: "
                      "yes for exec, no for -p)."),
    click.option("-q", "--quiet", is_flag=True, default=None, help="No summary."),
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
