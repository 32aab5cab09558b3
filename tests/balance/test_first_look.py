"""The first look for a followed target's descendants (ThreadTracker,
``look_at_new_processes``): every process is new then.  Where the backend
lists children, only the target's and tumbler's own subtrees are read --
not the parent of every process on the machine, 25-75 ms at each exec's
start on a machine of 1,000-3,000 processes.  Real processes."""

import os
import subprocess
import sys

import pytest

from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker
from tumbler.engine.policy import make_policy
from tumbler.platform.base import NullBinder
from tumbler.platform.linux.backend import LinuxBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

#: A parent of two sleeping children, which says their PIDs once both run.
PARENT = ("import subprocess, sys, time\n"
          "kids = [subprocess.Popen(['sleep', '60']) for _ in range(2)]\n"
          "print(*[k.pid for k in kids], flush=True)\n"
          "time.sleep(60)\n")


class CountingBackend(LinuxBackend):
    """The real backend, counting whose parents it was asked."""

    def __init__(self, lists_children):
        super().__init__()
        self.asked = []
        self._lists_children = lists_children

    def parent_of(self, pid):
        self.asked.append(pid)
        return super().parent_of(pid)


def tracker_over(backend):
    """A tracker over --domains 0/1 that binds nothing."""
    layout = Layout(DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"))
    return ThreadTracker(backend, NullBinder(), make_policy("tumbler"), layout,
                         MachineWatch(backend), RunStats(0.0), lambda warning: None,
                         bound_masks=set(), load_window_ns=300_000_000)


@pytest.fixture
def family():
    """(the parent, its two children), beside 30 unrelated processes."""
    others = [subprocess.Popen(["sleep", "60"]) for _ in range(30)]
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        children = {int(pid) for pid in parent.stdout.readline().split()}
        yield parent.pid, children, {p.pid for p in others}
    finally:
        for process in [*others, parent]:
            process.kill()
            process.wait()
        for pid in children:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("lists_children", [True, False])
def test_the_first_look_adopts_the_children_reading_only_theirs(family, lists_children):
    """With the children listed, the parents read are the two children's
    (the adoption's own check); without, every process's.  The same
    processes are adopted either way."""
    parent, children, others = family
    backend = CountingBackend(lists_children)
    tracker = tracker_over(backend)
    tracker.add_target(parent, children=True)
    assert set(tracker.targets) == {parent} | children
    if lists_children:
        assert sorted(backend.asked) == sorted(children)
    else:
        assert others <= set(backend.asked)
    backend.close()


def test_a_child_born_after_the_first_look_is_found_at_the_next(family):
    """The first look lists the processes; a child made after it is new at
    the next look, and its parent is read then."""
    parent, children, _ = family
    backend = CountingBackend(True)
    tracker = tracker_over(backend)
    tracker.add_target(parent, children=True)
    late = subprocess.Popen(["sleep", "60"])        # this test's own child, not the target's
    try:
        backend.asked.clear()
        tracker._newest_pid = None                  # as if the PID counter moved
        tracker.look_at_new_processes()
        assert late.pid in backend.asked            # read: it is new
        assert late.pid not in tracker.targets      # and not the target's
    finally:
        late.kill()
        late.wait()
        backend.close()
