"""Hardware counters of one program: LLC misses and CPU cycles per thread.

Space sharing's performance model (engine/share.py, the paper's section 4)
wants each program's last-level-cache misses per cycle.  Linux counts them
with perf_event_open(2), one *group* per thread: the leader counts
PERF_COUNT_HW_CPU_CYCLES, the member PERF_COUNT_HW_CACHE_MISSES (the
kernel's generic LLC-miss event), both PERF_TYPE_HARDWARE.  A group is
scheduled on the PMU as a unit, so when the kernel multiplexes more events
than the PMU has counters, cycles and misses are counted over the same
slices, and one read() returns both with the group's time enabled and
time running (read_format PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED |
TOTAL_TIME_RUNNING); ``parse_group_read`` scales the counts by
enabled/running, as perf stat does.

Choices, and why:

* exclude_kernel=1: the model wants the program's own memory intensity,
  and counting kernel mode needs kernel.perf_event_paranoid <= 1 or
  CAP_PERFMON (``perf_allow_kernel``, include/linux/perf_event.h), while
  user-only counting of one's own processes works at the upstream default
  of 2.  exclude_hv=1: the hypervisor's work is not the program's.
* inherit=0: tumbler attaches to running programs, whose threads that
  already exist would inherit nothing; it opens a group for each thread
  it sees (``add``) instead.
* Both events start enabled at open: the member joins a few microseconds
  after the leader, nothing next to a sampling interval.
* PERF_FLAG_FD_CLOEXEC: a program tumbler execs must not inherit the fds.
* A thread that exits keeps its counts readable until its fds are closed;
  ``forget`` reads them once more and adds them to what gone threads
  counted, so ``read`` never goes backwards.

Errors are mapped here, once: ENOENT, EOPNOTSUPP, ENODEV (and EINVAL
before any group opened) mean the machine exposes no such PMU event --
this VM, for one -- and raise Unsupported("no hardware counters: ...");
EACCES/EPERM raise AccessDenied; ESRCH means the thread is gone and is
skipped.

struct perf_event_attr: include/uapi/linux/perf_event.h of torvalds/linux
(commit 01be83ee) and /usr/include/linux/perf_event.h of this
machine; the offsets below were checked with offsetof() against the
latter.  Syscall numbers: 298 on x86_64 (asm/unistd_64.h), 241 on aarch64
(asm-generic/unistd.h, which arm64 uses).  Both are little-endian, so the
bitfield word is built as an integer with bit 0 = ``disabled``.
"""

import _thread
import ctypes
import errno
import os
import struct

from ..base import AccessDenied, PlatformError, Unsupported

SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241}

PERF_TYPE_HARDWARE = 0
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_ATTR_SIZE_VER5 = 112

# Bits of the u64 bitfield word at offset 40.
ATTR_DISABLED = 1 << 0
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6

READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
GROUP_HEADER = struct.Struct("=QQQ")            # nr, time_enabled, time_running
READ_SIZE = GROUP_HEADER.size + 2 * 8           # two values: cycles, misses

PRIVILEGE = "CAP_PERFMON (or kernel.perf_event_paranoid <= 2 for your own processes)"
NO_COUNTERS = "no hardware counters"
_UNSUPPORTED = (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV)
# What the bare strerror does not say (perf_event_open(2), ERRORS).
_HINTS = {errno.ENOENT: " (no PMU offers this event here: a VM without a virtual PMU?)",
          errno.EOPNOTSUPP: " (the PMU cannot count this event without interrupts)",
          errno.ENODEV: " (the CPU does not support this event)"}


def machine():
    """The machine's architecture, as uname(2) names it (what
    ``platform.machine()`` returns, without that module's import: 6 ms of
    CPU taken beside ``exec``'s command)."""
    return os.uname().machine


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr up to PERF_ATTR_SIZE_VER5 (112 bytes)."""

    _fields_ = [
        ("type", ctypes.c_uint32),              # 0
        ("size", ctypes.c_uint32),              # 4
        ("config", ctypes.c_uint64),            # 8
        ("sample_period", ctypes.c_uint64),     # 16 (union with sample_freq)
        ("sample_type", ctypes.c_uint64),       # 24
        ("read_format", ctypes.c_uint64),       # 32
        ("flags", ctypes.c_uint64),             # 40: disabled:1, inherit:1, ...
        ("wakeup_events", ctypes.c_uint32),     # 48
        ("bp_type", ctypes.c_uint32),           # 52
        ("config1", ctypes.c_uint64),           # 56
        ("config2", ctypes.c_uint64),           # 64
        ("branch_sample_type", ctypes.c_uint64),  # 72
        ("sample_regs_user", ctypes.c_uint64),  # 80
        ("sample_stack_user", ctypes.c_uint32),  # 88
        ("clockid", ctypes.c_int32),            # 92
        ("sample_regs_intr", ctypes.c_uint64),  # 96
        ("aux_watermark", ctypes.c_uint32),     # 104
        ("sample_max_stack", ctypes.c_uint16),  # 108
        ("reserved_2", ctypes.c_uint16),        # 110
    ]


def event_attr(config):
    """The attr of one hardware event as the module doc explains."""
    return PerfEventAttr(type=PERF_TYPE_HARDWARE, size=PERF_ATTR_SIZE_VER5, config=config,
                         read_format=READ_FORMAT,
                         flags=ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV)


def parse_group_read(data):
    """(cycles, misses) from one read() of a group leader, scaled by
    time_enabled / time_running when the group was multiplexed; (0, 0) if
    it never ran.  ValueError on a short or foreign buffer."""
    if len(data) < GROUP_HEADER.size:
        raise ValueError("group read of %d bytes is too short" % len(data))
    nr, enabled, running = GROUP_HEADER.unpack_from(data)
    if nr < 2 or len(data) < GROUP_HEADER.size + 8 * nr:
        raise ValueError("group read of %d bytes with %d values" % (len(data), nr))
    cycles, misses = struct.unpack_from("=QQ", data, GROUP_HEADER.size)
    if running == 0:
        return 0, 0
    if running < enabled:
        return cycles * enabled // running, misses * enabled // running
    return cycles, misses


_syscall = None


def libc_syscall():
    """libc's syscall(2) through ctypes (loaded once)."""
    global _syscall
    if _syscall is None:
        function = ctypes.CDLL(None, use_errno=True).syscall
        function.restype = ctypes.c_long
        _syscall = function
    return _syscall


def perf_event_open(attr, pid, cpu, group_fd, syscall=None, arch=None):
    """perf_event_open(2) of ``attr`` through libc's syscall(2) (or
    ``syscall``, tests' fake; ``arch``: os.uname's machine): the fd, with
    PERF_FLAG_FD_CLOEXEC; OSError with the kernel's errno, ENOSYS where
    the call's number on this architecture is not known."""
    number = SYSCALL_NUMBERS.get(arch or machine())
    if number is None:
        raise OSError(errno.ENOSYS, "perf_event_open's system call number on %s is not known"
                      % (arch or machine()))
    fd = (syscall or libc_syscall())(ctypes.c_long(number), ctypes.byref(attr),
                                     ctypes.c_int(pid), ctypes.c_int(cpu),
                                     ctypes.c_int(group_fd),
                                     ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


class ProgramCounters:
    """Cycles and LLC misses of the threads of ``pid`` that were ``add``-ed.

    ``syscall``, ``read`` and ``close`` default to libc's syscall(2),
    os.read and os.close; tests pass fakes.  ``syscall`` is called as
    ``syscall(number, attr_pointer, tid, cpu, group_fd, flags)`` and
    reports failure as -1 with ctypes' errno set.
    """

    def __init__(self, pid, syscall=None, read=os.read, close=os.close):
        self.pid = pid
        self._syscall = syscall
        self._read, self._close = read, close
        self._groups = {}           # tid -> (leader fd, member fd)
        self._last = {}             # tid -> (cycles, misses) last read
        self._gone = (0, 0)         # (cycles, misses) of forgotten threads
        self._opened = False        # a group was opened once: counters exist

    def add(self, tid):
        """Start counting thread ``tid``; False if it is gone."""
        if tid in self._groups:
            return True
        leader = self._open(PERF_COUNT_HW_CPU_CYCLES, "CPU cycles", tid, -1)
        if leader is None:
            return False
        try:
            member = self._open(PERF_COUNT_HW_CACHE_MISSES, "LLC misses", tid, leader)
        except BaseException:
            self._close(leader)
            raise
        if member is None:
            self._close(leader)
            return False
        self._groups[tid] = (leader, member)
        self._last[tid] = (0, 0)
        self._opened = True
        return True

    def forget(self, tid):
        """Stop counting ``tid``, keeping what it counted in the totals."""
        fds = self._groups.pop(tid, None)
        if fds is None:
            return
        cycles, misses = self._update(tid, fds[0])
        del self._last[tid]
        self._gone = (self._gone[0] + cycles, self._gone[1] + misses)
        for fd in fds:
            try:
                self._close(fd)
            except OSError:
                pass

    def read(self):
        """(misses, cycles) summed over every thread counted so far --
        cumulative, never smaller than the last answer."""
        cycles, misses = self._gone
        for tid, (leader, _) in self._groups.items():
            c, m = self._update(tid, leader)
            cycles += c
            misses += m
        return misses, cycles

    def close(self):
        for tid in list(self._groups):
            self.forget(tid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _update(self, tid, leader):
        """The thread's counts now, never below the last ones: a group
        whose read fails (or whose multiplexing estimate dips) keeps them."""
        last = self._last[tid]
        try:
            cycles, misses = parse_group_read(self._read(leader, READ_SIZE))
        except (OSError, ValueError):
            return last
        now = (max(cycles, last[0]), max(misses, last[1]))
        self._last[tid] = now
        return now

    def _open(self, config, what, tid, group_fd):
        """A counter fd, or None if the thread is gone; mapped errors."""
        if machine() not in SYSCALL_NUMBERS:
            raise Unsupported("%s: perf_event_open's system call number on %s is not known"
                              % (NO_COUNTERS, machine()))
        try:
            return perf_event_open(event_attr(config), tid, -1, group_fd, self._syscall)
        except OSError as error:
            code = error.errno
        if code == errno.ESRCH:
            return None
        detail = "perf_event_open of %s for thread %d of process %d: %s" % (
            what, tid, self.pid, os.strerror(code))
        if code in _UNSUPPORTED or (code == errno.EINVAL and not self._opened):
            raise Unsupported("%s: %s%s" % (NO_COUNTERS, detail, _HINTS.get(code, "")))
        if code in (errno.EACCES, errno.EPERM):
            raise AccessDenied(detail, PRIVILEGE)
        raise PlatformError(detail)


_UNKNOWN = object()
_support = _UNKNOWN


def probe_support(syscall=None):
    """None if counters open for the calling thread, else the one-line
    reason; asked of the kernel once (a given ``syscall`` is not cached)."""
    global _support
    if syscall is None and _support is not _UNKNOWN:
        return _support
    counters = ProgramCounters(os.getpid(), syscall=syscall)
    try:
        counters.add(_thread.get_native_id())     # threading's, without its import
        reason = None
    except PlatformError as exc:
        reason = str(exc)
    finally:
        counters.close()
    if syscall is None:
        _support = reason
    return reason
