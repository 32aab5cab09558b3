"""``--binder cpuset``: one cpuset cgroup per domain (root only).

cgroup v1 (a hierarchy with the cpuset controller mounted): for every
original cpuset cgroup ``C`` a thread comes from, tumbler creates
``C/tumbler.<tumbler pid>/d<i>``, one child per domain, whose ``cpuset.cpus``
is the domain's CPUs within ``C``'s and whose ``cpuset.mems`` is ``C``'s.
Writing a TID to ``tasks`` moves that one thread.  Nesting under ``C`` keeps
whatever limits ``C`` (a container, a slice) imposed.

Moving a task into a cpuset resets its affinity mask to the cpuset's CPUs,
so ``save`` records the affinity too and ``restore`` puts back both: first
the cgroup, then the mask.  ``close`` removes every cgroup tumbler created;
a thread still inside one (its restore failed) is first moved back to the
cgroup it came from, as rmdir of a populated cgroup fails with EBUSY.

cgroup v2 needs the whole process moved into a threaded subtree, which
changes its cgroup for every other controller too; tumbler refuses that
rather than silently re-parent a production process, and says to use
``--binder affinity`` there.
"""

import errno
import os

from ..cpulist import format_cpulist, parse_cpulist
from .base import AccessDenied, NoSuchProcess, PlatformError, Unmovable, Unsupported

CPUSET_PRIVILEGE = "root (CAP_SYS_ADMIN) for --binder cpuset"


def find_cpuset_mount(proc_dir, root="/"):
    """Return (version, mount point) of the cpuset controller, or raise."""
    v2_mount = None
    try:
        with open(proc_dir + "/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        mount_point, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup" and "cpuset" in options:
            return "v1", _under_root(root, mount_point)
        if fstype == "cgroup2":
            v2_mount = _under_root(root, mount_point)
    if v2_mount is not None:
        raise Unsupported("--binder cpuset: the cpuset controller is on cgroup v2 here, "
                          "where threads can only move inside a threaded subtree that "
                          "would re-parent the whole process; use --binder affinity")
    raise Unsupported("--binder cpuset: no cpuset cgroup hierarchy is mounted; "
                      "use --binder affinity")


def _under_root(root, path):
    return path if root == "/" else os.path.join(root, path.lstrip("/"))


class CpusetBinder:
    kind = "cpuset"

    def __init__(self, backend):
        self.backend = backend
        self.version, self.mount = find_cpuset_mount(backend.proc, backend.root)
        self.domains = []
        self._created = {}      # original cgroup path -> list of created dirs, parents first
        self._name = "tumbler.%d" % os.getpid()

    def setup(self, domains):
        self.domains = [frozenset(d) for d in domains]

    def save(self, pid, tid):
        path = self._cgroup_of(pid, tid)
        cpus = sorted(self.backend.allowed_cpus(pid, tid))
        return {"cgroup": path, "cpus": cpus}

    def bind(self, pid, tid, domain_index, cpus):
        saved_cgroup = self._cgroup_of(pid, tid)
        origin = self._origin(saved_cgroup)
        target = self._domain_dir(origin, domain_index)
        self._move(pid, tid, target)

    def restore(self, pid, tid, saved):
        self._move(pid, tid, self._dir(saved["cgroup"]))
        from .linux import set_affinity
        set_affinity(pid, tid, saved["cpus"])

    def close(self):
        errors = []
        for origin, dirs in self._created.items():
            for path in reversed(dirs):
                try:
                    self._empty_into(path, self._dir(origin))
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    errors.append("%s: %s" % (path, exc.strerror))
        self._created.clear()
        if errors:
            raise PlatformError("could not remove cpuset cgroups: " + "; ".join(errors))

    # -- helpers -----------------------------------------------------------

    def _cgroup_of(self, pid, tid):
        path = "%s/%d/task/%d/cgroup" % (self.backend.proc, pid, tid)
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            raise NoSuchProcess(pid, tid) from None
        except OSError as exc:
            raise PlatformError("cannot read %s: %s" % (path, exc.strerror)) from None
        for line in lines:
            _, controllers, cg_path = line.split(":", 2)
            if "cpuset" in controllers.split(","):
                return cg_path
        raise Unsupported("--binder cpuset: thread %d is in no cpuset cgroup" % tid)

    def _origin(self, cgroup):
        """The cgroup a thread came from, even if it sits in one of ours now."""
        parts = cgroup.rstrip("/").split("/")
        if len(parts) >= 2 and parts[-2] == self._name:
            return "/".join(parts[:-2]) or "/"
        return cgroup

    def _dir(self, cgroup):
        return os.path.join(self.mount, cgroup.lstrip("/"))

    def _domain_dir(self, origin, index):
        base = os.path.join(self._dir(origin), self._name)
        child = os.path.join(base, "d%d" % index)
        if os.path.isdir(child):
            return child
        parent_cpus = _read_cpus(os.path.join(self._dir(origin), "cpuset.effective_cpus"),
                                 os.path.join(self._dir(origin), "cpuset.cpus"))
        mems = _read_text(os.path.join(self._dir(origin), "cpuset.mems"))
        created = self._created.setdefault(origin, [])
        if not os.path.isdir(base):
            self._mkdir(base, created, parent_cpus, mems)
        cpus = self.domains[index] & parent_cpus
        if not cpus:
            raise Unmovable(0, "domain %d has no CPU inside cgroup %s" % (index, origin))
        self._mkdir(child, created, cpus, mems)
        return child

    def _mkdir(self, path, created, cpus, mems):
        try:
            os.mkdir(path)
        except PermissionError:
            raise AccessDenied("cannot create cgroup %s" % path, CPUSET_PRIVILEGE) from None
        except FileExistsError:
            pass
        created.append(path)
        _write(os.path.join(path, "cpuset.cpus"), format_cpulist(cpus))
        _write(os.path.join(path, "cpuset.mems"), mems)

    def _move(self, pid, tid, directory):
        try:
            _write(os.path.join(directory, "tasks"), str(tid))
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise NoSuchProcess(pid, tid) from None
            if exc.errno in (errno.EPERM, errno.EACCES):
                raise AccessDenied("cannot move thread %d into %s" % (tid, directory),
                                   CPUSET_PRIVILEGE) from None
            if exc.errno == errno.ENOENT:
                raise PlatformError("cgroup %s was removed underneath tumbler" % directory) from None
            raise Unmovable(tid, "moving it into %s failed: %s" % (directory, exc.strerror)) from None

    def _empty_into(self, path, destination):
        try:
            tids = _read_text(os.path.join(path, "tasks")).split()
        except OSError:
            return
        for tid in tids:
            try:
                _write(os.path.join(destination, "tasks"), tid)
            except OSError:
                pass


def _read_text(path):
    with open(path) as f:
        return f.read().strip()


def _read_cpus(*paths):
    for path in paths:
        try:
            text = _read_text(path)
        except OSError:
            continue
        if text:
            return parse_cpulist(text)
    return frozenset()


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
