"""The cpuset cgroup hierarchy as files: where the cpuset controller is
mounted (v1 or v2), which CPUs the cpuset of a process's cgroup allows
(``CgroupCpus``, for Backend.cpuset_cpus), the tree's paths and its v2
``cgroup.subtree_control`` (read, and a +cpuset taken back:
``disable_cpuset``), and the ``tumbler.<pid>`` cgroups a tumbler that is
gone left behind (found by ``leftover_dirs``, removed by ``remove_tree``),
which both ``tumbler restore`` and ``--binder cpuset`` clean up.  What the
binder builds in it, and when, is cpuset_binder.py's.  Every write to a
cgroup file goes through ``write``.
"""

import errno
import os

from ...cpulist import parse_cpulist
from ...errors import UsageError
from ..base import NoSuchProcess, PlatformError, Unsupported

#: A tumbler's own cgroup is ``tumbler.<its pid>``, a domain's below it
#: ``d<index>`` (``own_dir_pid``, ``is_domain_dir``).
OWN_PREFIX = "tumbler."
USE_AFFINITY = "; use --binder affinity"


def own_dir_pid(name):
    """The PID in a ``tumbler.<pid>`` cgroup directory's ``name`` (ASCII
    digits only, as tumbler makes them), else None.  String methods, not
    ``re``: its import (with ``enum``) was 8 ms of the CPU ``exec`` takes
    beside its command."""
    digits = name[len(OWN_PREFIX):] if name.startswith(OWN_PREFIX) else ""
    return int(digits) if digits.isascii() and digits.isdigit() else None


def is_domain_dir(name):
    """Whether ``name`` is a domain's directory below tumbler's own (``d<index>``)."""
    return name[:1] == "d" and name[1:].isascii() and name[1:].isdigit()


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
        if fstype == "cgroup2" and v2_mount is None:
            v2_mount = _under_root(root, mount_point)
    if v2_mount is not None:
        if "cpuset" in words(os.path.join(v2_mount, "cgroup.controllers")):
            return "v2", v2_mount
        raise Unsupported("--binder cpuset: the cpuset controller is not available on the "
                          "cgroup v2 hierarchy at %s (bound to a cgroup v1 hierarchy that is "
                          "not mounted, or disabled)%s" % (v2_mount, USE_AFFINITY))
    raise Unsupported("--binder cpuset: no cpuset cgroup hierarchy is mounted" + USE_AFFINITY)


def _under_root(root, path):
    return path if root == "/" else os.path.join(root, path.lstrip("/"))


class CgroupCpus:
    """The CPUs the cpuset of a process's cgroup allows now (Backend.
    cpuset_cpus): v1 ``cpuset.effective_cpus`` (``cpuset.cpus`` where the
    kernel has no such file), v2 ``cpuset.cpus.effective`` of the nearest
    cgroup with the controller.  A process whose main thread sits in a
    ``tumbler.<pid>`` cgroup (``--binder cpuset`` moved it) counts as in the
    cgroup that one was made in.  Two preads of kept descriptors, a few
    microseconds: /proc/PID/cgroup (tied to its process: a PID reused by
    another process is never read through it) and the cpuset's file (both
    give their current content at offset 0); the mounts are read once."""

    #: Kept descriptors of each kind at most -- cpuset files (a service of
    #: many cgroups), /proc/PID/cgroup (processes of a tree that exited
    #: without being read again): more, and all of that kind are closed,
    #: to be opened again as they are read.
    MAX_FILES = 64

    def __init__(self, proc, root):
        self.proc = proc
        self.root = root
        self._mount = None          # (version, mount point); False: no cpuset hierarchy
        self._cgroup_fds = {}       # pid -> fd of /proc/PID/cgroup
        self._file_fds = {}         # cpuset file path -> fd

    def of(self, pid):
        """(cgroup, CPUs) of ``pid``'s cpuset, or None: no cpuset hierarchy,
        or nothing readable.  NoSuchProcess once the process is gone."""
        if self._mount is None:
            try:
                self._mount = find_cpuset_mount(self.proc, self.root)
            except Unsupported:
                self._mount = False
        if not self._mount:
            return None
        v2 = self._mount[0] == "v2"
        cgroup = _cpuset_cgroup(self._cgroup_text(pid).splitlines(), v2)
        if cgroup is None:
            return None
        names = ("cpuset.cpus.effective",) if v2 else ("cpuset.effective_cpus", "cpuset.cpus")
        directory = os.path.join(self._mount[1], cgroup.strip("/")).rstrip("/")
        while True:
            for name in names:
                text = self._read(os.path.join(directory, name))
                if text is None:
                    continue
                try:
                    return (cgroup, parse_cpulist(text)) if text else None
                except UsageError:
                    return None
            if not v2 or len(directory) <= len(self._mount[1]):
                return None
            directory = os.path.dirname(directory)     # v2: the controller is further up

    def _cgroup_text(self, pid):
        fd = self._cgroup_fds.get(pid)
        try:
            if fd is None:
                if len(self._cgroup_fds) >= self.MAX_FILES:
                    for kept in list(self._cgroup_fds):
                        self.forget(kept)
                fd = self._cgroup_fds[pid] = os.open("%s/%d/cgroup" % (self.proc, pid),
                                                     os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 1 << 16, 0).decode(errors="replace")
        except OSError:
            self.forget(pid)
            raise NoSuchProcess(pid) from None

    def _read(self, path):
        """The text of a cpuset file, or None if it cannot be read (one
        removed with its cgroup: opened again next time)."""
        fd = self._file_fds.get(path)
        try:
            if fd is None:
                if len(self._file_fds) >= self.MAX_FILES:
                    self._close_files()
                fd = self._file_fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 1 << 16, 0).decode("ascii", errors="replace").strip()
        except OSError:
            if fd is not None:
                os.close(self._file_fds.pop(path))
            return None

    def forget(self, pid):
        fd = self._cgroup_fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def _close_files(self):
        for fd in self._file_fds.values():
            os.close(fd)
        self._file_fds.clear()

    def close(self):
        for pid in list(self._cgroup_fds):
            self.forget(pid)
        self._close_files()


def _cpuset_cgroup(lines, v2):
    """The cpuset cgroup in /proc/PID/cgroup ``lines`` (v2: the "0::" one,
    v1: the hierarchy with cpuset), above any ``tumbler.<pid>`` in it."""
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (parts[0] == "0" and not parts[1]) if v2 else "cpuset" in parts[1].split(","):
            names = parts[2].split("/")
            for i, name in enumerate(names):
                if own_dir_pid(name) is not None:
                    return "/".join(names[:i]) or "/"
            return parts[2] or "/"
    return None


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
            pid = own_dir_pid(name)
            if pid is not None:
                found.setdefault(pid, []).append(os.path.join(top, name))
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
            empty_into(path, origin)
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


def empty_into(path, destination):
    """Move every thread in cgroup ``path`` to ``destination``, one by one
    (v1 ``tasks``; v2 ``cgroup.threads``, as the two share a domain)."""
    name = "tasks" if os.path.exists(os.path.join(path, "tasks")) else "cgroup.threads"
    try:
        tids = read_text(os.path.join(path, name)).split()
    except OSError:
        return
    for tid in tids:
        try:
            write(os.path.join(destination, name), tid)
        except OSError:
            pass


class Vanished(PlatformError):
    """A cgroup directory was removed underneath tumbler."""

    def __init__(self, path):
        super().__init__("cgroup %s was removed underneath tumbler" % path)


def disable_cpuset(path):
    """Take back a +cpuset tumbler wrote to ``path``'s cgroup.subtree_control.

    Returns None, or why it stays enabled: someone else relies on it now --
    a child enables cpuset further down (the kernel refuses with EBUSY) or
    has CPUs or memory nodes configured, which disabling would drop.
    """
    user = _cpuset_user(path)
    if user is not None:
        return "cgroup %s has cpuset settings of its own" % user
    try:
        write(os.path.join(path, "cgroup.subtree_control"), "-cpuset")
    except FileNotFoundError:
        return None                 # the cgroup is gone, and its setting with it
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return "a cgroup below it enables cpuset for its own children"
        raise PlatformError("cannot disable the cpuset controller in cgroup %s: %s"
                            % (path, exc.strerror)) from None
    return None


def _cpuset_user(path):
    """A child cgroup of ``path`` whose cpuset.cpus or cpuset.mems is set."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    for name in names:
        child = os.path.join(path, name)
        for setting in ("cpuset.cpus", "cpuset.mems"):
            try:
                if read_text(os.path.join(child, setting)):
                    return child
            except OSError:
                continue
    return None


def nearest_existing(directory, mount):
    """``directory`` or its nearest ancestor that still exists (at most ``mount``)."""
    while not os.path.isdir(directory) and len(directory) > len(mount):
        directory = os.path.dirname(directory)
    return directory


def ancestors(mount, directory):
    """The cgroup dirs from ``mount`` down to the parent of ``directory``."""
    relative = os.path.relpath(directory, mount)
    if relative == ".":
        return []
    parts = relative.split("/")
    return [os.path.join(mount, *parts[:i]) for i in range(len(parts))]


def is_under(path, mount):
    """Is ``path`` ``mount`` or a directory below it (no ``..`` tricks)?"""
    if not os.path.isabs(path) or ".." in path.split("/"):
        return False
    return path.rstrip("/") == mount.rstrip("/") or path.startswith(mount.rstrip("/") + "/")


def is_own_path(path, mount, owner):
    """Is ``path`` a cgroup tumbler ``owner`` created: MOUNT/.../tumbler.OWNER[/dN]?"""
    if owner is None or not os.path.isabs(path) or ".." in path.split("/"):
        return False
    if not path.startswith(mount.rstrip("/") + "/"):
        return False
    name = os.path.basename(path)
    if is_domain_dir(name):
        name = os.path.basename(os.path.dirname(path))
    return own_dir_pid(name) == owner


def subtree_control(directory):
    """The controllers ``directory`` enables for its children."""
    path = os.path.join(directory, "cgroup.subtree_control")
    try:
        return read_text(path).split()
    except FileNotFoundError:
        raise Vanished(directory) from None
    except OSError as exc:
        raise PlatformError("cannot read %s: %s" % (path, exc.strerror)) from None


def read_cpus(*paths):
    for path in paths:
        try:
            text = read_text(path)
        except OSError:
            continue
        if text:
            return parse_cpulist(text)
    return frozenset()


def read_text(path):
    with open(path) as f:
        return f.read().strip()


def words(path):
    """The words of a file such as cgroup.controllers; none if unreadable."""
    try:
        return read_text(path).split()
    except OSError:
        return []


def write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
