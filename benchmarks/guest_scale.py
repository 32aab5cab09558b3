#!/usr/bin/env python3
"""The Tumbler paper's metric in a multi-socket guest (issue 48, item 3):
the spread of CPU utilisation across sockets under the OS alone and under
tumbler, on the paper's scenarios, and what tumbler did.

    benchmarks/guest_scale.py [--scenario NAME] [--kernel 6.1] [--sockets 2 --cores 8]
                              [--threads-per-stage N] [--windows 3] [--window-s 10]
    benchmarks/guest_scale.py --three-on-two [--kernel 6.12] [--window-s 10]

On the host it boots a guest of that shape (scripts/guest, TCG: figures
relative only) and runs itself there with ``--inside``.  Scenarios (N: the
guest's CPUs; the paper's sections 2 and 5):

``pipeline``      examples/workloads/pipeline, ferret's stage weights 2, 1,
                  11, 36 (the paper's Table I), N/4 threads per stage.
``varying``       skewed: N threads of shares 1 : 2 : ... (skew 1) that move
                  one thread along every 10 phases (--rotate): loads that
                  vary in time, as many threads as CPUs.
``overloaded``    skewed: 2N threads of uneven shares (skew 0.5): twice as
                  many threads as CPUs.
``two-programs``  two pipelines of N/8 threads per stage, both given to one
                  tumbler (``-p A -p B``).
``daemons``       the pipeline beside three daemons that each burn 20 ms of
                  CPU every 100 ms, unmanaged.

It lets the programs settle, reads each socket's CPU utilisation from
/proc/stat over ``--windows`` windows (the OS alone), then attaches
``nice -n -20 tumbler -p PID...`` (a TCG guest starts Python slowly:
tumbler(8) advises nice -20 on a loaded machine) without ``--log`` or
``-v`` (either makes every round a full one: a TCG guest's full round costs
tens of ms), waits for its claim and 2 s more, and reads the same windows
again.  tumbler's own CPU in each window is taken off the socket it ran on
(its CPU time and the CPU it last ran on, read every 0.5 s): the metric is
about the programs' placement, not tumbler's cost, which is reported
apart.  Spread: (busiest socket - least busy) / their mean, in CPUs used.
Moves per second: the programs' threads whose affinity mask changed
between two reads 0.5 s apart, over the tumbler windows.  It prints one
JSON object: the windows, the spreads, moves per second, and tumbler's
summary (``--summary-json``: rounds full and quiet, threads moved,
speed balancing's core changes, its CPU) with its summary lines (what
acted where, for how long).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sockets_of_cpus():
    sockets = {}
    for name in os.listdir("/sys/devices/system/cpu"):
        if name.startswith("cpu") and name[3:].isdigit():
            path = "/sys/devices/system/cpu/%s/topology/physical_package_id" % name
            with open(path) as f:
                sockets[int(name[3:])] = int(f.read())
    return sockets


def busy_ticks():
    """cpu -> busy ticks (all but idle and iowait)."""
    found = {}
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0].startswith("cpu") and fields[0][3:].isdigit():
                ticks = [int(x) for x in fields[1:9]]
                found[int(fields[0][3:])] = sum(ticks) - ticks[3] - ticks[4]
    return found


class Sampler:
    """Every 0.5 s: the busy ticks of each CPU, tumbler's CPU time and the
    CPU it last ran on, and the programs' threads' affinity masks."""

    def __init__(self, sockets, programs):
        self.sockets = sockets
        self.programs = programs
        self.tumbler = None
        self.hz = os.sysconf("SC_CLK_TCK")

    def masks(self):
        found = {}
        for pid in self.programs:
            try:
                tids = os.listdir("/proc/%d/task" % pid)
            except OSError:
                continue
            for tid in tids:
                try:
                    found[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
                except OSError:
                    pass
        return found

    def tumbler_cpu(self):
        """(CPU s, the CPU it last ran on) of tumbler's process, or None."""
        if self.tumbler is None:
            return None
        try:
            with open("/proc/%d/stat" % self.tumbler) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self.hz, int(fields[36])

    def window(self, seconds):
        """One window: CPUs used per socket less tumbler's own CPU, that
        CPU, and the threads whose mask changed, each per second."""
        before, t0 = busy_ticks(), time.monotonic()
        own = {s: 0.0 for s in set(self.sockets.values())}
        last_cpu, masks, changed = self.tumbler_cpu(), self.masks(), 0
        # Monotonic deadline: a TCG guest's sleep once returned early.
        while time.monotonic() - t0 < seconds:
            time.sleep(max(0.0, min(0.5, seconds - (time.monotonic() - t0))))
            now_cpu, now_masks = self.tumbler_cpu(), self.masks()
            if last_cpu is not None and now_cpu is not None:
                own[self.sockets[now_cpu[1]]] += now_cpu[0] - last_cpu[0]
            changed += sum(1 for tid, mask in now_masks.items()
                           if tid in masks and masks[tid] != mask)
            last_cpu, masks = now_cpu, now_masks
        after, span = busy_ticks(), time.monotonic() - t0
        use = {}
        for cpu, socket in self.sockets.items():
            use[socket] = use.get(socket, 0.0) + (after[cpu] - before[cpu]) / self.hz / span
        return {"use": [round(use[s] - own[s] / span, 3) for s in sorted(use)],
                "tumbler_cpus": round(sum(own.values()) / span, 3),
                "moves_per_s": round(changed / span, 2)}


def spread(use):
    mean = sum(use) / len(use)
    return round((max(use) - min(use)) / mean, 3) if mean > 0 else 0.0


WORKLOADS = os.path.join(REPO, "examples", "workloads")
# A daemon of the ``daemons`` scenario: 20 ms of CPU every 100 ms.
DAEMON = ("import time\n"
          "while True:\n"
          "    t = time.thread_time() + 0.02\n"
          "    while time.thread_time() < t: pass\n"
          "    time.sleep(0.1)\n")


def scenario_commands(name, cpus, threads_per_stage):
    """(the programs tumbler is given, the unmanaged neighbours)."""
    stage = threads_per_stage or max(2, cpus // 4)
    pipeline = [os.path.join(WORKLOADS, "pipeline"), "-t", str(stage), "-p", "100000000"]
    skewed = [os.path.join(WORKLOADS, "skewed"), "-w", "20", "-b", "sleep", "-p", "100000000"]
    if name == "pipeline":
        return [pipeline], []
    if name == "varying":
        return [skewed + ["-t", str(cpus), "-s", "1", "-r", "10"]], []
    if name == "overloaded":
        return [skewed + ["-t", str(2 * cpus), "-s", "0.5"]], []
    if name == "two-programs":
        half = [os.path.join(WORKLOADS, "pipeline"), "-t",
                str(threads_per_stage or max(1, cpus // 8)), "-p", "100000000"]
        return [half, half], []
    if name == "daemons":
        return [pipeline], [[sys.executable, "-c", DAEMON] for _ in range(3)]
    raise ValueError(name)


def inside(args):
    sockets = sockets_of_cpus()
    commands, neighbours = scenario_commands(args.scenario, len(sockets),
                                             args.threads_per_stage)
    started = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in commands + neighbours]
    programs = [p.pid for p in started[:len(commands)]]
    sampler = Sampler(sockets, programs)
    result = {"cpus": len(sockets), "sockets": len(set(sockets.values())),
              "scenario": args.scenario, "commands": [" ".join(map(os.path.basename, c))
                                                      for c in commands],
              "neighbours": len(neighbours)}
    work = tempfile.mkdtemp(prefix="guest-scale-")
    state = os.path.join(work, "state")
    summary = os.path.join(work, "summary.json")
    tumbler = None
    try:
        time.sleep(5)
        result["os_alone"] = [sampler.window(args.window_s) for _ in range(args.windows)]
        env = dict(os.environ, TUMBLER_STATE_DIR=state)
        command = ["nice", "-n", "-20", os.path.join(REPO, ".venv", "bin", "tumbler"),
                   "--summary-json", summary]
        for pid in programs:
            command += ["-p", str(pid)]
        tumbler = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        sampler.tumbler = tumbler.pid
        t0 = time.monotonic()
        while not (os.path.isdir(state) and any(n.endswith(".json") for n in os.listdir(state))):
            if tumbler.poll() is not None or time.monotonic() - t0 > 900:
                result["tumbler_failed"] = tumbler.stderr.read() if tumbler.poll() else "slow"
                return result
            time.sleep(0.2)
        result["claimed_after_s"] = round(time.monotonic() - t0, 1)
        time.sleep(2)
        result["tumbler"] = [sampler.window(args.window_s) for _ in range(args.windows)]
    finally:
        if tumbler is not None and tumbler.poll() is None:
            tumbler.send_signal(signal.SIGTERM)
            tumbler.wait(timeout=300)
        for p in started:
            p.kill()
            p.wait()
    result["summary_lines"] = [line for line in tumbler.stderr.read().splitlines() if line]
    if os.path.exists(summary):
        with open(summary) as f:
            result["summary"] = json.load(f)
        figures = result["summary"]
        rounds = figures["intervals"] + figures["quiet_intervals"]
        if rounds and figures.get("own_cpu_s") is not None:
            result["tumbler_cpu_ms_per_round"] = round(1000 * figures["own_cpu_s"] / rounds, 1)
    result["spread_os"] = [spread(w["use"]) for w in result["os_alone"]]
    result["spread_tumbler"] = [spread(w["use"]) for w in result["tumbler"]]
    return result


def three_on_two(args):
    """``--three-on-two``: 3 CPU-bound processes (yes > /dev/null), their
    CPU shares per window: does the OS alone rotate them (0.67 each) or
    leave two sharing a CPU (0.5, 0.5, 1.0)?"""
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(3)]
    hz = os.sysconf("SC_CLK_TCK")

    def cpu(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / hz
    windows = []
    try:
        time.sleep(2)
        for _ in range(args.windows):
            before, t0 = [cpu(h.pid) for h in hogs], time.monotonic()
            while time.monotonic() - t0 < args.window_s:
                time.sleep(0.5)
            span = time.monotonic() - t0
            windows.append(sorted(round((cpu(h.pid) - b) / span, 3)
                                  for h, b in zip(hogs, before)))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return {"cpus": len(sockets_of_cpus()), "three_on_two_shares": windows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", default="pipeline",
                        choices=("pipeline", "varying", "overloaded", "two-programs", "daemons"))
    parser.add_argument("--kernel", default="6.1")
    parser.add_argument("--sockets", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--threads-per-stage", type=int, default=0,
                        help="pipeline threads per stage (default: CPUs / 4, or / 8 for "
                        "two programs; at least 2 and 1)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--three-on-two", action="store_true",
                        help="instead: 3 CPU-bound processes on a 1 x 2 guest, their shares")
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(three_on_two(args) if args.three_on_two else inside(args)),
              flush=True)
        return
    if args.three_on_two:
        args.sockets, args.cores = 1, 2
    command = [sys.executable, os.path.join(REPO, "scripts", "guest"), "--kernel", args.kernel,
               "--sockets", str(args.sockets), "--cores", str(args.cores),
               "--timeout", "2400", "--", os.path.join(REPO, ".venv", "bin", "python"),
               os.path.abspath(__file__), "--inside", "--scenario", args.scenario,
               "--threads-per-stage", str(args.threads_per_stage),
               "--windows", str(args.windows), "--window-s", str(args.window_s)] \
        + (["--three-on-two"] if args.three_on_two else [])
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        sys.exit("guest_scale.py: the guest run failed (exit %d): %s"
                 % (done.returncode, done.stderr.strip()[-2000:]))
    result = json.loads(lines[-1])
    result.update(kernel=args.kernel, shape="%d x %d" % (args.sockets, args.cores),
                  threads_per_stage=args.threads_per_stage or None,
                  host_load=os.getloadavg()[0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
