"""``--binder cpuset`` on cgroup v2, on fixture trees.

A plain directory tree does not enforce the kernel's rules, so these tests
put a small fake kernel (``FakeCgroup2``) between the binder and the tree:
it creates the interface files on mkdir, moves threads on writes to
``cgroup.threads``/``cgroup.procs``, resets affinity masks as cpuset does,
and refuses what kernel/cgroup/cgroup.c refuses (EBUSY for controllers in
a cgroup with processes that cannot be a thread root, EOPNOTSUPP for
thread moves across domains and for threaded children of a cgroup that
cannot be a thread root, EBUSY for rmdir of a populated cgroup or -cpuset
while a child enables it).  The tests check the writes tumbler makes and
that restore and cleanup leave the tree exactly as it was.
"""

import errno
import json
import os
import re

import pytest

from tumbler.cpulist import format_cpulist, parse_cpulist
from tumbler.platform.linux import cpuset, cpuset_binder
from tumbler.platform.base import AccessDenied, PlatformError, Unsupported
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.state import Journal, StateFile, restore_state

PID = 300
THREADS = (300, 301, 302)
START = 5000
APP = "/app.slice/app.service"
DEAD_TUMBLER = 999999          # no such process in the fixture /proc


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read().strip()


class FakeCgroup2:
    """Just enough of the cgroup v2 core and cpuset for the binder."""

    FILES = ("cgroup.controllers", "cgroup.subtree_control", "cgroup.procs",
             "cgroup.threads", "cgroup.type", "cpuset.cpus", "cpuset.mems",
             "cpuset.cpus.effective")

    def __init__(self, root):
        self.root = root
        self.mount = os.path.join(root, "sys/fs/cgroup")
        self.proc = os.path.join(root, "proc")
        self.log = []               # (cgroup path relative to the mount, file, text)
        self.attempts = []          # every path tumbler tried to write
        self.refuse = {}            # (cgroup path, file) -> errno
        self.real_mkdir, self.real_rmdir = os.mkdir, os.rmdir
        write(self.proc + "/self/mounts",
              "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n")
        write(self.mount + "/cgroup.controllers", "cpuset cpu io memory pids")
        write(self.mount + "/cgroup.subtree_control", "memory pids")
        write(self.mount + "/cpuset.cpus.effective", "0-3")
        for name in ("cgroup.procs", "cgroup.threads"):
            write(os.path.join(self.mount, name), "")

    # -- the tree --------------------------------------------------------

    def dir(self, cgroup):
        return os.path.join(self.mount, cgroup.strip("/")).rstrip("/")

    def cgroup(self, directory):
        if directory == self.mount:
            return "/"
        return "/" + os.path.relpath(directory, self.mount)

    def words(self, directory, name):
        try:
            return read(os.path.join(directory, name)).split()
        except FileNotFoundError:
            return []

    def put_words(self, directory, name, words):
        write(os.path.join(directory, name), " ".join(words))

    def children(self, directory):
        return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
                if os.path.isdir(os.path.join(directory, n))]

    def kind(self, directory):
        if directory == self.mount:
            return "root"
        return read(os.path.join(directory, "cgroup.type"))

    def domain(self, directory):
        while self.kind(directory) == "threaded":
            directory = os.path.dirname(directory)
        return directory

    def populated(self, directory):
        return bool(self.words(directory, "cgroup.threads")) or \
            any(self.populated(c) for c in self.children(directory))

    def can_be_thread_root(self, directory):
        if directory == self.mount:
            return True             # the root is mixable
        if self.kind(directory) == "threaded":
            return False
        if any(self.populated(c) for c in self.children(directory)
               if self.kind(c) != "threaded"):
            return False
        return not set(self.words(directory, "cgroup.subtree_control")) - {"cpuset", "pids"}

    def effective(self, directory):
        return parse_cpulist(read(directory + "/cpuset.cpus.effective"))

    # -- system calls ------------------------------------------------------

    def mkdir(self, path, mode=0o777, **kwargs):
        self.real_mkdir(path, mode, **kwargs)
        path = os.fspath(path)
        if not path.startswith(self.mount + "/"):
            return
        parent = os.path.dirname(path)
        controllers = self.words(parent, "cgroup.subtree_control")
        self.put_words(path, "cgroup.controllers", controllers)
        for name in ("cgroup.subtree_control", "cgroup.procs", "cgroup.threads"):
            write(os.path.join(path, name), "")
        write(path + "/cgroup.type",
              "domain invalid" if self.kind(parent) == "threaded" else "domain")
        if "cpuset" in controllers:
            self.add_cpuset(path)

    def add_cpuset(self, path):
        write(path + "/cpuset.cpus", "")
        write(path + "/cpuset.mems", "")
        write(path + "/cpuset.cpus.effective",
              format_cpulist(self.effective(os.path.dirname(path))))

    def rmdir(self, path, **kwargs):
        path = os.fspath(path)
        if not path.startswith(self.mount + "/"):
            return self.real_rmdir(path, **kwargs)
        if not os.path.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if self.children(path) or self.populated(path):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        for name in self.FILES:
            if os.path.exists(os.path.join(path, name)):
                os.unlink(os.path.join(path, name))
        self.real_rmdir(path)
        parent = os.path.dirname(path)
        if parent != self.mount and self.kind(parent) == "domain threaded" and \
                not any(self.kind(c) == "threaded" for c in self.children(parent)):
            write(parent + "/cgroup.type", "domain")

    def write(self, path, text):
        self.attempts.append(path)
        directory, name = os.path.split(path)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        refused = self.refuse.get((self.cgroup(directory), name))
        if refused:
            raise OSError(refused, os.strerror(refused), path)
        self.log.append((self.cgroup(directory), name, text))
        handler = getattr(self, "write_" + name.replace(".", "_"), None)
        if handler is None:
            raise AssertionError("tumbler wrote %s" % path)
        handler(directory, text)

    def write_cgroup_subtree_control(self, directory, text):
        controllers = set(self.words(directory, "cgroup.subtree_control"))
        sign, name = text[0], text[1:]
        assert name == "cpuset"
        if sign == "+":
            if name not in self.words(directory, "cgroup.controllers") and \
                    directory != self.mount:
                raise OSError(errno.ENOENT, "No such file or directory")
            if self.words(directory, "cgroup.threads") and self.kind(directory) != "threaded" \
                    and not self.can_be_thread_root(directory):
                raise OSError(errno.EBUSY, "Device or resource busy")
            controllers.add(name)
            for child in self.children(directory):
                self.put_words(child, "cgroup.controllers",
                               self.words(child, "cgroup.controllers") + [name])
                self.add_cpuset(child)
        else:
            if any(name in self.words(c, "cgroup.subtree_control")
                   for c in self.children(directory)):
                raise OSError(errno.EBUSY, "Device or resource busy")
            controllers.discard(name)
            for child in self.children(directory):
                self.put_words(child, "cgroup.controllers",
                               [c for c in self.words(child, "cgroup.controllers") if c != name])
                for setting in ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective"):
                    os.unlink(os.path.join(child, setting))
        self.put_words(directory, "cgroup.subtree_control", sorted(controllers))

    def write_cgroup_type(self, directory, text):
        assert text == "threaded"
        parent = os.path.dirname(directory)
        if self.kind(parent) != "threaded" and not self.can_be_thread_root(parent):
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        write(directory + "/cgroup.type", "threaded")
        if parent != self.mount and self.kind(parent) == "domain":
            write(parent + "/cgroup.type", "domain threaded")

    def write_cpuset_cpus(self, directory, text):
        write(directory + "/cpuset.cpus", text)
        parent = self.effective(os.path.dirname(directory))
        write(directory + "/cpuset.cpus.effective",
              format_cpulist(parse_cpulist(text) & parent if text else parent))

    def write_cgroup_threads(self, directory, text):
        tid = int(text)
        source = self.where(tid)
        if self.domain(source) != self.domain(directory):
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        self.move(tid, source, directory)

    def write_cgroup_procs(self, directory, text):
        pid = int(text)
        for tid in sorted(int(t) for t in os.listdir("%s/%d/task" % (self.proc, pid))):
            self.move(tid, self.where(tid), directory)

    # -- threads -----------------------------------------------------------

    def task(self, tid):
        for pid in os.listdir(self.proc):
            path = "%s/%s/task/%d" % (self.proc, pid, tid)
            if os.path.isdir(path):
                return path
        raise ProcessLookupError(errno.ESRCH, "No such process")

    def where(self, tid):
        return self.dir(read(self.task(tid) + "/cgroup").split(":", 2)[2])

    def place(self, tid, directory):
        """Put a thread into a cgroup (how the fixture starts)."""
        write(self.task(tid) + "/cgroup", "0::%s\n" % self.cgroup(directory))
        tids = {int(t) for t in self.words(directory, "cgroup.threads")} | {tid}
        self.put_words(directory, "cgroup.threads", [str(t) for t in sorted(tids)])

    def move(self, tid, source, directory):
        self.put_words(source, "cgroup.threads",
                       [t for t in self.words(source, "cgroup.threads") if t != str(tid)])
        self.place(tid, directory)
        cpus = self.cpuset_of(directory)
        set_mask(self.task(tid), cpus)

    def cpuset_of(self, directory):
        while not os.path.exists(directory + "/cpuset.cpus.effective"):
            directory = os.path.dirname(directory)
        return self.effective(directory)

    def snapshot(self):
        """Every file of the tree and every thread's placement."""
        files = {}
        for top, _, names in os.walk(self.mount):
            for name in names:
                files[os.path.relpath(os.path.join(top, name), self.mount)] = \
                    read(os.path.join(top, name))
        for top, _, names in os.walk(self.proc):
            for name in names:
                if name in ("cgroup", "status"):
                    files[os.path.relpath(os.path.join(top, name), self.root)] = \
                        read(os.path.join(top, name))
        return files


def set_mask(task_dir, cpus):
    status = read(task_dir + "/status").splitlines()
    status = [line for line in status if not line.startswith("Cpus_allowed_list")]
    write(task_dir + "/status", "\n".join(status + ["Cpus_allowed_list:\t%s"
                                                     % format_cpulist(cpus)]) + "\n")


def stat_line(tid, start):
    fields = ["S"] + ["0"] * 50
    fields[19] = str(start)             # starttime (field 22)
    return "%d (app) %s\n" % (tid, " ".join(fields))


def add_thread(kernel, tid, directory, cpus="0-3"):
    task = "%s/%d/task/%d" % (kernel.proc, PID, tid)
    write(task + "/stat", stat_line(tid, START + tid))
    write(task + "/schedstat", "1000 10 1\n")
    write(task + "/status", "Name:\tapp\nTgid:\t%d\nPid:\t%d\nUid:\t0\t0\t0\t0\n"
          "Cpus_allowed_list:\t%s\n" % (PID, tid, cpus))
    write(task + "/cgroup", "")
    kernel.place(tid, directory)


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """M/app.slice/app.service holds process 300 (threads 300-302, CPUs 0-3);
    the root enables memory and pids but not cpuset, app.slice memory only."""
    kernel = FakeCgroup2(str(tmp_path / "root"))
    monkeypatch.setattr(os, "mkdir", kernel.mkdir)
    monkeypatch.setattr(os, "rmdir", kernel.rmdir)
    monkeypatch.setattr(cpuset, "write", kernel.write)
    masks = []

    def fake_set_affinity(pid, tid, cpus):
        masks.append((tid, frozenset(cpus)))
        set_mask(kernel.task(tid), cpus)
    monkeypatch.setattr(cpuset_binder, "set_affinity", fake_set_affinity)
    kernel.masks = masks
    os.mkdir(kernel.mount + "/app.slice")
    write(kernel.mount + "/app.slice/cgroup.subtree_control", "memory")
    os.mkdir(kernel.dir(APP))
    write("%s/%d/stat" % (kernel.proc, PID), stat_line(PID, START + PID))
    write("%s/%d/status" % (kernel.proc, PID),
          "Name:\tapp\nTgid:\t%d\nUid:\t0\t0\t0\t0\n" % PID)
    for tid in THREADS:
        add_thread(kernel, tid, kernel.dir(APP))
    return kernel


def make_binder(kernel, warnings=None):
    backend = LinuxBackend(kernel.root)
    binder = cpuset_binder.CpusetBinder(backend, warn=(warnings.append if warnings is not None
                                                else None))
    binder.setup([frozenset({0, 1}), frozenset({2, 3})])
    return binder


def bound_binder(kernel, warnings=None):
    """(make_binder's binder with thread 301 saved and bound to domain 0,
    its saved record)."""
    binder = make_binder(kernel, warnings)
    record = binder.save(PID, 301)
    binder.bind(PID, 301, 0, frozenset({0, 1}))
    return binder, record


def cgroup_of(kernel, tid):
    return kernel.cgroup(kernel.where(tid))


def mask_of(kernel, tid):
    for line in read(kernel.task(tid) + "/status").splitlines():
        if line.startswith("Cpus_allowed_list"):
            return parse_cpulist(line.split(":")[1].strip())


# -- finding the hierarchy -------------------------------------------------------

def test_cpuset_on_cgroup2_is_found(kernel):
    assert cpuset.find_cpuset_mount(kernel.proc, kernel.root) == ("v2", kernel.mount)


def test_cgroup2_without_cpuset_says_use_affinity(kernel):
    write(kernel.mount + "/cgroup.controllers", "cpu io memory pids")
    with pytest.raises(Unsupported, match="cpuset controller is not available on the "
                                          "cgroup v2 hierarchy.*use --binder affinity"):
        cpuset.find_cpuset_mount(kernel.proc, kernel.root)


def test_a_v1_cpuset_hierarchy_wins_over_cgroup2(kernel):
    write(kernel.proc + "/self/mounts",
          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
          "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n")
    assert cpuset.find_cpuset_mount(kernel.proc, kernel.root) == \
        ("v1", os.path.join(kernel.root, "sys/fs/cgroup/cpuset"))


# -- binding and restoring -------------------------------------------------------

def test_threads_move_within_the_process_cgroup_and_everything_is_undone(kernel):
    before = kernel.snapshot()
    binder = make_binder(kernel)
    own = binder._name
    saved = {tid: binder.save(PID, tid) for tid in (301, 302)}
    assert saved[301] == {"cgroup": APP, "cpus": [0, 1, 2, 3]}
    # The thread root is ready once the first thread is saved, so the
    # state file written next lists the +cpuset writes.
    assert binder.resources() == {
        "cgroups": [kernel.dir(APP) + "/" + own],
        "subtree_control": [kernel.mount, kernel.dir("/app.slice"), kernel.dir(APP)]}
    binder.bind(PID, 301, 0, frozenset({0, 1}))
    binder.bind(PID, 302, 1, frozenset({3}))

    assert cgroup_of(kernel, 301) == "%s/%s/d0" % (APP, own)
    assert cgroup_of(kernel, 302) == "%s/%s/d1" % (APP, own)
    assert cgroup_of(kernel, 300) == APP            # the process stays where it was
    assert mask_of(kernel, 301) == {0, 1}
    assert mask_of(kernel, 302) == {3}              # narrowed below the cgroup's 2-3
    assert kernel.kind(kernel.dir(APP)) == "domain threaded"
    for name in (own, own + "/d0", own + "/d1"):
        assert kernel.kind(kernel.dir(APP + "/" + name)) == "threaded"
    assert read(kernel.dir(APP) + "/%s/d1/cpuset.cpus" % own) == "2-3"
    writes = [entry for entry in kernel.log if entry[1] != "cgroup.threads"]
    assert writes == [
        ("/", "cgroup.subtree_control", "+cpuset"),
        ("/app.slice", "cgroup.subtree_control", "+cpuset"),
        (APP, "cgroup.subtree_control", "+cpuset"),
        ("%s/%s" % (APP, own), "cgroup.type", "threaded"),
        ("%s/%s" % (APP, own), "cgroup.subtree_control", "+cpuset"),
        ("%s/%s/d0" % (APP, own), "cgroup.type", "threaded"),
        ("%s/%s/d0" % (APP, own), "cpuset.cpus", "0-1"),
        ("%s/%s/d1" % (APP, own), "cgroup.type", "threaded"),
        ("%s/%s/d1" % (APP, own), "cpuset.cpus", "2-3"),
    ]

    del kernel.log[:]
    for tid, record in saved.items():
        binder.restore(PID, tid, record)
    binder.close()
    assert kernel.log == [
        (APP, "cgroup.threads", "301"),
        (APP, "cgroup.threads", "302"),
        (APP, "cgroup.subtree_control", "-cpuset"),
        ("/app.slice", "cgroup.subtree_control", "-cpuset"),
        ("/", "cgroup.subtree_control", "-cpuset"),
    ]
    assert kernel.snapshot() == before
    assert binder.resources() == {"cgroups": []}


def test_cpuset_already_enabled_stays_enabled(kernel):
    for cgroup in ("/", "/app.slice"):
        kernel.write(kernel.dir(cgroup) + "/cgroup.subtree_control", "+cpuset")
    kernel.write(kernel.dir(APP) + "/cgroup.subtree_control", "+cpuset")
    before = kernel.snapshot()
    binder = make_binder(kernel)
    record = binder.save(PID, 301)
    binder.bind(PID, 301, 1, frozenset({2, 3}))
    assert "subtree_control" not in binder.resources()
    binder.restore(PID, 301, record)
    binder.close()
    assert kernel.snapshot() == before


def test_a_target_in_the_root_cgroup(kernel):
    """The root may hold processes and threaded children at once."""
    for tid in THREADS:
        kernel.move(tid, kernel.where(tid), kernel.mount)
    before = kernel.snapshot()
    binder = make_binder(kernel)
    record = binder.save(PID, 302)
    assert record["cgroup"] == "/"
    binder.bind(PID, 302, 0, frozenset({0, 1}))
    assert cgroup_of(kernel, 302) == "/%s/d0" % binder._name
    assert binder.resources()["subtree_control"] == [kernel.mount]
    binder.restore(PID, 302, record)
    binder.close()
    assert kernel.snapshot() == before


def test_two_processes_in_different_cgroups(kernel):
    """Each process cgroup gets its own thread root; the shared ancestors'
    +cpuset is written once and taken back last."""
    os.mkdir(kernel.mount + "/app.slice/db.service")
    other = 400
    task = "%s/%d/task/%d" % (kernel.proc, other, other)
    write(task + "/status", "Cpus_allowed_list:\t0-3\n")
    write(task + "/cgroup", "")
    kernel.place(other, kernel.mount + "/app.slice/db.service")
    before = kernel.snapshot()
    binder = make_binder(kernel)
    records = {(PID, 301): binder.save(PID, 301), (other, other): binder.save(other, other)}
    binder.bind(PID, 301, 0, frozenset({0, 1}))
    binder.bind(other, other, 1, frozenset({2, 3}))
    assert cgroup_of(kernel, other) == "/app.slice/db.service/%s/d1" % binder._name
    assert binder.resources()["subtree_control"] == [
        kernel.mount, kernel.dir("/app.slice"), kernel.dir(APP),
        kernel.dir("/app.slice/db.service")]
    for (pid, tid), record in records.items():
        binder.restore(pid, tid, record)
    binder.close()
    assert kernel.snapshot() == before


def test_a_thread_born_in_a_domain_cgroup_is_saved_with_its_origin(kernel):
    binder = bound_binder(kernel)[0]
    add_thread(kernel, 303, kernel.where(301), cpus="0-1")     # created by 301
    assert binder.save(PID, 303)["cgroup"] == APP
    binder.bind(PID, 303, 1, frozenset({2, 3}))
    assert cgroup_of(kernel, 303).endswith("/d1")


def test_close_moves_threads_still_inside_back(kernel):
    before = kernel.snapshot()
    binder = bound_binder(kernel)[0]
    add_thread(kernel, 303, kernel.where(301), cpus="0-1")     # never seen by tumbler
    binder.close()
    assert cgroup_of(kernel, 301) == cgroup_of(kernel, 303) == APP
    assert not os.path.exists(kernel.dir(APP) + "/" + binder._name)
    assert read(kernel.mount + "/cgroup.subtree_control") == "memory pids"
    after = kernel.snapshot()
    expected = {k: v for k, v in before.items() if "/task/" not in k}
    expected["app.slice/app.service/cgroup.threads"] = "300 301 302 303"
    assert {k: v for k, v in after.items() if "/task/" not in k} == expected


def test_domain_cgroups_removed_underneath_are_created_again(kernel):
    binder = bound_binder(kernel)[0]
    # An admin empties and removes tumbler's whole tree.
    top = kernel.dir(APP) + "/" + binder._name
    kernel.write(kernel.dir(APP) + "/cgroup.threads", "301")
    os.rmdir(top + "/d0")
    os.rmdir(top)
    binder.bind(PID, 301, 1, frozenset({2, 3}))
    assert cgroup_of(kernel, 301) == "%s/%s/d1" % (APP, binder._name)
    assert kernel.kind(top) == "threaded"
    binder.close()


def test_thread_whose_process_was_moved_elsewhere_is_left_there(kernel):
    warnings = []
    binder, record = bound_binder(kernel, warnings)
    os.mkdir(kernel.mount + "/elsewhere")
    kernel.write(kernel.mount + "/elsewhere/cgroup.procs", str(PID))
    binder.restore(PID, 301, record)
    assert cgroup_of(kernel, 301) == "/elsewhere"
    assert "left where it is" in warnings[0]
    binder.close()
    assert not os.path.exists(kernel.dir(APP) + "/" + binder._name)


# -- refusals ------------------------------------------------------------------------

def test_an_ancestor_with_processes_of_its_own_is_named(kernel):
    """app.slice holds a process, so the kernel keeps controllers from its
    children: one clear line naming it, and what was enabled is taken back."""
    before = kernel.snapshot()
    write("%s/999/task/999/status" % kernel.proc, "Cpus_allowed_list:\t0-3\n")
    kernel.place(999, kernel.mount + "/app.slice")
    binder = make_binder(kernel)
    with pytest.raises(Unsupported) as caught:
        binder.save(PID, 301)
    message = str(caught.value)
    assert kernel.dir("/app.slice") in message and "processes of its own" in message
    assert message.endswith("use --binder affinity") and "\n" not in message
    binder.close()
    after = kernel.snapshot()
    assert after["cgroup.subtree_control"] == before["cgroup.subtree_control"]


def test_a_process_cgroup_that_cannot_be_a_thread_root_is_named(kernel):
    """app.service has a child cgroup with a process of its own."""
    kernel.write(kernel.mount + "/cgroup.subtree_control", "+cpuset")
    kernel.write(kernel.dir("/app.slice") + "/cgroup.subtree_control", "+cpuset")
    os.mkdir(kernel.dir(APP) + "/helper")
    write("%s/999/task/999/status" % kernel.proc, "Cpus_allowed_list:\t0-3\n")
    kernel.place(999, kernel.dir(APP) + "/helper")
    binder = make_binder(kernel)
    with pytest.raises(Unsupported, match="refused to enable the cpuset controller in "
                       "cgroup %s: it has child cgroups with processes.*use --binder affinity"
                       % re.escape(kernel.dir(APP))):
        binder.save(PID, 301)
    binder.close()
    assert not os.path.exists(kernel.dir(APP) + "/" + binder._name)


def test_threaded_child_refused(kernel):
    kernel.refuse[("%s/tumbler.%d" % (APP, os.getpid()), "cgroup.type")] = errno.EOPNOTSUPP
    binder = make_binder(kernel)
    with pytest.raises(Unsupported, match="refused to make a threaded subtree under cgroup "
                       "%s.*use --binder affinity" % re.escape(kernel.dir(APP))):
        binder.save(PID, 301)
    binder.close()
    assert read(kernel.mount + "/cgroup.subtree_control") == "memory pids"
    assert not os.path.exists(kernel.dir(APP) + "/" + binder._name)


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES])
def test_permission_errors_name_the_privilege(kernel, code):
    kernel.refuse[("/", "cgroup.subtree_control")] = code
    binder = make_binder(kernel)
    with pytest.raises(AccessDenied) as caught:
        binder.save(PID, 301)
    assert caught.value.privilege == cpuset_binder.CPUSET_PRIVILEGE
    assert kernel.mount in str(caught.value)


def test_enables_someone_else_relies_on_are_left_with_a_warning(kernel):
    warnings = []
    binder, record = bound_binder(kernel, warnings)
    # Meanwhile an admin gives a sibling service CPUs of its own.
    os.mkdir(kernel.mount + "/app.slice/db.service")
    kernel.write(kernel.mount + "/app.slice/db.service/cpuset.cpus", "1")
    binder.restore(PID, 301, record)
    binder.close()
    # app.service: taken back; app.slice: the sibling's setting would go;
    # the root: app.slice below it still enables cpuset (EBUSY).
    assert "cpuset" not in read(kernel.dir(APP) + "/cgroup.subtree_control")
    assert "cpuset" in read(kernel.dir("/app.slice") + "/cgroup.subtree_control")
    assert "cpuset" in read(kernel.mount + "/cgroup.subtree_control")
    assert len(warnings) == 2
    assert "db.service has cpuset settings of its own" in warnings[0]
    assert "enables cpuset for its own children" in warnings[1]
    assert binder.resources() == {"cgroups": []}


def test_a_cgroup_that_cannot_be_removed_keeps_the_enables_recorded(kernel):
    binder = bound_binder(kernel)[0]
    d0 = "%s/%s/d0" % (APP, binder._name)
    kernel.refuse[(APP, "cgroup.threads")] = errno.EINVAL       # cannot be emptied
    with pytest.raises(PlatformError, match="could not remove cpuset cgroups"):
        binder.close()
    left = binder.resources()
    assert left["cgroups"] == [kernel.dir(APP) + "/" + binder._name, kernel.dir(d0)]
    assert left["subtree_control"] == [kernel.mount, kernel.dir("/app.slice"),
                                       kernel.dir(APP)]
    del kernel.refuse[(APP, "cgroup.threads")]
    binder.close()
    assert binder.resources() == {"cgroups": []}
    assert read(kernel.mount + "/cgroup.subtree_control") == "memory pids"


# -- tumbler restore -------------------------------------------------------------------

def killed_tumbler(kernel):
    """Bind two threads as a tumbler that is then SIGKILLed would have:
    return its state (as the journal wrote it) and the tree before."""
    before = kernel.snapshot()
    binder = make_binder(kernel)
    binder._name = "tumbler.%d" % DEAD_TUMBLER
    records = [{"tid": tid, "start": START + tid, "binder": "cpuset",
                "saved": binder.save(PID, tid)} for tid in (301, 302)]
    binder.bind(PID, 301, 0, frozenset({0, 1}))
    binder.bind(PID, 302, 1, frozenset({2, 3}))
    add_thread(kernel, 303, kernel.where(302), cpus="2-3")      # born after the last write
    state = {"version": 1, "boot": None, "tumbler": {"pid": DEAD_TUMBLER, "start": 1},
             "platform": "linux", "binder": "cpuset",
             "target": {"pid": PID, "start": START + PID, "name": "app",
                        "allowed": [0, 1, 2, 3]},
             "domains": [[0, 1], [2, 3]], "resources": binder.resources(),
             "threads": records}
    return state, before


def test_restore_puts_back_what_a_killed_tumbler_left(kernel, tmp_path):
    state, before = killed_tumbler(kernel)
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    state_file = StateFile(str(directory), PID, START + PID)
    with open(state_file.path, "w") as f:
        json.dump(state, f)
    report = restore_state(state_file, LinuxBackend(kernel.root))
    assert (report.restored, report.adopted, report.failed) == (2, 1, 0), report.errors
    assert len(report.removed) == 3                 # tumbler.N, d0, d1
    after = kernel.snapshot()
    expected = dict(before)
    expected["app.slice/app.service/cgroup.threads"] = "300 301 302 303"
    assert {k: v for k, v in after.items() if "/task/303/" not in k} == expected
    # The thread born after the last write is back with the process's CPUs.
    assert cgroup_of(kernel, 303) == APP and mask_of(kernel, 303) == {0, 1, 2, 3}
    assert not os.path.exists(state_file.path)


def test_restore_without_a_state_file_removes_the_tree(kernel):
    """`tumbler restore --all` finds tumbler.<pid> dirs of dead tumblers."""
    killed_tumbler(kernel)
    found = cpuset.leftover_dirs(kernel.mount)
    top = kernel.dir(APP) + "/tumbler.%d" % DEAD_TUMBLER
    assert found == {DEAD_TUMBLER: [top]}
    removed = cpuset.remove_tree(top)
    assert sorted(removed) == [top, top + "/d0", top + "/d1"]
    assert {cgroup_of(kernel, tid) for tid in (301, 302, 303)} == {APP}
    assert kernel.kind(kernel.dir(APP)) == "domain"


def test_recorded_enables_are_only_taken_back_inside_the_mount(kernel):
    state, _ = killed_tumbler(kernel)
    resources = dict(state["resources"])
    resources["subtree_control"] = ["/etc", kernel.mount + "/../../etc"] + \
        resources["subtree_control"]
    binder = cpuset_binder.CpusetBinder(LinuxBackend(kernel.root))
    binder.remove_leftovers(resources, DEAD_TUMBLER)
    assert kernel.attempts and all(path.startswith(kernel.mount + "/")
                                   for path in kernel.attempts)
    assert read(kernel.mount + "/cgroup.subtree_control") == "memory pids"


def test_journal_keeps_a_state_file_that_only_lists_cgroups(tmp_path):
    """close() failed to remove a cgroup although every thread was put back:
    the state file stays, for `tumbler restore`."""
    class Binder:
        kind = "cpuset"

        def resources(self):
            return {"cgroups": ["/sys/fs/cgroup/x/tumbler.1"]}

    journal = Journal(LinuxBackend("/"), directory=str(tmp_path / "state"))
    journal.claim(os.getpid())
    journal.attach(Binder())
    journal.close(keep=True)
    assert [n for n in os.listdir(tmp_path / "state") if n.endswith(".json")]
