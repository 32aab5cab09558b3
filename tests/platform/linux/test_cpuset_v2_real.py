"""``--binder cpuset`` on a real cgroup v2 hierarchy (root only).

Two groups of tests:

* cgroup core: the threaded subtree the binder builds, on the real kernel,
  for a real multithreaded process.  Runs wherever cgroup2 is mounted, even
  when the cpuset controller is bound to a v1 hierarchy: then the writes
  to ``cgroup.subtree_control`` and ``cpuset.*`` are stubbed (they are
  what the fixture-tree tests in test_cpuset_v2.py check), everything else
  -- ``cgroup.type``, moving threads through ``cgroup.threads``, rmdir --
  is the kernel's.
* cpuset: the whole binder and the CLI, with real CPU sets.  Needs the
  cpuset controller on cgroup v2.  On a machine with cpuset on a v1
  hierarchy the ``cgroup2_cpuset`` fixture can move it: unmounting an
  unused v1 hierarchy (no child cgroups, nobody holding it open) releases
  the controller to v2, and mounting it again afterwards binds it back.
  That changes the machine's mounts for the duration of this module, so
  it is only done with TUMBLER_TEST_CGROUP_SWAP=1; the v1 mount is always
  put back and checked.

Each test runs its workload in a scratch cgroup ``tumbler-test.<pid>/app``
under the v2 root, which it removes afterwards.
"""

import os
import signal
import subprocess
import time

import pytest

from support.helpers import (REPO, assert_no_traceback, cpuset_mount, thread_masks, tumbler_cmd,
                             wait_for_threads, wait_until)
from support.cgroup2 import (SWAP_ENV, cgroup2_mount, controllers, read, release_v1_cpuset,
                             remount_v1_cpuset, v1_cpuset_options, write)
from tumbler.platform.linux import cpuset, cpuset_binder
from tumbler.platform.linux.backend import LinuxBackend


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")


def cgroup2_of(pid, tid=None):
    path = "/proc/%d/cgroup" % pid if tid is None else "/proc/%d/task/%d/cgroup" % (pid, tid)
    for line in read(path).splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise AssertionError("no cgroup v2 line in " + path)


def own_dirs(directory):
    return [n for n in os.listdir(directory) if n.startswith("tumbler.")]


class Scratch:
    """``V2/tumbler-test.<pid>/app`` holding a workload, removed on close."""

    def __init__(self, v2, duty):
        self.v2 = v2
        self.top = os.path.join(v2, "tumbler-test.%d" % os.getpid())
        self.app = os.path.join(self.top, "app")
        self.workload = None
        self.home = None
        self.root_control = read(os.path.join(v2, "cgroup.subtree_control")).split()
        os.mkdir(self.top)
        try:
            os.mkdir(self.app)
            # Killed by close(); its 600 s only bound a test that hangs.  (30 s
            # ran out before a slow guest's tumbler bound anything:
            # tests/system/test_guest_suite_files.py.)
            self.workload = subprocess.Popen([duty, "600", "70", "50", "30", "10"])
            self.pid = self.workload.pid
            self.home = cgroup2_of(self.pid)
            wait_for_threads(self.pid, 5)
            write(os.path.join(self.app, "cgroup.procs"), str(self.pid))
        except BaseException:
            self.close()
            raise

    def control(self):
        """subtree_control of the root, the scratch top, and app."""
        return [read(os.path.join(d, "cgroup.subtree_control"))
                for d in (self.v2, self.top, self.app)]

    def close(self):
        if self.workload is not None and self.workload.poll() is None:
            try:
                write(os.path.join(self.v2, self.home.lstrip("/"), "cgroup.procs"),
                      str(self.pid))
            except OSError:
                pass
            self.workload.kill()
            self.workload.wait()
        for top in cpuset.leftover_dirs(self.top).get(os.getpid(), []):
            cpuset.remove_tree(top)
        for directory in (self.app, self.top):
            for _ in range(50):             # the killed workload leaves in a moment
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        if "cpuset" not in self.root_control and \
                "cpuset" in read(os.path.join(self.v2, "cgroup.subtree_control")).split():
            try:
                write(os.path.join(self.v2, "cgroup.subtree_control"), "-cpuset")
            except OSError:
                pass
        assert not os.path.exists(self.top), "scratch cgroup %s left" % self.top


@pytest.fixture
def v2():
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 hierarchy mounted")
    return mount


@pytest.fixture
def scratch_factory(duty):
    made = []

    def make(v2):
        scratch = Scratch(v2, duty)
        made.append(scratch)
        return scratch
    yield make
    for scratch in made:
        scratch.close()


def bind_alternately(binder, pid, domains):
    """Save every thread and bind them to the domains in turn; return
    ({tid: saved}, {tid: domain index})."""
    saved, placed = {}, {}
    tids = sorted(thread_masks(pid))
    for tid in tids:
        saved[tid] = binder.save(pid, tid)
    for i, tid in enumerate(tids):
        placed[tid] = i % len(domains)
        binder.bind(pid, tid, placed[tid], domains[placed[tid]])
    return saved, placed


# -- the cgroup core ----------------------------------------------------------------

@pytest.fixture
def cpuset_writes_stubbed(v2, monkeypatch):
    """Without cpuset on v2: the binder's controller writes are recorded
    instead of made; its domain CPUs come from this process's mask."""
    if "cpuset" in controllers(v2):
        return None                 # the real thing: see the tests below
    stubbed = []
    real_write, real_read_cpus = cpuset.write, cpuset.read_cpus

    def write_(path, text):
        name = os.path.basename(path)
        if name == "cgroup.subtree_control" or name.startswith("cpuset."):
            stubbed.append((os.path.relpath(os.path.dirname(path), v2), name, text))
            return
        real_write(path, text)
    monkeypatch.setattr(cpuset, "write", write_)
    monkeypatch.setattr(cpuset, "read_cpus",
                        lambda *paths: real_read_cpus(*paths) or
                        frozenset(os.sched_getaffinity(0)))
    monkeypatch.setattr(cpuset, "find_cpuset_mount", lambda proc, root: ("v2", v2))
    return stubbed


def bound_and_put_back(v2, scratch, two_cpus, look, version=None):
    """Bind ``scratch``'s threads alternately to two one-CPU domains with a
    CpusetBinder (of ``version``, when given), call ``look(binder, its own
    cgroup)`` while they are bound, put every thread back and close the
    binder.  Checks that each thread sat in its domain's cgroup, within the
    domain's CPUs; returns (binder, saved records, placed, what look saw)."""
    pid = scratch.pid
    domains = [frozenset([two_cpus[0]]), frozenset([two_cpus[1]])]
    binder = cpuset_binder.CpusetBinder(LinuxBackend("/"))
    if version is not None:
        assert binder.version == version
    binder.setup(domains)
    app = "/" + os.path.relpath(scratch.app, v2)
    try:
        saved, placed = bind_alternately(binder, pid, domains)
        during = {tid: cgroup2_of(pid, tid) for tid in placed}
        during_masks = thread_masks(pid)
        seen = look(binder, os.path.join(scratch.app, binder._name))
        for tid, record in saved.items():
            binder.restore(pid, tid, record)
    finally:
        binder.close()
    for tid, index in placed.items():
        assert during[tid] == "%s/%s/d%d" % (app, binder._name, index)
        assert during_masks[tid] <= domains[index]
    return binder, saved, placed, seen


def test_threads_move_below_the_process_cgroup_and_back(v2, cpuset_writes_stubbed,
                                                         scratch_factory, two_cpus):
    scratch = scratch_factory(v2)
    pid = scratch.pid
    before_masks = thread_masks(pid)
    app = "/" + os.path.relpath(scratch.app, v2)

    def look(binder, own):
        return ([read(os.path.join(d, "cgroup.type"))
                 for d in (scratch.app, own, own + "/d0", own + "/d1")],
                read(os.path.join(scratch.app, "cgroup.procs")).split())
    binder, saved, placed, (types, procs) = bound_and_put_back(v2, scratch, two_cpus, look)
    assert all(record["cgroup"] == app for record in saved.values())
    assert types == ["domain threaded", "threaded", "threaded", "threaded"]
    assert procs == [str(pid)]      # the process itself never left its cgroup
    assert {cgroup2_of(pid, tid) for tid in placed} == {app}
    assert thread_masks(pid) == before_masks
    assert own_dirs(scratch.app) == []
    assert read(os.path.join(scratch.app, "cgroup.type")) == "domain"
    if cpuset_writes_stubbed is not None:
        enables = [(d, t) for d, n, t in cpuset_writes_stubbed if n == "cgroup.subtree_control"]
        rel_app = os.path.relpath(scratch.app, v2)
        rel_top = os.path.relpath(scratch.top, v2)
        assert enables == [(".", "+cpuset"), (rel_top, "+cpuset"), (rel_app, "+cpuset"),
                           (os.path.join(rel_app, binder._name), "+cpuset"),
                           (rel_app, "-cpuset"), (rel_top, "-cpuset"), (".", "-cpuset")]


def test_leftover_tree_of_a_killed_tumbler_is_emptied_and_removed(v2, scratch_factory):
    """What ``tumbler restore`` does without a state file, on the real kernel."""
    scratch = scratch_factory(v2)
    pid = scratch.pid
    top = os.path.join(scratch.app, "tumbler.999999")
    os.mkdir(top)
    write(top + "/cgroup.type", "threaded")
    os.mkdir(top + "/d0")
    assert read(top + "/d0/cgroup.type") == "domain invalid"
    write(top + "/d0/cgroup.type", "threaded")
    tids = sorted(thread_masks(pid))
    for tid in tids[1:]:
        write(top + "/d0/cgroup.threads", str(tid))
    assert cpuset.leftover_dirs(scratch.top) == {999999: [top]}
    assert sorted(cpuset.remove_tree(top)) == [top, top + "/d0"]
    app = "/" + os.path.relpath(scratch.app, v2)
    assert {cgroup2_of(pid, tid) for tid in tids} == {app}
    assert read(os.path.join(scratch.app, "cgroup.type")) == "domain"


# -- the cpuset controller on v2 -----------------------------------------------------


@pytest.fixture(scope="module")
def cgroup2_cpuset():
    """The cgroup2 mount, with the cpuset controller available on it."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    v2 = cgroup2_mount()
    if v2 is None:
        pytest.skip("no cgroup2 hierarchy mounted")
    if "cpuset" in controllers(v2):
        yield v2                    # a pure v2 machine: nothing to change
        return
    v1, options = cpuset_mount(), v1_cpuset_options()
    if v1 is None:
        pytest.skip("cpuset is on neither cgroup v2 nor a mounted v1 hierarchy")
    if os.environ.get(SWAP_ENV) != "1":
        pytest.skip("cpuset is on cgroup v1 here; %s=1 lets this module move it to v2 "
                    "for a moment" % SWAP_ENV)
    release_v1_cpuset(v1)
    try:
        deadline = time.monotonic() + 5
        while "cpuset" not in controllers(v2) and time.monotonic() < deadline:
            time.sleep(0.1)
        if "cpuset" not in controllers(v2):
            pytest.skip("cpuset did not move to cgroup v2 after unmounting %s: its hierarchy "
                        "is still held (an open file in it, or another mount of it)" % v1)
        yield v2
    finally:
        remount_v1_cpuset(v1, options)


def test_binder_on_cgroup2_cpuset(cgroup2_cpuset, scratch_factory, two_cpus):
    v2 = cgroup2_cpuset
    scratch = scratch_factory(v2)
    pid = scratch.pid
    before_masks = thread_masks(pid)
    before_control = scratch.control()
    app = "/" + os.path.relpath(scratch.app, v2)
    _, _, placed, cpus = bound_and_put_back(
        v2, scratch, two_cpus,
        lambda binder, own: [read(own + "/d%d/cpuset.cpus.effective" % i) for i in (0, 1)],
        version="v2")
    assert cpus == [str(two_cpus[0]), str(two_cpus[1])]
    assert {cgroup2_of(pid, tid) for tid in placed} == {app}
    assert thread_masks(pid) == before_masks
    assert own_dirs(scratch.app) == []
    assert scratch.control() == before_control


def test_cli_on_cgroup2_cpuset_restores_everything(cgroup2_cpuset, scratch_factory,
                                                    two_cpus):
    v2 = cgroup2_cpuset
    scratch = scratch_factory(v2)
    pid = scratch.pid
    before_masks = thread_masks(pid)
    before_cgroups = {tid: cgroup2_of(pid, tid) for tid in before_masks}
    before_control = scratch.control()
    proc = subprocess.Popen(tumbler_cmd("--binder", "cpuset", "--domains",
                                        "%d/%d" % two_cpus, "-p", str(pid)),
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    during = []

    def bound():
        during[:] = [cgroup2_of(pid, tid) for tid in before_masks]
        return proc.poll() is not None or any("/tumbler." in c for c in during)

    # Until it has bound, however long its start takes (seconds in a slow
    # guest, tests/system/test_guest_suite_files.py), then a stop signal.
    wait_until(bound, "tumbler to move a thread into a tumbler.* cgroup")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert_no_traceback(stderr)
    assert proc.returncode == 0, stderr
    assert any("/tumbler." in c for c in during), during
    assert {tid: cgroup2_of(pid, tid) for tid in before_masks} == before_cgroups
    assert thread_masks(pid) == before_masks
    assert own_dirs(scratch.app) == []
    assert scratch.control() == before_control
