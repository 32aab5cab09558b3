"""``tumbler stat -p PID``: per-thread microstates, like ``prstat -mL``.

What a balancing run sees, without running one: for every thread of a
process, the share of time it spent in user mode (USR), in the kernel (SYS)
and waiting for a CPU (LAT), plus, on illumos, the other microstates (TRP,
TFL, DFL, LCK, SLP), the CPU it last ran on and the CPU domain that CPU
belongs to (the domains ``tumbler -p PID`` would balance across, chosen with
``--level`` or ``--domains`` exactly as a balancing run chooses them).

Everything comes from the backend alone (no tracing tool):

* Linux: USR and SYS from the clock ticks of ``/proc/PID/task/TID/stat``
  (utime, stime: 1/CLK_TCK resolution), LAT from ``run_delay`` of
  ``schedstat``; percentages of wall time.  The first report is the total
  since each thread started: thread age = ``/proc/uptime`` minus the
  thread's start time (stat field 22), both counted from boot.
* illumos: the prusage microstates of ``/proc/PID/lusage``; percentages of
  the LWP's own elapsed time (``pr_rtime``), computed as prstat does
  (``tumbler.platform.microstate_percent``).

The first report covers each thread's whole life; every later one (with
``--count N``) covers one ``--interval``.  A thread first seen in a later
report (new, or a reused id) is shown over its life so far, as prstat does.

``--json`` prints one JSON list of report objects; keys are in
``report_record``.  What it shares with ``tumbler probe`` (samples,
percentages, domains) is in ``commands/shared.py``.
"""

import json
import time

import click

from ..cpulist import format_cpulist
from ..balance.capacity import busy_shares, other_work
from ..errors import UsageError
from ..platform import open_backend
from ..platform.base import STAT_COLUMNS
from ..platform.base import NoSuchProcess, PlatformError
from ..balance.targets import check_process
from .options import domains_option, examples, level_option, pid_option
from .settings import check_interval
from .shared import (cpu_domain_map, domain_choice, format_cell, format_domains,
                     global_option, snapshot, thread_percentages)

#: Percentage columns per platform, in display order (prstat -mL order).
COLUMNS = STAT_COLUMNS

DEFAULT_INTERVAL_MS = 1000
NAME_WIDTH = 16

# -- reports ---------------------------------------------------------------------

def _rounded(value):
    return None if value is None else round(value, 2)


def report_record(number, platform, info, prev, cur, choice, busy=None):
    """One report as a JSON-ready dict.  Keys (stable):

    ``report``       1 for the first report, then 2, 3, ...
    ``pid``, ``name``, ``platform``
    ``since_start``  true: each thread over its life so far (first report);
                     false: over the interval
    ``elapsed_s``    wall seconds since the previous report (null in the first)
    ``columns``      the percentage keys present in each thread
    ``level``, ``domains``  the domain choice (CPU lists, by domain index)
    ``capacity``     per domain, the CPUs other work left the process over
                     the interval (its CPUs minus their busy time not the
                     process's, a thread counted where it last ran: what
                     ``--capacity measured`` weighs domains by); null in the
                     first report or where CPU times cannot be read
    ``threads``      by TID: ``tid``, ``name``, ``state`` (one letter),
                     ``cpu`` (last CPU), ``domain`` (its index, null if the
                     CPU is in no domain), and the percentage columns
                     (null when the OS does not say: LAT without schedstat)
    """
    columns = COLUMNS[platform]
    domain_of = cpu_domain_map(choice)
    elapsed_ns = cur.sample.wall_ns - prev.sample.wall_ns if prev is not None else 0
    before = prev.sample.threads if prev is not None else {}
    threads = []
    for tid in sorted(cur.sample.threads):
        times = cur.sample.threads[tid]
        pct = thread_percentages(platform, before.get(tid), times, elapsed_ns, cur.uptime_ns)
        row = {"tid": tid, "name": times.name, "state": times.state, "cpu": times.cpu,
               "domain": domain_of.get(times.cpu)}
        row.update((column, _rounded(pct.get(column))) for column in columns)
        threads.append(row)
    capacity = None
    if busy is not None and elapsed_ns > 0:
        own = [0.0] * len(choice.domains)
        for row, tid in zip(threads, sorted(cur.sample.threads)):
            old = before.get(tid)
            if row["domain"] is not None and old is not None:
                ran = cur.sample.threads[tid].run_ns - old.run_ns
                own[row["domain"]] += max(ran, 0) / elapsed_ns
        capacity = [round(len(cpus) - other_work(cpus, busy, mine), 2)
                    for cpus, mine in zip(choice.domains, own)]
    return {
        "report": number, "pid": info.pid, "name": info.name, "platform": platform,
        "since_start": prev is None,
        "elapsed_s": round(elapsed_ns / 1e9, 4) if prev is not None else None,
        "columns": list(columns), "level": choice.level,
        "domains": [format_cpulist(cpus) for cpus in choice.domains],
        "capacity": capacity,
        "threads": threads,
    }


def format_report(report):
    """Text lines of one report: a title, a header and one row per thread."""
    n = len(report["threads"])
    span = ("% of each thread's life so far" if report["since_start"]
            else "%% of the last %.2f s" % report["elapsed_s"])
    lines = ["PID %d (%s): %d thread%s, %s" % (report["pid"], report["name"], n,
                                               "" if n == 1 else "s", span)]
    columns = report["columns"]
    lines.append("%8s %-*s%s %4s %6s" % ("TID", NAME_WIDTH, "NAME",
                                         "".join(c.upper().rjust(6) for c in columns),
                                         "CPU", "DOMAIN"))
    for row in report["threads"]:
        lines.append("%8d %-*s%s %4s %6s" % (
            row["tid"], NAME_WIDTH, row["name"][:NAME_WIDTH],
            "".join(format_cell(row[c]) for c in columns),
            format_cell(row["cpu"], 4, "%d"), format_cell(row["domain"], 6, "%d")))
    if report.get("capacity") is not None:
        lines.append("capacity per domain (CPUs other work leaves it): %s"
                     % " / ".join("%.2f" % c for c in report["capacity"]))
    return lines


def _process_gone(exc, pid):
    return isinstance(exc, NoSuchProcess) and exc.pid == pid and exc.tid is None


def collect_reports(backend, pid, count, interval_ms, choice, emit, info, sleep=time.sleep):
    """Take ``count`` reports, ``interval_ms`` apart, passing each to
    ``emit(record)``.  Returns False if the process exited before the last."""
    prev = prev_times = None
    for number in range(1, count + 1):
        if prev is not None:
            sleep(interval_ms / 1000.0)
        try:
            cur = snapshot(backend, pid)
        except NoSuchProcess as exc:
            if prev is None or not _process_gone(exc, pid):
                raise
            return False
        times = _cpu_times(backend)
        busy = None
        if prev is not None and times is not None and prev_times is not None:
            span = cur.sample.wall_ns - prev.sample.wall_ns
            if span > 0:
                busy = busy_shares(prev_times, times, span)
        emit(report_record(number, backend.name, info, prev, cur, choice, busy))
        prev, prev_times = cur, times
    return True


def _cpu_times(backend):
    """Backend.cpu_times(), or None where the platform cannot tell."""
    try:
        return backend.cpu_times()
    except PlatformError:
        return None


# -- the command -----------------------------------------------------------------

@click.command("stat", short_help="Show each thread's CPU time, latency, CPU and domain.",
               epilog=examples(
                   "tumbler stat -p 1234                    # each thread's life so far",
                   "tumbler stat -p 1234 --count 10         # ten reports, a second apart",
                   "tumbler stat -p 1234 --domains 0-3/4-7 --json"))
@pid_option("Process whose threads to show.", name="pid", multiple=False, required=True)
@click.option("--interval", "interval_ms", type=int, metavar="MS", default=None,
              help="Time between reports in ms (default: %d)." % DEFAULT_INTERVAL_MS)
@click.option("--count", type=int, default=1, metavar="N",
              help="Number of reports; the first covers each thread's life so far "
                   "(default: 1).")
@level_option("Topology level of the DOMAIN column (default: auto).")
@domains_option("Explicit domains for the DOMAIN column: CPU lists separated by '/'.")
@click.option("--json", "as_json", is_flag=True, help="One JSON list of report objects.")
@click.pass_context
def stat_command(ctx, pid, interval_ms, count, level, domains_text, as_json):
    """Show each thread of a process: its user and system CPU time (USR,
    SYS), time waiting for a CPU (LAT; illumos adds its microstates), the
    CPU it last ran on and that CPU's domain."""
    if interval_ms is None:
        interval_ms = global_option(ctx, "interval_ms") or DEFAULT_INTERVAL_MS
    check_interval(interval_ms)
    if count < 1:
        raise UsageError("--count must be at least 1, not %d" % count)
    if level is None and domains_text is None:
        level, domains_text = global_option(ctx, "level"), global_option(ctx, "domains_text")
    backend = open_backend(global_option(ctx, "platform"), global_option(ctx, "root", "/"))
    try:
        info = check_process(backend, pid)
        choice = domain_choice(backend, [pid], level, domains_text)
        if as_json:
            reports = []
            complete = collect_reports(backend, pid, count, interval_ms, choice,
                                       reports.append, info)
            click.echo(json.dumps(reports, indent=2))
        else:
            click.echo(format_domains(choice))
            state = {"first": True}

            def emit(record):
                if not state["first"]:
                    click.echo("")
                state["first"] = False
                for line in format_report(record):
                    click.echo(line)
            complete = collect_reports(backend, pid, count, interval_ms, choice, emit, info)
    finally:
        backend.close()
    if not complete:
        click.echo("tumbler: process %d exited" % pid, err=True)
