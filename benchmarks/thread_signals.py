"""What auto's thresholds see of a program's threads: runnable share,
load, sleeping and switching, per load window, read from outside.

    python benchmarks/thread_signals.py [--window-ms 500] [--windows N] -- CMD...

Starts CMD (alone: no tumbler), and every ``--window-ms`` reads each of
its threads' /proc schedstat (CPU time, run-queue wait) and status
(voluntary and involuntary context switches), as tumbler's rounds do,
and prints one line per thread and window:

    window tid name runnable load cpu vol_per_s switches_per_cpu_s

``runnable`` = (CPU time + run-queue wait) / wall (engine/policy.py,
RUNNABLE_SHARE); ``load`` = demand as engine/window.py computes it (the
runnable share where it is >= 0.9, else the CPU share, capped at 1);
``vol_per_s`` = voluntary switches per second (SLEEPS_PER_SECOND);
``switches_per_cpu_s`` = all switches per CPU-second
(SYNC_SWITCHES_PER_CPU_S).  The first window of a thread (its birth) is
not printed.  Then a summary per thread kind (name less its number, the
main thread apart): min / median / max of each figure over the windows;
and over spans of 4 windows (2 s, as tumbler counts switches) the
workers' sleeps per second and their mean switches per CPU-second, and
per window the spread of the workers' loads.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def read_thread(pid, tid):
    try:
        with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
            run, wait, _ = (int(x) for x in f.read().split())
        vol = invol = 0
        name = ""
        with open("/proc/%d/task/%d/status" % (pid, tid)) as f:
            for line in f:
                if line.startswith("Name:"):
                    name = line.split(None, 1)[1].strip()
                elif line.startswith("voluntary_ctxt_switches:"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol = int(line.split()[1])
        return name, run, wait, vol, invol
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--window-ms", type=int, default=500)
    parser.add_argument("--windows", type=int, default=0, help="stop after N windows")
    parser.add_argument("--span-windows", type=int, default=4,
                        help="windows per span of the span figures (default 4: 2 s)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    last = {}
    rows = []
    window = 0
    try:
        while child.poll() is None:
            now = time.monotonic_ns()
            seen = {}
            for entry in os.listdir("/proc/%d/task" % child.pid):
                tid = int(entry)
                got = read_thread(child.pid, tid)
                if got is not None:
                    seen[tid] = (now,) + got
            for tid, (t, name, run, wait, vol, invol) in seen.items():
                before = last.get(tid)
                if before is not None and before[2] > 0:
                    span = t - before[0]
                    ran = run - before[2]
                    runnable = (ran + wait - before[3]) / span
                    cpu = ran / span
                    load = min(1.0, runnable if runnable >= 0.9 else cpu)
                    vol_s = (vol - before[4]) * 1e9 / span
                    per_cpu = ((vol + invol - before[4] - before[5]) * 1e9 / ran
                               if ran > 0 else float("nan"))
                    kind = "main" if tid == child.pid else \
                        name.rstrip("0123456789").rstrip("-") or name
                    rows.append((kind, runnable, load, cpu, vol_s, per_cpu, window, tid,
                                 vol - before[4], vol + invol - before[4] - before[5], ran,
                                 span))
                    print("%d %d %s %.3f %.3f %.3f %.1f %.0f" % (
                        window, tid, name, runnable, load, cpu, vol_s, per_cpu))
            last = seen
            window += 1
            if args.windows and window > args.windows:
                break
            time.sleep(args.window_ms / 1000.0)
    finally:
        if child.poll() is None:
            child.terminate()
        child.wait()
    print("# kind n: runnable / load / vol_per_s / switches_per_cpu_s as min median max")
    for kind in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == kind]
        parts = []
        for i in (1, 2, 4, 5):
            values = sorted(r[i] for r in mine if r[i] == r[i])
            parts.append("%.3f %.3f %.3f" % (values[0], statistics.median(values), values[-1])
                         if values else "-")
        print("# %s %d: %s" % (kind, len(mine), " / ".join(parts)))
    spans(rows, args.span_windows)
    return 0


def spans(rows, width):
    """Figures over spans of ``width`` windows (2 s by default, the span
    tumbler counts switches over), of the workers (not the main thread):
    each worker's voluntary switches per second; the workers' mean
    switches per CPU-second (the mean of their rates, as engine/policy.py
    takes it); and per window the spread (max - min) of the workers'
    loads."""
    workers = [r for r in rows if r[0] != "main"]
    if not workers:
        return
    first = min(r[6] for r in workers)
    by_span = {}
    for r in workers:
        by_span.setdefault((r[6] - first) // width, {}).setdefault(r[7], []).append(r)
    sleeps, crowd = [], []
    for threads in by_span.values():
        full = {tid: rs for tid, rs in threads.items() if len(rs) == width}
        rates = []
        for rs in full.values():
            wall = sum(r[11] for r in rs)
            sleeps.append(sum(r[8] for r in rs) * 1e9 / wall)
            ran = sum(r[10] for r in rs)
            if ran > 0:
                rates.append(sum(r[9] for r in rs) * 1e9 / ran)
        if rates and len(rates) == len(threads):
            crowd.append(sum(rates) / len(rates))
    by_window = {}
    for r in workers:
        by_window.setdefault(r[6], []).append(r[2])
    spread = sorted(max(v) - min(v) for v in by_window.values() if len(v) > 1)

    def summary(values):
        values = sorted(values)
        if not values:
            return "-"
        return "min %.3f median %.3f p90 %.3f max %.3f (n %d)" % (
            values[0], statistics.median(values), values[int(0.9 * (len(values) - 1))],
            values[-1], len(values))
    print("# spans of %d windows: workers' sleeps per second: %s" % (width, summary(sleeps)))
    print("# spans of %d windows: the workers' mean switches per CPU-second: %s"
          % (width, summary(crowd)))
    print("# per window: spread of the workers' loads: %s" % summary(spread))


if __name__ == "__main__":
    sys.exit(main())
