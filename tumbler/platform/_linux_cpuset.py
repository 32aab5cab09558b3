"""``--binder cpuset``: one cpuset cgroup per domain (root only).

cgroup v1 (a hierarchy with the cpuset controller mounted): for every
original cpuset cgroup ``C`` a thread comes from, tumbler creates
``C/tumbler.<tumbler pid>/d<i>``, one child per domain, whose ``cpuset.cpus``
is the domain's CPUs within ``C``'s and whose ``cpuset.mems`` is ``C``'s.
Writing a TID to ``tasks`` moves that one thread.  Nesting under ``C`` keeps
whatever limits ``C`` (a container, a slice) imposed.

Moving a task into a cpuset resets its affinity mask to the cpuset's CPUs,
so ``save`` records the affinity too and ``restore`` puts back both: first
the cgroup, then the mask; ``bind`` narrows the mask to the CPUs the thread
was allowed when the cgroup's are more.  ``close`` removes every cgroup
tumbler created; a thread still inside one (its restore failed) is first
moved back to the cgroup it came from, as rmdir of a populated cgroup fails
with EBUSY.

Someone else may remove cgroups underneath tumbler (after moving the
threads out -- a populated cgroup cannot be removed).  A domain cgroup that
vanished is created again on the next ``bind``; a thread whose original
cgroup vanished is restored into its nearest surviving ancestor, the cgroup
the kernel itself would have charged it to.

``remove_leftovers`` and ``leftover_dirs`` serve ``tumbler restore``: they
find and remove ``tumbler.<pid>`` cgroups a killed tumbler left, moving any
thread still inside back to the cgroup the directory was created in.

cgroup v2 needs the whole process moved into a threaded subtree, which
changes its cgroup for every other controller too; tumbler refuses that
rather than silently re-parent a production process, and says to use
``--binder affinity`` there.
"""

import errno
import os
import re

from ..cpulist import format_cpulist, parse_cpulist
from .base import AccessDenied, NoSuchProcess, PlatformError, Unmovable, Unsupported

CPUSET_PRIVILEGE = "root (CAP_SYS_ADMIN) for --binder cpuset"
_OWN_DIR = re.compile(r"^tumbler\.(\d+)$")
_DOMAIN_DIR = re.compile(r"^d\d+$")


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
        origin = self._origin(self._cgroup_of(pid, tid))
        for attempt in range(3):
            try:
                self._move(pid, tid, self._domain_dir(origin, domain_index))
                break
            except _Vanished as exc:
                # Removed underneath us between the check and the write:
                # start from scratch.
                vanished = exc
        else:
            raise Unmovable(tid, str(vanished))
        cpus = frozenset(cpus)
        if cpus and cpus != self.backend.allowed_cpus(pid, tid):
            from .linux import set_affinity
            set_affinity(pid, tid, cpus)

    def restore(self, pid, tid, saved):
        directory = self._dir(saved["cgroup"])
        while True:
            try:
                self._move(pid, tid, directory)
                break
            except _Vanished:
                parent = os.path.dirname(directory)
                if len(parent) < len(self.mount) or parent == directory:
                    raise PlatformError("cgroup %s was removed and so was every ancestor"
                                        % self._dir(saved["cgroup"])) from None
                directory = parent      # the original is gone: nearest ancestor
        if saved.get("cpus"):
            from .linux import set_affinity
            set_affinity(pid, tid, saved["cpus"])

    def close(self):
        errors = []
        for origin, dirs in self._created.items():
            for path in reversed(dirs):
                try:
                    self._empty_into(path, _existing(self._dir(origin), self.mount))
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    errors.append("%s: %s" % (path, exc.strerror))
        self._created.clear()
        if errors:
            raise PlatformError("could not remove cpuset cgroups: " + "; ".join(errors))

    # -- crash safety (tumbler.state) ----------------------------------------

    def resources(self):
        """What this binder created, for the state file."""
        return {"cgroups": [path for dirs in self._created.values() for path in dirs]}

    def current(self, pid, tid):
        """The thread's placement now: (cgroup, CPUs)."""
        return self._cgroup_of(pid, tid), self.backend.allowed_cpus(pid, tid)

    def leftover_placement(self, pid, tid, state):
        """Where a thread the state file does not list belongs, if it sits in
        a cgroup of the tumbler that wrote ``state`` (it was created by a
        thread inside one): its origin cgroup, with the process's CPUs."""
        owner = state.get("tumbler", {}).get("pid")
        cgroup = self._cgroup_of(pid, tid)
        parts = cgroup.rstrip("/").split("/")
        for i, part in enumerate(parts):
            if part == "tumbler.%s" % owner:
                saved = {"cgroup": "/".join(parts[:i]) or "/"}
                allowed = state.get("target", {}).get("allowed")
                if allowed:
                    saved["cpus"] = sorted(allowed)
                return saved
        return None

    def remove_leftovers(self, resources, owner):
        """Remove the ``tumbler.<owner>`` cgroups of a tumbler that is gone
        (those ``resources`` lists and any other found); return the paths
        removed.  Nothing is removed while a tumbler runs with that PID."""
        if owner is None or owner == os.getpid() or tumbler_running(self.backend.proc, owner):
            return []
        dirs = set()
        for path in (resources or {}).get("cgroups", []):
            if isinstance(path, str) and _is_own_path(path, self.mount, owner):
                top = path if _OWN_DIR.match(os.path.basename(path)) else os.path.dirname(path)
                dirs.add(top)
        if owner is not None:
            dirs.update(leftover_dirs(self.mount).get(owner, []))
        removed, errors = [], []
        for top in sorted(dirs):
            try:
                removed += remove_tree(top)
            except PlatformError as exc:
                errors.append(str(exc))
        if errors:
            raise PlatformError("; ".join(errors))
        return removed

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
        except FileNotFoundError:       # the parent was removed meanwhile
            raise _Vanished(path) from None
        if path not in created:
            created.append(path)
        try:
            _write(os.path.join(path, "cpuset.cpus"), format_cpulist(cpus))
            _write(os.path.join(path, "cpuset.mems"), mems)
        except FileNotFoundError:
            raise _Vanished(path) from None
        except OSError as exc:
            raise PlatformError("cannot configure cgroup %s: %s" % (path, exc.strerror)) \
                from None

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
                raise _Vanished(directory) from None
            raise Unmovable(tid, "moving it into %s failed: %s"
                            % (directory, exc.strerror)) from None

    def _empty_into(self, path, destination):
        _empty_into(path, destination)


class _Vanished(PlatformError):
    """A cgroup directory was removed underneath tumbler."""

    def __init__(self, path):
        super().__init__("cgroup %s was removed underneath tumbler" % path)


def _existing(directory, mount):
    """``directory`` or its nearest ancestor that still exists (at most ``mount``)."""
    while not os.path.isdir(directory) and len(directory) > len(mount):
        directory = os.path.dirname(directory)
    return directory


def _is_own_path(path, mount, owner):
    """Is ``path`` a cgroup tumbler ``owner`` created: MOUNT/.../tumbler.OWNER[/dN]?"""
    if owner is None or not os.path.isabs(path) or ".." in path.split("/"):
        return False
    if not path.startswith(mount.rstrip("/") + "/"):
        return False
    name = os.path.basename(path)
    if _DOMAIN_DIR.match(name):
        name = os.path.basename(os.path.dirname(path))
    match = _OWN_DIR.match(name)
    return bool(match) and int(match.group(1)) == owner


def tumbler_running(proc_dir, pid):
    """Whether ``pid`` is a live process that looks like tumbler (its command
    line says so): its tumbler.<pid> cgroups may be in use."""
    try:
        with open("%s/%d/cmdline" % (proc_dir, pid), "rb") as f:
            return b"tumbler" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True                 # cannot tell: leave its cgroups alone


def leftover_dirs(mount):
    """{tumbler pid: [its tumbler.<pid> cgroup dirs]} anywhere under ``mount``."""
    found = {}
    for top, dirnames, _ in os.walk(mount):
        for name in list(dirnames):
            match = _OWN_DIR.match(name)
            if match:
                found.setdefault(int(match.group(1)), []).append(os.path.join(top, name))
                dirnames.remove(name)       # never descend into ours
    return found


def remove_tree(top, attempts=5):
    """Remove a tumbler.<pid> dir and its domain dirs, moving every thread
    still inside to the cgroup ``top`` was created in; return removed paths.

    A thread inside may create threads (they start in its cgroup) while it
    is being emptied, hence a few attempts before EBUSY is an error.
    """
    origin = os.path.dirname(top)
    removed = []
    for attempt in range(attempts):
        try:
            children = [os.path.join(top, n) for n in os.listdir(top)
                        if os.path.isdir(os.path.join(top, n))]
        except FileNotFoundError:
            return removed
        busy = None
        for path in children + [top]:
            _empty_into(path, origin)
            try:
                os.rmdir(path)
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise PlatformError("cannot remove cgroup %s: %s"
                                        % (path, exc.strerror)) from None
                busy = path
        if busy is None:
            return removed
    raise PlatformError("cannot remove cgroup %s: threads keep entering it" % busy)


def _empty_into(path, destination):
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
