#!/usr/bin/env python3
"""Soak: does tumbler stay flat over a long run?

    .venv/bin/python benchmarks/soak.py                 # 10 minutes
    .venv/bin/python benchmarks/soak.py --minutes 1     # a smoke run

tumbler manages one 64-thread program (tests/workloads/churn.c, compiled on
the fly) for ``--minutes``: 64 long-lived threads whose duty cycles change
every 2 s (``-V``), while the main thread creates and joins ``--rate``
short threads a second.  Every ``--every`` seconds the script reads
tumbler's resident set size (VmRSS of /proc/PID/status) and CPU time
(utime + stime of /proc/PID/stat) and prints a row.

At the end it fits a line through RSS after a warm-up (the first fifth of
the run, but no less than its first minute or first third, whichever is
shorter) and compares the first and last thirds of tumbler's CPU share:

* RSS is flat if its fitted growth over the measured window stays below 2%
  of the mean RSS plus 256 KiB (the allocator's granularity);
* CPU is flat if the last third's share is at most 1.25 times the first
  third's plus 0.5 percentage points.

Then it stops tumbler with SIGTERM, prints its exit summary, checks every
surviving thread of the program got its original mask back, and exits 0 if
all of that holds, 1 if not.  Domains: ``--domains`` if given, else the
CPUs tumbler may use split in two halves, so there is balancing to do even
on a machine with one socket.  Not part of the test suite: the 10-minute run
belongs in a release check.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHURN_C = os.path.join(REPO, "tests", "workloads", "churn.c")
sys.path.insert(0, os.path.join(REPO, "tests"))
from support.helpers import thread_masks  # noqa: E402  (the tests' own reader)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def build_churn(directory):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        sys.exit("soak: a C compiler (gcc) is needed")
    out = os.path.join(directory, "churn")
    subprocess.run([compiler, "-O2", "-pthread", "-o", out, CHURN_C], check=True)
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def default_domains():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("soak: needs at least 2 CPUs to have domains to balance across")
    half = len(cpus) // 2
    return "%s/%s" % (",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:])))


def slope(xs, ys):
    """Least-squares slope of ys over xs (0 with fewer than 2 points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def verdicts(rows):
    """(rss_flat, cpu_flat, lines) from rows of (t_s, rss_kib, cpu_s, share_pct)."""
    lines = []
    total = rows[-1][0] if rows else 0
    warm_up = max(total / 5, min(60.0, total / 3))  # start-up: interpreter, first threads
    warm = [r for r in rows if r[0] >= warm_up]
    if len(warm) < 3:
        return False, False, ["too few samples for a verdict: run longer (--minutes)"]
    per_min = slope([r[0] / 60 for r in warm], [r[1] for r in warm])
    mean_rss = sum(r[1] for r in warm) / len(warm)
    growth = per_min * (warm[-1][0] - warm[0][0]) / 60      # fitted, over the window
    rss_flat = growth < 0.02 * mean_rss + 256
    lines.append("RSS: mean %.1f MiB, trend %+.1f KiB/min, %+.0f KiB over the last %.0f s: %s"
                 % (mean_rss / 1024, per_min, growth, warm[-1][0] - warm[0][0],
                    "flat" if rss_flat else "NOT FLAT"))
    shares = [r[3] for r in rows[1:]]
    third = max(1, len(shares) // 3)
    first, last = sum(shares[:third]) / third, sum(shares[-third:]) / third
    cpu_flat = last <= 1.25 * first + 0.5
    lines.append("CPU: %.2f%% of one CPU in the first third, %.2f%% in the last: %s"
                 % (first, last, "flat" if cpu_flat else "NOT FLAT"))
    return rss_flat, cpu_flat, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=64, help="long-lived threads")
    parser.add_argument("--rate", type=int, default=200,
                        help="short threads created and joined per second")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--domains", default=None, help="tumbler --domains (default: halves)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.minutes <= 0 or args.threads < 1 or args.rate < 10 or args.every <= 0:
        parser.error("need --minutes > 0, --threads >= 1, --rate >= 10, --every > 0")

    rng = random.Random(args.seed)
    loads = [str(rng.randint(5, 60)) for _ in range(args.threads)]
    seconds = args.minutes * 60
    domains = args.domains or default_domains()
    workdir = tempfile.mkdtemp(prefix="tumbler-soak-")
    program = tumbler = None
    try:
        churn = build_churn(workdir)
        program = subprocess.Popen([churn, "-d", "%g" % (seconds + 30), "-r", str(args.rate),
                                    "-V", "-w", *loads],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while len(thread_masks(program.pid)) < args.threads + 1:
            if time.monotonic() > deadline:
                sys.exit("soak: the program never started its threads")
            time.sleep(0.05)
        before = thread_masks(program.pid)
        summary_path = os.path.join(workdir, "tumbler.err")
        with open(summary_path, "w") as summary:
            tumbler = subprocess.Popen([sys.executable, "-m", "tumbler", "--domains", domains,
                                        "-p", str(program.pid)],
                                       stderr=summary, cwd=REPO)
        print("soak: %d long-lived threads (loads %s%%...), %d short threads/s, domains %s, "
              "%g minutes, tumbler PID %d"
              % (args.threads, ",".join(loads[:6]), args.rate, domains, args.minutes,
                 tumbler.pid))
        print("%8s %10s %10s %10s %8s" % ("t (s)", "RSS (MiB)", "CPU (s)", "CPU (%)",
                                          "threads"))
        rows = []
        started = time.monotonic()
        last_t, last_cpu = 0.0, cpu_seconds(tumbler.pid)
        while True:
            time.sleep(max(0.0, started + (len(rows) + 1) * args.every - time.monotonic()))
            if tumbler.poll() is not None:
                sys.exit("soak: tumbler exited early (status %d); see %s"
                         % (tumbler.returncode, summary_path))
            t = time.monotonic() - started
            rss, cpu = rss_kib(tumbler.pid), cpu_seconds(tumbler.pid)
            share = 100.0 * (cpu - last_cpu) / (t - last_t)
            last_t, last_cpu = t, cpu
            rows.append((t, rss, cpu, share))
            print("%8.0f %10.1f %10.2f %10.2f %8d"
                  % (t, rss / 1024, cpu, share, len(os.listdir("/proc/%d/task" % program.pid))),
                  flush=True)
            if t >= seconds:
                break
        tumbler.send_signal(signal.SIGTERM)
        status = tumbler.wait(timeout=60)
        with open(summary_path) as f:
            for line in f.read().splitlines()[-6:]:
                print("  " + line)
        after = thread_masks(program.pid)
        wrong = sorted(tid for tid, mask in after.items() if tid in before
                       and mask != before[tid])
        rss_flat, cpu_flat, lines = verdicts(rows)
        for line in lines:
            print("verdict: " + line)
        print("verdict: tumbler exited %d; %s" % (
            status, "every thread has its original mask" if not wrong
            else "threads %s do NOT have their original mask" % wrong))
        ok = rss_flat and cpu_flat and status == 0 and not wrong
        print("verdict: %s" % ("flat" if ok else "NOT FLAT / FAILED"))
        return 0 if ok else 1
    finally:
        if tumbler is not None and tumbler.poll() is None:
            tumbler.send_signal(signal.SIGTERM)
            try:
                tumbler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                tumbler.kill()
                tumbler.wait()
        if program is not None:
            program.kill()
            program.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
