"""``--binder cpuset``: one cpuset cgroup per domain (root only).  The
hierarchy it builds in (mount, paths, subtree_control, leftovers, file
writes) is cpuset.py's.

cgroup v1 (a hierarchy with the cpuset controller mounted): for every
original cpuset cgroup ``C`` a thread comes from, tumbler creates
``C/tumbler.<tumbler pid>/d<i>``, one child per domain, whose ``cpuset.cpus``
is the domain's CPUs within ``C``'s and whose ``cpuset.mems`` is ``C``'s.
Writing a TID to ``tasks`` moves that one thread.  Nesting under ``C`` keeps
whatever limits ``C`` (a container, a slice) imposed.

cgroup v2 (the cpuset controller on the unified hierarchy) keeps the same
layout, ``P/tumbler.<tumbler pid>/d<i>`` under the cgroup ``P`` of the
target process, but the kernel's rules decide how it is built
(Documentation/admin-guide/cgroup-v2.rst, "Threads"):

* A process lives in a domain cgroup; its threads can only be spread over
  threaded cgroups of the same threaded domain, by writing TIDs to
  ``cgroup.threads`` (EOPNOTSUPP across domains).  So ``tumbler.<pid>`` is
  made ``threaded``, which turns ``P`` itself into the threaded domain:
  the threads move below ``P`` while the process stays in ``P`` for every
  domain controller (memory, io): nothing but its CPUs changes.  Each
  ``d<i>`` is made threaded too (a child of a threaded cgroup starts as
  "domain invalid") and gets the domain's CPUs in ``cpuset.cpus``.
  Until the tree is removed, ``P`` (unless it is the root) cannot get
  child cgroups with processes of their own: children of a threaded
  domain are "domain invalid".  Moving the process into a domain child of
  ``P`` instead does not work: ``P`` (with processes and cpuset enabled)
  is then a thread root, under which the kernel lets no domain cgroup hold
  a process (EOPNOTSUPP).  Other threaded controllers ``P`` already
  enables for its children (cpu, pids) apply to ``tumbler.<pid>`` as to
  any child: with cpu enabled there, the moved threads share one
  cpu.weight next to ``P``'s own threads.
* A child has a controller only if its parent enables it in
  ``cgroup.subtree_control``.  tumbler writes ``+cpuset`` there from the
  mount's root down to ``P`` (and in ``tumbler.<pid>``) wherever it is
  missing, records each write and takes it back (``-cpuset``, innermost
  first) when it is done.  cpuset is a threaded controller, so ``P`` may
  enable it although it has processes, as long as ``P`` can be a thread
  root (no child cgroups with processes, no domain controllers enabled);
  an ancestor with processes of its own (EBUSY) cannot, and then tumbler
  stops with one line naming that cgroup and saying to use
  ``--binder affinity``.  An enable is left in place, with a warning, when
  someone else came to rely on it meanwhile: a child cgroup enables cpuset
  itself (the kernel refuses with EBUSY) or has CPUs or memory nodes set.
* The thread root is prepared when the first thread of ``P`` is saved, so
  the state file written right after it lists the ``+cpuset`` writes
  before any thread moves (see tumbler.state).

Threads a bound thread creates start in its cgroup (as they inherit its
affinity on v1); the controller places them like any other new thread.

Moving a task into a cpuset resets its affinity mask to the cpuset's CPUs,
so ``save`` records the affinity too and ``restore`` puts back both: first
the cgroup, then the mask; ``bind`` narrows the mask to the CPUs the thread
was allowed when the cgroup's are more.  ``close`` removes every cgroup
tumbler created; a thread still inside one (its restore failed) is first
moved back to the cgroup it came from, as rmdir of a populated cgroup fails
with EBUSY.  What ``close`` could not remove stays listed in
``resources()`` for the state file.

Someone else may remove cgroups underneath tumbler (after moving the
threads out -- a populated cgroup cannot be removed).  A domain cgroup that
vanished is created again on the next ``bind``; a thread whose original
cgroup vanished is restored into its nearest surviving ancestor, the cgroup
the kernel itself would have charged it to.  On v2 a thread whose process
someone moved to another cgroup domain cannot be moved back per thread and
is left there, with a warning.

``remove_leftovers`` and ``leftover_dirs`` serve ``tumbler restore``: they
find and remove ``tumbler.<pid>`` cgroups a killed tumbler left, moving any
thread still inside back to the cgroup the directory was created in, and
take back the ``+cpuset`` writes its state file records.
"""

import errno
import os

from ...cpulist import format_cpulist
from ...errors import warn as warn_line
from ..base import AccessDenied, Binder, NoSuchProcess, PlatformError, Unmovable, Unsupported
from . import cpuset
from .affinity import set_affinity

CPUSET_PRIVILEGE = "root (CAP_SYS_ADMIN) for --binder cpuset"


class CpusetBinder(Binder):
    kind = "cpuset"

    def __init__(self, backend, warn=None):
        self.backend = backend
        self.version, self.mount = cpuset.find_cpuset_mount(backend.proc, backend.root)
        self.v2 = self.version == "v2"
        # The file a TID is written to to move that one thread.
        self._threads = "cgroup.threads" if self.v2 else "tasks"
        self.domains = []
        self._created = {}      # original cgroup path -> list of created dirs, parents first
        self._enabled = []      # v2: dirs tumbler wrote +cpuset to, outermost first
        self._prepared = set()  # v2: original cgroups whose thread root is ready
        self._name = "tumbler.%d" % os.getpid()
        self.warn = warn or warn_line

    def setup(self, domains):
        self.domains = [frozenset(d) for d in domains]

    def save(self, pid, tid):
        # A thread created inside one of ours belongs where its creator came from.
        path = self._origin(self._cgroup_of(pid, tid))
        if self.v2:
            # Before the state file is written for this thread, so that it
            # lists the +cpuset writes (see the module doc).
            self._thread_root(path)
        cpus = sorted(self.backend.allowed_cpus(pid, tid))
        return {"cgroup": path, "cpus": cpus}

    def bind(self, pid, tid, domain_index, cpus):
        origin = self._origin(self._cgroup_of(pid, tid))
        for attempt in range(3):
            try:
                self._move(pid, tid, self._domain_dir(origin, domain_index))
                break
            except cpuset.Vanished as exc:
                # Removed underneath us between the check and the write:
                # start from scratch.
                vanished = exc
                self._prepared.discard(origin)
        else:
            raise Unmovable(tid, str(vanished))
        cpus = frozenset(cpus)
        if cpus and cpus != self.backend.allowed_cpus(pid, tid):
            set_affinity(pid, tid, cpus)

    def restore(self, pid, tid, saved):
        directory = self._dir(saved["cgroup"])
        while True:
            try:
                self._move(pid, tid, directory)
                break
            except cpuset.Vanished:
                parent = os.path.dirname(directory)
                if len(parent) < len(self.mount) or parent == directory:
                    raise PlatformError("cgroup %s was removed and so was every ancestor"
                                        % self._dir(saved["cgroup"])) from None
                directory = parent      # the original is gone: nearest ancestor
            except _OtherDomain:
                # v2: someone moved its process to another cgroup meanwhile;
                # the kernel moves threads only within one domain.
                self.warn("thread %d of process %d is no longer in the cgroup domain of %s "
                          "(its process was moved); left where it is" % (tid, pid, directory))
                return
        if saved.get("cpus"):
            set_affinity(pid, tid, saved["cpus"])

    def close(self):
        errors = []
        for origin in list(self._created):
            destination = cpuset.nearest_existing(self._dir(origin), self.mount)
            left = []
            for path in reversed(self._created[origin]):
                try:
                    self._empty_into(path, destination)
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    errors.append("%s: %s" % (path, exc.strerror))
                    left.insert(0, path)
            if left:
                self._created[origin] = left    # still listed in the state file
            else:
                del self._created[origin]
        self._prepared.clear()
        if not errors:
            # A cgroup of ours that is left still needs the controller.
            errors += self._take_back_enables()
        if errors:
            raise PlatformError("could not remove cpuset cgroups: " + "; ".join(errors))

    def _take_back_enables(self):
        """Undo tumbler's +cpuset writes, innermost first; return errors."""
        errors = []
        while self._enabled:
            path = self._enabled[-1]
            try:
                kept = cpuset.disable_cpuset(path)
            except PlatformError as exc:
                errors.append(str(exc))
                break
            if kept:
                self.warn("left the cpuset controller enabled in %s: %s" % (path, kept))
            self._enabled.pop()
        return errors

    # -- crash safety (tumbler.state) ----------------------------------------

    def resources(self):
        """What this binder created, for the state file."""
        found = {"cgroups": [path for dirs in self._created.values() for path in dirs]}
        if self._enabled:
            found["subtree_control"] = list(self._enabled)
        return found

    def current(self, pid, tid):
        """The thread's placement now: (cgroup, CPUs)."""
        return self._cgroup_of(pid, tid), self.backend.allowed_cpus(pid, tid)

    def placed_by_tumbler(self, pid, tid, record, state, last_masks):
        """In one of the dead tumbler's ``tumbler.<pid>`` cgroups, or still
        where it was found (putting it back changes nothing); anywhere
        else, someone moved it since."""
        if not state.get("domains"):
            return True
        saved = record["saved"]
        cgroup, current = self.current(pid, tid)
        if "tumbler.%s" % state.get("tumbler", {}).get("pid") in cgroup.split("/"):
            return True
        original = frozenset(saved.get("cpus") or state.get("target", {}).get("allowed") or ())
        return cgroup == saved.get("cgroup") and current == original

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
        (those ``resources`` lists and any other found) and take back the
        +cpuset writes it recorded; return the paths removed.  Nothing is
        touched while a tumbler runs with that PID."""
        if owner is None or owner == os.getpid() \
                or cpuset.tumbler_running(self.backend.proc, owner):
            return []
        resources = resources or {}
        dirs = set()
        for path in resources.get("cgroups", []):
            if isinstance(path, str) and cpuset.is_own_path(path, self.mount, owner):
                top = (path if cpuset.own_dir_pid(os.path.basename(path)) is not None
                       else os.path.dirname(path))
                dirs.add(top)
        dirs.update(cpuset.leftover_dirs(self.mount).get(owner, []))
        removed, errors = [], []
        for top in sorted(dirs):
            try:
                removed += cpuset.remove_tree(top)
            except PlatformError as exc:
                errors.append(str(exc))
        if not errors:
            enabled = [path for path in resources.get("subtree_control", [])
                       if isinstance(path, str) and cpuset.is_under(path, self.mount)]
            for path in reversed(enabled):
                try:
                    cpuset.disable_cpuset(path)     # kept if someone else uses it: fine
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
            hierarchy, controllers, cg_path = line.split(":", 2)
            if self.v2 and hierarchy == "0" and not controllers:
                return cg_path
            if not self.v2 and "cpuset" in controllers.split(","):
                return cg_path
        raise Unsupported("--binder cpuset: thread %d is in no cpuset cgroup" % tid)

    def _origin(self, cgroup):
        """The cgroup a thread came from, even if it sits in one of ours now."""
        parts = cgroup.rstrip("/").split("/")
        if len(parts) >= 2 and parts[-2] == self._name:
            return "/".join(parts[:-2]) or "/"
        return cgroup

    def _dir(self, cgroup):
        return os.path.join(self.mount, cgroup.strip("/")).rstrip("/") or "/"

    def _domain_dir(self, origin, index):
        base = os.path.join(self._dir(origin), self._name)
        child = os.path.join(base, "d%d" % index)
        if os.path.isdir(child):
            return child
        parent_cpus, mems = self._thread_root(origin)
        cpus = self.domains[index] & parent_cpus
        if not cpus:
            raise Unmovable(0, "domain %d has no CPU inside cgroup %s" % (index, origin))
        self._mkdir(child, self._created.setdefault(origin, []))
        self._configure(child, cpus, mems)
        return child

    def _thread_root(self, origin):
        """Make sure ``origin/tumbler.<pid>`` exists, ready for domain
        children; return (the CPUs they may have, their memory nodes)."""
        directory = self._dir(origin)
        base = os.path.join(directory, self._name)
        created = self._created.setdefault(origin, [])
        if self.v2:
            if origin not in self._prepared or not os.path.isdir(base):
                self._offer_cpuset(directory)
                self._mkdir(base, created)
                self._make_threaded(base, directory)
                self._enable_cpuset(base, {}, record=False)
                self._prepared.add(origin)
            # v2: an empty cpuset.mems means the parent's nodes.
            return cpuset.read_cpus(os.path.join(base, "cpuset.cpus.effective")), None
        parent_cpus = cpuset.read_cpus(os.path.join(directory, "cpuset.effective_cpus"),
                                 os.path.join(directory, "cpuset.cpus"))
        mems = cpuset.read_text(os.path.join(directory, "cpuset.mems"))
        if not os.path.isdir(base):
            self._mkdir(base, created)
            self._configure(base, parent_cpus, mems)
        return parent_cpus, mems

    def _offer_cpuset(self, directory):
        """v2: enable cpuset in cgroup.subtree_control from the mount's root
        down to ``directory`` itself, wherever it is missing, so that the
        children of ``directory`` have the controller."""
        if directory != self.mount and \
                "cpuset" not in cpuset.words(os.path.join(directory, "cgroup.controllers")):
            for ancestor in cpuset.ancestors(self.mount, directory):
                if "cpuset" not in cpuset.subtree_control(ancestor):
                    self._enable_cpuset(ancestor, _ANCESTOR_REFUSED, record=True)
        if "cpuset" not in cpuset.subtree_control(directory):
            self._enable_cpuset(directory, _THREAD_ROOT_REFUSED, record=True)

    def _enable_cpuset(self, path, reasons, record):
        try:
            cpuset.write(os.path.join(path, "cgroup.subtree_control"), "+cpuset")
        except OSError as exc:
            raise _refused(exc, path, "enable the cpuset controller in", reasons) from None
        if record:
            self._enabled.append(path)

    def _make_threaded(self, path, origin):
        try:
            cpuset.write(os.path.join(path, "cgroup.type"), "threaded")
        except OSError as exc:
            raise _refused(exc, origin, "make a threaded subtree under",
                           _THREAD_ROOT_REFUSED) from None

    def _mkdir(self, path, created):
        try:
            os.mkdir(path)
        except PermissionError:
            raise AccessDenied("cannot create cgroup %s" % path, CPUSET_PRIVILEGE) from None
        except FileExistsError:
            pass
        except FileNotFoundError:       # the parent was removed meanwhile
            raise cpuset.Vanished(path) from None
        if path not in created:
            created.append(path)

    def _configure(self, path, cpus, mems):
        """Give a cgroup of ours its CPUs (v1: and memory nodes)."""
        try:
            if self.v2:
                # A child of a threaded cgroup starts as "domain invalid".
                cpuset.write(os.path.join(path, "cgroup.type"), "threaded")
                cpuset.write(os.path.join(path, "cpuset.cpus"), format_cpulist(cpus))
            else:
                cpuset.write(os.path.join(path, "cpuset.cpus"), format_cpulist(cpus))
                cpuset.write(os.path.join(path, "cpuset.mems"), mems)
        except FileNotFoundError:
            raise cpuset.Vanished(path) from None
        except OSError as exc:
            raise PlatformError("cannot configure cgroup %s: %s" % (path, exc.strerror)) \
                from None

    def _move(self, pid, tid, directory):
        self.backend.check_thread(pid, tid)
        try:
            cpuset.write(os.path.join(directory, self._threads), str(tid))
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise NoSuchProcess(pid, tid) from None
            if exc.errno in (errno.EPERM, errno.EACCES):
                raise AccessDenied("cannot move thread %d into %s" % (tid, directory),
                                   CPUSET_PRIVILEGE) from None
            if exc.errno == errno.ENOENT:
                raise cpuset.Vanished(directory) from None
            if exc.errno == errno.EOPNOTSUPP and self.v2:
                raise _OtherDomain(tid, "it is not in the cgroup domain of %s" % directory) \
                    from None
            raise Unmovable(tid, "moving it into %s failed: %s"
                            % (directory, exc.strerror)) from None

    def _empty_into(self, path, destination):
        cpuset.empty_into(path, destination)


class _OtherDomain(Unmovable):
    """v2: the thread is in another threaded domain than the destination."""


#: Why the kernel refuses +cpuset in an ancestor of the target's cgroup.
_ANCESTOR_REFUSED = {
    errno.EBUSY: "it has processes of its own",
    errno.EOPNOTSUPP: "it is inside a threaded subtree or an invalid domain",
}
#: Why it refuses +cpuset, or a threaded child, in the target's own cgroup:
#: that cgroup cannot become a thread root.
_THREAD_ROOT_REFUSED = dict.fromkeys(
    (errno.EBUSY, errno.EOPNOTSUPP),
    "it has child cgroups with processes, or domain controllers enabled, so it "
    "cannot hold threaded cgroups")


def _refused(exc, path, action, reasons):
    """Map an OSError of a v2 structure write (subtree_control, cgroup.type)."""
    if exc.errno in (errno.EPERM, errno.EACCES):
        return AccessDenied("cannot %s cgroup %s" % (action, path), CPUSET_PRIVILEGE)
    if exc.errno == errno.ENOENT:
        return cpuset.Vanished(path)
    if exc.errno in reasons:
        return Unsupported("--binder cpuset: the kernel refused to %s cgroup %s: %s%s"
                           % (action, path, reasons[exc.errno], cpuset.USE_AFFINITY))
    return PlatformError("cannot %s cgroup %s: %s" % (action, path, exc.strerror))
