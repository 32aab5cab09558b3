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
``report_record``.  The helpers ``snapshot``, ``thread_percentages`` and
``cpu_domain_map`` are shared with ``tumbler probe``.
"""

import json
import os
import time
from dataclasses import dataclass
from typing import Optional

import click

from ..config import LEVEL_CHOICES, MAX_INTERVAL_MS, MIN_INTERVAL_MS
from ..cpulist import format_cpulist, parse_domains
from ..balance.capacity import busy_shares, other_work
from ..balance.domains import choose_domains
from ..errors import TumblerError, UsageError
from ..platform import STAT_COLUMNS, microstate_percent, open_backend
from ..platform.base import NoSuchProcess, PlatformError, Sample
from ..balance.targets import allowed_union, check_process

#: Percentage columns per platform, in display order (prstat -mL order).
COLUMNS = STAT_COLUMNS

DEFAULT_INTERVAL_MS = 1000
NAME_WIDTH = 16

_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    """A backend sample and, on Linux, the time since boot when it was taken."""

    sample: Sample
    uptime_ns: Optional[int]


# -- measuring -------------------------------------------------------------------

def read_uptime_ns(root):
    """Nanoseconds since boot from ROOT/proc/uptime (its first field)."""
    path = os.path.join(root, "proc", "uptime")
    try:
        with open(path) as f:
            seconds = f.read().split()[0]
    except (OSError, IndexError) as exc:
        raise TumblerError("cannot read %s: %s" % (path, getattr(exc, "strerror", None)
                                                   or "empty file")) from None
    whole, _, frac = seconds.partition(".")
    try:
        return int(whole) * 1_000_000_000 + int((frac + "000000000")[:9])
    except ValueError:
        raise TumblerError("%s: not a number of seconds: %r" % (path, seconds)) from None


def snapshot(backend, pid):
    """Sample every thread of ``pid`` with details (usr/sys, last CPU)."""
    sample = backend.sample(pid, detail=True)
    uptime = read_uptime_ns(backend.root) if backend.name == "linux" else None
    return Snapshot(sample, uptime)


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
    """Percentage columns (``COLUMNS[platform]``) of one thread.

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


def format_domains(choice):
    return "domains: %s (%s)" % (", ".join(
        "%d = CPUs %s" % (i, format_cpulist(cpus)) for i, cpus in enumerate(choice.domains)),
        choice.note)


def format_cell(value, width=6, fmt="%.1f"):
    return ("-" if value is None else fmt % value).rjust(width)


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

def _global(ctx, key, default=None):
    obj = ctx.obj or {}
    if key in ("root", "platform"):
        return obj.get(key, default)
    return (obj.get("options") or {}).get(key, default)


def validate_interval(interval_ms):
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise UsageError("--interval must be between %d and %d ms, not %d"
                         % (MIN_INTERVAL_MS, MAX_INTERVAL_MS, interval_ms))


@click.command("stat")
@click.option("-p", "--pid", type=int, required=True, metavar="PID",
              help="Process whose threads to show.")
@click.option("--interval", "interval_ms", type=int, metavar="MS", default=None,
              help="Time between reports in ms (default 1000).")
@click.option("--count", type=int, default=1, show_default=True, metavar="N",
              help="Number of reports; the first covers each thread's life so far.")
@click.option("--level", type=click.Choice(LEVEL_CHOICES), default=None,
              help="Topology level of the DOMAIN column (default auto).")
@click.option("--domains", "domains_text", metavar="LIST", default=None,
              help="Explicit domains for the DOMAIN column: CPU lists separated by '/'.")
@click.option("--json", "as_json", is_flag=True, help="One JSON list of report objects.")
@click.pass_context
def stat_command(ctx, pid, interval_ms, count, level, domains_text, as_json):
    """Per-thread USR, SYS, LAT (and illumos microstates), last CPU and domain."""
    if interval_ms is None:
        interval_ms = _global(ctx, "interval_ms") or DEFAULT_INTERVAL_MS
    validate_interval(interval_ms)
    if count < 1:
        raise UsageError("--count must be at least 1, not %d" % count)
    if level is None and domains_text is None:
        level, domains_text = _global(ctx, "level"), _global(ctx, "domains_text")
    backend = open_backend(_global(ctx, "platform"), _global(ctx, "root", "/"))
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
