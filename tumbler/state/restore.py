"""Putting back what a dead tumbler left, from its state files (see
``tumbler.state``; the command is ``tumbler.commands.restore``)."""


from ..cpulist import parse_cpulist
from ..errors import UsageError
from ..platform.base import SWEEP_PASSES, NoSuchProcess, PlatformError, sweep
from ..safefile import UnsafePath
from .paths import StateError, unlink_quietly
from .store import Busy, Lock, boot_id, is_thread_record, read_state, read_state_bytes

class RestoreReport:
    """What ``restore_state`` did with one state file."""

    def __init__(self, pid, name="?", owner=None):
        self.pid = pid
        self.name = name
        self.owner = owner              # PID of the tumbler that left it
        self.restored = 0
        self.gone = 0                   # threads that exited (or whose TID was reused)
        self.adopted = 0                # threads it never recorded, reset all the same
        self.foreign = 0                # placed by someone else since: left alone
        self.removed = []               # what the binder had created, removed
        self.failed = 0
        self.errors = []
        self.process_gone = False

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
    # The records logged since the file was last written join its own.
    logged = _MaskLog.read(state_file, data)
    kind = data.get("binder") or next((r.get("binder") for r in data["threads"]
                                       if r.get("binder")), None)
    binder = None
    if kind is not None and (data["threads"] or data.get("resources") or data.get("masks")
                             or logged.every):
        binder = backend.binder(kind)
    try:
        info = backend.process(target["pid"])
        alive = info.start == target.get("start") and not info.zombie
    except NoSuchProcess:
        alive = False
    if binder is not None:
        if alive:
            _restore_threads(data, backend, binder, logged, report)
        else:
            report.process_gone = True
        # A child process born of a bound thread carries tumbler's mask
        # even when the target itself is gone.
        children = _restore_children(data, backend, binder, logged, report)
        _sweep(data, backend, binder, logged, report, children)
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
    unlink_quietly(state_file.log_path)
    unlink_quietly(state_file.path)


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
        """The log of ``state_file`` read; the records it logged since the
        file was written replace or join ``data["threads"]`` (and the ones
        it dropped leave), in the order logged."""
        pid = data["target"]["pid"]
        in_file, done, pending = {}, {}, {}
        every = data.get("masks")
        if every is not None:
            every = {frozenset(m) for m in every if isinstance(m, list)}
        try:
            text = read_state_bytes(state_file.log_path).decode(errors="replace")
        except FileNotFoundError:
            text = ""
        except UnsafePath as exc:
            raise StateError("masks log %s" % exc) from None
        except OSError as exc:
            raise StateError("cannot read %s: %s" % (state_file.log_path, exc.strerror)) \
                from None
        # Every line is written whole with its newline: a last one without
        # is torn (a full disk, SIGKILL mid-write) and may still parse --
        # "d 5000 5012" of "d 5000 50123", "0-1" of "0-15" -- as another.
        text = text[:text.rfind("\n") + 1]
        records = {(r.get("pid", pid), r["tid"]): r for r in data["threads"]}
        for line in text.splitlines():
            if line == ".":
                done.update(pending)
                pending = {}
                continue
            if line[:2] in ("r ", "d "):
                _replay(line, records, pid)
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
        data["threads"] = list(records.values())
        for record in data["threads"]:
            key = (record.get("pid", pid), record["tid"], record.get("start"))
            in_file[key] = {frozenset(m) for m in record.get("set") or () if isinstance(m, list)}
        return cls(every, in_file, done, pending)

    def view(self, data):
        """The state as binders judge it: ``masks`` is every mask the log
        and the file say tumbler set (absent for a state file written
        before tumbler kept the log)."""
        if self.every is None:
            return data
        return dict(data, masks=sorted(sorted(m) for m in self.every))

    def last(self, key):
        """The log is complete since it was last emptied, which is only
        done once the state file carries it all: where the log knows the
        thread, it has the last word."""
        masks = {self._done[key]} if key in self._done else set(self._in_file.get(key, ()))
        if key in self._pending:
            masks.add(self._pending[key])
        return masks


def _replay(line, records, pid):
    """One record line of the log (``r`` and the record as JSON: set it;
    ``d PID TID``: drop it) applied to ``records`` ((pid, tid) -> record;
    ``pid`` is the target's, which its own threads' records do not name).
    A line that is not one -- the torn last line of a tumbler killed
    mid-write, whose thread was not changed yet -- is passed over, as a
    mask line would be."""
    import json         # here: only restore reads a log
    if line[0] == "d":
        fields = line.split()
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            records.pop((int(fields[1]), int(fields[2])), None)
        return
    try:
        record = json.loads(line[2:])
    except (ValueError, RecursionError):
        return
    if is_thread_record(record):
        records[(record.get("pid", pid), record["tid"])] = record


def _restore_threads(data, backend, binder, logged, report):
    """The target's recorded threads (the ones it made since the last write
    are ``_sweep``'s)."""
    pid = data["target"]["pid"]
    try:
        sample = backend.sample(pid)
    except NoSuchProcess:
        report.process_gone = True
        return
    starts = {tid: times.start for tid, times in sample.threads.items()}
    records = [r for r in data["threads"] if r.get("pid", pid) == pid]
    _restore_records(pid, starts, records, data, backend, binder, logged, report)


def _restore_children(data, backend, binder, logged, report):
    """The recorded threads of child processes (and theirs) born of threads
    tumbler had bound; returns the PIDs that still name those processes
    (one of their recorded threads alive, same start)."""
    pid = data["target"]["pid"]
    records = {}
    for record in data["threads"]:
        if record.get("pid", pid) != pid:
            records.setdefault(record["pid"], []).append(record)
    same = set()
    for child, mine in sorted(records.items()):
        try:
            starts = {tid: times.start for tid, times in backend.sample(child).threads.items()}
        except NoSuchProcess:
            report.gone += len(mine)
            continue
        if any(starts.get(r["tid"]) == r.get("start") for r in mine):
            same.add(child)
        _restore_records(child, starts, mine, data, backend, binder, logged, report)
    return same


def _sweep(data, backend, binder, logged, report, children):
    """Threads the state does not list, of the target and of the processes
    below it born after the tumbler started (none earlier can carry its
    masks): a bound thread made them after the last write, or goes on
    making them while the ones before it are put back -- one born after its
    creator was listed but before the creator was put back carries
    tumbler's mask and shows up only in a later listing.  List again,
    adopting, as platform/base.py's ``sweep`` says (a program setting
    tumbler's masks on its own threads over and over cannot keep restore
    busy forever: a sweep cut at SWEEP_PASSES is said, the state kept).
    ``children``: the recorded child processes their PIDs still name; a
    PID of one that exited may name anybody's process now."""
    pid = data["target"]["pid"]
    handled = {}                # pid -> TIDs recorded, put back, or failed already
    for record in data["threads"]:
        handled.setdefault(record.get("pid", pid), set()).add(record["tid"])

    def one_pass():
        found = set(children)
        if not report.process_gone:
            found |= _descendants(backend, pid, data["tumbler"].get("start")) | {pid}
        adopted = False
        for each in sorted(found):
            try:
                tids = backend.thread_ids(each)
            except NoSuchProcess:
                continue
            done = handled.setdefault(each, set())
            put_back, failed = _adopt(each, tids, done, data, backend, binder, logged, report)
            done |= put_back | failed       # each said once, tried once
            adopted = adopted or bool(put_back)
        return adopted

    if sweep(one_pass):
        return
    report.errors.append("threads with tumbler's binding were still being created after "
                         "%d listings; run tumbler restore again" % SWEEP_PASSES)
    report.failed += 1


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
            if not binder.placed_by_tumbler(pid, tid, record, logged.view(data),
                                            logged.last((pid, tid, record.get("start")))):
                report.foreign += 1
                continue
            binder.restore(pid, tid, record["saved"])
            report.restored += 1
        except NoSuchProcess:
            report.gone += 1
        except PlatformError as exc:
            report.failed += 1
            report.errors.append("thread %d of process %d: %s" % (tid, pid, exc))


def _adopt(pid, tids, recorded, data, backend, binder, logged, report):
    """Threads the state file does not list were created by a bound thread
    (after the last write) and inherited its placement: the binder says,
    from the state and the masks tumbler logged, whether they did and where
    they belong (``Binder.leftover_placement``).  Returns the TIDs put
    back and those that failed."""
    state = logged.view(data)
    adopted, failed = set(), set()
    for tid in tids:
        if tid in recorded:
            continue
        try:
            saved = binder.leftover_placement(pid, tid, state)
            if saved is None:
                continue
            binder.restore(pid, tid, saved)
            report.adopted += 1
            adopted.add(tid)
        except NoSuchProcess:
            continue
        except PlatformError as exc:
            report.failed += 1
            report.errors.append("thread %d of process %d: %s" % (tid, pid, exc))
            failed.add(tid)
    return adopted, failed


def remove_resources_of(binder, resources, owner):
    """Remove what the tumbler ``owner`` created through a binder of this
    kind (``resources`` from its state files, plus any the binder finds);
    return what was removed."""
    return binder.remove_leftovers(resources or {}, owner)
