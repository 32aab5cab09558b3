"""Context switches on a set of CPUs (``Backend.cpu_switches``, Linux).

What they are for: ``auto`` takes many switches per CPU-second of threads
that never leave the run queue as the sign of sched_yield barriers
(engine/policy.py, 2.).  A neighbour that wakes thousands of times a
second preempts such threads as often, and their own counts cannot tell
the two apart; the switches of the domain's CPUs can: each preemption by
another task is a second switch (that task's, back off the CPU) that is
not the program's.

How: perf_event_open(2) with PERF_TYPE_SOFTWARE /
PERF_COUNT_SW_CONTEXT_SWITCHES, pid -1 and one CPU counts every context
switch on that CPU, whatever task (perf_event_task_sched_out ->
perf_sw_event, kernel/events/core.c).  A software event needs no PMU (it
counts in VMs that have none, this one).  A CPU-wide event needs
CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= 0
(perf_event_open(2)): the service runs as root, ``tumbler exec`` run by a
user usually may not.  Then the count is the whole machine's, the
``ctxt`` line of /proc/stat (proc(5)): switches on CPUs outside the
domain count as other tasks', which can only keep speed balancing out.

Each set of CPUs keeps the source its first count came from, so that a
set's counts only grow.  One fd per CPU, opened when a crowded domain
first asks (the scheduler then adds a few instructions to each switch on
it), shared by every program of the service, closed with the backend.
"""

import ctypes
import errno
import os
import struct

from ..base import Unsupported
from .counters import PERF_ATTR_SIZE_VER5, PERF_FLAG_FD_CLOEXEC, SYSCALL_NUMBERS, \
    PerfEventAttr, libc_syscall, machine as arch

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
_COUNT = struct.Struct("=Q")        # read_format 0: the value alone
#: Errors that say this process may not count CPU-wide: asked once.
_DENIED = (errno.EACCES, errno.EPERM)


def machine_switches(proc_stat):
    """The ``ctxt`` line of /proc/stat's bytes ``proc_stat``: context
    switches on every CPU since boot."""
    for line in proc_stat.split(b"\n"):
        if line.startswith(b"ctxt "):
            return int(line.split()[1])
    raise Unsupported("no ctxt line in /proc/stat")


class CpuSwitches:
    """Context switches per set of CPUs, per-CPU perf counters where they
    may be opened, else the machine's (``machine_count``: a callable
    returning /proc/stat's ``ctxt``).  ``syscall``, ``read`` and ``close``
    default to libc's syscall(2), os.read and os.close; tests pass fakes."""

    def __init__(self, machine_count, syscall=None, machine=None, read=os.read,
                 close=os.close):
        self._machine_count = machine_count
        self._syscall = syscall
        self._number = SYSCALL_NUMBERS.get(machine or arch())
        self._read, self._close = read, close
        self._fds = {}              # cpu -> fd of its counter
        self._per_cpu = {}          # frozenset of CPUs -> whether counted per CPU
        self._denied = self._number is None

    def count(self, cpus):
        """Switches on ``cpus`` so far (see the module docstring);
        Unsupported where not even /proc/stat can be read."""
        cpus = frozenset(cpus)
        per_cpu = self._per_cpu.get(cpus)
        if per_cpu is None:
            per_cpu = self._per_cpu[cpus] = all(self._opened(cpu) for cpu in sorted(cpus))
        if not per_cpu:
            return self._machine_count()
        total = 0
        for cpu in cpus:
            total += _COUNT.unpack(self._read(self._fds[cpu], _COUNT.size))[0]
        return total

    def _opened(self, cpu):
        """Whether ``cpu`` has a counter (opened now if need be)."""
        if cpu in self._fds:
            return True
        if self._denied:
            return False
        if self._syscall is None:
            self._syscall = libc_syscall()
        attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=PERF_ATTR_SIZE_VER5,
                             config=PERF_COUNT_SW_CONTEXT_SWITCHES)
        fd = self._syscall(ctypes.c_long(self._number), ctypes.byref(attr), ctypes.c_int(-1),
                           ctypes.c_int(cpu), ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
        if fd < 0:
            # Denied: never again (the privilege will not come); any other
            # error (a CPU off-line: ENODEV) for this set of CPUs only.
            self._denied = ctypes.get_errno() in _DENIED
            return False
        self._fds[cpu] = fd
        return True

    def close(self):
        for fd in self._fds.values():
            try:
                self._close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._per_cpu.clear()
