#!/usr/bin/env python3
"""How close speed balancing comes to a free, perfect rotation.

    .venv/bin/python benchmarks/rotation_bound.py [--runs N] [--period MS] \\
        [--policy P ...] [--config FILE ...] -- CMD [ARGS...]

Runs CMD interleaved, run by run, three ways:

* ``default``: unmanaged;
* ``rotate``: a minimal external rotator that knows the answer in advance.
  It pins CMD's worker threads round-robin to the allowed CPUs as soon as
  they exist, then every PERIOD ms moves the thread that has waited longest
  from the most crowded CPU to the least crowded one.  It measures nothing
  and costs one sched_setaffinity per period: the upper bound of what
  rotating threads can give on this machine, migrations included;
* with ``--mimic US``, also ``rotate + work``: the same rotator doing what a
  tumbler step does besides deciding -- reading every worker's schedstat
  and the moved thread's mask each step, every worker's status every 5th
  step -- and burning US microseconds of CPU per step: whether tumbler's
  cost, rather than its decisions, is what separates it from the bound;
* ``tumbler --policy P exec -- CMD`` for each ``--policy`` (default auto),
  and ``tumbler --config FILE exec -- CMD`` for each ``--config``.

CMD must print ``elapsed_s=SECONDS`` (the example workloads do).  Prints
mean +- sample sd, min..max and the speedup vs default of each.  Not a
test: run it on an otherwise idle machine.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUMBLER = os.path.join(REPO, ".venv", "bin", "tumbler")


def elapsed(stdout):
    return float(stdout.split("elapsed_s=")[1].split()[0])


def worker_tids(pid):
    return sorted(int(t) for t in os.listdir("/proc/%d/task" % pid) if int(t) != pid)


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def run_rotated(command, workers, period_s, mimic_s=None):
    cpus = sorted(os.sched_getaffinity(0))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        while len(worker_tids(process.pid)) < workers:
            time.sleep(0.0005)
        on = {cpu: [] for cpu in cpus}
        tids = worker_tids(process.pid)[:workers]
        for i, tid in enumerate(tids):
            os.sched_setaffinity(tid, {cpus[i % len(cpus)]})
            on[cpus[i % len(cpus)]].append(tid)
        fds = [os.open("/proc/%d/task/%d/schedstat" % (process.pid, tid), os.O_RDONLY)
               for tid in tids] if mimic_s is not None else []
        steps = 0
        while process.poll() is None:
            time.sleep(period_s)
            steps += 1
            if mimic_s is not None:
                for fd in fds:
                    os.pread(fd, 128, 0)
                if steps % 5 == 0:
                    for tid in tids:
                        with open("/proc/%d/task/%d/status" % (process.pid, tid)) as f:
                            f.read()
                burn(mimic_s)
            crowded = max(cpus, key=lambda c: len(on[c]))
            idlest = min(cpus, key=lambda c: len(on[c]))
            if len(on[crowded]) - len(on[idlest]) < 1 or crowded == idlest:
                continue
            tid = on[crowded].pop(0)        # the one that has waited longest
            on[idlest].append(tid)
            if mimic_s is not None:
                os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {idlest})
    except (ProcessLookupError, FileNotFoundError):
        pass
    finally:
        for fd in locals().get("fds", []):
            os.close(fd)
    return elapsed(process.communicate()[0])


def run_plain(command):
    return elapsed(subprocess.run(command, stdout=subprocess.PIPE, text=True,
                                  check=True).stdout)


def main():
    parser = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--period", type=float, default=20.0, help="rotation period, ms")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker threads to rotate (default: the -t of CMD)")
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--mimic", type=float, default=None, metavar="US",
                        help="also run the rotator doing a tumbler step's reads "
                             "and US microseconds of CPU per step")
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="also run auto with this tumbler --config FILE")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    workers = args.workers or int(command[command.index("-t") + 1])
    policies = args.policy or ["auto"]
    ways = [("default", lambda: run_plain(command)),
            ("rotate %g ms" % args.period,
             lambda: run_rotated(command, workers, args.period / 1000.0))]
    if args.mimic is not None:
        ways.append(("rotate + work", lambda: run_rotated(command, workers, args.period / 1000.0,
                                                          args.mimic / 1e6)))
    ways += [(policy, lambda p=policy: run_plain([TUMBLER, "-q", "--policy", p, "exec", "--"]
                                                 + command)) for policy in policies]
    ways += [("auto " + os.path.basename(path),
              lambda f=path: run_plain([TUMBLER, "-q", "--config", f, "exec", "--"] + command))
             for path in args.config]
    times = {name: [] for name, _ in ways}
    print("load average at start: %.2f; %s" % (os.getloadavg()[0], " ".join(command)))
    for _ in range(args.runs):
        for name, run in ways:
            times[name].append(run())
    base = statistics.mean(times["default"])
    for name, values in times.items():
        mean = statistics.mean(values)
        print("%-16s %.3f +- %.3f s  (%.3f .. %.3f)  speedup %.2fx" % (
            name, mean, statistics.stdev(values) if len(values) > 1 else 0.0,
            min(values), max(values), base / mean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
