"""``tumbler probe KIND -p PID``: what sampling cannot see, per thread.

Runs the tracing scripts of ``probes/`` (bpftrace on Linux, DTrace on
illumos; see ``tumbler.tracing``) over one window of ``--duration`` seconds
and prints one table per process.  The window runs from the scripts' first
print after they are attached to their first print once ``--duration`` has
passed; the backend samples each process right after each of those two
prints, so the probes and the kernel's own counters cover the same time.

``USR``, ``SYS``  CPU time in user mode and in the kernel, % of the window,
                  from those backend samples (as ``tumbler stat``)
``LCK``           time blocked on user-level locks, % of the window (locks);
                  waits in progress count as far as they have gone
``LAT``           time runnable but waiting for a CPU, % of the window
                  (latency)
``MIGR``          CPU migrations in the window (migrations)
``XDOM``          those between two CPU domains: the domains ``tumbler -p
                  PID`` would use (``--level``, ``--domains``)

then a totals line per process.  Columns of kinds not traced show ``-``.
The window ends early on SIGINT/SIGTERM/SIGHUP/SIGQUIT (the results so far
are printed) and when every target has exited.

``--check`` compares LAT (and on illumos LCK) with the kernel's own
figures for the same threads and window, and LCK with two control threads
of known lock time on Linux (``tracing.check``); a figure outside the
tolerance makes the exit status 1.

Without the tracing tool or the privilege it needs, one line says which and
how to get it, and the exit status is 1 (``tumbler.tracing.tool.check_tool``).
``--json`` keys are documented in ``probe_record``.
"""

import json
import os
import time

import click

from ..tracing import check as probe_check
from ..tracing import session as probe
from ..cpulist import format_cpulist
from ..errors import TumblerError, UsageError, warn
from ..platform import native_platform, open_backend
from ..platform.base import NoSuchProcess
from ..observers.probes import FIELDS_OF_KIND, check_tracing
from .options import domains_option, examples, level_option, pid_option
from .settings import check_duration
from .shared import (cpu_domain_map, domain_choice, format_cell, format_domains,
                     global_option, snapshot, thread_percentages)
from ..balance.targets import check_process
from ..platform.signals import SignalWaiter
from ..records import record

DEFAULT_DURATION_S = 5.0
#: The scripts print their totals this often.  The window starts and ends at
#: a print, so each end waits up to one period for it.
PERIOD_MS = 200
#: How often the window checks for signals and exited targets.
POLL_S = 0.2
NAME_WIDTH = 16


# -- the window ------------------------------------------------------------------

def target_alive(backend, pid):
    """False once the process has exited (gone or a zombie)."""
    try:
        return not backend.process(pid).zombie
    except NoSuchProcess:
        return False


@record
class Window:
    """What ``trace_window`` saw: backend snapshots of each process right
    after the first and the last print (``ends[pid]`` None if it exited),
    the probe values in between (``{(pid, tid): record}``), the seconds
    each kind's values cover (``traced_s``), the window's length
    (``window_s``: the longest of those) and why the window ended."""

    starts: dict
    ends: dict
    values: dict
    traced_s: dict
    window_s: float
    ended: str


def trace_window(backend, session, pids, kinds, domain_of_cpu, duration_s, waiter,
                 sampled=None):
    """Trace ``pids`` for ``duration_s`` (a Window).  ``sampled`` lists the
    processes to sample (default ``pids``)."""
    sampled = pids if sampled is None else sampled
    session.start(pids, kinds, domain_of_cpu)
    first, first_spans = session.next_reading()
    starts = {pid: snapshot(backend, pid) for pid in sampled}
    t0 = time.monotonic()
    deadline = t0 + duration_s
    ended = "duration"
    while True:
        signals = waiter.take()
        if signals:
            ended = "signal %d" % signals[0]
            break
        if not any(target_alive(backend, pid) for pid in sampled):
            ended = "targets exited"
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        waiter.sleep(min(POLL_S, left))
    last, last_spans = session.next_reading()
    ends = {}
    for pid in sampled:
        try:
            ends[pid] = snapshot(backend, pid)
        except NoSuchProcess:
            ends[pid] = None
    session.stop()
    traced_s = {kind: (last_spans[kind][1] - first_spans[kind][1]) / 1e9
                for kind in kinds if kind in first_spans and kind in last_spans}
    window_s = max(traced_s.values()) if traced_s else time.monotonic() - t0
    return Window(starts, ends, probe.delta(last, first), traced_s, window_s, ended)


# -- the numbers -----------------------------------------------------------------

def _share(ns, seconds):
    return None if ns is None or seconds is None else (
        ns * 100.0 / (seconds * 1e9) if seconds > 0 else 0.0)


def _rate(count, seconds):
    return None if count is None or seconds is None else (
        count / seconds if seconds > 0 else 0.0)


def _rounded(value, digits=2):
    return None if value is None else round(value, digits)


def traced_fields(kinds):
    return {f for kind in kinds for f in FIELDS_OF_KIND[kind]}


def thread_row(tid, start, end, record, kinds, platform, traced_s, elapsed_ns, uptime_ns):
    """One thread's row.  ``start``/``end`` are its ThreadTimes in the
    samples at the start and the end of the window (None where absent),
    ``elapsed_ns`` the time between those samples, ``uptime_ns`` the time
    since boot at the end one (Linux); ``traced_s`` the seconds each kind's
    values cover."""
    traced = traced_fields(kinds)
    known = end or start
    row = {"tid": tid, "name": known.name if known is not None else "?"}
    if end is not None:
        pct = thread_percentages(platform, start, end, elapsed_ns, uptime_ns)
        row["usr"], row["sys"] = _rounded(pct.get("usr")), _rounded(pct.get("sys"))
    else:
        row["usr"] = row["sys"] = None
    for field in probe.FIELDS:
        row[field] = record.get(field, 0) if field in traced else None
    row["lck"] = _rounded(_share(row["lock_ns"], traced_s.get("locks")))
    row["lat"] = _rounded(_share(row["runq_ns"], traced_s.get("latency")))
    return row


def process_rows(pid, window, kinds, platform):
    """Rows of every thread of ``pid`` seen by a sample or a probe, by TID."""
    first = window.starts[pid].sample
    last = window.ends[pid].sample if window.ends[pid] is not None else None
    records = probe.by_tid(window.values, pid)
    tids = set(first.threads) | set(records) | (set(last.threads) if last else set())
    elapsed_ns = last.wall_ns - first.wall_ns if last is not None else 0
    uptime_ns = window.ends[pid].uptime_ns if last is not None else None
    rows = []
    for tid in sorted(tids):
        end = last.threads.get(tid) if last is not None else None
        rows.append(thread_row(tid, first.threads.get(tid), end,
                               records.get(tid, probe.empty_record()), kinds, platform,
                               window.traced_s, elapsed_ns, uptime_ns))
    return rows


def _sum(rows, key):
    values = [row[key] for row in rows if row[key] is not None]
    return sum(values) if values else None


def process_totals(rows, traced_s):
    """Sums over the threads, and the rates behind the totals line."""
    totals = {"threads": len(rows)}
    for key in ("usr", "sys", "lck", "lat"):
        totals[key] = _rounded(_sum(rows, key))
    for field in probe.FIELDS:
        totals[field] = _sum(rows, field)
    count = totals["runq_count"]
    totals["mean_runq_ns"] = (None if count is None else
                              round(totals["runq_ns"] / count) if count else 0)
    seconds = traced_s.get("migrations")
    totals["migrations_per_s"] = _rounded(_rate(totals["migrations"], seconds))
    totals["cross_domain_per_s"] = _rounded(_rate(totals["cross_domain"], seconds))
    return totals


def check_record(figures):
    """``check`` of the JSON record: the tolerance, every compared figure
    (``what``, ``pid``, ``thread``, ``probe``, ``kernel``, ``ok``) and ``ok``."""
    return {"tolerance": {"relative": probe_check.RELATIVE_TOLERANCE,
                          "window_percent": probe_check.WINDOW_TOLERANCE,
                          "per_wait_ns": probe_check.PER_WAIT_NS},
            "figures": [f._asdict() for f in figures],
            "ok": all(f.ok for f in figures)}


def probe_record(platform, kinds, infos, window, choice, lost_events, check=False,
                 controls=None):
    """The command's result as a JSON-ready dict.  Keys (stable):

    ``platform``, ``kinds`` (traced), ``duration_s`` (the window, seconds),
    ``traced_s`` (per kind, the seconds its values cover: the same window,
    between two prints of that kind's script), ``ended`` ("duration",
    "signal N" or "targets exited"), ``level`` and ``domains`` (CPU lists by
    index), ``lost_events`` (events the tool dropped), ``processes``: one
    per -p, with ``pid``, ``name``, ``exited`` (during the window),
    ``threads`` and ``totals``; with ``--check``, ``check``
    (``check_record``).

    A thread: ``tid``, ``name``, ``usr``, ``sys`` (% of the window, null if
    it exited before the end), ``lock_ns``, ``lock_count``, ``lck`` (% of
    the window), ``runq_ns``, ``runq_count``, ``lat`` (%), ``migrations``,
    ``cross_domain``; fields of kinds not traced are null.
    ``totals``: the same summed over the threads (percentages are then % of
    one CPU), plus ``threads``, ``mean_runq_ns``, ``migrations_per_s``,
    ``cross_domain_per_s``.

    ``controls`` (``check`` on Linux): the LockControls traced with the
    targets.
    """
    processes, figures = [], []
    for info in infos:
        rows = process_rows(info.pid, window, kinds, platform)
        processes.append({"pid": info.pid, "name": info.name,
                          "exited": window.ends[info.pid] is None,
                          "threads": rows, "totals": process_totals(rows, window.traced_s)})
        if check and window.ends[info.pid] is not None:
            figures += probe_check.kernel_figures(info.pid, rows, window.starts[info.pid].sample,
                                                  window.ends[info.pid].sample,
                                                  window.traced_s.get("latency"))
    record = {"platform": platform, "kinds": [k for k in probe.KINDS if k in kinds],
              "duration_s": round(window.window_s, 3),
              "traced_s": {k: round(v, 3) for k, v in window.traced_s.items()},
              "ended": window.ended, "level": choice.level,
              "domains": [format_cpulist(cpus) for cpus in choice.domains],
              "lost_events": lost_events, "processes": processes}
    if check:
        if controls is not None and "locks" in window.traced_s:
            figures += controls.figures(window.values, window.traced_s["locks"] * 1e9)
        record["check"] = check_record(figures)
    return record


# -- text ------------------------------------------------------------------------

def format_count(value, width=7):
    return ("-" if value is None else "%d" % value).rjust(width)


def format_share(value):
    return "-" if value is None else "%.1f%%" % value


def totals_line(totals):
    """The per-process line under the table; sums of percentages are % of
    one CPU."""
    parts = ["USR %s SYS %s" % (format_share(totals["usr"]), format_share(totals["sys"]))]
    if totals["lock_ns"] is not None:
        parts.append("locks %.3f s blocked (LCK %.1f%%), %d waits begun"
                     % (totals["lock_ns"] / 1e9, totals["lck"], totals["lock_count"]))
    if totals["runq_ns"] is not None:
        parts.append("run-queue latency %.3f s (LAT %.1f%%), mean %.3f ms over %d waits"
                     % (totals["runq_ns"] / 1e9, totals["lat"],
                        totals["mean_runq_ns"] / 1e6, totals["runq_count"]))
    if totals["migrations"] is not None:
        parts.append("%d migrations (%.1f/s), %d cross-domain (%.1f/s)"
                     % (totals["migrations"], totals["migrations_per_s"],
                        totals["cross_domain"], totals["cross_domain_per_s"]))
    return "total: " + "; ".join(parts)


def format_record(record):
    lines = []
    span = "%.2f s traced (%s)" % (record["duration_s"], ", ".join(record["kinds"]))
    if record["ended"] != "duration":
        span += ", ended early: %s" % record["ended"]
    for proc in record["processes"]:
        if lines:
            lines.append("")
        n = proc["totals"]["threads"]
        lines.append("PID %d (%s): %d thread%s, %s%s" % (
            proc["pid"], proc["name"], n, "" if n == 1 else "s", span,
            ", exited" if proc["exited"] else ""))
        lines.append("%8s %-*s%6s%6s%6s%6s%7s%7s" % ("TID", NAME_WIDTH, "NAME", "USR", "SYS",
                                                    "LCK", "LAT", "MIGR", "XDOM"))
        for row in proc["threads"]:
            lines.append("%8d %-*s%s%s%s%s%s%s" % (
                row["tid"], NAME_WIDTH, row["name"][:NAME_WIDTH],
                format_cell(row["usr"]), format_cell(row["sys"]), format_cell(row["lck"]),
                format_cell(row["lat"]), format_count(row["migrations"]),
                format_count(row["cross_domain"])))
        lines.append(totals_line(proc["totals"]))
    if "check" in record:
        lines.append("")
        lines.extend(check_lines(record["check"]))
    return lines


def check_lines(check):
    """The ``--check`` section: one line per figure, then the verdict."""
    tol = check["tolerance"]
    lines = ["check against the kernel (agree: within %g%% of its figure or %g%% of "
             "the window, LAT %g us more per wait):"
             % (tol["relative"] * 100, tol["window_percent"], tol["per_wait_ns"] / 1000)]
    for f in check["figures"]:
        if isinstance(f["thread"], int):
            who, against = "PID %d TID %d" % (f["pid"], f["thread"]), "kernel"
        else:
            who, against = "control thread %s" % f["thread"], "known"
        lines.append("  %s %-28s probe %6.2f%%  %s %6.2f%%  %s" % (
            f["what"], who, f["probe"], against, f["kernel"],
            "agrees" if f["ok"] else "DISAGREES"))
    bad = sum(1 for f in check["figures"] if not f["ok"])
    if not check["figures"]:
        lines.append("  nothing to compare (no thread traced over the whole window)")
    elif bad:
        lines.append("  %d of %d figures disagree" % (bad, len(check["figures"])))
    else:
        lines.append("  all %d figures agree" % len(check["figures"]))
    return lines


# -- the command -----------------------------------------------------------------

def live_platform(ctx):
    """The platform to trace: always the running system."""
    if (global_option(ctx, "root") or "/") != "/":
        raise UsageError("probe traces the running system; --root only applies to "
                         "topology and stat")
    native = native_platform(required=True)
    wanted = global_option(ctx, "platform")
    if wanted is not None and wanted != native:
        raise UsageError("probe traces the running system, which is %s, not %s"
                         % (native, wanted))
    return native


@click.command("probe", short_help="Trace lock waits, run-queue latency and migrations.",
               epilog=examples(
                   "tumbler probe all -p 1234                   # all three, for 5 s",
                   "tumbler probe latency -p 1234 --duration 10 # time spent waiting for a CPU",
                   "tumbler probe migrations -p 1234 --json"))
@click.argument("kind", type=click.Choice(probe.KINDS + ("all",)))
@pid_option("Process to trace; repeat for several.", required=True)
@click.option("--duration", type=float, default=None, metavar="SECONDS",
              help="Length of the window (default: %g)." % DEFAULT_DURATION_S)
@level_option("Topology level of the domains behind XDOM (default: auto).")
@domains_option("Explicit domains behind XDOM: CPU lists separated by '/'.")
@click.option("--check", "check", is_flag=True,
              help="Compare with the kernel's own accounting (exit status 1 if they disagree).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def probe_command(ctx, kind, pids, duration, level, domains_text, check, as_json):
    """Trace, per thread, lock waits, run-queue latency (time runnable but
    not running) and migrations between CPUs and domains (XDOM), with
    bpftrace on Linux or DTrace on illumos."""
    kinds = probe.KINDS if kind == "all" else (kind,)
    if duration is None:
        duration = global_option(ctx, "duration") or DEFAULT_DURATION_S
    check_duration(duration)
    if len(set(pids)) != len(pids):
        raise UsageError("a process is given twice with -p")
    if level is None and domains_text is None:
        level, domains_text = global_option(ctx, "level"), global_option(ctx, "domains_text")
    platform = live_platform(ctx)
    backend = open_backend(platform, "/")
    try:
        infos = [check_process(backend, pid) for pid in pids]
        choice = domain_choice(backend, list(pids), level, domains_text)
        check_tracing(platform)
        # Linux keeps no lock time of its own: the check traces two threads
        # of ours whose lock time is known (not on illumos, where LCK has
        # the kernel's microstate to meet, and dtrace -p would stop us).
        controls = (probe_check.LockControls()
                    if check and platform == "linux" and "locks" in kinds else None)
        traced = list(pids) + ([os.getpid()] if controls is not None else [])
        waiter = SignalWaiter()
        try:
            if controls is not None:
                controls.start(backend)
            with probe.ProbeSession(platform, period_ms=PERIOD_MS, backend=backend) as session:
                window = trace_window(backend, session, traced, kinds, cpu_domain_map(choice),
                                      duration, waiter, sampled=list(pids))
                lost = session.lost_events
        finally:
            if controls is not None:
                controls.stop()
            waiter.close()
    finally:
        backend.close()
    record = probe_record(platform, kinds, infos, window, choice, lost, check, controls)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        click.echo(format_domains(choice))
        for line in format_record(record):
            click.echo(line)
    if lost:
        warn("%s lost %d events: the counts are low"
             % ("bpftrace" if platform == "linux" else "dtrace", lost))
    if check and not record["check"]["ok"]:
        bad = [f for f in record["check"]["figures"] if not f["ok"]]
        raise TumblerError("probe check: %d of %d figures disagree with the kernel's"
                           % (len(bad), len(record["check"]["figures"])))
