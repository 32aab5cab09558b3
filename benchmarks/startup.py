"""What tumbler's own start and exit cost a user (issue 15).

    python3 benchmarks/startup.py [--runs N] [--tumbler PATH]

Runs, N times each and interleaved (so that the machine's slow minutes
fall on every case alike):

- ``tumbler --version``                    wall time
- ``tumbler exec -q -- true``              wall and CPU time (tumbler's, the
                                           command's is nil)
- ``sleep 1`` and ``tumbler exec -q -- sleep 1``   wall time, and their ratio
                                           per pair
- ``tumbler exec -- sleep 1``              wall time with the summary printed

and prints the median, min and max of each.  CPU time is the children's
rusage around each run.  No figure is asserted: the budgets are in
BENCHMARKS.md.
"""

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time


def timed(argv):
    """(wall s, CPU s) of one run of ``argv``; its output is discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    status = subprocess.call(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status != 0:
        sys.exit("startup.py: %s exited with %d" % (" ".join(argv), status))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def spread(values, scale=1000.0, unit="ms", digits=1):
    values = sorted(values)
    return "%8.*f %s median (%.*f .. %.*f)" % (
        digits, statistics.median(values) * scale, unit, digits, values[0] * scale,
        digits, values[-1] * scale)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tumbler", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "bin", "tumbler"))
    args = parser.parse_args()
    tumbler = args.tumbler
    # Byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (this VM),
    # a module edited since the last compile is compiled at every start,
    # which tripled exec's CPU here (86 ms against 40).
    compileall.compile_dir(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "tumbler"), quiet=1)
    cases = {
        "version": [tumbler, "--version"],
        "true": [tumbler, "exec", "-q", "--", "true"],
        "sleep": ["sleep", "1"],
        "tumbler sleep": [tumbler, "exec", "-q", "--", "sleep", "1"],
        "tumbler sleep summary": [tumbler, "exec", "--", "sleep", "1"],
    }
    results = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            results[name].append(timed(argv))
    print("runs: %d each, interleaved; load average %.2f" % (args.runs, os.getloadavg()[0]))
    print("tumbler --version                 wall %s" % spread([w for w, _ in results["version"]]))
    print("tumbler exec -- true              wall %s" % spread([w for w, _ in results["true"]]))
    print("                                  CPU  %s" % spread([c for _, c in results["true"]]))
    print("sleep 1                           wall %s" % spread(
        [w for w, _ in results["sleep"]], 1.0, "s", 3))
    print("tumbler exec -- sleep 1           wall %s" % spread(
        [w for w, _ in results["tumbler sleep"]], 1.0, "s", 3))
    print("tumbler exec -- sleep 1 (summary) wall %s" % spread(
        [w for w, _ in results["tumbler sleep summary"]], 1.0, "s", 3))
    ratios = [t / s for (s, _), (t, _) in zip(results["sleep"], results["tumbler sleep"])]
    print("ratio per pair                         %s" % spread(ratios, 1.0, "x", 3))


if __name__ == "__main__":
    main()
