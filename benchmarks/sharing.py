#!/usr/bin/env python3
"""Issue 18's two cases, measured as a user feels them (wall time from
start to exit, tumbler's start-up included), interleaved, N repetitions.

``space``: two programs, 2 and 8 CPU-bound threads (examples/workloads/spmd,
one phase), each alone, then together three ways -- plainly (the OS shares
in time), under ``tumbler --share time -p A -p B`` and under ``tumbler
--share space -p A -p B`` (equal-qos) -- with ``--domains`` one domain per
CPU.  Reported: each program's slowdown against running alone, and their
spread (the paper's measure: equal-qos should make them equal).

``capacity``: an uneven program (skewed) with one domain per CPU while a
CPU hog pinned to the last CPU runs, plainly and under ``tumbler exec
--capacity cpus`` and ``--capacity measured``.

    python3 benchmarks/sharing.py space --runs 5
    python3 benchmarks/sharing.py capacity --runs 5 [--hog-nice -10]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = os.path.join(REPO, "examples", "workloads")
TUMBLER = [os.path.join(REPO, ".venv", "bin", "tumbler")]


def spmd(threads, work):
    return [os.path.join(WORKLOADS, "spmd"), "-t", str(threads), "-w", str(work), "-p", "1"]


def together(commands, tumbler_args=None):
    """Start ``commands`` at once (and tumbler on them); wall time of each."""
    started = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in commands]
    agent = None
    if tumbler_args is not None:
        pids = [a for p in procs for a in ("-p", str(p.pid))]
        agent = subprocess.Popen(TUMBLER + tumbler_args + ["-q"] + pids)
    walls = [None] * len(procs)
    left = set(range(len(procs)))
    while left:
        for i in list(left):
            if procs[i].poll() is not None:
                walls[i] = time.monotonic() - started
                left.discard(i)
        time.sleep(0.002)
    if agent is not None:
        agent.wait(timeout=30)
    if any(p.returncode for p in procs):
        sys.exit("a workload failed")
    return walls


def stats(values):
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return "%.3f (min %.3f, max %.3f, sd %.3f)" % (mean, min(values), max(values), sd)


def case_space(runs, domains):
    a, b = spmd(2, 3000), spmd(8, 750)
    ways = {"os": None, "tumbler --share time": ["--domains", domains, "--share", "time"],
            "tumbler --share space": ["--domains", domains, "--share", "space"]}
    alone = {"A": [], "B": []}
    walls = {way: ([], []) for way in ways}
    for run in range(runs):
        alone["A"].append(together([a])[0])
        alone["B"].append(together([b])[0])
        for way, args in ways.items():
            wa, wb = together([a, b], args)
            walls[way][0].append(wa)
            walls[way][1].append(wb)
        print("run %d done" % (run + 1), file=sys.stderr)
    alone_a, alone_b = statistics.fmean(alone["A"]), statistics.fmean(alone["B"])
    print("alone: A (2 threads) %s s, B (8 threads) %s s" % (stats(alone["A"]), stats(alone["B"])))
    print("| way | A wall s | B wall s | A slowdown | B slowdown | spread (sd) | max/min |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for way, (wa, wb) in walls.items():
        sa, sb = statistics.fmean(wa) / alone_a, statistics.fmean(wb) / alone_b
        per_run = [statistics.pstdev([x / alone_a, y / alone_b]) for x, y in zip(wa, wb)]
        print("| %s | %s | %s | %.2f | %.2f | %.2f (runs %.2f-%.2f) | %.2f |"
              % (way, stats(wa), stats(wb), sa, sb, statistics.pstdev([sa, sb]),
                 min(per_run), max(per_run), max(sa, sb) / min(sa, sb)))


def case_capacity(runs, domains, hog_cpu, hog_nice):
    prog = [os.path.join(WORKLOADS, "skewed"), "-t", "4", "-w", "100", "-p", "30", "-s", "1"]
    ways = {"plain": None,
            "tumbler --capacity cpus": ["--domains", domains, "--capacity", "cpus"],
            "tumbler --capacity measured": ["--domains", domains, "--capacity", "measured"]}
    hog = subprocess.Popen(["nice", "-n", str(hog_nice), "taskset", "-c", str(hog_cpu),
                            "sh", "-c", "while :; do :; done"])
    try:
        time.sleep(1)
        walls = {way: [] for way in ways}
        for run in range(runs):
            for way, args in ways.items():
                command = prog if args is None else TUMBLER + args + ["-q", "exec", "--"] + prog
                started = time.monotonic()
                subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
                walls[way].append(time.monotonic() - started)
            print("run %d done" % (run + 1), file=sys.stderr)
    finally:
        hog.kill()
        hog.wait()
    base = statistics.fmean(walls["plain"])
    print("| way | wall s | vs plain |")
    print("| --- | --- | --- |")
    for way, values in walls.items():
        print("| %s | %s | %.3f |" % (way, stats(values), statistics.fmean(values) / base))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=("space", "capacity"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--domains", default="0/1")
    parser.add_argument("--hog-cpu", type=int, default=1)
    parser.add_argument("--hog-nice", type=int, default=0,
                        help="the hog's nice value (-10: it takes most of its CPU, as "
                             "interrupts or a hypervisor's steal would)")
    args = parser.parse_args()
    if args.case == "space":
        case_space(args.runs, args.domains)
    else:
        case_capacity(args.runs, args.domains, args.hog_cpu, args.hog_nice)


if __name__ == "__main__":
    main()
