#!/bin/sh
# A case where tumbler helps on a machine of 2 CPUs: 3 threads that meet at a
# barrier after every phase and call sched_yield while they wait
# (examples/workloads/spmd -b yield).  Alone, Linux keeps two of them on one
# CPU for long stretches and every phase waits for the slower pair; tumbler's
# default policy sees the yields and rotates the threads over the CPUs
# (speed balancing).  BENCHMARKS.md measured 1.10-1.13x for this case on a
# quiet 2-CPU VM.
#
# The program runs alone (the OS's scheduler) and under `tumbler exec` in
# interleaved pairs (DEMO_PAIRS, default 3); the script prints each time,
# the medians and their ratio, then draws the last tumbler run's log
# (demo.jsonl) to demo.svg.  DEMO_ARGS passes options to the workload (for
# example DEMO_ARGS="-p 5" for a shorter run).  Times are wall-clock: on a
# machine busy with other work they say little.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
.venv/bin/python - "${DEMO_PAIRS:-3}" ${DEMO_ARGS:-} <<'PY'
import statistics
import subprocess
import sys

from tumbler.commands.compare.runs import parse_elapsed

pairs, extra = int(sys.argv[1]), sys.argv[2:]
workload = ["examples/workloads/spmd", "-b", "yield"] + extra
under = [".venv/bin/tumbler", "--log", "demo.jsonl", "exec", "--"]


said = []


def elapsed(command):
    """The workload's own elapsed_s (its line on stdout); tumbler's summary
    (stderr) is kept for the end."""
    run = subprocess.run(command, check=True, capture_output=True, text=True)
    said[:] = [run.stderr]
    value = parse_elapsed(run.stdout)
    if value is None:
        sys.exit("demo: %s printed no elapsed_s= line" % command[-1])
    return value


print("== %s: alone (the OS) and under tumbler exec, %d pairs" % (" ".join(workload), pairs))
alone, tumbler = [], []
for pair in range(1, pairs + 1):
    alone.append(elapsed(workload))
    tumbler.append(elapsed(under + workload))
    print("pair %d: alone %.2f s, with tumbler %.2f s" % (pair, alone[-1], tumbler[-1]))
a, t = statistics.median(alone), statistics.median(tumbler)
print("== what tumbler said of its last run")
print(said[0], end="")
print("== median: alone %.2f s, with tumbler %.2f s: %.2fx as fast with tumbler"
      % (a, t, a / t))
PY
echo "== the last run with tumbler: tumbler plot -o demo.svg demo.jsonl"
.venv/bin/tumbler plot -o demo.svg demo.jsonl
echo "demo.svg written (each domain's load over time, moves, speed balancing's periods)"
