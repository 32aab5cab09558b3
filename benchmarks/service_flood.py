"""How many lines ``tumbler service`` writes while a user churns processes
a rule selects (issue 47, "Log flooding"), and what it costs the service.

    sudo .venv/bin/python benchmarks/service_flood.py [--mode pinned|unpinned]
                                                      [--live N] [--life S]
                                                      [--seconds S] [--warmup S]
                                                      [--tree DIR]

As ``nobody``, keeps ``--live`` (200) processes alive, each living
``--life`` (1.5) s and replaced as it exits: ~133 new PIDs a second.
Each is ``/bin/sleep`` under the name ``bpfloodN`` (a symbolic link: the
kernel names a process after the file it ran), one thread: the issue's
``hogN``, named so that no other service on the machine selects them.
``--mode pinned``: every one is pinned to the first CPU (as ``taskset -c 0``
would), so the service leaves each alone, with a line; ``unpinned``: it
manages each and drops it when it exits.  The service runs from
``--tree`` (default: this one) with this interpreter, as root, with a
temporary configuration (one rule, ``match: {comm: "bpflood[0-9]+"}``,
``min_threads: 1``, ``min_cpu: 0``, ``domains`` the first two CPUs),
socket, state directory and log.

Measured over ``--seconds`` (120) after ``--warmup`` (5) s: lines the
service wrote (lines per second), of them the summaries ("N more ... in
the last 60 s"), and the service's CPU time (utime + stime of
/proc/PID/stat) as a share of one CPU.  At the end (SIGTERM) it checks
the count: lines about the hogs one by one plus what the summaries
count, against the processes the service saw (it may miss a few that
lived less than a scan).  Prints one JSON object.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_s(pid):
    """utime + stime of ``pid``, seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def churn(links, live, life, pinned_cpu, stop_fd):
    """The child that, as nobody, keeps ``live`` hogs alive until
    ``stop_fd`` is readable (or closed)."""
    if pinned_cpu is not None:
        os.sched_setaffinity(0, {pinned_cpu})
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    os.set_blocking(stop_fd, False)
    started = 0

    def spawn():
        nonlocal started
        path = links[started % len(links)]
        os.posix_spawn(path, [os.path.basename(path), str(life)], {})
        started += 1
    for _ in range(live):
        spawn()
    while True:
        try:
            if os.read(stop_fd, 1) is not None:
                break
        except BlockingIOError:
            pass
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            pid = 0
        if pid:
            spawn()
    os.write(2, b"churn: started %d\n" % started)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("pinned", "unpinned"), default="pinned")
    parser.add_argument("--live", type=int, default=200)
    parser.add_argument("--life", type=float, default=1.5)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tree", default=REPO, help="the tumbler tree to run the service from")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("service_flood.py: run as root (the service needs it)")
    cpus = sorted(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="tumbler-flood-")
    os.chmod(work, 0o755)
    links = []
    for index in range(args.live):
        path = os.path.join(work, "bpflood%d" % index)
        os.symlink("/bin/sleep", path)
        links.append(path)
    config = os.path.join(work, "tumbler.yaml")
    with open(config, "w") as f:
        f.write("service:\n  scan_interval: 2\n  socket: %s\nprograms:\n"
                "  - name: hog\n    match: {comm: \"bpflood[0-9]+\"}\n    min_threads: 1\n"
                "    min_cpu: 0\n    domains: \"%d/%d\"\n"
                % (os.path.join(work, "tumbler.sock"), cpus[0], cpus[1]))
    log_path = os.path.join(work, "service.log")
    env = dict(os.environ, TUMBLER_STATE_DIR=os.path.join(work, "state"),
               PYTHONPATH=args.tree)
    log = open(log_path, "a+")
    service = subprocess.Popen([sys.executable, "-m", "tumbler", "service", "--config", config],
                               cwd=args.tree, env=env, stderr=log, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while "service started" not in open(log_path).read():
        if service.poll() is not None or time.monotonic() > deadline:
            sys.exit("service_flood.py: the service did not start:\n" + open(log_path).read())
        time.sleep(0.1)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(write_end)
        churn(links, args.live, args.life, cpus[0] if args.mode == "pinned" else None, read_end)
    os.close(read_end)
    time.sleep(args.warmup)
    lines_before = sum(1 for _ in open(log_path))
    cpu_before, wall_before = cpu_s(service.pid), time.monotonic()
    time.sleep(args.seconds)
    lines_after = sum(1 for _ in open(log_path))
    cpu_after, wall_after = cpu_s(service.pid), time.monotonic()
    window = [line for index, line in enumerate(open(log_path))
              if lines_before <= index < lines_after]
    os.write(write_end, b"x")
    os.close(write_end)
    os.waitpid(child, 0)
    time.sleep(args.life + 0.5)     # the last hogs exit
    service.send_signal(signal.SIGTERM)
    service.wait(timeout=60)
    text = open(log_path).read().splitlines()
    one_by_one = sum(1 for line in text
                     if re.search(r"PID \d+ \(bpflood\d+\).*(left alone|managed by)", line))
    summed = sum(int(m.group(1)) for line in text
                 for m in [re.search(r"rule hog: (\d+) more programs (left alone|managed) ", line)]
                 if m)
    wall = wall_after - wall_before
    print(json.dumps({
        "mode": args.mode, "tree": args.tree, "live": args.live, "life_s": args.life,
        "seconds": round(wall, 1), "lines": len(window),
        "lines_per_s": round(len(window) / wall, 2),
        "summaries": sum(1 for line in window if " more " in line),
        "lines_naming_a_process": sum(1 for line in window if re.search(r"PID \d+ ", line)),
        "service_cpu_share": round((cpu_after - cpu_before) / wall, 4),
        "hogs_said_one_by_one": one_by_one, "hogs_counted_in_summaries": summed,
        "service_exit": service.returncode, "loadavg": open("/proc/loadavg").read().split()[:3],
        "log": log_path}))


if __name__ == "__main__":
    main()
