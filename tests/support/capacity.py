"""Other work on real processes: a hog pinned to one CPU, how many
spinners tumbler bound to each CPU, the CPU time others used, the run
log's rounds."""

import json
import os
import subprocess
import sys
import time

import pytest

from support.helpers import REPO, thread_masks, thread_names, tumbler_cmd
from support.processes import env_for, wait_until
from support.sharing import spinners


linux_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root")


def split(pid, cpu_a, cpu_b):
    """How many of ``pid``'s spinning threads (spawner-N; not the idle main
    thread) are bound to each CPU."""
    names = thread_names(pid)
    masks = [m for tid, m in thread_masks(pid).items()
             if names.get(tid, "").startswith("spawner-")]
    return (sum(1 for m in masks if m == {cpu_a}), sum(1 for m in masks if m == {cpu_b}))


#: log path -> (bytes parsed, its rounds): see rounds_of.
_parsed = {}


def rounds_of(log):
    """The run log's complete rounds.  Tests poll this every 20 ms while
    tumbler judges other work; parsing the whole log each time made the
    test itself other work (5-10% of a CPU on a slow VM, past the dead
    band), which kept merged domains from splitting.  So only the bytes
    added since the last call are read and parsed."""
    key = str(log)
    done, rounds = _parsed.get(key, (0, []))
    try:
        with open(log, "rb") as f:
            if os.fstat(f.fileno()).st_size < done:     # a new log at the same path
                done, rounds = 0, []
            f.seek(done)
            data = f.read()
    except FileNotFoundError:
        return []
    complete = data[:data.rfind(b"\n") + 1]
    if complete:
        rounds = rounds + [json.loads(line) for line in complete.splitlines()]
        done += len(complete)
        _parsed[key] = (done, rounds)
    return list(rounds)


def other_work_reading(pid, cpus):
    """(monotonic s, busy ticks of ``cpus``, CPU ticks of process ``pid``)."""
    busy = 0
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0] in ("cpu%d" % c for c in cpus):
                ticks = [int(x) for x in fields[1:9]]
                busy += sum(ticks) - ticks[3] - ticks[4]        # all but idle, iowait
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return time.monotonic(), busy, int(fields[11]) + int(fields[12])


def busiest_window(readings, span_s=0.5):
    """The most CPUs' worth of other work over any ``span_s`` between two
    of ``readings`` (other_work_reading's, in time order): a meter reading
    over load windows sees a burst that an average over the whole run
    hides."""
    busiest = 0.0
    for i, first in enumerate(readings):
        last = next((r for r in readings[i + 1:] if r[0] - first[0] >= span_s), None)
        if last is None:
            break
        other = (last[1] - first[1] - (last[2] - first[2])) / os.sysconf("SC_CLK_TCK")
        busiest = max(busiest, other / (last[0] - first[0]))
    return busiest


def other_work_since(before, pid, cpus):
    """CPUs' worth of time ``cpus`` spent on anything but ``pid`` since ``before``."""
    now, busy, own = other_work_reading(pid, cpus)
    return (busy - before[1] - (own - before[2])) / os.sysconf("SC_CLK_TCK") / (now - before[0])


def hog(procs, duty, cpu, nice, percent):
    """``duty`` busy ``percent``% of the time, pinned to ``cpu``, at ``nice``."""
    def hogged():
        os.sched_setaffinity(0, {cpu})
        os.nice(nice)
    return procs.start([duty, "600", str(percent)], preexec_fn=hogged)


def bound_across(procs, spawner, state, two_cpus, count, *options):
    """``count`` spinners under ``tumbler --domains A/B OPTIONS -p``, once
    they are bound evenly, one domain per CPU: (the spinners, tumbler)."""
    cpu_a, cpu_b = two_cpus
    target = spinners(procs, spawner, frozenset(two_cpus), count)
    tumbler = procs.start(tumbler_cmd("--domains", "%d/%d" % two_cpus, *options,
                                      "-p", str(target.pid)),
                          env=env_for(state), cwd=REPO, stderr=subprocess.PIPE, text=True)
    even = (count // 2, count // 2)
    wait_until(lambda: split(target.pid, cpu_a, cpu_b) == even, timeout=20,
               what="%d spinners bound to each CPU" % even[0])
    return target, tumbler
