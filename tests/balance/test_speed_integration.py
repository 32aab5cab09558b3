"""Speed balancing on real threads: 3 threads on 2 cores take turns -- under
``auto`` only when they yield at barriers (the evidence it needs), under
``--policy speed`` also when they spin; threads that only compute are
left to the OS.

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

from support.helpers import (REPO, assert_no_traceback, exited_cleanly, on_cpus, started,
                             thread_masks, thread_names, tumbler_cmd, wait_for_threads, wait_until)
from tumbler.engine.policy import SYNC_SWITCHES_PER_CPU_S


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


def terminated(tumbler, pid):
    """SIGTERM to ``tumbler``; its stderr, and the masks of ``pid``'s
    threads once it exited (its status: see the caller)."""
    tumbler.send_signal(signal.SIGTERM)
    _, stderr = tumbler.communicate(timeout=20)
    assert_no_traceback(stderr)
    return stderr, thread_masks(pid)


def skip_beside_other_work(rounds):
    """auto leaves a domain other work competes for to the OS (engine/
    policy.py, 3.): the premise of a test of speed balancing under auto is
    a machine where nothing else runs on the CPUs (the rest of the suite,
    or anything else, running there rightly keeps speed balancing out)."""
    noted = [note for r in rounds for note in r["mechanisms"].values() if "other work" in note]
    if noted:
        pytest.skip("not an idle machine: %s" % noted[0])


def merged_from(rounds, two_cpus):
    """The rounds after auto merged the two 1-CPU domains (engine/policy.py,
    5.): one merge, and every round after it on the one domain."""
    merges = [i for i, r in enumerate(rounds) if "merged" in r["reason"]]
    assert len(merges) == 1, [r["reason"] for r in rounds]
    after = rounds[merges[0]:]
    assert all(r["domains"] == ["%d-%d" % two_cpus] for r in after), \
        [r["domains"] for r in after]
    return after


@pytest.mark.parametrize("policy,barrier,sep", [("auto", "yield", ","), ("speed", "spin", ","),
                                                ("auto", "yield", "/")])
def test_each_thread_of_three_on_two_cores_gets_time_alone(workloads, two_cpus, tmp_path,
                                                          policy, barrier, sep):
    """One domain of two cores, or (``/``) two 1-CPU domains, which auto
    merges: three threads on two CPUs can never be grouped evenly."""
    cpus = set(two_cpus)
    log = tmp_path / "run.jsonl"
    spmd = os.path.join(workloads, "spmd")
    alone = {}
    with started(tumbler_cmd("--policy", policy, "--log", str(log), "--domains",
                             "%d%s%d" % (two_cpus[0], sep, two_cpus[1]), "exec", "--", spmd, "-b",
                             barrier, "-t", "3", "-w", "100", "-p", "40"),
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
    rounds = [json.loads(line) for line in open(log)]
    if policy == "auto":
        skip_beside_other_work(rounds)
    # Every worker was, at some moment, the only one pinned to its core.
    assert set(alone) == set(workers), alone
    assert all(count >= 3 for count in alone.values()), alone
    if sep == "/":
        rounds = merged_from(rounds, two_cpus)
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
    assert set(by_step) - {r["step"] for r in rounds}, "speed steps between rounds pinned nothing"
    moved = [by_step[step] for step in sorted(by_step)]
    total = sum(len(m) for m in moved)
    assert total > 0
    repeats = sum(len(a & b) for a, b in zip(moved, moved[1:]))
    assert repeats <= 0.1 * total, (repeats, total)


@pytest.mark.parametrize("barrier,sep", [("none", ","), ("spin", ","), ("none", "/")])
def test_threads_that_only_compute_or_spin_are_left_to_the_os_by_auto(workloads, two_cpus,
                                                                      tmp_path, barrier, sep):
    """Three threads of independent work (one phase: no barrier until the
    end), or spinning at barriers: nothing from outside says pinning would
    beat the kernel's own sharing, so auto pins nothing at all and holds no
    pin at the end.  On two 1-CPU domains (``/``) it merges them and hands
    the threads back to the OS, which rotates them: nothing moves after."""
    log = tmp_path / "run.jsonl"
    summary = tmp_path / "summary.json"
    spmd = os.path.join(workloads, "spmd")
    # Independent work long enough for three rounds after a merge, which
    # comes about 0.9 s in (readings, a load window's hold), with rounds
    # then paced 200 -> 400 -> 800 ms: 1.5 s per thread left two, once.
    shape = ["-p", "1", "-w", "2500"] if barrier == "none" else ["-b", "spin", "-p", "20",
                                                                   "-w", "80"]
    result = subprocess.run(tumbler_cmd("--log", str(log), "--summary-json", str(summary),
                                        "--domains", "%d%s%d" % (two_cpus[0], sep, two_cpus[1]),
                                        "exec", "--", spmd, "-t", "3", *shape),
                            capture_output=True, text=True, cwd=REPO, timeout=120,
                            preexec_fn=on_cpus(set(two_cpus)))
    assert result.returncode == 0, result.stderr
    rounds = [json.loads(line) for line in open(log)]
    assert len(rounds) >= 5
    if sep == "/":
        rounds = merged_from(rounds, two_cpus)
        assert len(rounds) >= 3
        assert not any(r["moves"] for r in rounds[1:])
    assert all(r["mechanisms"]["0"].startswith("os") for r in rounds), \
        [r["mechanisms"] for r in rounds]
    assert not any(r["pins"] for r in rounds)
    assert json.load(open(summary))["core_changes"] == 0


def switching_per_cpu_second(pid, tids, seconds=0.5):
    """The mean context switches per CPU-second of ``pid``'s threads
    ``tids`` over ``seconds``, from /proc."""
    def read():
        counts = {}
        for tid in tids:
            task = "/proc/%d/task/%d/" % (pid, tid)
            with open(task + "status") as f:
                status = f.read()
            switches = sum(int(status.split(key)[1].split()[0])
                           for key in ("\nvoluntary_ctxt_switches:",
                                       "nonvoluntary_ctxt_switches:"))
            with open(task + "schedstat") as f:
                counts[tid] = (switches, int(f.read().split()[0]))
        return counts
    before = read()
    time.sleep(seconds)
    after = read()
    rates = [(after[t][0] - before[t][0]) * 1e9 / (after[t][1] - before[t][1]) for t in tids]
    return sum(rates) / len(rates)


def test_threads_that_only_compute_beside_a_neighbour_that_wakes_often_are_left_alone(
        workloads, waker, two_cpus, tmp_path):
    """A neighbour waking every 0.3 ms (3-5% of a CPU: under other work's
    dead band) preempts three threads that only compute about as often as
    threads at yield barriers switch (1,400 times per CPU-second here): by
    their own counts they look synchronising, and auto engaged speed
    balancing on them.  The switches their CPUs count beyond their own say
    it was the neighbour (balance/speedstep.py): nothing is pinned."""
    cpus = set(two_cpus)
    log = tmp_path / "run.jsonl"
    neighbour = subprocess.Popen([waker, "300"], preexec_fn=on_cpus(cpus))
    try:
        with started(tumbler_cmd("--log", str(log), "--domains", "%d,%d" % two_cpus, "exec",
                                 "--", os.path.join(workloads, "spmd"), "-b", "spin", "-t", "3",
                                 "-p", "1", "-w", "2500"),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     preexec_fn=on_cpus(cpus)) as proc:
            pid, workers = workers_of(proc.pid)
            time.sleep(0.3)
            switching = switching_per_cpu_second(pid, workers, seconds=1.5)
            out, _ = exited_cleanly(proc, timeout=60)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert "workload=spmd" in out
    if switching < SYNC_SWITCHES_PER_CPU_S:
        pytest.skip("the neighbour switched the threads %.0f times per CPU-second here: "
                    "not the case of this test" % switching)
    rounds = [json.loads(line) for line in open(log)]
    assert len(rounds) >= 5
    assert all(r["mechanisms"]["0"].startswith("os") for r in rounds), \
        [r["mechanisms"] for r in rounds]
    assert not any(r["pins"] for r in rounds)


def test_sleeping_barriers_are_not_pinned_by_auto(workloads, tmp_path):
    log = tmp_path / "run.jsonl"
    spmd = os.path.join(workloads, "spmd")
    result = subprocess.run(tumbler_cmd("--log", str(log), "exec", "--", spmd, "-b", "sleep",
                                        "-t", "3", "-w", "60", "-p", "60"),
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    rounds = [json.loads(line) for line in open(log)]
    assert rounds
    # Nothing is pinned before 0.3 s of readings say how a thread sleeps
    # and switches (policy.py), and sleepers are never candidates: only
    # the OS places, from the first round to the last.
    assert all(r["mechanisms"]["0"].startswith("os") for r in rounds), \
        [(r["t"], r["mechanisms"]) for r in rounds]
    assert not any(r["pins"] for r in rounds)


def test_signal_during_speed_steps_restores_every_mask(workloads, two_cpus):
    """Stopped while speed balancing steps between rounds, tumbler puts back
    the masks the threads had, whichever core a step last pinned them to."""
    spmd = subprocess.Popen([os.path.join(workloads, "spmd"), "-b", "spin", "-t", "3",
                             "-w", "100", "-p", "400"], stdout=subprocess.DEVNULL,
                            preexec_fn=on_cpus(two_cpus))
    try:
        wait_for_threads(spmd.pid, 4)
        before = thread_masks(spmd.pid)
        tumbler = subprocess.Popen(tumbler_cmd("--policy", "speed", "--domains",
                                               "%d,%d" % two_cpus, "-p", str(spmd.pid)),
                                   stderr=subprocess.PIPE, text=True, cwd=REPO)
        pinned = set()

        def rotated():
            for tid, mask in thread_masks(spmd.pid).items():
                if len(mask) == 1:
                    pinned.add((tid, mask))
            return len(pinned) >= 6          # threads have moved between cores
        wait_until(rotated, "speed balancing to move threads between cores")
        stderr, after = terminated(tumbler, spmd.pid)
    finally:
        spmd.kill()
        spmd.wait()
    assert tumbler.returncode == 0, stderr
    assert after == before
    assert "changes of a thread's core" in stderr


def test_merged_domains_hand_threads_back_with_their_own_masks(workloads, two_cpus, tmp_path):
    """Three busy threads attached on two 1-CPU domains: auto merges the
    domains without binding them 2 + 1 first (the first binding waits for
    the judgement of merging), and every worker has the mask it had before
    tumbler came, while tumbler runs on; SIGTERM leaves them so."""
    log = tmp_path / "run.jsonl"
    spmd = subprocess.Popen([os.path.join(workloads, "spmd"), "-t", "3", "-p", "1",
                             "-w", "60000"], stdout=subprocess.DEVNULL,
                            preexec_fn=on_cpus(two_cpus))
    try:
        wait_for_threads(spmd.pid, 4)
        before = thread_masks(spmd.pid)
        tumbler = subprocess.Popen(tumbler_cmd("--log", str(log), "--domains",
                                               "%d/%d" % two_cpus, "-p", str(spmd.pid)),
                                   stderr=subprocess.PIPE, text=True, cwd=REPO)

        def rounds():
            try:
                return [json.loads(line) for line in open(log)]
            except (FileNotFoundError, ValueError):
                return []
        wait_until(lambda: any("merged" in r["reason"] for r in rounds()),
                   "auto to merge the domains")
        merged = thread_masks(spmd.pid)
        stderr, after = terminated(tumbler, spmd.pid)
    finally:
        spmd.kill()
        spmd.wait()
    assert tumbler.returncode == 0, stderr
    placed = [m for r in rounds() if len(r["domains"]) == 2 for m in r["moves"]
              if m["name"].startswith("spmd-")]
    assert placed == []
    assert any("nothing moved while merging is judged" in r["reason"] for r in rounds())
    assert merged == before
    assert after == before
