"""compare's report: per policy the figures of its runs (``stats``), as
the JSON object of the package doc (keys stable for scripts) and as a
text table."""

import math
import shlex

from ...cpulist import format_cpulist
from .stats import paired_verdict, slowdown_spread, speedup, summarize
from .variants import ALONE


def report(setup, policies, runs, results, failed):
    """The JSON-ready report (see the package docstring for the keys)."""
    summaries = {}
    for policy in policies:
        made = [r for r in results if r.policy == policy]
        done = [r for r in made if r.ok]
        elapsed = [r.elapsed_s for r in done]
        agent = [r.agent_cpu_s for r in done if r.agent_cpu_s is not None]
        summaries[policy] = {
            "policy": policy,
            "runs": len(done),
            "statuses": [r.status for r in made],
            "wall_s": summarize(r.wall_s for r in done),
            "elapsed_s": summarize(elapsed) if None not in elapsed else None,
            "agent_cpu_s": math.fsum(agent) / len(agent) if agent else None,
            "probe": _probe_means(done) if setup.probe_kinds else None,
        }
    default = summaries.get("default")
    default_done = [r for r in results if r.policy == "default" and r.ok]
    for policy, summary in summaries.items():
        for key, measure in (("speedup_vs_default", "wall_s"),
                             ("elapsed_speedup_vs_default", "elapsed_s")):
            summary[key] = speedup(_mean(default, measure), _mean(summary, measure))
        summary["verdict"] = None if policy == "default" else paired_verdict(
            default_done, [r for r in results if r.policy == policy and r.ok])
    if setup.together:
        _add_slowdowns(summaries, results, len(setup.programs))
    # Keys of --together and --background appear only when they are given.
    extended = bool(setup.together or setup.background)
    hidden = ({"programs"} if not setup.together else set()) | \
        ({"failure"} if not extended else set())
    data = {
        "command": list(setup.command),
        "runs": runs,
        "domains": [format_cpulist(d) for d in setup.domains],
        "domain_note": setup.domain_note,
        "results": [summaries[policy] for policy in policies],
        "run_results": [{key: value for key, value in r._asdict().items() if key not in hidden}
                        for r in results],
        "failed": ({"run": failed.run, "policy": failed.policy, "status": failed.status}
                   if failed is not None else None),
    }
    if extended and failed is not None:
        data["failed"]["failure"] = failed.failure
    if setup.together:
        data["programs"] = setup.programs
    if setup.background:
        data["background"] = [list(c) for c in setup.background]
    return data


def _add_slowdowns(summaries, results, count):
    """--together: per policy, each program's wall (and elapsed_s) figures,
    its slowdown against running alone, and the spread of the slowdowns."""
    for policy, summary in summaries.items():
        done = [r for r in results if r.policy == policy and r.ok]
        programs = []
        for index in range(count):
            elapsed = [r.programs[index]["elapsed_s"] for r in done]
            programs.append({
                "wall_s": summarize(r.programs[index]["wall_s"] for r in done),
                "elapsed_s": summarize(elapsed) if None not in elapsed else None})
        summary["programs"] = programs
    alone = summaries.get(ALONE, {}).get("programs") or [{}] * count
    for summary in summaries.values():
        for program, by_itself in zip(summary["programs"], alone):
            for key, measure in (("slowdown", "wall_s"), ("elapsed_slowdown", "elapsed_s")):
                # this mean over the mean alone: speedup()'s ratio, the other way up
                program[key] = speedup(_mean(program, measure), _mean(by_itself, measure))
        summary["slowdown_spread"] = slowdown_spread([p["slowdown"]
                                                      for p in summary["programs"]])


#: Per-run probe figures averaged per policy (--probe).
_PROBE_FIGURES = ("lock_s", "lock_waits", "runq_s", "runq_waits", "runq_mean_ms",
                  "migrations", "cross_domain")


def _probe_means(runs):
    """Mean of each probe figure over the runs traced to the end; None if none was."""
    traced = [r.probe for r in runs if r.probe is not None and r.probe["failure"] is None]
    if not traced:
        return None
    means = {"runs": len(traced)}
    for figure in _PROBE_FIGURES:
        values = [p[figure] for p in traced if figure in p]
        if values:
            means[figure] = math.fsum(values) / len(values)
    return means


def _mean(summary, measure):
    if summary is None or summary[measure] is None:
        return None
    return summary[measure]["mean"]


def _cell(value, fmt, width):
    return ("%" + str(width) + "s") % ("-" if value is None else fmt % value)


def format_table(data):
    """The report as a text table, one line per policy."""
    width = max([9] + [len(row["policy"]) for row in data["results"]])
    lines = ["command: %s" % " ".join(data["command"])]
    for index, program in enumerate(data.get("programs") or [], 1):
        lines.append("  program #%d: %s" % (index, shlex.join(program)))
    for command in data.get("background") or []:
        lines.append("background: %s" % shlex.join(command))
    lines += [
        "%d run%s per policy, interleaved; domains %s (%s)" % (
            data["runs"], "" if data["runs"] == 1 else "s", " / ".join(data["domains"]),
            data["domain_note"]),
        "",
        "%*s%s  %9s  %s  %8s" % (width + 7, "", " wall time (s) ".center(38, "-"),
                                 "elapsed_s", "speedup vs default", "agent"),
        "%-*s %4s  %7s %7s %7s %7s %6s  %9s  %8s %9s  %8s" % (
            width, "policy", "runs", "mean", "median", "min", "max", "CV", "mean", "wall",
            "elapsed", "CPU s"),
    ]
    for row in data["results"]:
        wall = row["wall_s"] or {}
        elapsed = row["elapsed_s"] or {}
        lines.append("%-*s %4d  %s %s %s %s %s  %s  %s %s  %s" % (
            width, row["policy"], row["runs"],
            _cell(wall.get("mean"), "%.3f", 7), _cell(wall.get("median"), "%.3f", 7),
            _cell(wall.get("min"), "%.3f", 7), _cell(wall.get("max"), "%.3f", 7),
            _cell(100 * wall["cv"] if wall else None, "%.1f%%", 6),
            _cell(elapsed.get("mean"), "%.3f", 9),
            _cell(row["speedup_vs_default"], "%.2f", 8),
            _cell(row["elapsed_speedup_vs_default"], "%.2f", 9),
            _cell(row["agent_cpu_s"], "%.3f", 8)))
    verdicts = [row for row in data["results"] if row.get("verdict")]
    if verdicts:
        lines += ["", "against default, paired runs (policy wall / default wall):"]
        for row in verdicts:
            v = row["verdict"]
            lines.append("  %s: %s, median %.3f, %.0f%% interval %.3f-%.3f over %d pair%s" % (
                row["policy"], v["verdict"], v["ratio_median"], 100 * v["confidence"],
                v["ratio_low"], v["ratio_high"], v["pairs"], "" if v["pairs"] == 1 else "s"))
    if any(row.get("probe") for row in data["results"]):
        lines += ["", "probes, mean per run (traced from the command's start):",
                  "%-*s %6s  %10s %9s  %12s %9s  %10s %12s" % (
                      width, "policy", "traced", "lock s", "waits", "runq mean ms", "waits",
                      "migrations", "cross-domain")]
        for row in data["results"]:
            probe = row.get("probe") or {}
            lines.append("%-*s %6s  %s %s  %s %s  %s %s" % (
                width, row["policy"], probe.get("runs", 0),
                _cell(probe.get("lock_s"), "%.3f", 10), _cell(probe.get("lock_waits"), "%.0f", 9),
                _cell(probe.get("runq_mean_ms"), "%.3f", 12),
                _cell(probe.get("runq_waits"), "%.0f", 9),
                _cell(probe.get("migrations"), "%.0f", 10),
                _cell(probe.get("cross_domain"), "%.0f", 12)))
    if data.get("programs"):
        lines += _together_lines(data, width)
    lines += [
        "",
        "speedup = default's mean / the policy's mean: above 1 is faster than default.",
        "agent CPU = mean CPU seconds spent placing threads (tumbler's own, from its "
        "summary; compare's pinning loop for pinned and psets).",
    ]
    if data.get("programs"):
        lines += [
            "programs together: a run's wall time is from their release to the end of the "
            "last (alone: the sum of theirs);",
            "slowdown = a program's mean wall under the policy / its mean wall alone; "
            "stdev (population) and max/min of the slowdowns: their spread."]
    if data["failed"] is not None:
        failed = data["failed"]
        if failed.get("failure"):
            lines.append("run %d of %s FAILED: %s; later runs were not made."
                         % (failed["run"], failed["policy"], failed["failure"]))
        else:
            lines.append("run %d of %s FAILED with exit status %d; later runs were not made."
                         % (failed["run"], failed["policy"], failed["status"]))
    return lines


def _together_lines(data, width):
    """--together: each program's mean wall and slowdown per policy, and
    the spread of the slowdowns."""
    count = len(data["programs"])
    lines = ["", "%-*s %s  %s" % (
        width, "programs", "  ".join("%s" % (" #%d " % i).center(17, "-")
                                     for i in range(1, count + 1)),
        " slowdowns ".center(23, "-")),
        "%-*s %s  %7s %7s %7s" % (width, "policy", "  ".join(
            "%8s %8s" % ("wall s", "slowdown") for _ in range(count)),
            "mean", "stdev", "max/min")]
    for row in data["results"]:
        spread = row.get("slowdown_spread") or {}
        lines.append("%-*s %s  %s %s %s" % (
            width, row["policy"], "  ".join(
                "%s %s" % (_cell((p["wall_s"] or {}).get("mean"), "%.3f", 8),
                           _cell(p["slowdown"], "%.2f", 8)) for p in row["programs"]),
            _cell(spread.get("mean"), "%.2f", 7), _cell(spread.get("stdev"), "%.3f", 7),
            _cell(spread.get("max_over_min"), "%.2f", 7)))
    return lines
