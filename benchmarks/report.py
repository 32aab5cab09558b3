#!/usr/bin/env python3
"""Turn benchmarks/results/*.json (from run_compare.sh) into Markdown tables.

    python3 benchmarks/report.py [RESULTS_DIR]

One table per case: per policy the workload's own elapsed time (mean,
+- sample standard deviation, min..max), the speedup vs default on those
means, wall time including start-up, and the placing agent's CPU time.
"""

import json
import os
import sys


def table(path):
    data = json.load(open(path))
    name = os.path.basename(path)[:-5]
    lines = ["### %s" % name, "",
             "`tumbler compare --runs %d%s -- %s`" % (
                 data["runs"], "" if not data.get("domain_note", "").startswith("explicit")
                 else " --domains " + "/".join(data["domains"]), " ".join(
                     c.replace(os.getcwd() + "/", "") for c in data["command"])), "",
             "| policy | elapsed s (mean +- sd) | min .. max | CV | speedup vs default "
             "| wall s | agent CPU s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for result in data["results"]:
        e = result["elapsed_s"] or result["wall_s"]
        sd = e["cv"] * e["mean"]
        speed = result.get("elapsed_speedup_vs_default") or result.get("speedup_vs_default")
        cpu = result.get("agent_cpu_s")
        lines.append("| %s | %.3f +- %.3f | %.3f .. %.3f | %.1f%% | %s | %.2f | %s |" % (
            result["policy"], e["mean"], sd, e["min"], e["max"], 100 * e["cv"],
            "%.2fx" % speed if speed else "-", result["wall_s"]["mean"],
            "%.3f" % cpu if cpu is not None else "-"))
    if data.get("failed"):
        lines.append("")
        lines.append("A run failed: %s" % data["failed"])
    return "\n".join(lines) + "\n"


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results")
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            print(table(os.path.join(directory, name)))


if __name__ == "__main__":
    main()
