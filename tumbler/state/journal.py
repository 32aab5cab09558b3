"""The journal: what a running tumbler writes before it changes anything
(see ``tumbler.state``)."""

import os

from ..cpulist import format_cpulist
from ..errors import EXIT_FAILURE, TumblerError, tell
from ..platform import own_start_ticks
from ..platform.base import NoSuchProcess, allowed_union
from .restore import restore_state
from .paths import StateError, dumps, ensure_dir, state_dir, unlink_quietly, write_atomic
from .store import (STATE_VERSION, Busy, Lock, StateFile, boot_id, list_states, owner_of,
                    read_state)

#: Records of exited threads are pruned once the file holds twice as many
#: as were alive at the last pruning, and at least this many.
PRUNE_MIN = 64
#: The log (records, drops and masks: ``tumbler.state``) is folded into the
#: state file and emptied once it is as long as the file it follows, and at
#: least this long: each compaction writes no more bytes than the log took
#: since the last one, so the bytes written follow the changes (issue 47: a
#: rewrite of every thread's record for each thread born, 667 KB at 8,000
#: threads, ~1.3 times a second), and ``tumbler restore`` reads at most
#: twice the file plus this.  64 KiB: ~900 records; 800 are read and
#: replayed by restore in 4.6 ms (BENCHMARKS.md, "Cost that follows what
#: changes"), and tests/state/test_journal_log.py holds it between 4 KiB
#: (a compaction every ~50 records) and 1 MiB.
LOG_COMPACT_MIN_BYTES = 64 << 10


class _Batch:
    """Journal.batch's context (a class: contextlib's import is ~1 ms of a
    ``tumbler exec``'s start)."""

    def __init__(self, journal):
        self.journal = journal

    def __enter__(self):
        self.journal._batch += 1
        return self.journal

    def __exit__(self, *exc):
        journal = self.journal
        journal._batch -= 1
        if not journal._batch:
            journal.flush()
        return False


class _Target:
    """A claimed target: its lock and what its state file holds."""

    def __init__(self, pid, start, lock, name="?", allowed=None):
        self.pid = pid
        self.start = start
        self.lock = lock
        self.name = name
        self.allowed = allowed          # sorted CPU list, or None
        self.threads = {}               # (pid, tid) -> record
        self.masks = set()              # every mask set (tuples)
        self.prune_at = PRUNE_MIN
        self.log_fd = None              # the .masks log, once opened
        self.log_bytes = 0              # written to the log since the file was
        self.file_bytes = 0             # the state file's size when written
        self.unlogged = []              # record and drop lines for the next append
        self.header = None              # (binder, domains, resources) the file holds
        self.pending = []               # records of masks being set


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
        self.warn = warn or tell
        self.targets = {}           # pid -> _Target
        self.binder = None
        self.binder_kind = None
        self.domains = None
        self._batch = 0
        self._me = {"pid": os.getpid(), "start": own_start_ticks()}
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
                allowed = self._own_cpus(pid)
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

    def try_claim(self, pid, allowed):
        """``claim`` for a process found while balancing (a descendant of a
        target): None once claimed, else why it is not (another tumbler
        manages it, or it is gone).  A state directory that cannot be
        written still raises StateError."""
        try:
            self.claim(pid, allowed)
        except StateError:
            raise
        except TumblerError as exc:         # Busy, or no such process
            return str(exc)
        return None

    def _own_cpus(self, pid):
        """The union of ``pid``'s threads' masks; None if it is gone or
        has none."""
        try:
            return allowed_union(self.backend, [pid]) or None
        except NoSuchProcess:
            return None

    def _restore_stale(self, state_file):
        data = read_state(state_file.path)
        owner = data["tumbler"]
        # The dead tumbler's cgroups / processor sets go only with its last
        # state file: other processes it managed may still sit in them.
        alone = not any(other.path != state_file.path and owner_of(other) == owner
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
        resources it created (``binder.resources()``): each state file is
        rewritten if they are not what it holds."""
        self.binder = binder
        self.binder_kind = binder.kind
        if domains is not None:
            self.domains = [sorted(d) for d in domains]
        header = self._header()
        for target in self.targets.values():
            if target.header != header:
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
        # One line of the log, not a rewrite of every record (LOG_COMPACT_MIN_BYTES).
        target.unlogged.append(b"r %s\n" % dumps(record).encode())
        if not self._batch:
            self._append(target, b"")

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
            target.masks.add(mask)      # (the log has it; the next rewrite too)
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
        """Forget a thread (restored, or gone); logged with the next append."""
        target = self.targets.get(pid if owner is None else owner)
        if target is not None and target.threads.pop((pid, tid), None) is not None:
            target.unlogged.append(b"d %d %d\n" % (pid, tid))

    def batch(self):
        """``with journal.batch():`` records made inside reach the disk in
        one write per file, at the end."""
        return _Batch(self)

    def flush(self):
        """Records made in a batch reach the log, one append per state file."""
        for target in self.targets.values():
            if target.unlogged:
                self._append(target, b"")

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

    def _header(self):
        return self.binder_kind, self.domains, self._resources()

    def _write(self, target):
        """Compaction: the state file rewritten from what is known now, then
        the log emptied (everything it says is in the file).  Killed
        between the two, the log replays over the file to the same state:
        each of its lines sets or drops a record, or logs a mask."""
        if len(target.threads) > target.prune_at:
            self._prune(target)
        header = self._header()
        data = {
            "version": STATE_VERSION,
            "boot": self._boot,
            "tumbler": self._me,
            "platform": self.backend.name,
            "binder": header[0],
            "target": {"pid": target.pid, "start": target.start, "name": target.name,
                       "allowed": target.allowed},
            "domains": header[1],
            "resources": header[2],
            "masks": sorted(list(m) for m in target.masks),
            "threads": list(target.threads.values()),
        }
        path = StateFile(self.directory, target.pid, target.start).path
        text = dumps(data).encode()
        try:
            write_atomic(path, text)
        except OSError as exc:
            raise StateError("cannot write state file %s: %s" % (path, exc.strerror)) from None
        target.header = header
        target.file_bytes = len(text)
        target.unlogged = []
        if target.log_fd is not None and target.log_bytes:
            try:
                os.ftruncate(target.log_fd, 0)
                target.log_bytes = 0
            except OSError:
                # A longer log is still a correct one; fold it again only
                # once it has grown as much again, not at every append.
                target.file_bytes += target.log_bytes

    def _append(self, target, data):
        """Append the lines waiting (records, drops) and ``data`` to the
        log in one write(2); compact when it has grown as long as the file."""
        if target.unlogged:
            data = b"".join(target.unlogged) + data
            target.unlogged = []
        if not data:
            return
        path = StateFile(self.directory, target.pid, target.start).log_path
        try:
            if target.log_fd is None:
                target.log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                        | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(target.log_fd, view):]
        except OSError as exc:
            raise StateError("cannot write state file %s: %s" % (path, exc.strerror)) from None
        target.log_bytes += len(data)
        # What the binder created (a cpuset binder's cgroups, made at a
        # thread's first bind) is in the file from the next append on.
        if target.log_bytes > max(LOG_COMPACT_MIN_BYTES, target.file_bytes) \
                or self._header() != target.header:
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
        unlink_quietly(state_file.log_path)
        unlink_quietly(state_file.path)

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
        if self.binder is None:
            return {}
        try:
            return self.binder.resources()
        except Exception:           # never let bookkeeping stop a run
            return {}
