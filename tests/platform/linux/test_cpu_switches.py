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


@linux
def test_a_cpus_count_covers_the_switches_made_on_it_and_no_more_than_the_machines():
    if os.geteuid() != 0:
        pytest.skip("counting a CPU's switches needs CAP_PERFMON; the suite runs as root")
    cpu = min(os.sched_getaffinity(0))
    backend = LinuxBackend("/")
    try:
        machine_before = machine_switches(open("/proc/stat", "rb").read())
        before = backend.cpu_switches({cpu})
        yielded = yielders_on(cpu)
        after = backend.cpu_switches({cpu})
        machine_after = machine_switches(open("/proc/stat", "rb").read())
    finally:
        backend.close()
    # Two processes yielding to each other on one CPU: thousands of switches.
    assert yielded >= 4000
    assert yielded <= after - before <= machine_after - machine_before


def test_where_a_cpus_counter_may_not_be_opened_the_machines_count_is_taken():
    machine = iter([500, 700, 900])
    denied = FakeSyscall(errno.EACCES)
    switches = CpuSwitches(lambda: next(machine), syscall=denied, machine="x86_64")
    assert switches.count({0, 1}) == 500
    assert switches.count({2}) == 700               # denied once: not asked again
    assert len(denied.calls) == 1
    call = denied.calls[0]
    assert (call["type"], call["config"], call["tid"], call["cpu"]) == (1, 3, -1, 0)
    # A CPU that cannot be counted (off-line) makes its set the machine's,
    # for good -- a set's counts only grow -- and other sets stay per CPU.
    reads = Reads()
    offline = FakeSyscall(None, errno.ENODEV, None)
    switches = CpuSwitches(lambda: next(machine), syscall=offline, machine="x86_64",
                           read=reads, close=lambda fd: None)
    reads.queued = {101: [(40).to_bytes(8, "little")], 102: [(2).to_bytes(8, "little")]}
    assert switches.count({0, 1}) == 900
    assert switches.count({0}) == 40
    assert switches.count({0, 2}) == 42
    offline.errors = [None]
    with pytest.raises(StopIteration):          # still the machine's: no fourth count
        switches.count({0, 1})


def test_an_unknown_machine_counts_the_whole_machine():
    switches = CpuSwitches(lambda: 7, syscall=FakeSyscall(), machine="sparc64")
    assert switches.count({0}) == 7


def test_the_machines_count_is_the_ctxt_line_of_proc_stat():
    assert machine_switches(b"cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
                            b"intr 5 0\nctxt 123456\nbtime 1\n") == 123456
    with pytest.raises(Unsupported):
        machine_switches(b"cpu0 1 2 3 4 5 6 7 8\n")
