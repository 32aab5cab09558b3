"""What ``tumbler service`` costs managing many programs at once (issues 16, 29, 47).

    .venv/bin/python benchmarks/service_load.py [--programs N] [--threads T]
                                                [--seconds S] [--domains LIST]
                                                [--period MS] [--profile FILE]
                                                [--rise K] [--demand-spread LOW-HIGH]
                                                [--windows K] [--config-extra YAML]
    .venv/bin/python benchmarks/service_load.py --hostile [--rows 1,2,...]
                                                [--seconds S] [--windows K]

``--hostile`` (as root, issue 47): each row of the issue's table in turn,
a fresh service from this tree whose one rule selects ``hogPID`` (this
script's PID: no one else's program) of ``nobody`` with ``domains: "0/1"``, and one program of ``nobody`` (tests/workloads/hog.c:
busy threads, threads asleep in pause(), short threads born per second);
the service's CPU (utime + stime of /proc/PID/stat) over ``--seconds``
(default 20), ``--windows`` times in a row, printed as a table with the
service's budget and the programs' paces from ``tumbler status``.
``--windows K`` in the default mode also reads K windows in a row (the
service's cost at several moments, not once); ``--demand-spread
0.074-0.091`` gives the programs demands spread evenly over that range
(issue 47's 20 programs x 100 threads near the parking threshold).

Starts N copies of ``tests/workloads/crowd`` with T threads each (together
asking ``--demand`` CPUs per program, each thread waking once every
``--period`` ms: mostly sleeping threads, a program in its stride), a
service whose one rule selects them, waits until
``tumbler status`` lists all N, then reads the service's own CPU time
(``own_cpu_s``) S seconds apart: its CPU share of one core in the steady
state.  Prints that, the rounds and quiet rounds per program, how many
are parked (issue 29: too idle to imbalance a domain, not read thread by
thread), the moves per minute, and stops everything (the service hands
every thread back).

``--rise K`` then measures K times how long a parked program takes to be
back under full rounds once it turns busy: one more crowd program
(``--threads`` threads asking 1 CPU), stopped (SIGSTOP) until the service
has parked it, continued (SIGCONT) at a random point of the scan cycle;
the time from SIGCONT until ``tumbler status`` shows it unparked with a
round made since, against the scan interval.
"""

import argparse
import json
import pwd
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tumbler.service.config import DEFAULT_SCAN_INTERVAL_S  # noqa: E402
from tumbler.service.control import request  # noqa: E402

#: The tumbler of this tree, run by this interpreter.
TUMBLER = [sys.executable, "-m", "tumbler"]


class NotAnswering(Exception):
    pass


def status(socket):
    """The service's status reply, asked on its socket (no process started:
    the polls of --rise must not take the CPU the service needs)."""
    try:
        return request(socket, {"cmd": "status"})
    except Exception as exc:            # not started yet, or gone
        raise NotAnswering(str(exc)) from None


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
    parser.add_argument("--period", type=float, default=None, metavar="MS",
                        help="how often each crowd thread wakes (default crowd's 100 ms; "
                             "given, a program's threads begin spread over one period): 200 "
                             "programs x 100 threads at 100 ms are 200,000 wake-ups a second, "
                             "more than a 2-CPU machine runs; --period 5000 makes them 4,000")
    parser.add_argument("--capacity", choices=("measured", "cpus"), default=None,
                        help="balancing.defaults.capacity (default: tumbler's)")
    parser.add_argument("--rise", type=int, default=0, metavar="K",
                        help="then time K wake-ups of a parked program turning busy")
    parser.add_argument("--scan-interval", type=float, default=None,
                        help="service.scan_interval (default: tumbler's)")
    parser.add_argument("--demand-spread", metavar="LOW-HIGH", default=None,
                        help="programs' demands spread evenly from LOW to HIGH CPUs")
    parser.add_argument("--windows", type=int, default=1,
                        help="read the service's CPU over this many windows in a row")
    parser.add_argument("--config-extra", metavar="YAML", default="",
                        help="more keys of the service section, e.g. 'cpu_budget: 0.05'")
    parser.add_argument("--hostile", action="store_true",
                        help="the rows of issue 47's table (see the module doc)")
    parser.add_argument("--rows", default="1,2,3,4,5", help="--hostile: which rows")
    args = parser.parse_args()
    if args.hostile:
        return hostile(args)
    # The service keeps a schedstat fd per managed thread (and a few per
    # program): room for them all, which root may give (up to fs.nr_open).
    files = (args.programs + 1) * (args.threads + 8) + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < files:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        except (ValueError, OSError):
            print("service_load.py: cannot raise the open-files limit to %d (it is %d): "
                  "the service reads the last programs' threads by path" % (files, hard))
    work = tempfile.mkdtemp(prefix="tumbler-service-load-")
    crowd = os.path.join(work, "crowd")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", crowd,
                    os.path.join(REPO, "tests", "workloads", "crowd.c")], check=True)
    period = [] if args.period is None else [str(args.period)]
    programs = []
    demands = [args.demand] * args.programs
    if args.demand_spread:
        low, high = (float(x) for x in args.demand_spread.split("-"))
        demands = [low + (high - low) * i / max(args.programs - 1, 1)
                   for i in range(args.programs)]
    for demand in demands:
        proc = subprocess.Popen([crowd, "3600", str(args.threads), "%.4f" % demand] + period,
                                stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()
        programs.append(proc)
    config = os.path.join(work, "tumbler.yaml")
    socket = os.path.join(work, "tumbler.sock")
    with open(config, "w") as f:
        f.write("service:\n  socket: %s\n" % socket)
        if args.scan_interval is not None:
            f.write("  scan_interval: %s\n" % args.scan_interval)
        for line in filter(None, args.config_extra.split(";")):
            f.write("  %s\n" % line.strip())
        # Room for every program (the defaults: 64 programs, 16,384 threads).
        f.write("  max_programs: %d\n  max_threads: %d\n" % (
            max(64, args.programs + 1), max(16384, (args.programs + 1) * (args.threads + 1))))
        f.write("programs:\n  - name: crowd\n    match: {cmdline: %s}\n"
                "    domains: \"%s\"\n" % (json.dumps(crowd), args.domains))
        if args.capacity:
            f.write("balancing:\n  defaults:\n    capacity: %s\n" % args.capacity)
    env = dict(os.environ, TUMBLER_STATE_DIR=os.path.join(work, "state"))
    env["PYTHONPATH"] = REPO
    command = TUMBLER + ["service", "--config", config]
    if args.profile:
        command = [sys.executable, "-m", "cProfile", "-o", args.profile, "-m",
                   "tumbler", "service", "--config", config]
    log = open(os.path.join(work, "service.log"), "w")     # why a program was refused
    service = subprocess.Popen(command, env=env, stderr=log)
    try:
        managed = wait_managed(socket, args.programs, log.name)
        time.sleep(5)                   # first placements and regroupings done
        for _ in range(args.windows):
            stride_window(args, socket, managed, [proc.pid for proc in programs])
        if args.rise:
            rise(args, crowd, socket, programs)
    finally:
        service.terminate()
        service.wait()
        for proc in programs:
            proc.kill()
            proc.wait()


def stride_window(args, socket, managed, pids):
    """One window of ``--seconds``: the service's CPU, its rounds, parked
    programs (the module doc), and the CPUs the programs used (lowest,
    median, highest: whether they sat near the parking threshold), one
    line."""
    first = patient_status(socket)
    before = [cpu_seconds(pid) for pid in pids]
    t0 = time.monotonic()
    time.sleep(args.seconds)
    second = patient_status(socket)
    elapsed = time.monotonic() - t0
    used = sorted((cpu_seconds(pid) - b) / elapsed for pid, b in zip(pids, before))
    cpu = second["own_cpu_s"] - first["own_cpu_s"]
    rounds = {p["pid"]: p for p in first["programs"]}
    full = quiet = 0
    for p in second["programs"]:
        if p["pid"] not in rounds:
            continue
        full += p["intervals"] - rounds[p["pid"]]["intervals"]
        quiet += p["quiet_intervals"] - rounds[p["pid"]]["quiet_intervals"]
    moves = sum(p["moves"] - rounds[p["pid"]]["moves"] for p in second["programs"]
                if p["pid"] in rounds)
    parked = sum(1 for p in second["programs"] if p.get("parked"))
    print("%d programs x %d threads%s (%d managed), %.0f s, load average %.2f: "
          "service CPU %.3f s = "
          "%.2f%% of one core; %.1f rounds/s per program, %.0f%% of them quiet; "
          "%d parked at the end; %.1f moves/min in all; programs used %.3f / %.3f / %.3f "
          "CPUs (lowest / median / highest)"
          % (args.programs, args.threads,
             "" if args.period is None else " waking every %g ms" % args.period,
             managed, elapsed, os.getloadavg()[0], cpu,
             100 * cpu / elapsed, full / elapsed / managed,
             100 * quiet / max(full, 1), parked, 60 * moves / elapsed,
             used[0], statistics.median(used), used[-1]))


#: Issue 47's table: (threads asleep in pause(), short threads born per
#: second, busy threads) of one program of ``nobody``.
HOSTILE_ROWS = [(0, 20, 1), (8000, 0, 1), (8000, 20, 1), (16000, 20, 1), (16000, 50, 4)]


def cpu_seconds(pid):
    """utime + stime of a process, in s."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def as_nobody():
    user = pwd.getpwnam("nobody")
    os.setgid(user.pw_gid)
    os.setgroups([])
    os.setuid(user.pw_uid)


def hostile(args):
    """``--hostile``: the module doc."""
    if os.geteuid() != 0:
        sys.exit("service_load.py --hostile: run as root (the service and nobody's program)")
    work = tempfile.mkdtemp(prefix="tumbler-service-hostile-")
    os.chmod(work, 0o755)
    # A name of its own: other people's programs named hog-something on
    # this machine are not this benchmark's to manage.
    hog = os.path.join(work, ("hog%d" % os.getpid())[:15])
    subprocess.run(["gcc", "-O2", "-pthread", "-o", hog,
                    os.path.join(REPO, "tests", "workloads", "hog.c")], check=True)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("| nobody's program | service CPU per %g s window (%% of one CPU) | budget | "
          "paced | commit %s |" % (args.seconds, commit))
    print("| --- | --- | --- | --- | --- |")
    for row in (int(r) for r in args.rows.split(",")):
        asleep, born, busy = HOSTILE_ROWS[row - 1]
        shares, paced, budget = hostile_row(args, work, hog, asleep, born, busy)
        print("| %d asleep, %d new/s, %d busy | %s (median %.2f) | %s | %s | |"
              % (asleep, born, busy, ", ".join("%.2f" % x for x in shares),
                 statistics.median(shares), budget, paced or "-"), flush=True)


def hostile_row(args, work, hog, asleep, born, busy):
    """One row: the shares of one CPU the service used per window, how the
    status said the program was paced, the service's budget."""
    config = os.path.join(work, "tumbler.yaml")
    socket = os.path.join(work, "tumbler.sock")
    state = tempfile.mkdtemp(prefix="state-", dir=work)
    with open(config, "w") as f:
        # Never parked (issue 47's rows: a busy thread sees to that on a
        # quiet machine; on a loaded one it may get less than park_below).
        f.write("service:\n  socket: %s\n  park_below: 0\n" % socket)
        for line in filter(None, args.config_extra.split(";")):
            f.write("  %s\n" % line.strip())
        f.write("programs:\n  - name: hog\n    match: {comm: \"%s\", user: nobody}\n"
                "    domains: \"0/1\"\n" % os.path.basename(hog))
    env = dict(os.environ, TUMBLER_STATE_DIR=state, PYTHONPATH=REPO)
    log = open(os.path.join(work, "service-%d-%d-%d.log" % (asleep, born, busy)), "w")
    service = subprocess.Popen(TUMBLER + ["service", "--config", config], env=env, stderr=log)
    program = subprocess.Popen([hog, "3600", str(asleep), str(born), str(busy)],
                               stdout=subprocess.PIPE, text=True, preexec_fn=as_nobody)
    try:
        if program.stdout.readline().strip() != "ready":
            sys.exit("service_load.py: hog did not start (%d threads)" % asleep)
        wait_managed(socket, 1, log.name)
        time.sleep(5)                   # first placements done
        shares = []
        for _ in range(args.windows):
            before, t0 = cpu_seconds(service.pid), time.monotonic()
            time.sleep(args.seconds)
            shares.append(100 * (cpu_seconds(service.pid) - before) / (time.monotonic() - t0))
        try:
            reply = patient_status(socket)
        except NotAnswering:
            return shares, "(no status)", "?"
        paced = "; ".join(p.get("paced") or ("parked" if p.get("parked") else "own pace")
                          for p in reply["programs"]) or "not managed"
        return shares, paced, reply.get("cpu_budget", "none")
    finally:
        service.terminate()
        service.wait()
        program.kill()
        program.wait()


def wait_managed(socket, programs, log, timeout=180.0, settled=20.0):
    """How many programs the service manages once it lists all ``programs``,
    or once their number has not grown for ``settled`` s (some refused: the
    service logs why; the figures are then for fewer, said in the output)."""
    deadline = time.monotonic() + timeout
    count, since = 0, time.monotonic()
    while True:
        try:
            now = len(status(socket)["programs"])
        except NotAnswering:
            now = 0
        if now == programs:
            return now
        if now != count:
            count, since = now, time.monotonic()
        elif count and time.monotonic() - since > settled:
            print("service_load.py: %d of the %d programs managed (the others refused: "
                  "%s says why)" % (count, programs, log))
            return count
        if time.monotonic() > deadline:
            sys.exit("service_load.py: the service did not pick up the programs")
        time.sleep(0.5)


def patient_status(socket, tries=10):
    """status(), asked again up to ``tries`` times a second apart: on a
    loaded machine the socket's 0.25 s can pass."""
    for _ in range(tries - 1):
        try:
            return status(socket)
        except NotAnswering:
            time.sleep(1)
    return status(socket)


def program_status(socket, pid):
    return next((p for p in status(socket)["programs"] if p["pid"] == pid), None)


def wait_for(what, condition, timeout=60.0, poll=0.02):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            sys.exit("service_load.py: timed out waiting for %s" % what)
        time.sleep(poll)


def rise(args, crowd, socket, programs):
    """``--rise``: see the module docstring."""
    proc = subprocess.Popen([crowd, "3600", str(args.threads), "1.0"], stdout=subprocess.PIPE,
                            text=True)
    proc.stdout.readline()
    programs.append(proc)
    os.kill(proc.pid, signal.SIGSTOP)
    scan = args.scan_interval or DEFAULT_SCAN_INTERVAL_S
    unparked, rounded = [], []
    for _ in range(args.rise):
        before = wait_for("the program parked", lambda: (lambda p: p if p and p["parked"]
                                                         else None)(program_status(socket,
                                                                                   proc.pid)))
        time.sleep(random.uniform(0, scan))
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGCONT)
        wait_for("the program unparked",
                 lambda: not (program_status(socket, proc.pid) or {"parked": 1})["parked"])
        unparked.append(time.monotonic() - start)
        wait_for("a full round", lambda: program_status(socket, proc.pid)["intervals"]
                 > before["intervals"])
        rounded.append(time.monotonic() - start)
        os.kill(proc.pid, signal.SIGSTOP)
    print("rise from idle to busy, %d times (scan interval %.1f s): unparked after %.2f s "
          "median (%.2f-%.2f), first round after %.2f s median (%.2f-%.2f)"
          % (args.rise, scan, statistics.median(unparked), min(unparked), max(unparked),
             statistics.median(rounded), min(rounded), max(rounded)))
    os.kill(proc.pid, signal.SIGCONT)


if __name__ == "__main__":
    main()
