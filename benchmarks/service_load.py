"""What ``tumbler service`` costs managing many programs at once (issue 16).

    .venv/bin/python benchmarks/service_load.py [--programs N] [--threads T]
                                                [--seconds S] [--domains LIST]
                                                [--profile FILE]

Starts N copies of ``tests/workloads/crowd`` with T threads each (together
asking ``--demand`` CPUs per program: mostly sleeping threads, a program
in its stride), a service whose one rule selects them, waits until
``tumbler status`` lists all N, then reads the service's own CPU time
(``own_cpu_s``) S seconds apart: its CPU share of one core in the steady
state.  Prints that, the rounds and quiet rounds per program, and stops
everything (the service hands every thread back).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUMBLER = os.path.join(REPO, ".venv", "bin", "tumbler")


def status(socket):
    out = subprocess.run([TUMBLER, "status", "--json", "--socket", socket],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--domains", default="0/1")
    parser.add_argument("--profile", metavar="FILE",
                        help="run the service under cProfile, its stats to FILE (then "
                             "python3 -m pstats FILE); the CPU figure includes the profiler's")
    parser.add_argument("--demand", type=float, default=0.04,
                        help="CPUs each program asks in all (default 0.04: 20 programs "
                             "want 0.8 of this VM's 2)")
    parser.add_argument("--capacity", choices=("measured", "cpus"), default=None,
                        help="balancing.defaults.capacity (default: tumbler's)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="tumbler-service-load-")
    crowd = os.path.join(work, "crowd")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", crowd,
                    os.path.join(REPO, "tests", "workloads", "crowd.c")], check=True)
    programs = []
    for _ in range(args.programs):
        proc = subprocess.Popen([crowd, "3600", str(args.threads), str(args.demand)],
                                stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()
        programs.append(proc)
    config = os.path.join(work, "tumbler.yaml")
    socket = os.path.join(work, "tumbler.sock")
    with open(config, "w") as f:
        f.write("service:\n  socket: %s\nprograms:\n  - name: crowd\n    match: {cmdline: %s}\n"
                "    domains: \"%s\"\n" % (socket, json.dumps(crowd), args.domains))
        if args.capacity:
            f.write("balancing:\n  defaults:\n    capacity: %s\n" % args.capacity)
    env = dict(os.environ, TUMBLER_STATE_DIR=os.path.join(work, "state"))
    command = [TUMBLER, "service", "--config", config]
    if args.profile:
        command = [os.path.join(REPO, ".venv", "bin", "python"), "-m", "cProfile", "-o",
                   args.profile, TUMBLER] + command[1:]
    service = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if len(status(socket)["programs"]) == args.programs:
                    break
            except subprocess.CalledProcessError:
                pass
            if time.monotonic() > deadline:
                sys.exit("service_load.py: the service did not pick up every program")
            time.sleep(0.5)
        time.sleep(5)                   # first placements and regroupings done
        first = status(socket)
        t0 = time.monotonic()
        time.sleep(args.seconds)
        second = status(socket)
        elapsed = time.monotonic() - t0
        cpu = second["own_cpu_s"] - first["own_cpu_s"]
        rounds = {p["pid"]: p for p in first["programs"]}
        full = quiet = 0
        for p in second["programs"]:
            full += p["intervals"] - rounds[p["pid"]]["intervals"]
            quiet += p["quiet_intervals"] - rounds[p["pid"]]["quiet_intervals"]
        print("%d programs x %d threads, %.0f s, load average %.2f: service CPU %.3f s = "
              "%.2f%% of one core; %.1f rounds/s per program, %.0f%% of them quiet"
              % (args.programs, args.threads, elapsed, os.getloadavg()[0], cpu,
                 100 * cpu / elapsed, full / elapsed / args.programs,
                 100 * quiet / max(full, 1)))
    finally:
        service.terminate()
        service.wait()
        for proc in programs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
