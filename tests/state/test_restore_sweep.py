"""``tumbler restore``'s look for threads and processes born of bound
threads (state/restore.py, ``_sweep``), on a scripted system: which
processes it may touch, and how often."""

import pytest

from support.restore_system import CHILD, TARGET, TUMBLER, ScriptedBinder, System
from tumbler.state import STATE_VERSION, StateFile, restore_state, write_json
from tumbler.state import store as state_module


def state(directory, threads):
    """The dead tumbler's state: ``threads`` [(pid, tid, start)] recorded."""
    state_file = StateFile(str(directory), TARGET, 10)
    write_json(state_file.path, {
        "version": STATE_VERSION, "boot": state_module.boot_id(),
        "tumbler": {"pid": TUMBLER, "start": 5}, "platform": "linux", "binder": "affinity",
        "target": {"pid": TARGET, "start": 10, "name": "app", "allowed": [0, 1]},
        "domains": [[0], [1]], "resources": {},
        "threads": [{"pid": pid, "tid": tid, "start": start, "binder": "affinity",
                     "saved": {"cpus": [0, 1]}} for pid, tid, start in threads]})
    return state_file


def test_a_recorded_childs_pid_now_anothers_is_not_touched(tmp_path):
    """The recorded child exited and its PID names an unrelated process
    now, whose thread happens to carry a mask tumbler once set (a taskset
    of one domain's CPUs): restore leaves it alone."""
    system = System({TARGET: (10, {TARGET: 10}, 1),
                     CHILD: (99, {CHILD: 99, CHILD + 2: 99}, 1)},      # not the target's child
                    masked={(CHILD, CHILD + 2)})
    report = restore_state(state(tmp_path, [(TARGET, TARGET, 10), (CHILD, CHILD + 1, 20)]),
                           system)
    assert system.restored == [(TARGET, TARGET)]
    assert report.gone == 1 and not report.failed


def test_a_live_recorded_child_and_its_new_threads_are_put_back(tmp_path):
    system = System({TARGET: (10, {TARGET: 10}, 1),
                     CHILD: (20, {CHILD + 1: 20, CHILD + 2: 30}, 1)},  # re-parented: not below
                    masked={(CHILD, CHILD + 2)})
    report = restore_state(state(tmp_path, [(TARGET, TARGET, 10), (CHILD, CHILD + 1, 20)]),
                           system)
    assert sorted(system.restored) == [(TARGET, TARGET), (CHILD, CHILD + 1), (CHILD, CHILD + 2)]
    assert (report.restored, report.adopted, report.failed) == (2, 1, 0)


def test_a_thread_that_cannot_be_put_back_is_tried_and_said_once(tmp_path):
    """Thread 103 refuses; 104 is born meanwhile (found by the second
    listing): 103 is not tried again at every pass, and the state stays
    for another try."""
    system = System({TARGET: (10, {TARGET: 10, 103: 11}, 1)}, masked={(TARGET, 103)})
    system.failing.add((TARGET, 103))
    original = ScriptedBinder.restore

    def restore_and_spawn(binder, pid, tid, saved):
        original(binder, pid, tid, saved)
        if tid == TARGET and 104 not in system.processes[TARGET][1]:
            system.processes[TARGET][1][104] = 12
            system.masked.add((TARGET, 104))
    ScriptedBinder.restore = restore_and_spawn
    try:
        state_file = state(tmp_path, [(TARGET, TARGET, 10)])
        report = restore_state(state_file, system)
    finally:
        ScriptedBinder.restore = original
    assert (TARGET, 104) in system.restored
    assert report.failed == 1 and len(report.errors) == 1, report.errors
    assert tmp_path.joinpath(state_file.path.rsplit("/", 1)[1]).exists()


def test_a_program_that_keeps_setting_tumblers_masks_ends_the_sweep(tmp_path):
    """Every listing finds a new thread with tumbler's mask (a program
    setting it on its own threads over and over): restore stops after
    SWEEP_PASSES listings, says so, and keeps the state."""
    from tumbler.platform.base import SWEEP_PASSES
    system = System({TARGET: (10, {TARGET: 10}, 1)}, masked=set())
    original = System.thread_ids
    born = iter(range(1000, 2000))

    def listing_with_one_more(self, pid):
        tid = next(born)
        self.processes[TARGET][1][tid] = tid
        self.masked.add((TARGET, tid))
        return original(self, pid)
    System.thread_ids = listing_with_one_more
    try:
        report = restore_state(state(tmp_path, [(TARGET, TARGET, 10)]), system)
    finally:
        System.thread_ids = original
    assert report.adopted == SWEEP_PASSES
    assert report.failed == 1 and "run tumbler restore again" in report.errors[0]
