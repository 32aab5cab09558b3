"""Backend.cpu_switches on Linux (platform/linux/switches.py): per-CPU
perf software counters counting real switches, /proc/stat's ``ctxt`` where
they may not be opened, and a set of CPUs that keeps its source."""

import errno
import os
import signal
import sys
import time

import pytest

from support.counters import FakeSyscall, Reads
from tumbler.platform.base import Unsupported
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.linux.switches import CpuSwitches, machine_switches

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def nonvoluntary_switches(path):
    with open(path) as f:
        return int(f.read().split("nonvoluntary_ctxt_switches:")[1].split()[0])


def yielders_on(cpu, count=2, switches=4000, seconds=10.0):
    """Fork ``count`` processes pinned to ``cpu`` that sched_yield to each
    other until they have been switched ``switches`` times between them
    (however busy the machine, not for a fixed time; ``seconds`` at most);
    their nonvoluntary switches once stopped."""
    pids = []
    # Born on the CPU (a child that moved there would be switched once
    # elsewhere, by the migration).
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:                        # the child: no pytest beyond this
                try:
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        os.sched_yield()
                finally:
                    os._exit(0)
            pids.append(pid)
    finally:
        os.sched_setaffinity(0, mask)
    statuses = ["/proc/%d/status" % pid for pid in pids]
    end = time.monotonic() + seconds
    while (sum(map(nonvoluntary_switches, statuses)) < switches
           and time.monotonic() < end):
        time.sleep(0.01)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    switched = 0
    for status in statuses:
        # Read before reaping: a zombie's status still counts its switches.
        while True:
            with open(status) as f:
                if "State:\tZ" in f.read():
                    break
            time.sleep(0.01)
        switched += nonvoluntary_switches(status)
    for pid in pids:
        os.waitpid(pid, 0)
    return switched


def _openers():
    """The ways a CPU's counter is opened: _steady.c's (when built) and
    ctypes' (when it is not)."""
    from tumbler.platform.linux import switches
    openers = [pytest.param(switches.ctypes_open, id="ctypes")]
    if switches.open_cpu_switches is not None:
        openers.insert(0, pytest.param(switches.open_cpu_switches, id="c"))
    return openers


@linux
@pytest.mark.parametrize("opener", _openers())
def test_a_cpus_count_covers_the_switches_made_on_it_and_no_more_than_the_machines(opener):
    if os.geteuid() != 0:
        pytest.skip("counting a CPU's switches needs CAP_PERFMON; the suite runs as root")
    cpu = min(os.sched_getaffinity(0))
    backend = LinuxBackend("/")
    try:
        backend._switches = CpuSwitches(
            lambda: machine_switches(open("/proc/stat", "rb").read()), open_counter=opener)
        machine_before = machine_switches(open("/proc/stat", "rb").read())
        before = backend.cpu_switches({cpu})
        yielded = yielders_on(cpu)
        after = backend.cpu_switches({cpu})
        machine_after = machine_switches(open("/proc/stat", "rb").read())
        assert backend._switches._fds, "the machine's count was taken, not the CPU's"
    finally:
        backend.close()
    # Two processes yielding to each other on one CPU: thousands of switches.
    assert yielded >= 4000
    assert yielded <= after - before <= machine_after - machine_before


@linux
def test_the_backend_opens_counters_with_the_c_module_where_it_was_built():
    from tumbler.platform.linux import switches
    if switches.open_cpu_switches is None:
        pytest.skip("_steady.c was not built")
    backend = LinuxBackend("/")
    try:
        backend.cpu_switches({min(os.sched_getaffinity(0))})
        assert backend._switches._open_counter is switches.open_cpu_switches
    finally:
        backend.close()


class FakeOpener:
    """open_counter that records the CPUs asked for: fails with ``errors``
    (one errno per call, None = succeed), else hands out fds from 101."""

    def __init__(self, *errors):
        self.errors = list(errors)
        self.cpus = []
        self.next_fd = 100

    def __call__(self, cpu):
        self.cpus.append(cpu)
        code = self.errors.pop(0) if self.errors else None
        if code is not None:
            raise OSError(code, os.strerror(code))
        self.next_fd += 1
        return self.next_fd


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.ENOSYS])
def test_where_a_cpus_counter_may_never_be_opened_the_machines_count_is_taken(code):
    machine = iter([500, 700])
    denied = FakeOpener(code)
    switches = CpuSwitches(lambda: next(machine), open_counter=denied)
    assert switches.count({0, 1}) == 500
    assert switches.count({2}) == 700               # denied once: not asked again
    assert denied.cpus == [0]


def test_a_cpu_that_cannot_be_counted_makes_its_set_the_machines_for_good():
    # A CPU that cannot be counted (off-line) makes its set the machine's,
    # for good -- a set's counts only grow -- and other sets stay per CPU.
    machine = iter([900])
    reads = Reads()
    offline = FakeOpener(None, errno.ENODEV, None)
    switches = CpuSwitches(lambda: next(machine), open_counter=offline,
                           read=reads, close=lambda fd: None)
    reads.queued = {101: [(40).to_bytes(8, "little")], 102: [(2).to_bytes(8, "little")]}
    assert switches.count({0, 1}) == 900
    assert switches.count({0}) == 40
    assert switches.count({0, 2}) == 42
    assert offline.cpus == [0, 1, 2]
    offline.errors = [None]
    with pytest.raises(StopIteration):          # still the machine's: no fourth count
        switches.count({0, 1})


def test_ctypes_opens_a_software_context_switch_counter_of_every_task_on_the_cpu():
    from tumbler.platform.linux.switches import ctypes_open
    syscall = FakeSyscall(None, errno.EACCES)
    assert ctypes_open(3, syscall=syscall, machine="x86_64") == 101
    call = syscall.calls[0]
    assert (call["number"], call["type"], call["config"], call["read_format"], call["flags"],
            call["tid"], call["cpu"], call["group_fd"], call["open_flags"]) == \
        (298, 1, 3, 0, 0, -1, 3, -1, 1 << 3)
    with pytest.raises(OSError) as failed:
        ctypes_open(0, syscall=syscall, machine="aarch64")
    assert failed.value.errno == errno.EACCES
    assert syscall.calls[1]["number"] == 241
    with pytest.raises(OSError) as failed:          # an unknown machine
        ctypes_open(0, syscall=syscall, machine="sparc64")
    assert failed.value.errno == errno.ENOSYS and len(syscall.calls) == 2


def test_an_unknown_machine_counts_the_whole_machine():
    from tumbler.platform.linux.switches import ctypes_open
    switches = CpuSwitches(lambda: 7, open_counter=lambda cpu: ctypes_open(
        cpu, syscall=FakeSyscall(), machine="sparc64"))
    assert switches.count({0}) == 7


def test_the_machines_count_is_the_ctxt_line_of_proc_stat():
    assert machine_switches(b"cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
                            b"intr 5 0\nctxt 123456\nbtime 1\n") == 123456
    with pytest.raises(Unsupported):
        machine_switches(b"cpu0 1 2 3 4 5 6 7 8\n")
