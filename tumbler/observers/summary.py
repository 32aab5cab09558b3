"""The exit summary printed on stderr after a balancing run, and the same
figures as one JSON object (``--summary-json FILE``, see summary_record).

"Early" and "late" spread are the mean per-domain load spread (CV of
per-capacity domain loads, as measured before each round's moves) over the
first and the last quarter of the rounds: a run that balanced well shows a
late figure well below the early one.
"""


#: Start-up at least this long (s) is reported on a line of its own.
STARTUP_NOTE_S = 1.0


def summary_lines(controller, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """``cpu_s``: tumbler's CPU time while balancing; ``process_cpu_s``
    (if known): its process's since it started -- Python's start and the
    set-up before balancing too: 50-80 ms here, more than a short run's
    balancing (BENCHMARKS.md, "The floor under goal 2")."""
    stats = controller.stats
    rate = stats.migrations / wall_s if wall_s > 0 else 0.0
    lines = [
        "ran %.1f s (%s): %d intervals (%d quiet), %d threads seen, %d migrations (%.1f/s), "
        "policy %s%s"
        % (wall_s, end_reason, stats.intervals, stats.quiet, stats.threads_seen,
           stats.migrations, rate, controller.policy.name,
           ", dry run" if controller.dry_run else ""),
        controller.choice.note,
    ]
    if any(d.capacity != len(d.cpus) for d in controller.domains):
        lines.append("measured capacity at the end (CPUs other work leaves): %s"
                     % " / ".join("%.2f" % d.capacity for d in controller.domains))
    if stats.outsiders:
        lines.append("%d thread%s allowed only CPUs outside the domains: left alone"
                     % (stats.outsiders, "" if stats.outsiders == 1 else "s"))
    if stats.pins:
        lines.append("speed balancing: %d core changes (%.1f/s)"
                     % (stats.pins, stats.pins / wall_s if wall_s > 0 else 0.0))
    early, late = stats.spreads.early_late()
    if early is not None:
        lines.append("domain load spread (CV): early %.2f, late %.2f" % (early, late))
    if stats.priority is not None:
        lines.append("loop priority: %s" % stats.priority())
    if stats.startup_s >= STARTUP_NOTE_S:
        lines.append("start-up took %.1f s of it (an overloaded machine delays the start "
                     "before tumbler can raise its priority)" % stats.startup_s)
    share = 100.0 * cpu_s / wall_s if wall_s > 0 else 0.0
    line = "own CPU time %.3f s (%.2f%% of one CPU)" % (cpu_s, share)
    if process_cpu_s is not None:
        line += ", %.3f s with its start-up" % process_cpu_s
    lines.append(line)
    return lines


def summary_record(controller, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """The figures of summary_lines as a JSON-ready dict, for our own
    commands (``compare`` reads it) and scripts; keys are stable:

    ``wall_s`` balancing's wall time, ``end_reason``, ``intervals``,
    ``quiet_intervals``, ``threads_seen``, ``migrations``, ``core_changes``
    (speed balancing's), ``policy``, ``dry_run``, ``domain_note``,
    ``spread_early`` and ``spread_late`` (null without rounds), ``own_cpu_s``
    (tumbler's CPU time from the start of balancing to the restore),
    ``process_cpu_s`` (its process's CPU time from its start to the
    restore: with Python's start and the set-up; null where not known),
    ``capacity`` (each domain's at the end: its CPUs, or what other work
    leaves of them, --capacity measured).
    """
    stats = controller.stats
    early, late = stats.spreads.early_late()
    return {"wall_s": wall_s, "end_reason": end_reason, "intervals": stats.intervals,
            "quiet_intervals": stats.quiet, "threads_seen": stats.threads_seen,
            "migrations": stats.migrations, "core_changes": stats.pins,
            "policy": controller.policy.name, "dry_run": bool(controller.dry_run),
            "domain_note": controller.choice.note, "spread_early": early,
            "spread_late": late, "own_cpu_s": cpu_s, "process_cpu_s": process_cpu_s,
            "capacity": [d.capacity for d in controller.domains]}


def shared_summary_lines(programs, sharing, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """The summary of a space-shared run (``--share space``): each
    program's lines, named by PID, then tumbler's own cost once."""
    counters = sharing.counters
    lines = ["ran %.1f s (%s): %d programs sharing in space (%s), %d partitions"
             % (wall_s, end_reason, len(programs), sharing.policy, sharing.repartitions)]
    for pid, controller in programs:
        own = summary_lines(controller, wall_s, cpu_s, end_reason)
        # Its run line without the wall time; neither priority nor own
        # CPU time (once, below): they are the run's, not the program's.
        lines.append("PID %d: %s" % (pid, own[0].split(": ", 1)[1]))
        lines += ["PID %d: %s" % (pid, line) for line in own[1:-1]
                  if not line.startswith(("loop priority", "start-up took"))]
        rate = counters.rates.get(pid) if counters is not None else None
        if rate is not None:
            lines.append("PID %d: LLC misses per cycle %.4f at the last check" % (pid, rate))
    lines += [line for line in summary_lines(programs[0][1], wall_s, cpu_s, end_reason,
                                             process_cpu_s)
              if line.startswith(("loop priority", "start-up took", "own CPU time"))]
    return lines
