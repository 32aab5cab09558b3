"""How much a program's CPU use moves from one parked look to the next
(issue 47: the evidence for program.py's WAKE_ABOVE).

    .venv/bin/python benchmarks/parking_noise.py [--looks N] [--demands 0.075,0.08,...]

Starts one ``tests/workloads/crowd`` of 100 mostly sleeping threads per
demand (CPUs it asks in all), reads each one's utime + stime from
/proc/PID/stat every 2/3 s -- the service's looks at parked programs at
the default 2 s scan interval -- and prints per program the spread of
the CPUs it used per look and how many looks reached park_below (0.1) and
1.5 x park_below.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOK_S = 2.0 / 3


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--looks", type=int, default=60)
    parser.add_argument("--demands", default="0.075,0.08,0.085,0.09")
    args = parser.parse_args()
    crowd = os.path.join(tempfile.mkdtemp(prefix="tumbler-parking-noise-"), "crowd")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", crowd,
                    os.path.join(REPO, "tests", "workloads", "crowd.c")], check=True)
    procs = [subprocess.Popen([crowd, "3600", "100", demand], stdout=subprocess.PIPE,
                              text=True) for demand in args.demands.split(",")]
    try:
        for proc in procs:
            proc.stdout.readline()
        time.sleep(2)
        marks = {p.pid: (time.monotonic(), cpu_seconds(p.pid)) for p in procs}
        uses = {p.pid: [] for p in procs}
        for _ in range(args.looks):
            time.sleep(LOOK_S)
            for proc in procs:
                now, cpu = time.monotonic(), cpu_seconds(proc.pid)
                then, before = marks[proc.pid]
                uses[proc.pid].append((cpu - before) / (now - then))
                marks[proc.pid] = (now, cpu)
        print("| asks | mean | min | median | max | looks >= 0.10 | looks >= 0.15 |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for demand, proc in zip(args.demands.split(","), procs):
            u = uses[proc.pid]
            print("| %s | %.3f | %.3f | %.3f | %.3f | %d of %d | %d of %d |"
                  % (demand, statistics.mean(u), min(u), statistics.median(u), max(u),
                     sum(x >= 0.1 for x in u), len(u), sum(x >= 0.15 for x in u), len(u)))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
