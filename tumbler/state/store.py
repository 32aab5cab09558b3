"""State directory, locks and state files (see ``tumbler.state``)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from ..errors import EXIT_FAILURE, TumblerError
from ..jsonlimits import BadJSON, loads
from ..platform import boot_token
from ..records import record
from ..safefile import UnsafePath, open_parent
from .paths import StateError

STATE_VERSION = 1
#: A state file of 100,000 threads is ~20 MiB; a larger one is not ours.
MAX_STATE_BYTES = 64 << 20


class Busy(TumblerError):
    """The target is managed by another, running tumbler."""

    status = EXIT_FAILURE

    def __init__(self, pid, owner):
        self.pid, self.owner = pid, owner
        who = "tumbler PID %d" % owner if owner else "another tumbler"
        super().__init__("process %d is already managed by %s; stop that one first"
                         % (pid, who))


def boot_id():
    """This boot's token (``tumbler.platform.boot_token``), or None."""
    return boot_token()


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
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise StateError("cannot open %s: %s" % (self.path, exc.strerror)) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)            # a FIFO or device someone put in its place
                raise StateError("cannot lock %s: not a regular file" % self.path)
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

def read_state(path):
    """Load and check a state file; raise StateError if it is not one."""
    # jsonlimits imports json and re when it parses: most runs never read
    # a state file (the two cost ~5 ms at start).
    try:
        data = loads(read_state_bytes(path), MAX_STATE_BYTES)
    except FileNotFoundError:
        raise
    except UnsafePath as exc:
        raise StateError("state file %s" % exc) from None
    except OSError as exc:
        raise StateError("cannot read state file %s: %s" % (path, exc.strerror)) from None
    except BadJSON as exc:
        raise StateError("state file %s: %s; inspect and remove it" % (path, exc)) from None
    problem = _check_state(data)
    if problem:
        raise StateError("state file %s is not a tumbler state file (%s); inspect and "
                         "remove it" % (path, problem))
    return data


def read_state_bytes(path):
    """The bytes of a file in a state directory: a regular file of
    tumbler's own (or root's), not a link, not writable by others
    (tumbler.safefile), of at most MAX_STATE_BYTES."""
    directory, name = open_parent(path)
    with directory:
        return directory.read(name, MAX_STATE_BYTES, trusted=True)


def _check_state(data):
    """What is wrong with the data of a state file, or None.  Everything
    restore acts on is checked before anything is moved: IDs are
    positive integers, start times integers, CPU lists lists of CPU
    numbers, what binders saved plain values."""
    if not isinstance(data, dict):
        return "not a mapping"
    if data.get("version") != STATE_VERSION:
        return "version %r, expected %d" % (data.get("version"), STATE_VERSION)
    for key in ("tumbler", "target"):
        part = data.get(key)
        if not isinstance(part, dict) or not _is_id(part.get("pid")):
            return "no %s pid" % key
        if not _is_int_or_none(part.get("start")):
            return "bad %s start" % key
    if not _is_cpus_or_none(data["target"].get("allowed")):
        return "bad target CPUs"
    if not isinstance(data.get("threads"), list):
        return "no thread list"
    if not all(map(is_thread_record, data["threads"])):
        return "bad thread record"
    for key in ("masks", "domains"):
        if data.get(key) is not None and not (isinstance(data[key], list)
                                              and all(_is_cpus_or_none(m) for m in data[key])):
            return "bad %s" % key
    return None


def is_thread_record(record):
    """Whether ``record`` is a thread's record as a state file (or its
    log) holds it: what restore acts on, checked before anything moves."""
    return (isinstance(record, dict) and _is_id(record.get("tid"))
            and _is_id(record.get("pid", 1)) and _is_int_or_none(record.get("start"))
            and isinstance(record.get("saved"), dict)
            and all(_is_plain(value) for value in record["saved"].values())
            and _is_cpus_or_none(record["saved"].get("cpus"))
            and _is_cgroup_or_none(record["saved"].get("cgroup")))


#: CPU numbers a state file may name (Linux's NR_CPUS is at most 8192).
_MAX_CPU = 1 << 16


def _is_id(value):
    return type(value) is int and value > 0


def _is_int_or_none(value):
    return value is None or type(value) is int


def _is_cpus_or_none(value):
    return value is None or (isinstance(value, list) and all(
        type(cpu) is int and 0 <= cpu < _MAX_CPU for cpu in value))


def _is_cgroup_or_none(value):
    """A cgroup path as the cpuset binder saves it: absolute, no ``..``."""
    return value is None or (isinstance(value, str) and value.startswith("/")
                             and ".." not in value.split("/") and "\0" not in value)


def _is_plain(value):
    return value is None or type(value) in (int, str, bool) or _is_cpus_or_none(value)


@record
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
    """StateFile of every state file in ``directory`` (of ``pid`` only, if
    given); none if ``directory`` is None (there is no state directory)."""
    if directory is None:
        return []
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


def owner_of(state_file):
    """The "tumbler" entry ({pid, start}) of a state file, None if unreadable."""
    try:
        return read_state(state_file.path)["tumbler"]
    except (OSError, StateError):
        return None
