"""auto beside other work, on real processes (engine/policy.py, 3.;
engine/merging.py): a CPU-bound hog on one of two 1-CPU domains makes auto
hand the program's threads back to the OS, with the default ``--capacity
cpus``; once the hog has gone the domains split again."""

import os
import signal
import subprocess
import time

import pytest

from support.capacity import (bound_across, hog, linux_root, other_work_reading, other_work_since,
                              rounds_of, split)
from support.helpers import thread_masks
from support.processes import finish, wait_until
from tumbler.balance.capacity import HYSTERESIS_STEPS, step_of


@linux_root
def test_a_hog_beside_a_bound_thread_merges_the_domains_until_it_goes(
        spawner, duty, procs, state, tmp_path, two_cpus):
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)
    log = tmp_path / "run.jsonl"
    target, tumbler = bound_across(procs, spawner, state, two_cpus, 2, "--log", str(log))
    hogging = hog(procs, duty, cpu_b, 0, 100)
    wait_until(lambda: any("merged: other work" in r["reason"] for r in rounds_of(log)),
               timeout=20, what="auto to merge the domains beside the hog")
    # Handed back: every thread has the mask it had before tumbler came.
    wait_until(lambda: all(m == both for m in thread_masks(target.pid).values()),
               timeout=5, what="every thread handed back to both CPUs")
    merged_at = len(rounds_of(log))
    hogging.kill()
    hogging.wait()
    # The split's premise: no other work to speak of on the CPUs once the
    # hog has gone (the rest of the suite, or anything else, running there
    # rightly keeps the domains merged; checked as test_capacity's idle test).
    before = other_work_reading(target.pid, two_cpus)
    time.sleep(1.0)
    other = other_work_since(before, target.pid, two_cpus)
    idle = other < HYSTERESIS_STEPS * step_of(2)
    if idle:
        wait_until(lambda: any("split again" in r["reason"]
                               for r in rounds_of(log)[merged_at:]),
                   timeout=20, what="the domains to split once the hog has gone")
        wait_until(lambda: split(target.pid, cpu_a, cpu_b) == (1, 1), timeout=20,
                   what="one spinner bound to each CPU again")
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert all(m == both for m in thread_masks(target.pid).values())
    rounds = rounds_of(log)
    merges = [r for r in rounds if "merged" in r["reason"]]
    assert len(merges) == 1, [r["reason"] for r in rounds]
    assert all(r["domains"] == ["%d-%d" % tuple(sorted(two_cpus))]
               for r in rounds[rounds.index(merges[0]):merged_at]), \
        [r["domains"] for r in rounds]
    if not idle:
        pytest.skip("not an idle machine: other work took %.2f CPU of CPUs %s after the "
                    "hog; the split was not checked" % (other, "/".join(map(str, two_cpus))))


@linux_root
def test_without_per_round_output_the_merge_is_judged_too(spawner, duty, procs, state,
                                                          two_cpus):
    """No --log: rounds may be quiet, with the table's long intervals; a
    merge waiting for its readings keeps them full and at auto's watch
    pace (never paced further), so the threads are handed back within seconds of the hog."""
    cpu_b = two_cpus[1]
    both = frozenset(two_cpus)
    target, tumbler = bound_across(procs, spawner, state, two_cpus, 2)
    time.sleep(2.0)                     # quiet rounds by now, on a quiet machine
    hogging = hog(procs, duty, cpu_b, 0, 100)
    wait_until(lambda: all(m == both for m in thread_masks(target.pid).values()),
               timeout=5, what="every thread handed back to both CPUs beside the hog")
    status, stderr = finish(tumbler, signal.SIGTERM)
    hogging.kill()
    assert status == 0, stderr
    assert "merged: other work" in stderr, stderr
    assert all(m == both for m in thread_masks(target.pid).values())


@linux_root
def test_threads_that_block_and_wait_beside_a_hog_merge_the_domains(duty, procs, state, tmp_path,
                                                                     two_cpus):
    """Two threads busy 40% of every 20 ms (they block the rest), bound one
    to each of two 1-CPU domains; a hog on one CPU: the thread beside it
    waits in the run queue (runnable ~0.8, below always-runnable) while
    the other CPU idles half the time, so auto hands both back to the OS
    (engine/merging.py, the threads that block)."""
    from support.helpers import REPO, thread_names, tumbler_cmd
    from support.processes import env_for
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)
    log = tmp_path / "run.jsonl"
    target = procs.start([duty, "600", "40", "40"],
                         preexec_fn=lambda: os.sched_setaffinity(0, both))
    tumbler = procs.start(tumbler_cmd("--domains", "%d/%d" % two_cpus, "--log", str(log),
                                      "-p", str(target.pid)),
                          env=env_for(state), cwd=REPO, stderr=subprocess.PIPE, text=True)

    def workers():
        names = thread_names(target.pid)
        return {tid: m for tid, m in thread_masks(target.pid).items()
                if names.get(tid, "").startswith("duty-")}

    wait_until(lambda: sorted(map(sorted, workers().values())) == [[cpu_a], [cpu_b]],
               timeout=20, what="one blocking thread bound to each CPU")
    hogging = hog(procs, duty, cpu_b, 0, 100)
    wait_until(lambda: any("merged: other work" in r["reason"] for r in rounds_of(log)),
               timeout=20, what="auto to merge the domains beside the hog")
    wait_until(lambda: all(m == both for m in thread_masks(target.pid).values()),
               timeout=5, what="every thread handed back to both CPUs")
    status, stderr = finish(tumbler, signal.SIGTERM)
    hogging.kill()
    assert status == 0, stderr
    assert all(m == both for m in thread_masks(target.pid).values())
