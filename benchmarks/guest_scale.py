#!/usr/bin/env python3
"""The Tumbler paper's metric in a multi-socket guest (issue 48, item 3):
the spread of CPU utilisation across sockets under the OS alone and under
tumbler, on a ferret-like pipeline of uneven stages, and what tumbler did.

    benchmarks/guest_scale.py [--kernel 6.1] [--sockets 2 --cores 2]
                              [--threads-per-stage N] [--windows 3] [--window-s 5]
    benchmarks/guest_scale.py --three-on-two [--kernel 6.12] [--window-s 10]

On the host it boots a guest of that shape (scripts/guest, TCG: figures
relative only) and runs itself there with ``--inside``: it starts
``examples/workloads/pipeline`` (ferret's stage weights 2, 1, 11, 36 --
the paper's Table I -- N threads per stage), lets it settle, reads each
socket's CPU utilisation from /proc/stat over ``--windows`` windows (the OS
alone), then attaches ``nice -n -20 tumbler -p PID --log`` (a TCG guest
starts Python slowly: tumbler(8) advises nice -20 on a loaded machine),
waits for its first round and 2 s more, and reads the same windows again.
Spread: (busiest socket - least busy) / their mean, in CPUs used.  It
prints one JSON object: the windows, auto's decisions from the log (its
``mechanisms`` and ``changes``), moves per second after the first 2 s of
balancing, tumbler's CPU per round.
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


def socket_use(seconds, sockets):
    """CPUs used per socket over ``seconds`` (monotonic deadline: a TCG
    guest's sleep once returned early)."""
    before, t0 = busy_ticks(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(min(0.5, seconds - (time.monotonic() - t0)))
    after, span = busy_ticks(), time.monotonic() - t0
    hz = os.sysconf("SC_CLK_TCK")
    use = {}
    for cpu, socket in sockets.items():
        use[socket] = use.get(socket, 0.0) + (after[cpu] - before[cpu]) / hz / span
    return [round(use[s], 3) for s in sorted(use)]


def spread(use):
    mean = sum(use) / len(use)
    return round((max(use) - min(use)) / mean, 3) if mean > 0 else 0.0


def inside(args):
    sockets = sockets_of_cpus()
    pipeline = os.path.join(REPO, "examples", "workloads", "pipeline")
    prog = subprocess.Popen([pipeline, "-t", str(args.threads_per_stage), "-p", "1000000"],
                            stdout=subprocess.DEVNULL)
    result = {"cpus": len(sockets), "sockets": len(set(sockets.values()))}
    work = tempfile.mkdtemp(prefix="guest-scale-")
    log = os.path.join(work, "run.jsonl")
    tumbler = None
    try:
        time.sleep(3)
        result["os_alone"] = [socket_use(args.window_s, sockets) for _ in range(args.windows)]
        env = dict(os.environ, TUMBLER_STATE_DIR=os.path.join(work, "state"))
        tumbler = subprocess.Popen(
            ["nice", "-n", "-20", os.path.join(REPO, ".venv", "bin", "tumbler"), "--log", log,
             "-q", "-p", str(prog.pid)], env=env, stderr=subprocess.PIPE, text=True)
        started = time.monotonic()
        while not (os.path.exists(log) and os.path.getsize(log)):
            if tumbler.poll() is not None or time.monotonic() - started > 600:
                result["tumbler_failed"] = tumbler.stderr.read() if tumbler.poll() else "slow"
                return result
            time.sleep(0.2)
        result["first_round_after_s"] = round(time.monotonic() - started, 1)
        time.sleep(2)
        result["tumbler"] = [socket_use(args.window_s, sockets) for _ in range(args.windows)]
        with open("/proc/%d/stat" % tumbler.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        if tumbler is not None and tumbler.poll() is None:
            tumbler.send_signal(signal.SIGTERM)
            tumbler.wait(timeout=120)
        prog.kill()
        prog.wait()
    records = [json.loads(line) for line in open(log)]
    first = records[0]["t"]
    settled = [r for r in records if r["t"] >= first + 2]
    span = (settled[-1]["t"] - settled[0]["t"]) if len(settled) > 1 else 0
    moves = sum(len([m for m in r["moves"] if m.get("from") is not None]) for r in settled)
    result.update(
        rounds=len(records), tumbler_cpu_s=round(cpu_s, 2),
        tumbler_cpu_ms_per_round=round(1000 * cpu_s / len(records), 1),
        moves_per_s_settled=round(moves / span, 2) if span else None,
        domains=records[-1]["domains"], mechanisms_last=records[-1].get("mechanisms"),
        changes=[(round(r["t"], 1), c) for r in records for c in r.get("changes", ())],
        spread_os=[spread(u) for u in result["os_alone"]],
        spread_tumbler=[spread(u) for u in result["tumbler"]])
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
    parser.add_argument("--kernel", default="6.1")
    parser.add_argument("--sockets", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--threads-per-stage", type=int, default=2)
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
               "--timeout", "1500", "--", os.path.join(REPO, ".venv", "bin", "python"),
               os.path.abspath(__file__), "--inside",
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
                  threads_per_stage=args.threads_per_stage,
                  host_load=os.getloadavg()[0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
