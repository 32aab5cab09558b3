"""``tumbler service`` and ``tumbler status``: the machine-wide service
(tumbler/service/loop.py) and what it reports on its control socket."""

import json
import sys

import click

from ..errors import EXIT_FAILURE, TumblerError, warn
from ..service.config import DEFAULT_CONFIG, DEFAULT_SOCKET, load_service_config
from .options import examples


@click.command("service", short_help="Balance the programs the rules select, machine-wide.",
               epilog=examples(
                   "tumbler service --check /etc/tumbler/tumbler.yaml  # check before a reload",
                   "tumbler service -v                    # in the foreground, a line per round",
                   "tumbler status                        # what a running service manages"))
@click.option("--config", "config_path", default=DEFAULT_CONFIG,
              metavar="FILE", help="Configuration; drop-ins from conf.d/*.yaml beside it "
                                   "(default: %s)." % DEFAULT_CONFIG)
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help="Control socket (default: the service.socket setting, else %s)."
                   % DEFAULT_SOCKET)
@click.option("--check", "check_path", default=None, metavar="FILE",
              help="Only check FILE (and its drop-ins) and exit: 0 if good, 2 if not.")
@click.option("--log", "log_path", default=None, metavar="FILE",
              help="Append one JSON object per round of each program to FILE.")
@click.option("-v", "--verbose", is_flag=True, help="Print every round's decision too.")
def service_command(config_path, socket_path, check_path, log_path, verbose):
    """Balance, machine-wide, the programs the rules of the configuration
    select (tumbler.yaml(5)), as they start, until stopped."""
    if check_path is not None:
        config = load_service_config(check_path)
        click.echo("%s: good: %d rule(s) from %s" % (check_path, len(config.rules),
                                                     ", ".join(config.files) or "no file"))
        for line in open_rules(config):
            warn(line)
        sys.exit(0)
    sys.exit(run_service(config_path, socket_path, verbose, log_path))


def open_rules(config):
    """A line for each rule any user can opt into (it matches on names or
    command lines only): said by ``--check`` and when the service starts."""
    return ["%s: rule %s %s: any user can opt in (up to the caps); add `user:` (or "
            "cgroup, zone, project)" % (rule.source, rule.name,
                                        "matches on name or command line only"
                                        if rule.comm is not None or rule.cmdline is not None
                                        else "matches every process")
            for rule in config.rules if rule.anyone_can_opt_in()]


def run_service(config_path, socket_path=None, verbose=False, log_path=None):
    import os
    from ..platform.signals import SignalWaiter
    from ..platform.priority import raise_priority
    from ..service.control import ControlSocket
    from ..service.log import ERROR, INFO, WARNING, Log
    from ..service.loop import Service
    from ..state import list_states, state_dir
    from ..state.paths import ensure_dir
    from ..platform.limits import raise_file_limit
    if os.geteuid() != 0:
        raise TumblerError("the service manages other users' programs: it needs root "
                           "(CAP_SYS_NICE and write access to /run)", EXIT_FAILURE)
    config = load_service_config(config_path)
    log = Log()
    raise_priority()
    raise_file_limit()
    ensure_dir(state_dir())         # full, read-only or foreign: refused now
    # From here on a stop signal is recorded and ends the service cleanly
    # at its first turn, whatever it arrives during.
    waiter = SignalWaiter()
    control = None
    service = None
    reason = "error"
    try:
        if list_states(state_dir()):
            # What a killed service (or tumbler) left is put back first.
            from ..platform import open_backend
            from ..state.leftovers import restore_left
            restore_left(open_backend(None, "/"), say=click.echo)
        control = ControlSocket(socket_path or config.socket)
        service = Service(config, config_path, log, verbose=verbose, log_path=log_path)
        metrics = _metrics_writer(config, log)
        log(INFO, "service started: %d rule(s) from %s; socket %s"
            % (len(config.rules), ", ".join(config.files) or config_path, control.path))
        for line in open_rules(config):
            log(WARNING, line)
        reason = service.run(waiter, control, metrics)
    finally:
        failed = service.stop() if service is not None else 0
        if control is not None:
            control.close()
        waiter.close()
        if service is not None:
            log(ERROR if failed else INFO, "service stopped (%s)%s" % (
                reason, "; %d thread(s) not restored" % failed if failed else
                ": every thread handed back"))
    return EXIT_FAILURE if failed else 0


def _metrics_writer(config, log):
    """``metrics(service)`` -> when next due, writing service.metrics_file
    every METRICS_INTERVAL_S; None without one."""
    if config.metrics_file is None:
        return None
    import time
    from ..observers.metrics import write_metrics
    from ..service.log import INFO, WARNING
    due = [0.0]
    said = [None]           # the failure last said: said once, until a write works

    def metrics(service):
        now = time.monotonic()
        if now >= due[0]:
            path = service.config.metrics_file
            try:
                write_metrics(path, service.status())
            except TumblerError as exc:     # tumbler.safefile refused it
                failure = "cannot write metrics: %s" % exc
            except OSError as exc:
                failure = "cannot write %s: %s" % (path, exc)
            else:
                if said[0] is not None:
                    log(INFO, "metrics written to %s again" % path)
                failure = None
            if failure is not None and failure != said[0]:
                log(WARNING, failure + " (said once, until a write works)")
            said[0] = failure
            due[0] = now + METRICS_INTERVAL_S
        return due[0]
    return metrics


#: How often the metrics file is rewritten.
METRICS_INTERVAL_S = 5.0


@click.command("status", short_help="Show what a running tumbler service manages.",
               epilog=examples("tumbler status         # programs, rules, domains, moves",
                               "tumbler status --json  # the same, for scripts"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--socket", "socket_path", default=DEFAULT_SOCKET,
              metavar="PATH", help="The service's control socket (default: %s)."
                                   % DEFAULT_SOCKET)
def status_command(as_json, socket_path):
    """Show what a running tumbler service manages."""
    from ..service.control import request
    reply = request(socket_path, {"cmd": "status"})
    if as_json:
        click.echo(json.dumps(reply, indent=2, sort_keys=True))
        return
    click.echo("tumbler service PID %d, up %.0f s, own CPU %.2f s (budget %s CPUs), "
               "%d program(s), rules: %s"
               % (reply["pid"], reply["uptime_s"], reply["own_cpu_s"],
                  reply.get("cpu_budget", "-"), len(reply["programs"]),
                  ", ".join(reply.get("rules", [])) or "none"))
    if reply.get("priority"):
        click.echo("priority: %s" % reply["priority"])
    if not reply["programs"]:
        return
    click.echo("%7s  %-15s %-12s %-8s %-18s %-18s %8s %6s  %s" % (
        "PID", "NAME", "RULE", "POLICY", "DOMAINS", "LOAD", "MOVES/M", "SPEED", "STATE"))
    for p in reply["programs"]:
        click.echo("%7d  %-15s %-12s %-8s %-18s %-18s %8.1f %6s  %s" % (
            p["pid"], p["name"][:15], p["rule"][:12], p["policy"], "/".join(p["domains"]),
            " ".join("%.2f" % x for x in p["domain_load"]) or "-", p["moves_per_min"],
            "on" if p["speed"] else "off",
            "parked: " + p["parked"] if p.get("parked")
            else "balancing, " + p["paced"] if p.get("paced") else "balancing"))
