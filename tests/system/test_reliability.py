"""Fault injection on real processes: whatever happens to the target or to
tumbler, every thread ends where it was, and tumbler exits with its
documented status and no traceback.

Domains are one CPU each (``--domains A/B``), so binding is visible in every
thread's mask.  Each test keeps its state files in its own directory
(``TUMBLER_STATE_DIR``) and checks that none is left.

Two domains run wave grouping's policy (``--policy tumbler``), which binds
whatever else runs on the machine: under ``auto``, other work on the CPUs
(the CI host's, a VM's steal time) rightly merges the domains and binds
nothing, and a test waiting for a bound thread would wait for what must not
happen (tests/balance/test_other_work.py checks auto's side of it).
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support.helpers import (REPO, assert_no_traceback, cpuset_mount, on_cpus,
                             run_tumbler, thread_masks, thread_names, tumbler_cmd,
                             wait_for_threads)
from support.processes import bound, descendants, env_for, finish, wait_bound, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


# -- helpers -------------------------------------------------------------------

def duty_bound_by_tumbler(duty, procs, state, spec, doms, *options):
    """duty's four workers, every thread bound by ``tumbler --policy tumbler
    --domains SPEC OPTIONS -p PID``: (target, its masks before, tumbler)."""
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before = thread_masks(target.pid)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, *options, "-p", str(target.pid),
                            state_dir=state)
    wait_bound(target.pid, doms, count=len(before))
    return target, before, tumbler


def placed_in_log(path, rounds_after=0):
    """TIDs placed in the run log, counting only placements that at least
    ``rounds_after`` later rounds followed."""
    try:
        rounds = [json.loads(line) for line in open(path) if line.endswith("\n")]
    except FileNotFoundError:
        return set()
    placed = set()
    for i, record in enumerate(rounds):
        if len(rounds) - 1 - i >= rounds_after:
            placed |= {m["tid"] for m in record["moves"]}
    return placed


def cgroups_of(pid):
    result = {}
    for tid in thread_masks(pid):
        try:
            with open("/proc/%d/task/%d/cgroup" % (pid, tid)) as f:
                result[tid] = next(line.split(":", 2)[2].strip() for line in f
                                   if "cpuset" in line.split(":")[1].split(","))
        except (OSError, StopIteration):
            pass
    return result


def leftover_cgroups(mount):
    found = []
    for top, dirs, _ in os.walk(mount):
        found += [os.path.join(top, d) for d in dirs if re.match(r"tumbler\.\d+$", d)]
    return found


needs_cpuset = pytest.mark.skipif(os.geteuid() != 0 or cpuset_mount() is None,
                                  reason="needs root and a cgroup v1 cpuset hierarchy")


@pytest.fixture
def cgroups_gone():
    """Asserts no tumbler.<pid> cgroup is left, and removes any a failing
    test's tumbler left, so one failure does not leak into the system."""
    mount = cpuset_mount()
    yield mount
    left = leftover_cgroups(mount)
    for top in left:
        empty_and_remove(top)
    assert not left, "cgroups left behind: %s" % left


def empty_and_remove(top):
    """Move every task out of cgroup ``top`` (and its children) into its
    parent, then remove them, as an admin would; errors are ignored."""
    origin_tasks = os.path.join(os.path.dirname(top), "tasks")
    for sub in [os.path.join(top, d) for d in os.listdir(top)
                if os.path.isdir(os.path.join(top, d))] + [top]:
        for tid in open(os.path.join(sub, "tasks")).read().split():
            try:
                with open(origin_tasks, "w") as f:
                    f.write(tid)
            except OSError:
                pass
        try:
            os.rmdir(sub)
        except OSError:
            pass


# -- the target misbehaves -------------------------------------------------------

def test_one_target_exits_mid_interval_the_other_is_restored(churn, duty, domains, procs,
                                                             state):
    """``--policy tumbler``: the two programs want ~2.6 CPUs of 2, and when
    their threads' run-queue wait makes them read as always runnable,
    ``auto`` rightly merges the domains and binds nothing (1 run in 12
    here), which would leave this test nothing to restore."""
    spec, doms = domains
    short = procs.start([churn, "-d", "0", "-w", "60", "40"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE)
    long = procs.start([duty, "30", "70", "50", "30", "10"])
    wait_for_threads(short.pid, 3)
    wait_for_threads(long.pid, 5)
    before = thread_masks(long.pid)
    tumbler = procs.tumbler("--domains", spec, "--policy", "tumbler", "--interval", "1500",
                            "-p", str(short.pid), "-p", str(long.pid), state_dir=state)
    wait_bound(short.pid, doms, count=3)
    short.stdin.close()                 # exits while tumbler sleeps a 1.5 s interval
    assert short.wait(timeout=10) == 0
    # A round notices (the exited target's state file goes), and tumbler
    # goes on with the other.
    wait_until(lambda: not any(f.startswith("%d-" % short.pid) for f in os.listdir(state)),
               what="tumbler to drop the exited target")
    assert tumbler.poll() is None
    assert any(f.startswith("%d-" % long.pid) for f in os.listdir(state))
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert thread_masks(long.pid) == before


def test_exec_target_exits_mid_interval(duty, domains, state):
    spec, _ = domains
    result = subprocess.run(tumbler_cmd("--policy", "tumbler",
                                        "--domains", spec, "--interval", "3000", "exec", "--",
                                        duty, "0.5", "60", "40"),
                            capture_output=True, text=True, timeout=30, cwd=REPO,
                            env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    assert "command exited" in result.stderr


@pytest.mark.parametrize("who", ["leader", "thread"])
def test_target_execs_another_program(churn, duty, domains, procs, state, who):
    """exec replaces the image: the old threads die, the new image starts
    with whatever mask the exec'ing thread had.  The new image's threads must
    end with the original mask, as if tumbler had never run."""
    spec, doms = domains
    target = procs.start([churn, "-x", who, duty, "60", "50", "50", "50", "50"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "churn: ready"
    old_threads = thread_masks(target.pid)
    assert len(old_threads) == 5 and len(set(old_threads.values())) == 1
    original = set(old_threads.values()).pop()
    log = state.parent / "run.jsonl"
    tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "--interval", "50",
                            "--log", str(log), "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms, count=5)          # every old thread placed
    # From a thread tumbler bound elsewhere than the leader, so the new
    # image's main thread starts with a mask tumbler never gave that TID.
    masks, names = thread_masks(target.pid), thread_names(target.pid)
    index = next(int(name[6:]) for tid, name in sorted(names.items())
                 if name.startswith("churn-") and masks[tid] != masks[target.pid])
    target.stdin.write("%d\n" % index)
    target.stdin.flush()
    # The new image: duty's four workers, placed by tumbler as new threads,
    # then a few rounds over the new image.
    workers = wait_until(lambda: [t for t, n in thread_names(target.pid).items()
                                  if n.startswith("duty-")] if len(thread_names(target.pid))
                         == 5 else None, what="duty's threads")
    wait_until(lambda: len(workers) == 4 and set(workers) <= placed_in_log(log, rounds_after=3),
               what="tumbler to place the new image's threads")
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    after = thread_masks(target.pid)
    assert set(after.values()) == {original}, after


def test_thread_churn(churn, domains, procs, state):
    """1,000 threads created and joined a second for 10 s, three long-lived."""
    spec, doms = domains
    target = procs.start([churn, "-d", "10", "-r", "1000", "-w", "60", "40", "30"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    wait_until(lambda: sum(1 for n in thread_names(target.pid).values()
                           if n.startswith("churn-") and n != "churn-s") == 3,
               what="the long-lived threads")
    long_lived = {t for t, n in thread_names(target.pid).items()
                  if n.startswith("churn-") and n != "churn-s"} | {target.pid}
    before = {t: m for t, m in thread_masks(target.pid).items() if t in long_lived}
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms)
    line = target.stdout.readline().strip()
    assert line == "churn: 10000 threads created", line
    # The state file holds the threads alive, not every thread ever seen.
    files = [f for f in os.listdir(state) if f.endswith(".json")]
    assert len(files) == 1, files
    with open(state / files[0]) as f:
        recorded = json.load(f)["threads"]
    assert len(recorded) < 1000, len(recorded)
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    after = {t: m for t, m in thread_masks(target.pid).items() if t in long_lived}
    assert after == before
    seen = int(re.search(r"(?:watched|grouped) (\d+) threads?", stderr).group(1))
    intervals = int(re.search(r"(\d+) rounds?", stderr).group(1))
    assert 4 <= seen <= 10004, stderr
    assert intervals >= 1, stderr
    assert "warning" not in stderr, stderr
    target.stdin.close()
    assert target.wait(timeout=10) == 0


def test_someone_else_changes_affinity_mid_run(duty, domains, procs, state, two_cpus):
    """An admin's taskset wins: tumbler neither moves the thread again nor
    "restores" it over the admin's choice."""
    spec, doms = domains
    cpu_a, cpu_b = two_cpus
    both = frozenset([cpu_a, cpu_b])
    target = procs.start([duty, "30", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    names = {n: t for t, n in thread_names(target.pid).items()}
    pinned_before, retargeted = names["duty-1"], names["duty-0"]
    os.sched_setaffinity(pinned_before, {cpu_a})     # its own restriction, before tumbler
    before = thread_masks(target.pid)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--interval", "50", "-p", str(target.pid),
                            state_dir=state)
    wait_bound(target.pid, doms, count=len(before))
    mask = thread_masks(target.pid)[retargeted]
    elsewhere = both - mask
    assert len(elsewhere) == 1
    os.sched_setaffinity(retargeted, elsewhere)     # to the other domain
    os.sched_setaffinity(pinned_before, both)        # widened by the admin
    deadline = time.monotonic() + 1.5                # some 30 rounds
    while time.monotonic() < deadline:
        masks = thread_masks(target.pid)
        assert masks[retargeted] == elsewhere
        assert masks[pinned_before] == both
        time.sleep(0.02)
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    after = thread_masks(target.pid)
    assert after[retargeted] == elsewhere
    assert after[pinned_before] == both
    for tid, mask in before.items():
        if tid not in (retargeted, pinned_before):
            assert after[tid] == mask, tid


@needs_cpuset
def test_cpuset_cgroup_removed_underneath(spawner, domains, procs, state, cgroups_gone,
                                          two_cpus):
    """An admin empties and removes tumbler's cgroups under it: tumbler
    goes on, makes them again for the next thread it binds (spawner-0
    makes one every 50 ms; the threads moved out are the admin's now), and
    puts every thread back where it was on SIGTERM."""
    spec, doms = domains
    mount = cgroups_gone
    both = frozenset(two_cpus)
    target = started_ready(procs, [spawner, "2", "50", "30", "0", "0"], both)
    origin = cgroups_of(target.pid)[target.pid]
    tumbler = procs.tumbler("--policy", "tumbler", "--binder", "cpuset", "--domains", spec,
                            "--interval", "50", "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms, count=3)
    ours = os.path.join(mount, origin.lstrip("/"), "tumbler.%d" % tumbler.pid)
    assert os.path.isdir(ours)
    # Someone moves every thread out and removes tumbler's cgroups.
    for attempt in range(50):
        empty_and_remove(ours)
        if not os.path.exists(ours):
            break
    assert not os.path.exists(ours), "could not remove tumbler's cgroups"
    moved_out = set(thread_masks(target.pid))
    # tumbler goes on: it creates its cgroups again when it next binds.
    wait_until(lambda: os.path.isdir(ours) and bound(
        {tid: m for tid, m in thread_masks(target.pid).items() if tid not in moved_out}, doms),
               what="a thread born since bound in tumbler's cgroups made again")
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert set(cgroups_of(target.pid).values()) == {origin}
    assert all(mask == both for mask in thread_masks(target.pid).values())
    assert not leftover_cgroups(mount)


# -- tumbler is stopped ------------------------------------------------------------

def test_stop_signals_at_random_moments(duty, domains, procs, state):
    """-p mode: SIGTERM, SIGINT or SIGHUP at any moment of a run -> exit 0,
    everything restored.  Seeded, so a failure repeats."""
    spec, doms = domains
    rng = random.Random(20240607)
    target = procs.start([duty, "120", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before = thread_masks(target.pid)
    for iteration in range(9):
        signum = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)[iteration % 3]
        interval = rng.choice(["10", "25", "100"])
        delay = rng.uniform(0.0, 0.6)
        tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "--interval", interval,
                                "-p", str(target.pid), state_dir=state)
        wait_bound(target.pid, doms)
        time.sleep(delay)
        status, stderr = finish(tumbler, signum)
        what = "iteration %d: signal %d after %.2f s, interval %s" % (
            iteration, signum, delay, interval)
        assert status == 0, (what, stderr)
        assert thread_masks(target.pid) == before, what
        assert not os.listdir(state), what


def test_sigkill_then_restore(duty, domains, procs, state):
    spec, doms = domains
    target, before, tumbler = duty_bound_by_tumbler(duty, procs, state, spec, doms)
    files = sorted(os.listdir(state))
    assert [f.rsplit(".", 1)[1] for f in files] == ["json", "lock", "masks"], files
    assert all(f.startswith("%d-" % target.pid) for f in files), files
    tumbler.kill()
    tumbler.wait()
    assert thread_masks(target.pid) != before          # nobody put them back
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "process %d" % target.pid in lines[0], lines
    assert "restored %d threads" % len(before) in lines[0], lines
    assert thread_masks(target.pid) == before
    assert not os.listdir(state)
    again = run_tumbler("restore", env=env_for(state))
    assert again.returncode == 0 and again.stdout.strip() == "nothing to restore"


def test_restore_respects_changes_made_after_the_kill(duty, domains, procs, state,
                                                     two_cpus):
    spec, doms = domains
    cpu_a, cpu_b = two_cpus
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    names = {n: t for t, n in thread_names(target.pid).items()}
    changed = names["duty-1"]
    os.sched_setaffinity(changed, {cpu_a})          # its original: CPU A only
    before = thread_masks(target.pid)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms, count=len(before))
    tumbler.kill()
    tumbler.wait()
    os.sched_setaffinity(changed, {cpu_a, cpu_b})   # an admin's choice, after the kill
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert "restored %d threads of process %d" % (len(before) - 1, target.pid) \
        in result.stdout
    assert "left 1 that someone else had moved since" in result.stdout
    after = thread_masks(target.pid)
    assert after[changed] == frozenset([cpu_a, cpu_b])
    assert {t: m for t, m in after.items() if t != changed} == \
        {t: m for t, m in before.items() if t != changed}
    assert not os.listdir(state)


def test_restore_leaves_a_move_to_another_domain_after_the_kill(duty, domains, procs, state,
                                                                two_cpus):
    """The state knows which mask tumbler set: an admin's later move of a
    thread to the other domain's CPU is theirs, though that CPU is one
    tumbler binds threads to as well."""
    spec, doms = domains
    target, before, tumbler = duty_bound_by_tumbler(duty, procs, state, spec, doms,
                                                    "--interval", "3000")
    tumbler.kill()
    tumbler.wait()
    masks = thread_masks(target.pid)
    moved = min(masks)
    other = next(d for d in doms if d != masks[moved])
    os.sched_setaffinity(moved, other)              # taskset -pc, after the kill
    result = run_tumbler("restore", "--all", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert "restored %d threads of process %d" % (len(before) - 1, target.pid) \
        in result.stdout, result.stdout
    assert "left 1 that someone else had moved since" in result.stdout
    after = thread_masks(target.pid)
    assert after[moved] == other
    assert {t: m for t, m in after.items() if t != moved} == \
        {t: m for t, m in before.items() if t != moved}
    assert not os.listdir(state)


# -- threads and processes born of bound threads ----------------------------------
#
# A new thread or child process starts with its creator's CPU mask: born of
# a thread tumbler bound, it carries tumbler's mask whether tumbler saw it
# or not, and is tumbler's to put back.


def masks_below(pid):
    """{(pid, tid): mask} of every thread of ``pid`` and of its descendants."""
    return {(p, tid): mask for p in [pid] + descendants(pid)
            for tid, mask in thread_masks(p).items()}


def started_ready(procs, command, cpus):
    proc = procs.start(command, stdout=subprocess.PIPE, text=True, preexec_fn=on_cpus(cpus))
    assert proc.stdout.readline().strip() == "spawner: ready"
    return proc


def test_threads_born_of_speed_pins_are_put_back(spawner, procs, state, tmp_path, two_cpus):
    """One domain: speed balancing pins the spinners (``--policy speed``:
    spinners show auto no evidence), and the sleeping threads spawner-0
    makes between its spins inherit its pin."""
    both = frozenset(two_cpus)
    target = started_ready(procs, [spawner, "3", "300", "10", "0", "0"], both)
    log = tmp_path / "run.jsonl"
    tumbler = procs.tumbler("--policy", "speed", "--domains", "%d,%d" % two_cpus,
                            "--duration", "4", "--log",
                            str(log), "-p", str(target.pid), state_dir=state)
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    rounds = [json.loads(line) for line in open(log)]
    assert any(r["pins"] for r in rounds), "speed balancing never pinned: nothing tested"
    masks = thread_masks(target.pid)
    assert len(masks) > 6, "too few sleepers were born: nothing tested"
    assert all(mask == both for mask in masks.values()), masks


def test_threads_born_just_before_exit_are_put_back(spawner, domains, procs, state, two_cpus):
    """The main thread, bound to a domain, starts a thread every 50 ms:
    those born after the last look are found by the last sweep.  Stopped
    once 20 threads were born under it (however slowly the machine lets the
    main thread make them), while it goes on making them."""
    spec, doms = domains
    both = frozenset(two_cpus)
    for _ in range(3):
        target = started_ready(procs, [spawner, "0", "50", "10", "0", "0"], both)
        tumbler = procs.tumbler("--policy", "tumbler",
                                "--domains", spec, "-p", str(target.pid), state_dir=state)
        wait_bound(target.pid, doms)
        born = set(thread_masks(target.pid))
        wait_until(lambda: len(set(thread_masks(target.pid)) - born) >= 20,
                   what="20 threads born under tumbler")
        status, stderr = finish(tumbler, signal.SIGTERM)
        assert status == 0, stderr
        masks = thread_masks(target.pid)
        assert all(mask == both for mask in masks.values()), masks
        target.kill()


def test_forked_children_are_put_back(spawner, domains, procs, state, two_cpus):
    """``sh -c 'sleep 1; sleep 30 & exec prog'``: the background child of
    the bound shell keeps its mask unless tumbler puts it back."""
    spec, doms = domains
    both = frozenset(two_cpus)
    shell = procs.start(["sh", "-c", "sleep 1; sleep 30 & exec %s 2 1000 30 0 0" % spawner],
                        preexec_fn=on_cpus(both))
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--duration", "3", "-p", str(shell.pid),
                            state_dir=state)
    wait_bound(shell.pid, doms)
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    children = descendants(shell.pid)
    assert children, "the background sleep is gone: nothing tested"
    masks = masks_below(shell.pid)
    assert all(mask == both for mask in masks.values()), masks


def test_sigkill_then_restore_covers_threads_and_children_born_since(
        spawner, domains, procs, state, two_cpus):
    """After SIGKILL the bound threads go on making threads and processes
    with tumbler's masks: ``tumbler restore`` finds them by the masks the
    state says tumbler set."""
    spec, doms = domains
    both = frozenset(two_cpus)
    threads = started_ready(procs, [spawner, "2", "100", "30", "0", "0"], both)
    forks = started_ready(procs, [spawner, "2", "100", "30", "0", "0", "fork"], both)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "-p", str(threads.pid), "-p", str(forks.pid),
                            state_dir=state)
    wait_bound(threads.pid, doms, count=3)
    wait_bound(forks.pid, doms, count=3)
    tumbler.kill()
    tumbler.wait()
    # spawner-0 is still bound: what it makes now inherits tumbler's mask.
    wait_until(lambda: sum(1 for m in thread_masks(threads.pid).values() if m != both) >= 6,
               what="threads born with tumbler's mask")
    wait_until(lambda: sum(1 for m in masks_below(forks.pid).values() if m != both) >= 6,
               what="children born with tumbler's mask")
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    for pid in (threads.pid, forks.pid):
        masks = masks_below(pid)
        assert all(mask == both for mask in masks.values()), (pid, masks)
    assert not os.listdir(state)


def test_restore_catches_threads_born_while_their_creator_is_put_back(
        spawner, domains, procs, state, two_cpus):
    """spawner-0 makes a thread every millisecond: between restore's
    listing and putting spawner-0 back it makes more with tumbler's mask,
    which only the next listing shows (restore lists again until a pass
    finds none)."""
    spec, doms = domains
    both = frozenset(two_cpus)
    for _ in range(3):
        target = started_ready(procs, [spawner, "2", "1", "1", "0", "0"], both)
        tumbler = procs.tumbler("--policy", "tumbler",
                                "--domains", spec, "-p", str(target.pid), state_dir=state)
        wait_bound(target.pid, doms, count=3)
        tumbler.kill()
        tumbler.wait()
        result = run_tumbler("restore", env=env_for(state))
        assert result.returncode == 0, result.stderr
        masks = thread_masks(target.pid)
        assert all(mask == both for mask in masks.values()), masks
        assert not os.listdir(state)
        target.kill()


def test_sigkill_then_restore_adopts_threads_born_of_a_speed_pin(spawner, procs, state,
                                                                 two_cpus):
    """One domain: killed while spawner-0 was pinned to one CPU by speed
    balancing (``--policy speed``), tumbler leaves it there, and the
    sleepers it makes inherit that single-CPU mask: ``tumbler restore``
    puts them back too."""
    both = frozenset(two_cpus)
    target = started_ready(procs, [spawner, "3", "100", "30", "0", "0"], both)
    maker = next(t for t, n in thread_names(target.pid).items() if n == "spawner-0")
    for _ in range(20):
        tumbler = procs.tumbler("--policy", "speed", "--domains", "%d,%d" % two_cpus, "-p",
                                str(target.pid), state_dir=state)
        wait_until(lambda: len(thread_masks(target.pid)[maker]) == 1,
                   what="speed balancing to pin spawner-0")
        tumbler.kill()
        tumbler.wait()
        if len(thread_masks(target.pid)[maker]) == 1:
            break                       # still pinned after the kill
        result = run_tumbler("restore", env=env_for(state))     # unpinned meanwhile: again
        assert result.returncode == 0, result.stderr
    else:
        pytest.fail("never killed tumbler while spawner-0 was pinned")
    pin = thread_masks(target.pid)[maker]
    wait_until(lambda: sum(1 for m in thread_masks(target.pid).values() if m == pin) >= 4,
               what="sleepers born with spawner-0's pin")
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    masks = thread_masks(target.pid)
    assert all(mask == both for mask in masks.values()), masks
    assert not os.listdir(state)


@pytest.mark.parametrize("signame", ["SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
                                     "SIGXCPU", "SIGABRT", "SIGRTMIN"])
def test_every_terminating_signal_restores(duty, domains, procs, state, signame):
    spec, doms = domains
    target, before, tumbler = duty_bound_by_tumbler(duty, procs, state, spec, doms)
    status, stderr = finish(tumbler, getattr(signal, signame))
    assert status == 0, stderr
    assert "signal %d" % getattr(signal, signame) in stderr
    assert thread_masks(target.pid) == before
    assert not os.listdir(state)


def test_exec_forwards_other_signals_to_the_command(domains, state):
    """``exec``: a signal the command handles is the command's business;
    tumbler ends with it and returns its status."""
    spec, _ = domains
    proc = subprocess.Popen(tumbler_cmd("--policy", "tumbler",
                                        "--domains", spec, "exec", "--", "sh", "-c",
                                        "trap 'exit 9' USR1; echo ready; "
                                        "while :; do sleep 0.05; done"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=env_for(state), start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        status, stderr = finish(proc, signal.SIGUSR1)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # the command too, if a check failed
        except ProcessLookupError:
            pass
        proc.wait()
    assert status == 9, stderr
    assert "command exited" in stderr


# -- a state directory that cannot be written ------------------------------------------
#
# A tmpfs mounted over the state directory in a private mount namespace
# (unshare -m), so the machine's own /run/tumbler is never covered and the
# mount goes with the namespace.

needs_unshare = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="needs root and unshare(1) for a private tmpfs")


def in_small_tmpfs(directory, size, fill, command, **popen):
    """Popen of ``command`` (a list) in a private mount namespace with a
    tmpfs of ``size`` over ``directory``, ``fill`` KiB of it used up; the
    script prints the directory's listing on stdout afterwards (one name a
    line, "listing:" first) and exits with the command's status."""
    script = ('set -e; mount -t tmpfs -o size=%s,mode=0700 tmpfs "$1"; '
              'if [ %d -gt 0 ]; then dd if=/dev/zero of="$1/fill" bs=1k count=%d '
              '2>/dev/null || true; fi; shift; set +e; "$@"; rc=$?; echo listing:; '
              'ls -A "$0" 2>/dev/null; exit $rc') % (size, fill, fill)
    directory.mkdir(exist_ok=True)
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             script.replace('"$0"', '"%s"' % directory), "sh",
                             str(directory)] + command, cwd=REPO,
                            env=env_for(directory), text=True, **popen)


def leftovers(stdout):
    listing = stdout.split("listing:\n", 1)[1].split()
    return [name for name in listing if name != "fill"]


@needs_unshare
def test_full_state_directory_refuses_before_the_command_starts(tmp_path, domains):
    spec, _ = domains
    marker = tmp_path / "ran"
    proc = in_small_tmpfs(tmp_path / "state", "4k", 8, tumbler_cmd(
        "--domains", spec, "exec", "--", "touch", str(marker)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=60)
    assert_no_traceback(stderr)
    assert proc.returncode == 1, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], stderr
    assert not marker.exists()                      # the command never ran
    assert leftovers(stdout) == [], stdout


@needs_unshare
def test_state_directory_full_mid_run(spawner, domains, tmp_path, two_cpus):
    """The state file outgrows its file system while threads are placed:
    balancing stops with one line and every thread is handed back, the
    command runs on, and exec returns its status."""
    spec, _ = domains
    both = frozenset(two_cpus)
    proc = in_small_tmpfs(tmp_path / "state", "16k", 0, tumbler_cmd(
        "-q", "--domains", spec, "exec", "--", spawner, "0", "30", "60", "10", "7"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=on_cpus(both))
    try:
        line = proc.stderr.readline()
        assert "No space left on device" in line and "the command runs on" in line, line
        # Said once every thread is back.
        command = [p for p in descendants(proc.pid) if open(
            "/proc/%d/comm" % p).read().strip() == "spawner"]
        assert len(command) == 1, command
        masks = thread_masks(command[0])
        assert len(masks) > 20 and all(m == both for m in masks.values()), masks
        stdout, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_no_traceback(rest)
    assert rest == "", rest
    assert proc.returncode == 7
    assert leftovers(stdout) == [], stdout


def test_log_on_a_full_device(duty, domains, procs, state):
    spec, doms = domains
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before = thread_masks(target.pid)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--log", "/dev/full", "--duration", "1.5",
                            "-p", str(target.pid), state_dir=state)
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    warnings = [line for line in stderr.splitlines() if "cannot write log" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], stderr
    assert "duration reached" in stderr                 # the summary came
    assert thread_masks(target.pid) == before


SPAWNER = """
import sys, threading, time
def idle():
    while True:
        time.sleep(0.05)
for _ in range(2):
    threading.Thread(target=idle, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:              # each line: one more thread, made by the main thread
    worker = threading.Thread(target=idle, daemon=True)
    worker.start()
    print(worker.native_id, flush=True)
"""


def test_restore_resets_threads_born_after_the_kill(domains, procs, state):
    """A thread created by a bound thread inherits tumbler's mask; if tumbler
    died meanwhile, no state file lists it -- restore still puts it back."""
    spec, doms = domains
    target = procs.start([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    before = thread_masks(target.pid)
    original = set(before.values())
    assert len(original) == 1
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms, count=len(before))
    tumbler.kill()
    tumbler.wait()
    inherited = thread_masks(target.pid)[target.pid]
    assert any(inherited <= d for d in doms)
    target.stdin.write("one more\n")
    target.stdin.flush()
    born = int(target.stdout.readline())
    assert thread_masks(target.pid)[born] == inherited
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert "restored %d threads of process %d" % (len(before) + 1, target.pid) \
        in result.stdout
    assert set(thread_masks(target.pid).values()) == original
    assert not os.listdir(state)


@needs_cpuset
def test_sigkill_then_restore_cpuset(duty, domains, procs, state, cgroups_gone):
    spec, doms = domains
    mount = cgroups_gone
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before_masks, before_cgroups = thread_masks(target.pid), cgroups_of(target.pid)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--binder", "cpuset", "--domains", spec, "-p", str(target.pid),
                            state_dir=state)
    wait_bound(target.pid, doms, count=len(before_masks))
    tumbler.kill()
    tumbler.wait()
    assert "tumbler.%d" % tumbler.pid in "".join(cgroups_of(target.pid).values())
    result = run_tumbler("restore", "-p", str(target.pid), env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    assert "restored %d threads of process %d" % (len(before_masks), target.pid) \
        in result.stdout
    assert cgroups_of(target.pid) == before_cgroups
    assert thread_masks(target.pid) == before_masks
    assert not leftover_cgroups(mount)
    assert not os.listdir(state)


def test_restore_leaves_a_running_tumbler_alone(duty, domains, procs, state):
    """``--policy tumbler``: the restore's own start (~0.1 s of CPU) is
    other work beside the program, for which ``auto`` rightly merges the
    domains and hands the threads back -- a change of the running
    tumbler's (1 run in 8 here), not of the restore's, that this test
    would take for the restore's."""
    spec, doms = domains
    target, before, tumbler = duty_bound_by_tumbler(duty, procs, state, spec, doms)
    during = thread_masks(target.pid)
    result = run_tumbler("restore", "-p", str(target.pid), env=env_for(state))
    assert result.returncode == 1, result
    assert_no_traceback(result.stderr)
    assert "running tumbler PID %d" % tumbler.pid in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert bound(thread_masks(target.pid), doms) == bound(during, doms)
    # A second tumbler on the same process is refused, naming the first.
    second = run_tumbler("--policy", "tumbler",
                         "--domains", spec, "-p", str(target.pid), env=env_for(state))
    assert second.returncode == 1, second.stderr
    assert_no_traceback(second.stderr)
    assert second.stderr.strip().splitlines() == [
        "tumbler: process %d is already managed by tumbler PID %d; stop that one first"
        % (target.pid, tumbler.pid)]
    assert tumbler.poll() is None
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert thread_masks(target.pid) == before


def test_new_tumbler_restores_what_a_killed_one_left(duty, domains, procs, state):
    spec, doms = domains
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before = thread_masks(target.pid)
    first = procs.tumbler("--policy", "tumbler",
                          "--domains", spec, "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms, count=len(before))
    first.kill()
    first.wait()
    # The new tumbler must see the original masks, not the dead one's.
    result = run_tumbler("--policy", "tumbler",
                         "--domains", spec, "--duration", "1", "-p", str(target.pid),
                         env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stderr)
    assert "left by tumbler %d" % first.pid in result.stderr
    assert thread_masks(target.pid) == before


def test_unprivileged_user_on_another_users_process(duty, domains, procs, tmp_path):
    """As nobody, against root's process: one line naming CAP_SYS_NICE, exit 1."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to switch to an unprivileged user")
    drop = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    probe = subprocess.run(drop + [sys.executable, "-c", "import tumbler"], cwd=REPO,
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user nobody cannot run this Python: %s" % probe.stderr[-200:])
    spec, _ = domains
    target = procs.start([duty, "30", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    before = thread_masks(target.pid)
    env = dict(os.environ, TUMBLER_STATE_DIR=str(tmp_path / "nobody-state"))
    env.pop("XDG_RUNTIME_DIR", None)
    result = subprocess.run(drop + tumbler_cmd("--policy", "tumbler",
                                               "--domains", spec, "--duration", "2",
                                               "-p", str(target.pid)),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_SYS_NICE" in lines[0], lines
    assert thread_masks(target.pid) == before
    assert not (tmp_path / "nobody-state").exists()


# -- the state files themselves ------------------------------------------------------

def test_restore_discards_the_state_of_a_process_that_exited(duty, domains, procs, state):
    spec, doms = domains
    target = procs.start([duty, "60", "70", "50", "30", "10"])
    wait_for_threads(target.pid, 5)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "-p", str(target.pid), state_dir=state)
    wait_bound(target.pid, doms)
    tumbler.kill()
    tumbler.wait()
    target.kill()
    target.wait()
    result = run_tumbler("restore", "-p", str(target.pid), env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "process %d (duty) has exited; discarded its state left by tumbler %d"
        % (target.pid, tumbler.pid)]
    assert not os.listdir(state)


def test_restore_keeps_and_reports_a_corrupt_state_file(state):
    state.mkdir()
    bad = state / "123-456.json"
    bad.write_text("{not json")
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 1
    assert_no_traceback(result.stderr)
    assert result.stderr.strip().splitlines() == [
        "tumbler: state file %s: not valid JSON (line 1, column 2: Expecting property name "
        "enclosed in double quotes); inspect and remove it" % bad]
    assert bad.exists()
    bad.unlink()


def test_state_from_before_a_reboot_is_discarded(duty, procs, state):
    """PIDs and start times repeat across boots: never apply such state."""
    from tumbler.platform import open_backend
    from tumbler.state import STATE_VERSION, write_json
    target = procs.start([duty, "30", "5", "5"])
    wait_for_threads(target.pid, 3)
    before = thread_masks(target.pid)
    backend = open_backend()
    sample = backend.sample(target.pid)
    state.mkdir()
    path = state / ("%d-%d.json" % (target.pid, backend.process(target.pid).start))
    write_json(str(path), {
        "version": STATE_VERSION, "boot": "another-boot",
        "tumbler": {"pid": 99999999, "start": 1}, "platform": "linux", "binder": "affinity",
        "target": {"pid": target.pid, "start": backend.process(target.pid).start,
                   "name": "duty", "allowed": [0]},
        "domains": [[0]], "resources": {},
        "threads": [{"tid": tid, "start": times.start, "binder": "affinity",
                     "saved": {"cpus": [0]}} for tid, times in sample.threads.items()]})
    backend.close()
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert "has exited; discarded its state" in result.stdout
    assert thread_masks(target.pid) == before       # the stale "originals" not applied
    assert not os.listdir(state)


def test_default_state_directory(monkeypatch, tmp_path):
    """Every branch, whoever runs the suite: root, a user with and without
    XDG_RUNTIME_DIR, and the override above them all.  The fallback's
    /tmp is the test's own directory (the machine's /tmp/tumbler-1000 may
    be a real user's)."""
    from tumbler.state import paths, state_dir
    monkeypatch.setattr(paths, "FALLBACK_FORMAT", str(tmp_path / "tumbler-%d"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("TUMBLER_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert state_dir() == "/run/tumbler"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert state_dir() == "/run/user/1000/tumbler"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    fallback, home = str(tmp_path / "tumbler-1000"), str(tmp_path / "home/.local/state/tumbler")
    assert state_dir() == fallback              # free: made by ensure_dir, not here
    assert not os.path.lexists(fallback)
    os.mkdir(fallback)                          # root's here: another user's to uid 1000
    assert state_dir() == home
    os.mkdir(tmp_path / "tumbler-0")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert paths.fallback_dir() == str(tmp_path / "tumbler-0")     # its owner's own
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == str(tmp_path / "xdg" / "tumbler")
    monkeypatch.setenv("XDG_STATE_HOME", "relative")    # ignored, as XDG says
    assert state_dir() == home
    os.makedirs(home)                   # once it exists, it is used from then on
    os.rmdir(fallback)
    assert state_dir() == home
    monkeypatch.setenv("TUMBLER_STATE_DIR", "/somewhere/else")
    assert state_dir() == "/somewhere/else"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert state_dir() == "/somewhere/else"


def test_journal_lock_batch_and_pruning(duty, procs, state):
    """In-process: a second claim is Busy; a batch is one write at its end;
    records of exited threads are pruned as the file and its log grow."""
    from tumbler.platform import open_backend
    from tumbler.state.journal import LOG_COMPACT_MIN_BYTES, PRUNE_MIN
    from tumbler.state import Busy, Journal
    from tumbler.state.restore import _MaskLog
    from tumbler.state.store import StateFile
    target = procs.start([duty, "30", "5", "5"])
    wait_for_threads(target.pid, 3)
    backend = open_backend()
    journal, other = Journal(backend, str(state)), Journal(backend, str(state))
    try:
        journal.claim(target.pid)
        with pytest.raises(Busy) as refused:
            other.claim(target.pid)
        assert "tumbler PID %d" % os.getpid() in str(refused.value)
        (path,) = [state / f for f in os.listdir(state) if f.endswith(".json")]
        state_file = StateFile(str(state), target.pid, int(path.name[:-5].split("-")[1]))

        def recorded():
            """The records restore would act on: the file's and its log's."""
            with open(path) as f:
                data = json.load(f)
            _MaskLog.read(state_file, data)
            return {r["tid"] for r in data["threads"]}

        def on_disk():
            return sum(os.path.getsize(state / f) for f in os.listdir(state)
                       if not f.endswith(".lock"))

        live = sorted(thread_masks(target.pid))
        with journal.batch():
            for tid in live:
                journal.record(target.pid, tid, 0, "affinity", {"cpus": [0]})
            assert recorded() == set()
        assert recorded() == set(live)
        # Thousands of threads that came and went: the files stay small (a
        # compaction prunes, and the log is emptied once it is as long as
        # the file and LOG_COMPACT_MIN_BYTES).
        for fake in range(1, 100 * PRUNE_MIN):
            journal.record(target.pid, 4_000_000 + fake, 0, "affinity", {"cpus": [0]})
        assert set(live) <= recorded()
        assert on_disk() <= 3 * LOG_COMPACT_MIN_BYTES
    finally:
        journal.close()
        other.close()
        backend.close()
    assert not os.listdir(state)


@needs_cpuset
def test_restore_removes_cgroups_of_a_tumbler_killed_before_its_state(procs, state,
                                                                      cgroups_gone):
    """No state file names them: `tumbler restore` still finds tumbler.<pid>
    cgroups whose tumbler is gone and moves whatever is inside back out."""
    mount = cgroups_gone
    gone = procs.start(["true"])
    gone.wait()
    top = os.path.join(mount, "tumbler.%d" % gone.pid)
    os.mkdir(top)
    sub = os.path.join(top, "d0")
    os.mkdir(sub)
    for name in ("cpuset.cpus", "cpuset.mems"):
        for directory in (top, sub):
            with open(os.path.join(directory, name), "w") as f:
                f.write(open(os.path.join(mount, name)).read().strip())
    sleeper = procs.start(["sleep", "60"])
    with open(os.path.join(sub, "tasks"), "w") as f:
        f.write(str(sleeper.pid))
    result = run_tumbler("restore", env=env_for(state))
    assert result.returncode == 0, result.stderr
    assert "removed 2 cgroups left by tumbler %d" % gone.pid in result.stdout
    assert not os.path.exists(top)
    assert cgroups_of(sleeper.pid) == {sleeper.pid: "/"}


# -- the state file's JSON, written without the json module --------------------

@pytest.mark.parametrize("data", [
    {"version": 1, "boot": "0c5f-\u00e9\n\"x\\", "tumbler": {"pid": 4711, "start": 123456},
     "target": {"pid": 1, "start": 2, "name": "a b\tc\u2603", "allowed": [0, 1, 2, 3]},
     "domains": [[0, 1], [2, 3]], "resources": {"cgroups": [], "subtree_control": []},
     "masks": [], "threads": [{"tid": 5, "saved": {"cpus": [0]}, "set": [[1]], "x": None,
                               "y": True, "z": False, "f": 0.1, "g": -2.5e-07,
                               "big": 2 ** 70, "neg": -3, "t": (1, 2)}]},
    {}, [], "", 0, None, {"b": {}, "a": [[], {}]},
    # A thread name that is not UTF-8 (os.fsdecode's surrogate escape).
    {"name": b"w\xffrker\x00\x1f".decode("utf-8", "surrogateescape")},
])
def test_state_json_is_what_json_writes(data):
    """state.paths.dumps writes what json.dumps(..., separators=(",", ":"),
    sort_keys=True) writes, byte for byte, and json reads it back."""
    from tumbler.state.paths import dumps
    text = dumps(data)
    assert text == json.dumps(data, separators=(",", ":"), sort_keys=True)
    assert json.loads(text) == json.loads(json.dumps(data))


@pytest.mark.parametrize("bad", [{"a": {1, 2}}, {1: "x"}, [float("nan")], [object()]])
def test_state_json_refuses_what_json_cannot_read_back(bad):
    from tumbler.state.paths import dumps
    with pytest.raises((TypeError, ValueError)):
        dumps(bad)
