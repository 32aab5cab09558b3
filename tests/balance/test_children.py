"""Process trees (``--children``, the default of ``exec``): the threads of a
command's descendants are balanced with it, found as they appear, and put
back on every exit path, after SIGKILL by ``tumbler restore``.

Real processes, real masks; domains are one CPU each (``--domains A/B``)
so that a bound thread's mask shows it, under wave grouping's policy
(``--policy tumbler``), which binds whatever else runs on the machine (under
``auto`` other work on the CPUs rightly merges the domains and binds nothing:
tests/balance/test_other_work.py).
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from support.helpers import on_cpus, run_tumbler, thread_masks, wait_for_threads
from support.processes import descendants, env_for, finish, wait_bound, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

#: spawner with two spinning threads, nothing else, for RUN seconds.
SPINNERS = "%s 2 100000 1 %d 0"


def spinner_below(pid):
    """The descendant of ``pid`` that runs spawner (its threads: main + 2)."""
    def find():
        for child in descendants(pid):
            try:
                with open("/proc/%d/comm" % child) as f:
                    if f.read().startswith("spawner"):
                        return child
            except OSError:
                continue
        return None
    return wait_until(find, what="spawner below %d" % pid)


def assert_handed_back(spinners, cpus):
    """The spawner ``spinners`` (main thread + 2) has ``cpus`` on every thread."""
    masks = thread_masks(spinners)
    assert len(masks) == 3
    assert all(mask == cpus for mask in masks.values()), masks


def test_exec_balances_a_wrappers_grandchild(spawner, domains, procs, state, two_cpus):
    """``sh -c "sh -c 'spawner; true'; true"``: the spinners two levels
    down are bound across the domains, and handed back at the end."""
    spec, doms = domains
    both = frozenset(two_cpus)
    inner = "%s; true" % (SPINNERS % (spawner, 30))
    # (stderr: not tumbler's pipe, which the orphan would hold open)
    tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "exec", "--", "sh", "-c",
                            "exec 2>/dev/null; sh -c '%s'; true" % inner, state_dir=state,
                            preexec_fn=on_cpus(both))
    grandchild = spinner_below(tumbler.pid)
    wait_bound(grandchild, doms, count=2)
    status, stderr = finish(tumbler, signal.SIGTERM)     # forwarded to the outer shell
    try:
        assert status == 128 + signal.SIGTERM, stderr
        assert_handed_back(grandchild, both)                # runs on, orphaned
    finally:
        _kill(grandchild)


def test_no_children_leaves_descendants_alone(spawner, domains, procs, state, tmp_path,
                                              two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    summary = tmp_path / "summary.json"
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--summary-json", str(summary), "exec",
                            "--no-children", "--", "sh", "-c",
                            "%s; true" % (SPINNERS % (spawner, 3)), state_dir=state,
                            preexec_fn=on_cpus(both))
    child = spinner_below(tumbler.pid)
    seen = []
    while _alive(child):
        try:
            seen.append(thread_masks(child))
        except FileNotFoundError:
            break               # it exited between the two looks
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    assert seen and all(mask == both for masks in seen for mask in masks.values())
    assert json.load(open(summary))["threads_seen"] == 1      # the shell's own thread


def test_a_child_forked_after_the_start_is_picked_up(spawner, domains, procs, state,
                                                      two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    # (stderr: not tumbler's pipe, which the orphan would hold open)
    tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "exec", "--", "sh", "-c",
                            "exec 2>/dev/null; sleep 1; %s; true" % (SPINNERS % (spawner, 30)),
                            state_dir=state, preexec_fn=on_cpus(both))
    child = spinner_below(tumbler.pid)
    wait_bound(child, doms, count=2)
    status, stderr = finish(tumbler, signal.SIGTERM)     # forwarded to the shell
    try:
        assert status == 128 + signal.SIGTERM, stderr
        assert_handed_back(child, both)             # runs on, orphaned
    finally:
        _kill(child)


def test_threads_made_during_start_up_are_placed(spawner, domains, procs, state, two_cpus):
    """The spinners start while tumbler is still starting: the first look
    places them."""
    spec, doms = domains
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "exec", "--", spawner, "2", "100000", "1",
                            "4", "0", state_dir=state, stdout=subprocess.DEVNULL,
                            preexec_fn=on_cpus(frozenset(two_cpus)))
    wait_until(lambda: descendants(tumbler.pid), what="the command")
    target = descendants(tumbler.pid)[0]
    wait_bound(target, doms, count=3)
    status, stderr = finish(tumbler)
    assert status == 0, stderr


def test_sigkill_then_restore_covers_the_children(spawner, domains, procs, state, two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "exec", "--", "sh", "-c",
                            "%s; true" % (SPINNERS % (spawner, 60)), state_dir=state,
                            preexec_fn=on_cpus(both))
    child = spinner_below(tumbler.pid)
    wait_bound(child, doms, count=2)
    shell = [p for p in descendants(tumbler.pid) if p != child][0]
    tumbler.kill()
    tumbler.wait()
    try:
        restore = run_tumbler("restore", env=env_for(state))
        assert restore.returncode == 0, restore.stderr
        masks = thread_masks(child)
        assert len(masks) == 3
        assert all(mask == both for mask in masks.values()), masks
    finally:
        _kill(child)
        _kill(shell)


def test_attach_with_children(spawner, domains, procs, state, two_cpus):
    """``-p PID --children`` adds a running program's descendants."""
    spec, doms = domains
    both = frozenset(two_cpus)
    shell = procs.start(["sh", "-c", "%s; true" % (SPINNERS % (spawner, 30))],
                        preexec_fn=on_cpus(both))
    child = spinner_below(shell.pid)
    try:
        tumbler = procs.tumbler("--policy", "tumbler",
                                "--domains", spec, "--children", "--duration", "30", "-p",
                                str(shell.pid), state_dir=state)
        wait_bound(child, doms, count=2)
        status, stderr = finish(tumbler, signal.SIGINT)
        assert status == 0, stderr
        assert_handed_back(child, both)
    finally:
        _kill(child)            # the shell is the fixture's; its child would spin on


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children_of(pid):
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            continue
    return found


#: sh: wait until the test creates $GO (tumbler is balancing by then).
WAIT_GO = 'while [ ! -e "$GO" ]; do sleep 0.01; done; '


def _rounds(log):
    return [json.loads(line) for line in open(log)] if log.exists() else []


def _balancing(log, go):
    """Once ``log`` has a round that bound threads (auto binds none before
    it has read other work; the shell is bound, orphans are kept), create
    ``go``."""
    wait_until(lambda: any(r["moves"] for r in _rounds(log)), what="the first binding round")
    go.touch()


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_an_orphan_forked_by_a_bound_shell_is_handed_back(spawner, domains, procs, state,
                                                          two_cpus, tmp_path):
    """``sh -c 'spawner &'``: the shell, bound by then, forks the spinners
    in the background and exits at once, before tumbler's next look.  The
    orphan is re-parented to tumbler (exec keeps the orphans of its
    command's tree), not to init, and is handed back: it runs on with the
    CPUs the command had, not the one-CPU mask it was born with."""
    spec, doms = domains
    both = frozenset(two_cpus)
    pidfile, log, go = tmp_path / "orphan.pid", tmp_path / "run.jsonl", tmp_path / "go"
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--log", str(log), "exec", "--", "env",
                            "GO=%s" % go, "sh", "-c", "exec 2>/dev/null; " + WAIT_GO
                            + "%s & echo $! > %s; exit 0" % (SPINNERS % (spawner, 30), pidfile),
                            state_dir=state, preexec_fn=on_cpus(both))
    _balancing(log, go)
    status, stderr = finish(tumbler)
    child = int(pidfile.read_text())
    try:
        assert status == 0, stderr
        # the shell was bound to one domain before it forked
        binding = next(r for r in _rounds(log) if r["moves"])
        assert "sh" in [m["name"] for m in binding["moves"]], binding
        assert all(m["to"] is not None for m in binding["moves"])
        # (on a loaded machine the orphan may make its threads after
        # tumbler has gone: they are born of its handed-back main thread)
        wait_for_threads(child, 3)
        assert_handed_back(child, both)             # runs on, orphaned
    finally:
        _kill(child)


def test_orphans_that_exit_are_reaped(procs, state, domains, two_cpus, tmp_path):
    """Orphans re-parented to tumbler are waited for while it runs: none is
    left a zombie (a long command that orphans many short processes would
    otherwise fill the process table)."""
    spec, _ = domains
    log, go = tmp_path / "run.jsonl", tmp_path / "go"
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--log", str(log), "exec", "--", "env",
                            "GO=%s" % go, "sh", "-c", WAIT_GO
                            + "for i in 1 2 3 4 5; do (sleep 1 &); done; exec sleep 5",
                            state_dir=state, preexec_fn=on_cpus(frozenset(two_cpus)))
    try:
        _balancing(log, go)
        # the five sleeps are re-parented to tumbler at once, and end 1 s later
        wait_until(lambda: len(_children_of(tumbler.pid)) == 6, what="the orphans")
        wait_until(lambda: len(_children_of(tumbler.pid)) == 1, what="orphans reaped")
        leftover = [c for c in _children_of(tumbler.pid) if _state(c) == "Z"]
        assert leftover == []
    finally:
        status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, stderr


def test_orphans_that_exit_after_balancing_ended_are_reaped(procs, state, domains, two_cpus,
                                                            tmp_path):
    """--duration ends balancing and the command runs on; tumbler stays
    the subreaper of its tree, so orphans made after that are still
    re-parented to it, and still waited for (they stayed zombies until the
    command exited).  Each orphan writes its PID and its parent once that
    is tumbler (the subshell that forked it gone), then exits."""
    spec, _ = domains
    summary, go, seen = tmp_path / "summary.json", tmp_path / "go", tmp_path / "orphans"
    # $1: tumbler's PID, the command's parent (5 s at most, else the parent
    # it has then is written: init's, say)
    orphan = ('i=0; while [ $i -lt 500 ]; do read -r pid comm state parent rest < /proc/$$/stat'
              '; [ "$parent" = "$1" ] && break; i=$((i + 1)); sleep 0.01; done; '
              'echo $$ $parent >> %s' % seen)
    tumbler = procs.tumbler("--policy", "tumbler",
                            "--domains", spec, "--duration", "0.5", "--summary-json",
                            str(summary), "exec", "--", "env", "GO=%s" % go, "sh", "-c",
                            WAIT_GO + "for i in 1 2 3 4 5; do (sh -c '%s' orphan $PPID &); done; "
                            "exec sleep 30" % orphan,
                            state_dir=state, preexec_fn=on_cpus(frozenset(two_cpus)))
    try:
        wait_until(lambda: summary.exists() and summary.stat().st_size > 0,
                   what="balancing to end")
        assert json.loads(summary.read_text())["end_reason"] == "duration reached"
        go.touch()
        wait_until(lambda: seen.exists() and len(seen.read_text().split("\n")) == 6,
                   what="the orphans")
        orphans = dict(map(int, line.split()) for line in seen.read_text().split("\n")[:5])
        assert set(orphans.values()) == {tumbler.pid}, orphans
        wait_until(lambda: not set(orphans) & set(_children_of(tumbler.pid)),
                   what="orphans reaped")
    finally:
        status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, stderr
