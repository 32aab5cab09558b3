"""Real processes a test starts and tumbler runs on them: each one killed
at the end (``Processes``, the ``procs`` fixture), tumbler with a state
directory of the test's own, waits for binding, a tumbler run finished."""

import os
import subprocess
import time

from support.helpers import REPO, assert_no_traceback, thread_masks, tumbler_cmd


def env_for(state_dir):
    return dict(os.environ, TUMBLER_STATE_DIR=str(state_dir))


class Processes:
    """Starts processes and makes sure every one is gone at the end."""

    def __init__(self):
        self.procs = []

    def start(self, args, **kwargs):
        proc = subprocess.Popen(args, **kwargs)
        self.procs.append(proc)
        return proc

    def tumbler(self, *args, state_dir, **kwargs):
        kwargs.setdefault("stderr", subprocess.PIPE)
        return self.start(tumbler_cmd(*args), env=env_for(state_dir), text=True, cwd=REPO,
                          **kwargs)

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=10)
            except (ValueError, subprocess.TimeoutExpired):
                proc.wait()


def bound(masks, domains):
    """Threads whose mask lies inside one domain."""
    return {tid for tid, mask in masks.items() if any(mask <= d for d in domains)}


def wait_until(predicate, timeout=10.0, what="condition", on_timeout=None):
    """``predicate()``'s first true value; AssertionError naming ``what``
    (and giving ``on_timeout()``, e.g. a service's log, if given) after
    ``timeout`` s (a failure guard, never the thing tested).
    (support.helpers.wait_until: one limit, WAIT_LIMIT_S, for every wait.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what +
                         ("" if on_timeout is None else "\n" + str(on_timeout())))


def wait_bound(pid, domains, count=1):
    """Wait until tumbler has bound at least ``count`` threads of ``pid``."""
    return wait_until(lambda: len(bound(thread_masks(pid), domains)) >= count,
                      what="tumbler to bind %d thread(s) of %d" % (count, pid))


def finish(proc, signum=None, timeout=30):
    if signum is not None:
        proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=timeout)
    assert_no_traceback(stderr)
    return proc.returncode, stderr


def descendants(pid):
    """PIDs below ``pid`` (children, theirs, ...)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir("/proc/%d/task" % parent)
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                with open("/proc/%d/task/%s/children" % (parent, tid)) as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found
