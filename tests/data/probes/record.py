"""Record the .ndjson files of this directory (see README.md).

    cd REPO && sudo python3 tests/data/probes/record.py locktime|runqlat|migrations

Runs the workloads of tests/tracing/test_probes_linux.py and tests/workloads/ and
the script as tumbler runs it (prelude included), for four periods of
100 ms, then SIGINT; writes the output to tests/data/probes/SCRIPT.ndjson.
The workloads are built into a temporary directory.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

from tumbler.platform import open_backend          # noqa: E402
from tumbler.tracing import scripts               # noqa: E402

PERIOD_MS = 100
PERIODS = 4


def build(directory):
    from test_probes_linux import WORKLOAD_C
    src = os.path.join(directory, "work.c")
    with open(src, "w") as f:
        f.write(WORKLOAD_C)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", os.path.join(directory, "work"), src],
                   check=True)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", os.path.join(directory, "lockwait"),
                    os.path.join(REPO, "tests", "workloads", "lockwait.c")], check=True)


def spawn(directory, *args, stdin=None):
    p = subprocess.Popen([os.path.join(directory, args[0])] + [str(a) for a in args[1:]],
                         stdin=stdin, stdout=subprocess.PIPE, universal_newlines=True,
                         start_new_session=True)
    if args[0] == "work":
        assert p.stdout.readline().strip() == "ready"
    return p


def record(script, directory):
    backend = open_backend()
    procs, notes = [], {}
    if script == "locktime":
        procs.append(spawn(directory, "work", "lock", 3, -1))
        procs.append(spawn(directory, "work", "lock", 1, -1))
        lw = spawn(directory, "lockwait", stdin=subprocess.PIPE)
        procs.append(lw)
        names = dict(lw.stdout.readline().split() for _ in range(5))
        notes = {"contended": procs[0].pid, "alone": procs[1].pid, "lockwait": lw.pid,
                 "held": int(names["held"]), "late": int(names["late"])}
        while notes["held"] not in backend.lock_waiters(lw.pid, [notes["held"]]):
            time.sleep(0.01)
    elif script == "runqlat":
        procs.append(spawn(directory, "work", "spin", 3, 0))
        procs.append(spawn(directory, "work", "sleep", 2, 1))
    else:
        procs.append(spawn(directory, "work", "spin", 2, 0))
    time.sleep(0.2)
    pids = [p.pid for p in procs]
    tids_of = {pid: backend.thread_ids(pid) for pid in pids}
    text = scripts.with_prelude("linux", scripts.find_script("linux", script),
                                scripts.bpftrace_prelude(script, pids, tids_of,
                                                         {0: 0, 1: 1}))
    path = os.path.join(directory, script + ".bt")
    with open(path, "w") as f:
        f.write(text)
    tracer = subprocess.Popen(["bpftrace", "-f", "json", path, str(pids[0]), str(PERIOD_MS)],
                              stdout=subprocess.PIPE, universal_newlines=True)
    lines = []
    for line in tracer.stdout:
        lines.append(line)
        if "ready" in line:
            if script == "locktime":
                # what ProbeSession does once the probes are in
                found = backend.lock_waiters(notes["lockwait"], tids_of[notes["lockwait"]])
                notes["checked"] = found[notes["held"]]
                lw.stdin.write("block late\n")
                lw.stdin.flush()
            elif script == "migrations":
                for i in range(5):
                    for tid in tids_of[pids[0]][1:]:
                        os.sched_setaffinity(tid, {(i + 1) % 2})
        if line.count("period") and len([l for l in lines if " period" in l]) >= PERIODS:
            tracer.send_signal(signal.SIGINT)
            lines.extend(tracer.stdout)
            break
    tracer.wait()
    for p in procs:
        p.kill()
        p.wait()
    with open(os.path.join(HERE, script + ".ndjson"), "w") as f:
        if notes:
            f.write("# %s\n" % json.dumps(notes))
        f.writelines(lines)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        build(d)
        record(sys.argv[1], d)
