#!/usr/bin/env python3
"""What tumbler costs on a program of many threads asleep (issue 47), and
how long its hand-back takes, before and after a change, interleaved.

    .venv/bin/python benchmarks/asleep_cost.py [--reps K] [--warm S] [--span S]
        [--policy P] [--tree NAME=PATH ...] N:R [N:R ...]

For each case N:R a program with one busy thread, N threads asleep in
pause() and R short-lived threads born a second (each lives 250 ms, so
tumbler's looks for new threads find them) is started; ``tumbler -p PID
--domains 0/1 --policy P`` (default ``tumbler``: every thread bound, full
rounds) runs from each tree in turn (the order alternates by repetition);
its CPU time (utime+stime from /proc) is read ``--warm`` seconds after its
start and ``--span`` seconds later: its steady share of one CPU.  Then
SIGTERM: the wall time until it exits and its CPU time in that span (the
hand-back), and how many of the program's threads are still on one CPU
(must be 0).  Medians, minima and maxima per tree at the end.

``--tree before=/path/to/old/checkout`` (a checkout with its C modules
built, or copied: the .so files; its ``.venv`` a link to this one's) and
``after=.`` (the default: this tree only).
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static void *sleeper(void *a) { (void)a; for (;;) pause(); return NULL; }
static void *spinner(void *a) { (void)a; for (;;) __asm__ volatile(""); return NULL; }
static void *brief(void *a) { (void)a; usleep(250000); return NULL; }
int main(int argc, char **argv) {
    int n = atoi(argv[1]), r = atoi(argv[2]);
    pthread_attr_t attr; pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    pthread_create(&t, &attr, spinner, NULL);
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&t, &attr, sleeper, NULL);
        if (rc) { fprintf(stderr, "pthread_create %d: %s\n", i, strerror(rc)); return 1; }
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    printf("ready\n"); fflush(stdout);
    if (r <= 0) for (;;) pause();
    long gap = 1000000000L / r;
    for (;;) {
        struct timespec ts = {gap / 1000000000L, gap % 1000000000L};
        nanosleep(&ts, NULL);
        pthread_create(&t, &attr, brief, NULL);
    }
}
"""
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def on_one_cpu(pid):
    count = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            count += len(os.sched_getaffinity(int(tid))) == 1
        except OSError:
            pass
    return count


def one_run(binary, tree, n, r, args, state):
    prog = subprocess.Popen([binary, str(n), str(r)], stdout=subprocess.PIPE)
    try:
        prog.stdout.readline()
        tumbler = subprocess.Popen(
            [os.path.join(tree, ".venv/bin/python"), "-m", "tumbler", "-p", str(prog.pid),
             "--domains", "0/1", "--policy", args.policy], cwd=tree,
            env=dict(os.environ, TUMBLER_STATE_DIR=state), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        time.sleep(args.warm)
        cpu0, wall0 = cpu_s(tumbler.pid), time.monotonic()
        time.sleep(args.span)
        cpu1, wall1 = cpu_s(tumbler.pid), time.monotonic()
        stopped = time.monotonic()
        tumbler.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(tumbler.pid, 0)
        return (100 * (cpu1 - cpu0) / (wall1 - wall0), time.monotonic() - stopped,
                usage.ru_utime + usage.ru_stime - cpu1, on_one_cpu(prog.pid), status >> 8)
    finally:
        prog.kill()
        prog.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--warm", type=float, default=8.0)
    parser.add_argument("--span", type=float, default=12.0)
    parser.add_argument("--policy", default="tumbler")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("cases", nargs="+", metavar="N:R")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) or {"after": "."}
    trees = {name: os.path.abspath(path) for name, path in trees.items()}
    cases = [tuple(map(int, case.split(":"))) for case in args.cases]
    print("load average %s" % open("/proc/loadavg").read().split()[:3], flush=True)
    work = tempfile.mkdtemp(prefix="asleep-cost-")
    binary = os.path.join(work, "sleepers")
    src = binary + ".c"
    with open(src, "w") as f:
        f.write(SOURCE)
    subprocess.run([shutil.which("cc") or "gcc", "-O2", "-pthread", "-o", binary, src],
                   check=True)
    results = {}
    for rep in range(args.reps):
        for n, r in cases:
            names = list(trees) if rep % 2 == 0 else list(reversed(trees))
            for name in names:
                row = one_run(binary, trees[name], n, r, args, os.path.join(work, "state"))
                results.setdefault((n, r, name), []).append(row)
                print("rep %d  %5d asleep %2d new/s  %-8s steady %5.1f%%  hand-back %.3f s "
                      "(CPU %.2f s)  left on one CPU %d  exit %d" % ((rep, n, r, name) + row),
                      flush=True)
    for (n, r, name), rows in sorted(results.items()):
        for i, what in enumerate(("steady CPU %", "hand-back s", "hand-back CPU s")):
            values = [row[i] for row in rows]
            print("%5d asleep %2d new/s  %-8s %-16s median %7.3f  (min %.3f, max %.3f, %d runs)"
                  % (n, r, name, what, statistics.median(values), min(values), max(values),
                     len(values)))
    print("load average %s" % open("/proc/loadavg").read().split()[:3])
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
