"""Crash-safe state: what tumbler changed, on disk before it changes it.

A tumbler that is killed by SIGKILL, the OOM killer or a crash cannot put
threads back itself.  So before the first change of a thread its original
placement is written to a state file, one per managed process, and
``tumbler restore`` (``tumbler.restorecmd``) puts back whatever a dead
tumbler left.

Where: ``/run/tumbler`` for root, ``$XDG_RUNTIME_DIR/tumbler`` otherwise
(``/tmp/tumbler-UID`` if that is unset); ``$TUMBLER_STATE_DIR`` overrides
both.  The directory is created mode 0700 and must belong to the user.

Files, for a target process PID whose start-time token is START (the pair
survives PID reuse)::

    PID-START.lock   flock(2)ed by the tumbler managing the process; holds its PID
    PID-START.json   the state, replaced atomically (temp file, rename)
    PID-START.masks  the masks tumbler set, appended before each is set

The state only has to survive the tumbler, not the machine: after a reboot
every thread it recorded is gone.  So files are not fsync(2)ed (that costs
milliseconds per write where /run is on disk); the boot id in each file
makes ``tumbler restore`` discard state written before a reboot, whose
PIDs, TIDs and start times may belong to other processes now.

The lock is the liveness test: the kernel drops an flock when its holder
dies, however it dies, so a lock that can be taken belongs to no running
tumbler, and its state file (if any) is stale.  A second tumbler on a
process that a running one manages is refused (exit 1, naming the other's
PID).  A tumbler that finds a stale state file for its target restores it
first, before it looks at the target's threads: otherwise it would take the
placements the dead tumbler left for the originals.

The state file (JSON)::

    {"version": 1, "boot": "0c5f...",
     "tumbler": {"pid": 4711, "start": 123456},
     "platform": "linux", "binder": "affinity",
     "target": {"pid": 1234, "start": 120000, "name": "app", "allowed": [0, 1, 2, 3]},
     "domains": [[0, 1], [2, 3]],
     "resources": {"cgroups": ["/sys/fs/cgroup/cpuset/tumbler.4711", ...],
                   "subtree_control": [...]},   # cgroup v2: dirs given +cpuset
     "masks": [[0, 1], [2, 3], [1]],            # every mask tumbler set
     "threads": [{"tid": 1235, "start": 120001, "binder": "affinity",
                  "saved": {"cpus": [0, 1, 2, 3]},
                  "set": [[0, 1], [1]]},         # the last masks it set
                 {"pid": 1300, "tid": 1300, ...}, ...]}   # a child's thread

A thread's record reaches the disk before the thread is first changed (one
rewrite per record, or one per ``batch()``).  A record with a ``pid`` is a
thread of a child process born of a thread tumbler had bound: it inherited
tumbler's mask, and is tumbler's to put back (``pid`` defaults to the
target's).

What tumbler set, not only what it found, is on disk before it is set, so
``tumbler restore`` can tell tumbler's masks from an admin's later change:
before a round's binds, one line per thread (``PID TID START CPULIST``) is
appended to the ``.masks`` log in one write(2), and after them a line
``.`` -- a few bytes, not a rewrite of the state file, as speed balancing
re-pins threads every 20 ms.  A thread's mask is then the last mask logged
for it before a ``.`` line, or one logged after the last ``.`` (killed
during the binds); anything else was set by someone else and is left
alone.  Threads tumbler never saw (born of a
bound thread after the last round: they inherit its mask, on Linux and on
illumos alike) are put back when their mask is one tumbler set.  Each
rewrite of the state file carries the logged masks (``masks``, ``set``), and
the log is emptied when it has grown long.  Dropping a record (the thread
was restored, or exited) is only remembered and written with the next
rewrite: a stale record restores a thread to where it already is.  Records
of threads that exited are pruned when the file has grown to twice the
threads alive at the last pruning, so thread churn cannot grow it without
bound.
"""

import errno
import fcntl
import json
import os
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import List, Optional

from .cpulist import format_cpulist, parse_cpulist
from .errors import EXIT_FAILURE, TumblerError, UsageError
from .platform import boot_token
from .platform.base import NoSuchProcess, PlatformError

STATE_VERSION = 1
ENV_STATE_DIR = "TUMBLER_STATE_DIR"
PRUNE_MIN = 64
#: The mask log is folded into the state file and emptied when it has this
#: many lines (plus as many as records).
MASK_LOG_LINES = 4096


class Busy(TumblerError):
    """The target is managed by another, running tumbler."""

    status = EXIT_FAILURE

    def __init__(self, pid, owner):
        self.pid, self.owner = pid, owner
        who = "tumbler PID %d" % owner if owner else "another tumbler"
        super().__init__("process %d is already managed by %s; stop that one first"
                         % (pid, who))


class StateError(TumblerError):
    """The state directory or a state file cannot be used."""

    status = EXIT_FAILURE


def state_dir():
    """The directory of state files for this user (see the module doc)."""
    override = os.environ.get(ENV_STATE_DIR)
    if override:
        return override
    if os.geteuid() == 0:
        return "/run/tumbler"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "tumbler")
    return "/tmp/tumbler-%d" % os.geteuid()


def ensure_dir(path):
    """Create ``path`` (0700) if missing; refuse one another user could write."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise StateError("cannot create state directory %s: %s"
                         % (path, exc.strerror)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateError("state directory %s is not a directory" % path)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise StateError("state directory %s must belong to uid %d and not be writable "
                         "by others" % (path, os.geteuid()))
    # A state that cannot be written is no crash safety: find out now,
    # before anything is changed or a command started (a full file system
    # still lets a file be created, not written).
    probe = os.path.join(path, ".probe.%d" % os.getpid())
    try:
        write_json(probe, {})
    except OSError as exc:
        raise StateError("cannot write in state directory %s: %s"
                         % (path, exc.strerror)) from None
    _unlink_quietly(probe)
    return path


def boot_id():
    """This boot's token (``tumbler.platform.boot_token``), or None."""
    return boot_token()


def own_start():
    """Start-time token of this process (Linux: /proc/self/stat field 22)."""
    try:
        with open("/proc/self/stat") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _base(pid, start):
    return "%d-%d" % (pid, start)


def _parse_name(name, suffix):
    """(pid, start) from 'PID-START.suffix', or None."""
    if not name.endswith(suffix):
        return None
    stem = name[:-len(suffix)]
    pid_text, _, start_text = stem.partition("-")
    if not (pid_text.isdigit() and start_text.isdigit()):
        return None
    return int(pid_text), int(start_text)


# -- locks -------------------------------------------------------------------

class Lock:
    """An flock(2) on DIR/PID-START.lock; the file holds the owner's PID."""

    def __init__(self, directory, pid, start):
        self.path = os.path.join(directory, _base(pid, start) + ".lock")
        self.fd = None

    def acquire(self):
        """Take the lock; return None, or the PID of the tumbler holding it (0 if unknown)."""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise StateError("cannot open %s: %s" % (self.path, exc.strerror)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise StateError("cannot lock %s: %s" % (self.path, exc.strerror)) from None
                owner = _read_pid(fd)
                os.close(fd)
                return owner
            # The holder may have unlinked the file between our open and our
            # flock: then we hold a lock on a file nobody else will open.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            self.fd = fd
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"%d\n" % os.getpid(), 0)
            except OSError as exc:      # a full file system: leave nothing behind
                self.release()
                raise StateError("cannot write %s: %s" % (self.path, exc.strerror)) from None
            return None

    def release(self, unlink=True):
        if self.fd is None:
            return
        if unlink:
            try:
                os.unlink(self.path)      # while still held: see acquire
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text.isdigit() else 0
    except (OSError, ValueError):
        return 0


# -- state files ---------------------------------------------------------------

def write_json(path, data):
    """Replace ``path`` atomically: a reader sees the old file or the new one."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def read_state(path):
    """Load and check a state file; raise StateError if it is not one."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode())
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateError("cannot read state file %s: %s" % (path, exc.strerror)) from None
    except ValueError:
        raise StateError("state file %s is not valid JSON; inspect and remove it" % path) \
            from None
    problem = _check_state(data)
    if problem:
        raise StateError("state file %s is not a tumbler state file (%s); inspect and "
                         "remove it" % (path, problem))
    return data


def _check_state(data):
    if not isinstance(data, dict):
        return "not a mapping"
    if data.get("version") != STATE_VERSION:
        return "version %r, expected %d" % (data.get("version"), STATE_VERSION)
    for key in ("tumbler", "target"):
        part = data.get(key)
        if not isinstance(part, dict) or not isinstance(part.get("pid"), int):
            return "no %s pid" % key
    if not isinstance(data.get("threads"), list):
        return "no thread list"
    for record in data["threads"]:
        if not (isinstance(record, dict) and isinstance(record.get("tid"), int)
                and isinstance(record.get("saved"), dict)):
            return "bad thread record"
    return None


@dataclass
class StateFile:
    directory: str
    pid: int
    start: int

    @property
    def path(self):
        return os.path.join(self.directory, _base(self.pid, self.start) + ".json")

    @property
    def log_path(self):
        """The log of masks tumbler set (see the module doc)."""
        return os.path.join(self.directory, _base(self.pid, self.start) + ".masks")


def list_states(directory, pid=None):
    """StateFile of every state file in ``directory`` (of ``pid`` only, if given)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StateError("cannot list %s: %s" % (directory, exc.strerror)) from None
    found = []
    for name in sorted(names):
        key = _parse_name(name, ".json")
        if key is not None and (pid is None or key[0] == pid):
            found.append(StateFile(directory, *key))
    return found


# -- the journal -------------------------------------------------------------

@dataclass
class _Target:
    pid: int
    start: int
    lock: Lock
    name: str = "?"
    allowed: Optional[List[int]] = None
    threads: dict = field(default_factory=dict)     # (pid, tid) -> record
    masks: set = field(default_factory=set)         # every mask set (tuples)
    dirty: bool = False
    prune_at: int = PRUNE_MIN
    log_fd: Optional[int] = None                    # the .masks log, once opened
    log_lines: int = 0
    pending: list = field(default_factory=list)     # records of masks being set


class Journal:
    """The controller's ``journal`` hook, writing state files.

    Use::

        journal = Journal(backend)
        journal.claim(pid)                  # each target, before anything changes
        controller = Controller(..., journal=journal)
        journal.attach(binder, domains)     # after the binder's setup
        ...                                 # controller calls record/set_masks/drop/close

    ``claim`` raises Busy (exit 1) if a running tumbler manages the process,
    and first restores what a dead one left (``warn`` tells the user).
    Every method that writes raises StateError (one line) when it cannot.
    """

    def __init__(self, backend, directory=None, warn=None):
        self.backend = backend
        self.directory = ensure_dir(directory or state_dir())
        self.warn = warn or (lambda message: print("tumbler: " + message, file=sys.stderr))
        self.targets = {}           # pid -> _Target
        self.binder = None
        self.binder_kind = None
        self.domains = None
        self._batch = 0
        self._me = {"pid": os.getpid(), "start": own_start()}
        self._boot = boot_id()

    # -- claiming targets ----------------------------------------------------

    def claim(self, pid, allowed=None):
        """Lock ``pid`` for this tumbler and write its (empty) state file.

        ``allowed``: the CPUs the process may use (default: the union of
        its threads' masks, read after any stale state is restored).
        """
        if pid in self.targets:
            return
        try:
            info = self.backend.process(pid)
        except NoSuchProcess:
            raise TumblerError("no such process: %d" % pid, EXIT_FAILURE) from None
        lock = Lock(self.directory, pid, info.start)
        owner = lock.acquire()
        if owner is not None:
            raise Busy(pid, owner)
        try:
            stale = StateFile(self.directory, pid, info.start)
            if os.path.exists(stale.path):
                self._restore_stale(stale)
            if allowed is None:
                allowed = self._union_allowed(pid)
            target = _Target(pid, info.start, lock, name=info.name,
                             allowed=sorted(allowed) if allowed is not None else None)
            self.targets[pid] = target
            self._write(target)
        except BaseException:
            target = self.targets.pop(pid, None)
            if target is not None:
                self._remove_files(target)
            lock.release()
            raise

    def _union_allowed(self, pid):
        allowed = set()
        try:
            for tid in self.backend.thread_ids(pid):
                try:
                    allowed |= self.backend.allowed_cpus(pid, tid)
                except NoSuchProcess:
                    continue
        except NoSuchProcess:
            return None
        return allowed or None

    def _restore_stale(self, state_file):
        data = read_state(state_file.path)
        owner = data["tumbler"]
        # The dead tumbler's cgroups / processor sets go only with its last
        # state file: other processes it managed may still sit in them.
        alone = not any(other.path != state_file.path and _owner_of(other) == owner
                        for other in list_states(self.directory))
        report = restore_state(state_file, self.backend, locked=True, remove_resources=alone)
        for line in report.lines():
            self.warn(line)
        if report.failed:
            raise StateError("process %d: what a previous tumbler left could not all be "
                             "put back; run `tumbler restore -p %d` and try again"
                             % (state_file.pid, state_file.pid))

    def attach(self, binder, domains=None):
        """Record the binder's kind, the domains, and (on every write) the
        resources it created (``binder.resources()`` if it has one)."""
        self.binder = binder
        self.binder_kind = getattr(binder, "kind", None)
        if domains is not None:
            self.domains = [sorted(d) for d in domains]
        for target in self.targets.values():
            self._write(target)

    def release(self, pid):
        """The target exited: delete its state file and unlock it."""
        target = self.targets.pop(pid, None)
        if target is not None:
            self._remove_files(target)
            target.lock.release()

    # -- the controller hook -------------------------------------------------

    def record(self, pid, tid, start, binder_kind, saved, owner=None):
        """Remember a thread's original placement; on disk when this returns
        (or when the enclosing ``batch()`` ends).  ``owner``: the target
        whose state file takes it, when the thread belongs to a child
        process of the target (default: ``pid`` is the target)."""
        owner = pid if owner is None else owner
        target = self.targets.get(owner)
        if target is None:
            self.claim(owner)
            target = self.targets[owner]
        record = {"tid": tid, "start": start, "binder": binder_kind, "saved": saved}
        if pid != owner:
            record["pid"] = pid
        old = target.threads.get((pid, tid))
        if old is not None and old["start"] == start and "set" in old:
            record["set"] = old["set"]
        target.threads[(pid, tid)] = record
        if self.binder_kind is None:
            self.binder_kind = binder_kind
        target.dirty = True
        if not self._batch:
            self._write(target)

    def set_masks(self, entries):
        """Log the masks about to be set, before they are: ``entries`` are
        (pid, tid, start, cpus, owner) -- ``owner`` None for a target's own
        thread.  One append per state file, no rewrite of it.  Call
        ``masks_set()`` once they are set."""
        lines = {}
        for pid, tid, start, cpus, owner in entries:
            target = self.targets.get(pid if owner is None else owner)
            if target is None:
                continue            # never recorded: nothing of it is restored either
            mask = tuple(sorted(cpus))
            record = target.threads.get((pid, tid))
            if record is not None:
                record["set"] = (record.get("set") or [])[-1:] + [list(mask)]
                target.pending.append(record)
            if mask not in target.masks:
                target.masks.add(mask)
                target.dirty = True     # the next rewrite carries it
            lines.setdefault(target.pid, []).append(
                "%d %d %d %s\n" % (pid, tid, start, format_cpulist(mask)))
        for owner, text in lines.items():
            self._append(self.targets[owner], "".join(text).encode())

    def masks_set(self):
        """The masks of the last ``set_masks`` are set (or were refused, and
        the threads keep a mask tumbler logged before): one line says so."""
        for target in self.targets.values():
            if target.pending:
                for record in target.pending:
                    record["set"] = record["set"][-1:]
                target.pending = []
                self._append(target, b".\n")

    def drop(self, pid, tid, owner=None):
        """Forget a thread (restored, or gone); written with the next rewrite."""
        target = self.targets.get(pid if owner is None else owner)
        if target is not None and target.threads.pop((pid, tid), None) is not None:
            target.dirty = True

    @contextmanager
    def batch(self):
        """Records made inside reach the disk in one write per file, at the end."""
        self._batch += 1
        try:
            yield self
        finally:
            self._batch -= 1
            if not self._batch:
                self.flush()

    def flush(self):
        for target in self.targets.values():
            if target.dirty:
                self._write(target)

    def close(self, keep=False):
        """Delete the state files and unlock; with ``keep``, leave the files
        (something could not be restored, or a cgroup not removed) for
        ``tumbler restore``."""
        for pid in list(self.targets):
            target = self.targets.pop(pid)
            if keep and (target.threads or any(self._resources().values())):
                try:
                    self._write(target)
                except StateError:
                    pass                # the last good file and the log stand
                self._close_log(target)
            else:
                self._remove_files(target)
            target.lock.release()

    # -- writing ---------------------------------------------------------------

    def _write(self, target):
        if len(target.threads) > target.prune_at:
            self._prune(target)
        data = {
            "version": STATE_VERSION,
            "boot": self._boot,
            "tumbler": self._me,
            "platform": getattr(self.backend, "name", None),
            "binder": self.binder_kind,
            "target": {"pid": target.pid, "start": target.start, "name": target.name,
                       "allowed": target.allowed},
            "domains": self.domains,
            "resources": self._resources(),
            "masks": sorted(list(m) for m in target.masks),
            "threads": list(target.threads.values()),
        }
        path = StateFile(self.directory, target.pid, target.start).path
        try:
            write_json(path, data)
        except OSError as exc:
            raise StateError("cannot write state file %s: %s" % (path, exc.strerror)) from None
        target.dirty = False
        if target.log_lines > MASK_LOG_LINES + len(target.threads):
            # Everything the log says is in the file now.
            try:
                os.ftruncate(target.log_fd, 0)
                target.log_lines = 0
            except OSError:
                pass                    # a longer log is still a correct one

    def _append(self, target, data):
        path = StateFile(self.directory, target.pid, target.start).log_path
        try:
            if target.log_fd is None:
                target.log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                        | os.O_CLOEXEC, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(target.log_fd, view):]
        except OSError as exc:
            raise StateError("cannot write state file %s: %s" % (path, exc.strerror)) from None
        target.log_lines += data.count(b"\n")
        if target.log_lines > MASK_LOG_LINES + len(target.threads):
            self._write(target)

    def _close_log(self, target):
        if target.log_fd is not None:
            os.close(target.log_fd)
            target.log_fd = None

    def _remove_files(self, target):
        """The log first: a state file without its log still restores
        (as a log without its state file could not)."""
        self._close_log(target)
        state_file = StateFile(self.directory, target.pid, target.start)
        _unlink_quietly(state_file.log_path)
        _unlink_quietly(state_file.path)

    def _prune(self, target):
        alive = {}
        for pid, tid in [key for key in target.threads]:
            if pid not in alive:
                try:
                    alive[pid] = set(self.backend.thread_ids(pid))
                except NoSuchProcess:
                    alive[pid] = set()
            if tid not in alive[pid]:
                del target.threads[(pid, tid)]
        target.prune_at = max(PRUNE_MIN, 2 * len(target.threads))

    def _resources(self):
        resources = getattr(self.binder, "resources", None)
        if resources is None:
            return {}
        try:
            return resources()
        except Exception:           # never let bookkeeping stop a run
            return {}


# -- restoring -------------------------------------------------------------------

@dataclass
class RestoreReport:
    pid: int
    name: str = "?"
    owner: Optional[int] = None     # PID of the tumbler that left it
    restored: int = 0
    gone: int = 0                   # threads that exited (or whose TID was reused)
    adopted: int = 0                # threads it never recorded, reset all the same
    foreign: int = 0                # placed by someone else since: left alone
    removed: List[str] = field(default_factory=list)
    failed: int = 0
    errors: List[str] = field(default_factory=list)
    process_gone: bool = False

    def lines(self):
        what = "process %d (%s)" % (self.pid, self.name)
        owner = " left by tumbler %d" % self.owner if self.owner else ""
        if self.process_gone:
            text = "%s has exited; discarded its state%s" % (what, owner)
        elif not (self.restored or self.adopted or self.gone or self.foreign or self.failed):
            text = "nothing to put back for %s%s" % (what, owner)
        else:
            text = "restored %d thread%s of %s%s" % (
                self.restored + self.adopted, "" if self.restored + self.adopted == 1 else "s",
                what, owner)
            if self.gone:
                text += " (%d exited meanwhile)" % self.gone
            if self.foreign:
                text += "; left %d that someone else had moved since" % self.foreign
        if self.removed:
            text += "; removed %d %s" % (len(self.removed), "resource" if len(self.removed) == 1
                                         else "resources")
        lines = [text]
        lines += ["could not restore: %s" % e for e in self.errors]
        return lines


def _owner_of(state_file):
    """The "tumbler" entry ({pid, start}) of a state file, None if unreadable."""
    try:
        return read_state(state_file.path)["tumbler"]
    except (OSError, StateError):
        return None


def restore_state(state_file, backend, *, locked=False, remove_resources=True):
    """Put back what the state file records; delete it if all went well.

    ``locked``: the caller holds the state file's lock (else it is taken
    here, and StateError raised if a running tumbler holds it).
    ``remove_resources``: also remove the cgroups / processor sets the dead
    tumbler created (callers pass False while other state files of the same
    tumbler are still to be restored).
    """
    lock = None
    if not locked:
        lock = Lock(state_file.directory, state_file.pid, state_file.start)
        owner = lock.acquire()
        if owner is not None:
            raise Busy(state_file.pid, owner)
    try:
        return _restore_locked(state_file, backend, remove_resources)
    finally:
        if lock is not None:
            lock.release()


def _restore_locked(state_file, backend, remove_resources):
    data = read_state(state_file.path)
    target = data["target"]
    report = RestoreReport(pid=target["pid"], name=target.get("name", "?"),
                           owner=data["tumbler"].get("pid"))
    if data.get("boot") and data.get("boot") != boot_id():
        # Written before a reboot: nothing it names exists any more.
        report.process_gone = True
        _remove_state(state_file)
        return report
    kind = data.get("binder") or next((r.get("binder") for r in data["threads"]
                                       if r.get("binder")), None)
    binder = None
    if kind is not None and (data["threads"] or data.get("resources") or data.get("masks")):
        binder = backend.binder(kind)
    try:
        info = backend.process(target["pid"])
        alive = info.start == target.get("start") and not info.zombie
    except NoSuchProcess:
        alive = False
    if binder is not None:
        logged = _MaskLog.read(state_file, data)
        if alive:
            _restore_threads(data, backend, binder, logged, report)
        else:
            report.process_gone = True
        # A child process born of a bound thread carries tumbler's mask
        # even when the target itself is gone.
        _restore_children(data, backend, binder, logged, report)
    else:
        report.process_gone = not alive
    if remove_resources and binder is not None:
        try:
            report.removed += remove_resources_of(binder, data.get("resources"),
                                                  report.owner)
        except PlatformError as exc:
            report.failed += 1
            report.errors.append(str(exc))
    if not report.failed:
        _remove_state(state_file)
    return report


def _remove_state(state_file):
    _unlink_quietly(state_file.log_path)
    _unlink_quietly(state_file.path)


class _MaskLog:
    """What the masks log and the state file say tumbler set (module doc).

    ``every``: each mask it set on any thread of the target (or of its
    children); None for a state file written before tumbler kept the log,
    which is then judged as before (``_placed_by_tumbler``).
    ``last(key)``: the masks a thread of that (pid, tid, start) may have
    been left with by tumbler."""

    def __init__(self, every, in_file, done, pending):
        self.every = every
        self._in_file = in_file     # key -> the masks the state file says
        self._done = done           # key -> the last mask logged as set
        self._pending = pending     # key -> a mask logged, not said to be set

    @classmethod
    def read(cls, state_file, data):
        pid = data["target"]["pid"]
        in_file, done, pending = {}, {}, {}
        every = data.get("masks")
        if every is not None:
            every = {frozenset(m) for m in every if isinstance(m, list)}
        for record in data["threads"]:
            key = (record.get("pid", pid), record["tid"], record.get("start"))
            in_file[key] = {frozenset(m) for m in record.get("set") or () if isinstance(m, list)}
        try:
            with open(state_file.log_path, "rb") as f:
                text = f.read(64 << 20).decode(errors="replace")
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            raise StateError("cannot read %s: %s" % (state_file.log_path, exc.strerror)) \
                from None
        for line in text.splitlines():
            if line == ".":
                done.update(pending)
                pending = {}
                continue
            fields = line.split()
            if len(fields) != 4 or not all(f.isdigit() for f in fields[:3]):
                continue            # the torn last line of a full disk
            try:
                mask = parse_cpulist(fields[3])
            except UsageError:
                continue
            pending[tuple(map(int, fields[:3]))] = mask
            every = (every or set()) | {mask}
        return cls(every, in_file, done, pending)

    def last(self, key):
        """The log is complete since it was last emptied, which is only
        done once the state file carries it all: where the log knows the
        thread, it has the last word."""
        masks = {self._done[key]} if key in self._done else set(self._in_file.get(key, ()))
        if key in self._pending:
            masks.add(self._pending[key])
        return masks


def _restore_threads(data, backend, binder, logged, report):
    """The target's threads: the ones recorded, then the ones it made since
    the last write that carry a placement of the dead tumbler's."""
    pid = data["target"]["pid"]
    try:
        sample = backend.sample(pid)
    except NoSuchProcess:
        report.process_gone = True
        return
    starts = {tid: times.start for tid, times in sample.threads.items()}
    records = [r for r in data["threads"] if r.get("pid", pid) == pid]
    _restore_records(pid, starts, records, data, backend, binder, logged, report)
    _adopt(pid, starts, {r["tid"] for r in records}, data, backend, binder, logged, report)


def _restore_children(data, backend, binder, logged, report):
    """Child processes (and theirs) born of threads tumbler had bound: the
    ones recorded, and the ones found now below the target (born after the
    tumbler started: none earlier can carry its masks)."""
    pid = data["target"]["pid"]
    records = {}
    for record in data["threads"]:
        if record.get("pid", pid) != pid:
            records.setdefault(record["pid"], []).append(record)
    found = set(records)
    if not report.process_gone:
        found |= _descendants(backend, pid, data["tumbler"].get("start"))
    for child in sorted(found - {pid}):
        try:
            starts = {tid: times.start for tid, times in backend.sample(child).threads.items()}
        except NoSuchProcess:
            report.gone += len(records.get(child, ()))
            continue
        mine = records.get(child, [])
        _restore_records(child, starts, mine, data, backend, binder, logged, report)
        _adopt(child, starts, {r["tid"] for r in mine}, data, backend, binder, logged, report)


def _descendants(backend, pid, born_after):
    """PIDs of the processes below ``pid`` started at or after ``born_after``."""
    found, todo = set(), [pid]
    while todo:
        try:
            children = backend.children(todo.pop())
        except NoSuchProcess:
            continue
        for child in children - found:
            try:
                start = backend.process(child).start
            except NoSuchProcess:
                continue
            if born_after is None or start >= born_after:
                found.add(child)
                todo.append(child)
    return found


def _restore_records(pid, starts, records, data, backend, binder, logged, report):
    for record in records:
        tid = record["tid"]
        if starts.get(tid) != record.get("start"):
            report.gone += 1
            continue
        try:
            if not _placed_by_tumbler(backend, binder, pid, tid, record, data, logged):
                report.foreign += 1
                continue
            binder.restore(pid, tid, record["saved"])
            report.restored += 1
        except NoSuchProcess:
            report.gone += 1
        except PlatformError as exc:
            report.failed += 1
            report.errors.append("thread %d of process %d: %s" % (tid, pid, exc))


def _adopt(pid, starts, recorded, data, backend, binder, logged, report):
    """Threads the state file does not list were created by a bound thread
    (after the last write) and inherited its placement: the binder, or the
    masks tumbler logged, say whether they did and where they belong."""
    leftover = getattr(binder, "leftover_placement", None)
    if leftover is None and getattr(binder, "kind", None) == "affinity":
        leftover = _affinity_leftover(backend, logged)
    if leftover is None:
        return
    for tid in starts:
        if tid in recorded:
            continue
        try:
            saved = leftover(pid, tid, data)
            if saved is None:
                continue
            binder.restore(pid, tid, saved)
            report.adopted += 1
        except NoSuchProcess:
            continue
        except PlatformError as exc:
            report.failed += 1
            report.errors.append("thread %d of process %d: %s" % (tid, pid, exc))


def _placed_by_tumbler(backend, binder, pid, tid, record, state, logged):
    """Could the thread's placement now be the dead tumbler's doing?

    With the masks log: its mask is one of the last masks tumbler set on it
    (or the original, where putting it back changes nothing).  Anything
    else was set by someone else after it died, and is left alone as the
    running tumbler would have left it.

    State files without the log (older tumblers): it only ever bound a
    thread to a domain cut to the thread's original CPUs, or (speed
    balancing) to one CPU of those; with ``--binder cpuset`` into one of
    its own ``tumbler.<pid>`` cgroups.  Unknown binders, or state without
    domains: assume it was tumbler.
    """
    saved = record["saved"]
    kind = getattr(binder, "kind", None)
    original = frozenset(saved.get("cpus") or state.get("target", {}).get("allowed") or ())
    if kind == "affinity" and logged.every is not None:
        current = backend.allowed_cpus(pid, tid)
        return current == original or current in logged.last(
            (pid, tid, record.get("start")))
    domains = state.get("domains")
    if kind not in ("affinity", "cpuset") or not domains:
        return True
    current = backend.allowed_cpus(pid, tid)
    if kind == "cpuset":
        cgroup = binder.current(pid, tid)[0]
        owner = "tumbler.%s" % state.get("tumbler", {}).get("pid")
        if owner in cgroup.split("/"):
            return True
        return cgroup == saved.get("cgroup") and current == original
    if not original or current == original:
        return True             # putting it back changes nothing either way
    union = frozenset().union(*(frozenset(d) for d in domains)) & original
    ours = {frozenset(d) & original for d in domains} | {frozenset([c]) for c in union}
    return current in ours


def _affinity_leftover(backend, logged):
    """An unlisted thread whose mask is one the dead tumbler set (any it
    logged; without a log, a domain cut to the process's CPUs) belongs on
    the process's CPUs, as the controller itself would have judged."""
    def placement(pid, tid, state):
        allowed = state.get("target", {}).get("allowed")
        domains = state.get("domains")
        if not allowed:
            return None
        allowed = frozenset(allowed)
        if logged.every is not None:
            ours = logged.every
        elif domains:
            ours = {frozenset(d) & allowed for d in domains}
        else:
            return None
        current = backend.allowed_cpus(pid, tid)
        if current == allowed or current not in ours:
            return None
        return {"cpus": sorted(allowed)}
    return placement


def remove_resources_of(binder, resources, owner):
    """Remove what the tumbler ``owner`` created through a binder of this
    kind (``resources`` from its state files, plus any the binder finds);
    return what was removed.  Binders without anything to remove: []."""
    remove = getattr(binder, "remove_leftovers", None)
    if remove is None:
        return []
    return remove(resources or {}, owner)
