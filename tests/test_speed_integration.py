"""Speed balancing on real threads: 3 spinning threads on 2 cores take turns.

On a machine with more CPUs the workload is held to two of them (its
mask, and one explicit domain ``--domains A,B``), so the 3-on-2 case is
the same everywhere.
"""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import (REPO, assert_no_traceback, exited_cleanly, on_cpus, started,
                      thread_masks, thread_names, tumbler_cmd, wait_for_threads, wait_until)


def workers_of(tumbler_pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/task/%d/children" % (tumbler_pid, tumbler_pid)) as f:
                children = f.read().split()
        except OSError:
            children = []
        if children:
            pid = int(children[0])
            names = thread_names(pid)
            workers = [t for t, n in names.items() if n.startswith("spmd-")]
            if len(workers) == 3:
                return pid, workers
        time.sleep(0.02)
    raise AssertionError("spmd workers never appeared")


@pytest.mark.parametrize("policy", ["auto", "speed"])
def test_each_thread_of_three_spinners_on_two_cores_gets_time_alone(workloads, two_cpus,
                                                                    tmp_path, policy):
    cpus = set(two_cpus)
    log = tmp_path / "run.jsonl"
    spmd = os.path.join(workloads, "spmd")
    alone = {}
    with started(tumbler_cmd("--policy", policy, "--log", str(log), "--domains",
                             "%d,%d" % two_cpus, "exec", "--", spmd, "-b",
                             "spin", "-t", "3", "-w", "100", "-p", "40"),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 preexec_fn=on_cpus(cpus)) as proc:
        pid, workers = workers_of(proc.pid)
        while proc.poll() is None:
            try:
                masks = {tid: mask for tid, mask in thread_masks(pid).items() if tid in workers}
            except FileNotFoundError:
                break
            for tid, mask in masks.items():
                others = [m for t, m in masks.items() if t != tid]
                if len(mask) == 1 and mask <= cpus and all(m != mask for m in others):
                    alone[tid] = alone.get(tid, 0) + 1
            time.sleep(0.02)
        out, _ = exited_cleanly(proc, timeout=60)
    assert "workload=spmd" in out
    # Every worker was, at some moment, the only one pinned to its core.
    assert set(alone) == set(workers), alone
    assert all(count >= 3 for count in alone.values()), alone
    rounds = [json.loads(line) for line in open(log)]
    if policy == "auto":
        assert any(r["mechanisms"]["0"].startswith("speed:") for r in rounds)
    # Pins happened, and threads took turns instead of ping-ponging: the
    # least-migrated thread is pulled, so the same thread is almost never
    # moved in two consecutive steps.  A logged round lists the pins of the
    # speed steps since the round before, each with its step number.
    by_step = {}
    for r in rounds:
        for p in r["pins"]:
            if p["cpu"] is not None:
                by_step.setdefault(p["step"], set()).add(p["tid"])
    assert len(by_step) > len(rounds), "speed steps between rounds pinned nothing"
    moved = [by_step[step] for step in sorted(by_step)]
    total = sum(len(m) for m in moved)
    assert total > 0
    repeats = sum(len(a & b) for a, b in zip(moved, moved[1:]))
    assert repeats <= 0.1 * total, (repeats, total)


def test_sleeping_barriers_are_not_pinned_by_auto(workloads, tmp_path):
    log = tmp_path / "run.jsonl"
    spmd = os.path.join(workloads, "spmd")
    result = subprocess.run(tumbler_cmd("--log", str(log), "exec", "--", spmd, "-b", "sleep",
                                        "-t", "3", "-w", "60", "-p", "60"),
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    rounds = [json.loads(line) for line in open(log)]
    assert rounds
    # Until 0.3 s of readings say whether a runnable thread sleeps, auto
    # may pin it (policy.py, candidates); on a slow or busy machine the
    # first rounds can see three runnable threads and engage.  Once the
    # sleeping is known every pinned thread is handed back, and auto never
    # engages again: well before the run's end (60 phases of 60 units: 3.5 s
    # on this VM, more on slower machines), only the OS places.
    settled = [r for r in rounds if r["t"] >= 1.0]
    assert len(settled) >= 5, [r["t"] for r in rounds]
    assert all(r["mechanisms"]["0"].startswith("os") for r in settled), \
        [(r["t"], r["mechanisms"]) for r in settled]
    assert not any(p["cpu"] is not None for r in settled for p in r["pins"])
    last_cpu = {}
    for r in rounds:
        for p in r["pins"]:                 # in the order they were made
            last_cpu[p["tid"]] = p["cpu"]
    assert all(cpu is None for cpu in last_cpu.values()), last_cpu


def test_signal_during_speed_steps_restores_every_mask(workloads, two_cpus):
    """Stopped while speed balancing steps between rounds, tumbler puts back
    the masks the threads had, whichever core a step last pinned them to."""
    spmd = subprocess.Popen([os.path.join(workloads, "spmd"), "-b", "spin", "-t", "3",
                             "-w", "100", "-p", "400"], stdout=subprocess.DEVNULL,
                            preexec_fn=on_cpus(two_cpus))
    try:
        wait_for_threads(spmd.pid, 4)
        before = thread_masks(spmd.pid)
        tumbler = subprocess.Popen(tumbler_cmd("--domains", "%d,%d" % two_cpus, "-p",
                                               str(spmd.pid)),
                                   stderr=subprocess.PIPE, text=True, cwd=REPO)
        pinned = set()

        def rotated():
            for tid, mask in thread_masks(spmd.pid).items():
                if len(mask) == 1:
                    pinned.add((tid, mask))
            return len(pinned) >= 6          # threads have moved between cores
        wait_until(rotated, "speed balancing to move threads between cores")
        tumbler.send_signal(signal.SIGTERM)
        _, stderr = tumbler.communicate(timeout=20)
        after = thread_masks(spmd.pid)
    finally:
        spmd.kill()
        spmd.wait()
    assert tumbler.returncode == 0, stderr
    assert_no_traceback(stderr)
    assert after == before
    assert "core changes" in stderr
