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
The counter is opened by _steady.c, else (the C module not built) through
ctypes (``ctypes_open``): its import costs ~4 ms of CPU beside ``exec``'s
command.
"""

import errno
import os
import sys

from ..base import Unsupported

try:
    from ._steady import open_cpu_switches
except ImportError:         # not built (optional): through ctypes
    open_cpu_switches = None

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
_COUNT_SIZE = 8                     # read_format 0: the value alone, a native u64
#: Errors that say this process may never count CPU-wide (no privilege,
#: no perf events): asked once.
_NEVER = (errno.EACCES, errno.EPERM, errno.ENOSYS)


def machine_switches(proc_stat):
    """The ``ctxt`` line of /proc/stat's bytes ``proc_stat``: context
    switches on every CPU since boot."""
    for line in proc_stat.split(b"\n"):
        if line.startswith(b"ctxt "):
            return int(line.split()[1])
    raise Unsupported("no ctxt line in /proc/stat")


def ctypes_open(cpu, syscall=None, machine=None):
    """_steady.open_cpu_switches through ctypes: the fd of a counter of
    every context switch on ``cpu``; OSError.  ``syscall`` (libc's
    syscall(2)) and ``machine`` (os.uname's) are for tests."""
    from .counters import PerfEventAttr, PERF_ATTR_SIZE_VER5, perf_event_open
    attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=PERF_ATTR_SIZE_VER5,
                         config=PERF_COUNT_SW_CONTEXT_SWITCHES)
    return perf_event_open(attr, -1, cpu, -1, syscall, machine)


class CpuSwitches:
    """Context switches per set of CPUs, per-CPU perf counters where they
    may be opened, else the machine's (``machine_count``: a callable
    returning /proc/stat's ``ctxt``).  ``open_counter`` (cpu -> fd, or
    OSError), ``read`` and ``close`` default to _steady's (else
    ``ctypes_open``), os.read and os.close; tests pass fakes."""

    def __init__(self, machine_count, open_counter=None, read=os.read, close=os.close):
        self._machine_count = machine_count
        self._open_counter = open_counter or open_cpu_switches or ctypes_open
        self._read, self._close = read, close
        self._fds = {}              # cpu -> fd of its counter
        self._per_cpu = {}          # frozenset of CPUs -> whether counted per CPU
        self._never = False         # no counter may ever be opened

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
            total += int.from_bytes(self._read(self._fds[cpu], _COUNT_SIZE), sys.byteorder)
        return total

    def _opened(self, cpu):
        """Whether ``cpu`` has a counter (opened now if need be)."""
        if cpu in self._fds:
            return True
        if self._never:
            return False
        try:
            self._fds[cpu] = self._open_counter(cpu)
        except OSError as exc:
            # Denied: never again (the privilege will not come); any other
            # error (a CPU off-line: ENODEV) for this set of CPUs only.
            self._never = exc.errno in _NEVER
            return False
        return True

    def close(self):
        for fd in self._fds.values():
            try:
                self._close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._per_cpu.clear()
