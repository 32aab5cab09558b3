"""The exit summary printed on stderr after a balancing run, and the same
figures as one JSON object (``--summary-json FILE``, see summary_record).

"Early" and "late" spread are the mean per-domain load spread (CV of
per-capacity domain loads, as measured before each round's moves) over the
first and the last quarter of the rounds: a run that balanced well shows a
late figure well below the early one.
"""


#: Start-up at least this long (s) is reported on a line of its own.
STARTUP_NOTE_S = 1.0


def seconds(value):
    """A duration as people read it: ``0.3 s``, ``12 s``, ``2 min 5 s``."""
    if value < 10:
        return "%.1f s" % value
    if value < 120:
        return "%.0f s" % value
    return "%d min %d s" % divmod(round(value), 60)


def percent(value):
    """A percentage to the digits that mean something: ``82%``, ``0.8%``."""
    if value >= 10:
        return "%.0f%%" % value
    if value >= 0.1:
        return "%.1f%%" % value
    return "under 0.1%" if value > 0 else "0%"


def per_second(count, wall_s):
    return "%.1f a second" % (count / wall_s) if wall_s > 0 else "in no time"


def plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def threads_of(stats):
    """``5 threads`` or, where they were of several processes (exec's
    ``sh -c`` and its children), ``9 threads of 4 processes``."""
    processes = len(stats.processes_seen)
    text = plural(stats.threads_seen, "thread")
    return text + (" of %d processes" % processes if processes > 1 else "")


def what_it_did(controller, wall_s):
    """The summary's lines on what the run did, for one program."""
    stats = controller.stats
    domains = controller.domains
    planned = len(controller.merger.unmerged().domains)     # merged at the end or not
    if planned < 2:
        lines = ["watched %s on one domain" % threads_of(stats)]
    else:
        moved = stats.threads_moved
        lines = ["grouped %s into %d domains; %s" % (
            threads_of(stats), planned,
            "moved no thread between them" if not stats.migrations else
            "moved %s between them, %s in all (%s)" % (
                plural(moved, "thread"), plural(stats.migrations, "move"),
                per_second(stats.migrations, wall_s)))]
    if stats.pins:
        lines.append("speed balancing: %s of a thread's core (%s)"
                     % (plural(stats.pins, "change"), per_second(stats.pins, wall_s)))
    elif controller.policy.name in ("auto", "speed"):
        lines.append("speed balancing never engaged: it acts when more runnable threads "
                     "than cores meet at barriers")
    lines += stats.mechanisms.summary_lines(wall_s)
    lines.append(controller.choice.note)
    lines.append("%s, %d of them quiet (nothing to change)"
                 % (plural(stats.intervals, "round"), stats.quiet))
    if any(d.capacity != len(d.cpus) for d in domains):
        lines.append("measured capacity at the end (CPUs other work leaves): %s"
                     % " / ".join("%.2f" % d.capacity for d in domains))
    if stats.outsiders:
        lines.append("%s allowed only CPUs outside the domains: left alone"
                     % plural(stats.outsiders, "thread"))
    early, late = stats.spreads.early_late()
    if early is not None and len(domains) > 1:
        lines.append("domain loads differed by %s (CV) early in the run, %s late"
                     % (percent(100 * early), percent(100 * late)))
    return lines


def own_cost_lines(stats, wall_s, cpu_s, process_cpu_s):
    """tumbler's own cost: how its loop was scheduled, a slow start, its CPU time."""
    lines = []
    if stats.priority is not None:
        lines.append("priority: %s" % stats.priority())
    if stats.startup_s >= STARTUP_NOTE_S:
        lines.append("start-up took %s of it (an overloaded machine delays the start "
                     "before tumbler can raise its priority)" % seconds(stats.startup_s))
    # The figures --summary-json gives (rounded as there), so that the two
    # never differ in the last digit shown.
    line = "own CPU time %.3f s (%s of one CPU)" % (
        rounded(cpu_s, CPU_DIGITS), percent(100.0 * cpu_s / wall_s if wall_s > 0 else 0.0))
    if process_cpu_s is not None:
        line += ", %.3f s with its start-up" % rounded(process_cpu_s, CPU_DIGITS)
    lines.append(line)
    return lines


def policy_text(controller):
    """"policy NAME", and that nothing was moved on a dry run."""
    return "policy %s%s" % (controller.policy.name,
                            ", dry run: nothing was moved" if controller.dry_run else "")


def summary_lines(controller, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """``cpu_s``: tumbler's CPU time while balancing; ``process_cpu_s``
    (if known): its process's since it started -- Python's start and the
    set-up before balancing too: 50-80 ms here, more than a short run's
    balancing (BENCHMARKS.md, "The floor under goal 2")."""
    return (["ran %s (%s), %s" % (seconds(wall_s), end_reason, policy_text(controller))]
            + what_it_did(controller, wall_s)
            + own_cost_lines(controller.stats, wall_s, cpu_s, process_cpu_s))


def summary_record(controller, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """The figures of summary_lines as a JSON-ready dict, for our own
    commands (``compare`` reads it) and scripts; keys are stable:

    ``wall_s`` balancing's wall time, ``end_reason``, ``intervals``,
    ``quiet_intervals``, ``threads_seen``, ``processes_seen`` (the threads'),
    ``migrations`` (moves between domains), ``threads_moved`` (threads moved
    at least once), ``core_changes``
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
    return {"wall_s": rounded(wall_s, WALL_DIGITS), "end_reason": end_reason,
            "intervals": stats.intervals, "quiet_intervals": stats.quiet,
            "threads_seen": stats.threads_seen,
            "processes_seen": len(stats.processes_seen),
            "migrations": stats.migrations, "threads_moved": stats.threads_moved,
            "core_changes": stats.pins,
            "policy": controller.policy.name, "dry_run": bool(controller.dry_run),
            "domain_note": controller.choice.note,
            "spread_early": rounded(early, SHARE_DIGITS),
            "spread_late": rounded(late, SHARE_DIGITS),
            "own_cpu_s": rounded(cpu_s, CPU_DIGITS),
            "process_cpu_s": rounded(process_cpu_s, CPU_DIGITS),
            "capacity": [rounded(d.capacity, SHARE_DIGITS) for d in controller.domains]}


#: Digits kept in --summary-json: wall time to the ms, CPU times to 0.1 ms
#: (the kernel's accounting is in ns, but /proc's clock ticks are 10 ms and a
#: run's CPU time varies by more than 0.1 ms), spreads and capacities to 0.1%.
WALL_DIGITS, CPU_DIGITS, SHARE_DIGITS = 3, 4, 3


def rounded(value, digits):
    return None if value is None else round(value, digits)


def shared_summary_lines(programs, sharing, wall_s, cpu_s, end_reason, process_cpu_s=None):
    """The summary of a space-shared run (``--share space``): each
    program's lines, named by PID, then tumbler's own cost once."""
    counters = sharing.counters
    lines = ["ran %s (%s): %d programs sharing in space (%s), %s"
             % (seconds(wall_s), end_reason, len(programs), sharing.policy,
                plural(sharing.repartitions, "partition"))]
    for pid, controller in programs:
        lines.append("PID %d: %s" % (pid, policy_text(controller)))
        lines += ["PID %d: %s" % (pid, line) for line in what_it_did(controller, wall_s)]
        rate = counters.rates.get(pid) if counters is not None else None
        if rate is not None:
            lines.append("PID %d: LLC misses per cycle %.4f at the last check" % (pid, rate))
    return lines + own_cost_lines(programs[0][1].stats, wall_s, cpu_s, process_cpu_s)
