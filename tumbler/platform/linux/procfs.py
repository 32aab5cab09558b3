"""The formats of the /proc files the Linux backend reads (proc(5)): the
``stat`` line and its fields, ``status`` as a dict, ``cgroup``; and the two
process-wide facts other layers ask of /proc and prctl(2) (capabilities,
child subreaper), and sched_getcpu(3).  Parsing only: the kept descriptors
and the sampling are threads.py's, the calls backend.py's."""

import os

from ...escape import printable
from ..base import Unsupported

try:
    from . import _steady
    # A build older than its source (a tree pulled, not rebuilt) lacks
    # these: taken as not built, as switches.py's import takes it.
    _steady.set_child_subreaper, _steady.current_cpu
except (ImportError, AttributeError):   # not built (optional): through ctypes
    _steady = None

PF_KTHREAD = 0x00200000
PR_SET_CHILD_SUBREAPER = 36     # include/uapi/linux/prctl.h

NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

# Fields of /proc/.../stat counted from the one after "(comm)": field 3 of
# proc(5) is index 0 here.
STAT_STATE, STAT_FLAGS, STAT_UTIME, STAT_STIME = 0, 6, 11, 12
STAT_NUM_THREADS, STAT_STARTTIME, STAT_PROCESSOR = 17, 19, 36
STAT_STARTCODE, STAT_ENDCODE, STAT_STARTSTACK = 23, 24, 25


def parse_stat(text):
    """Split a /proc stat line into (comm, fields after the comm).

    The comm may itself contain ')' and spaces, so cut at the LAST ')'; it
    is any user's to choose, so it comes back ``printable`` (escape.py).
    """
    open_paren = text.index("(")
    close_paren = text.rindex(")")
    return printable(text[open_paren + 1:close_paren]), text[close_paren + 2:].split()


def stat_fields(data, count):
    """The first ``count`` fields after the "(comm)" of a /proc stat file's
    bytes, as bytes, without decoding the line or the name: what the
    scans and the parked looks read many times a second.  ValueError for
    an empty or cut-short read (an exited process)."""
    fields = data[data.rindex(b")") + 2:].split(None, count)
    if len(fields) < count:
        raise ValueError("short stat")
    return fields


def status_value(data, key):
    """The value of ``key`` (bytes, e.g. b"Uid") in a /proc ``status`` file's
    bytes, without parsing every line; KeyError if it is not there.  Only
    the Name line, the first, holds text its process chose, and the kernel
    escapes newlines in it: a "\\nKey:" cannot be forged before the real one."""
    at = data.find(b"\n" + key + b":")
    if at < 0:
        raise KeyError(key)
    start = at + len(key) + 2
    end = data.find(b"\n", start)
    return data[start:end if end >= 0 else len(data)].strip()


def exited(fields):
    """Whether stat ``fields`` of a main thread say its process has exited.

    A zombie main thread alone is not enough: a main thread that called
    pthread_exit(3) stays a zombie while the other threads run on, and
    num_threads still counts them (and it).  An exited process waiting to
    be reaped has just its zombie main thread.
    """
    if fields[STAT_STATE] not in ("Z", "X"):
        return False
    try:
        return int(fields[STAT_NUM_THREADS]) <= 1
    except (IndexError, ValueError):
        return True


def cgroup_path(text):
    """The cgroup of a /proc/PID/cgroup text: the v2 one ("0::/path"), else
    the v1 cpuset hierarchy's, else None."""
    found = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if "cpuset" in parts[1].split(","):
            found = parts[2]
    return found


def read_status(path):
    """A /proc ``status`` file as {key: value}.  OSError as open raises it."""
    fields = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def switch_counts(data):
    """(voluntary_ctxt_switches, nonvoluntary_ctxt_switches) of a status
    file's bytes ``data``, found from the end without decoding or splitting
    the file: read per thread per round while speed balancing watches a
    crowd, where ``read_status`` cost 75 us a thread here against 23.  Zero
    for a field the kernel does not write; ValueError for a malformed one.
    (Only the Name line could hold a thread's own text, and the kernel
    escapes its newlines: a name cannot begin a line of its own.)"""
    counts = []
    for key in (b"\nvoluntary_ctxt_switches:", b"\nnonvoluntary_ctxt_switches:"):
        start = data.rfind(key)
        if start < 0:
            counts.append(0)
            continue
        start += len(key)
        end = data.find(b"\n", start)
        counts.append(int(data[start:] if end < 0 else data[start:end]))
    return counts[0], counts[1]


def has_capability(bit, proc="/proc"):
    """True if the calling process holds capability number ``bit`` (its
    CapEff in /proc/self/status); False where that cannot be read."""
    try:
        status = read_status(proc + "/self/status")
        return bool(int(status["CapEff"], 16) >> bit & 1)
    except (OSError, KeyError, ValueError):
        return False


def set_child_subreaper(on):
    """prctl(PR_SET_CHILD_SUBREAPER) for the calling process (Linux 3.4 and
    later): while ``on``, orphans among its descendants are re-parented to
    it.  True if the kernel took it.  _steady.c's, else through ctypes:
    its import costs ~4 ms of CPU beside ``exec``'s command."""
    if _steady is not None:
        return _steady.set_child_subreaper(on)
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0,
                                                       0) == 0
    except (OSError, AttributeError):
        return False


_sched_getcpu = None         # libc's sched_getcpu through ctypes, loaded on first use


def current_cpu():
    """sched_getcpu(3), None if it failed: a vDSO call, no system call on
    x86_64.  _steady.c's, else through ctypes (as set_child_subreaper)."""
    if _steady is not None:
        return _steady.current_cpu()
    global _sched_getcpu
    if _sched_getcpu is None:
        import ctypes
        _sched_getcpu = ctypes.CDLL(None).sched_getcpu
    cpu = _sched_getcpu()
    return cpu if cpu >= 0 else None


def cpu_times_from_stat(data):
    """``{cpu: (busy_ns, total_ns)}`` from the ``cpuN`` lines of /proc/stat's
    bytes ``data`` (LinuxBackend.cpu_times); ValueError naming a malformed
    line."""
    times = {}
    for line in data.split(b"\n"):
        if not line.startswith(b"cpu") or line.startswith(b"cpu "):
            continue
        fields = line.split()
        try:
            cpu = int(fields[0][3:])
            ticks = [int(x) for x in fields[1:9]]
        except ValueError:
            raise ValueError("malformed line %r" % line[:60].decode(errors="replace")) from None
        ticks += [0] * (8 - len(ticks))
        user, nice, system, idle, iowait, irq, softirq, steal = ticks
        busy = user + nice + system + irq + softirq + steal
        times[cpu] = (busy * NS_PER_TICK, (busy + idle + iowait) * NS_PER_TICK)
    return times


class ProcStat:
    """/proc/stat read whole through a kept fd (a round may read it twice:
    cpu_times, cpu_switches); Unsupported where it cannot be."""

    def __init__(self, proc):
        self.path = os.path.join(proc, "stat")
        self._fd = None

    def read(self):
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            chunks, offset = [], 0
            while True:
                chunk = os.pread(self._fd, 1 << 16, offset)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                offset += len(chunk)
        except OSError as exc:
            raise Unsupported("cannot read %s: %s" % (self.path, exc.strerror)) from None

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def release_at_least(proc, version):
    """Whether the kernel's release (``proc``/sys/kernel/osrelease) is
    ``version`` or later; True where it cannot be read (a fixture tree)."""
    try:
        with open(os.path.join(proc, "sys/kernel/osrelease")) as f:
            release = f.read().split("-")[0].split(".")[:2]
        return tuple(int(part) for part in release) >= version
    except (OSError, ValueError):
        return True


#: futex(2)'s number in /proc/PID/task/TID/syscall, by machine (the kernel's
#: syscall tables: arch/x86/entry/syscalls, include/uapi/asm-generic/unistd.h
#: and the others); futex_waitv(2) has one number everywhere (kernel >= 5.16).
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "loongarch64": 98,
                 "ppc64le": 221, "ppc64": 221, "s390x": 238, "i686": 240, "i386": 240,
                 "armv7l": 240, "armv6l": 240}
FUTEX_WAITV_SYSCALL = 449
#: The futex ops (op & 0x7f) that sleep until woken: FUTEX_WAIT, LOCK_PI,
#: WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2 -- what probes/linux/locktime.bt
#: counts as lock waits.
FUTEX_WAIT_OPS = frozenset((0, 6, 9, 11, 13))


def in_futex_wait(call, futex):
    """Whether a thread's syscall file (``call``: its words) shows it asleep
    in futex(2) number ``futex`` with a waiting op (its 2nd number) or in
    futex_waitv(2); "running" or no system call: False."""
    try:
        nr = int(call[0])
        return (nr == futex and int(call[2], 16) & 0x7f in FUTEX_WAIT_OPS) \
            or nr == FUTEX_WAITV_SYSCALL
    except (IndexError, ValueError):
        return False
