"""Space sharing's LLC counters (balance/llc.py): the meter on the real
perf_event_open code with a fake system call and recorded group reads
(this VM has no PMU), then on the real kernel -- off on this machine,
without a leaked fd, and counting a real process's threads with software
events standing in for the hardware ones."""

import errno
import os
import subprocess
import sys

import pytest

from support.helpers import REPO
from support.processes import wait_until
from support.counters import FakeSyscall, Reads, SoftwareEvents, group_read
from support.sharing import StandIn, Thread
from tumbler.balance.llc import LlcMeter
from tumbler.balance.sharing import SpaceSharing
from tumbler.engine.share import MAX_QOS
from tumbler.platform.illumos.backend import IllumosBackend
from tumbler.platform.linux import counters as perf
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.base import Unsupported

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")


class Program(StandIn):
    """A stand-in controller whose threads are keyed (pid, tid), as the
    real one's are."""

    def __init__(self, pid, tids, domains=({0}, {1})):
        super().__init__(domains, [])
        self.threads = {(pid, tid): Thread(1.0) for tid in tids}


class Recorded:
    """A backend whose program_counters are the real Linux ProgramCounters
    on a fake system call (one per PID: fds, errors) and recorded reads."""

    def __init__(self, errors=None):
        self.errors = errors or {}
        self.reads = Reads()
        self.closed = []
        self.syscalls = {}

    def program_counters(self, pid):
        syscall = self.syscalls[pid] = FakeSyscall(*self.errors.get(pid, ()))
        syscall.next_fd = 100 * pid
        return perf.ProgramCounters(pid, syscall=syscall, read=self.reads,
                                    close=self.closed.append)


@pytest.fixture(autouse=True)
def x86_64(monkeypatch):
    """The fake system calls stand in for x86_64's, wherever the test runs."""
    monkeypatch.setattr(perf, "machine", lambda: "x86_64")


def test_the_rate_is_misses_per_cycle_over_each_interval():
    backend = Recorded()
    meter = LlcMeter(backend)
    program = Program(7, [8, 9])
    # Leaders: fd 701 for thread 8, 703 for thread 9 (members 702, 704).
    backend.reads.queued[701] = [group_read(1_000_000, 2_000, 5, 5),
                                 group_read(3_000_000, 5_000, 9, 9)]
    backend.reads.queued[703] = [group_read(1_000_000, 1_000, 5, 5),
                                 group_read(2_000_000, 1_000, 9, 9)]
    assert meter.rate(7, program) is None               # no interval yet
    assert meter.rate(7, program) == pytest.approx(3_000 / 3_000_000)
    assert meter.rates[7] == pytest.approx(0.001)
    assert meter.rate(7, program) is None               # no cycles since: nothing ran
    assert meter.rates[7] is None


def test_threads_follow_the_controller_and_leaving_closes_every_fd():
    backend = Recorded()
    meter = LlcMeter(backend)
    program = Program(7, [8, 9])
    backend.reads.queued.update({701: [group_read(10, 1, 1, 1)],
                                 703: [group_read(10, 1, 1, 1)],
                                 705: [group_read(10, 1, 1, 1)]})
    meter.rate(7, program)
    assert [call["tid"] for call in backend.syscalls[7].calls] == [8, 8, 9, 9]
    del program.threads[(7, 8)]                          # exited
    program.threads[(7, 10)] = Thread(None)              # born
    meter.rate(7, program)
    assert sorted(backend.closed) == [701, 702]
    assert [call["tid"] for call in backend.syscalls[7].calls][4:] == [10, 10]
    meter.forget(7)
    assert sorted(backend.closed) == [701, 702, 703, 704, 705, 706]
    meter.forget(7)                                      # twice is harmless
    assert len(backend.closed) == 6


def test_no_counters_on_the_machine_turns_them_off_once():
    backend = Recorded({7: [errno.ENOENT]})
    said = []
    meter = LlcMeter(backend, said.append)
    assert meter.rate(7, Program(7, [8])) is None
    assert meter.rate(9, Program(9, [10])) is None      # not asked again
    assert 9 not in backend.syscalls
    assert meter.off.startswith("no hardware counters: ") and "No such file" in meter.off
    assert said == ["space sharing: LLC counters off, the model stands on demand alone: "
                    + meter.off]


def test_no_privilege_turns_them_off_and_names_it():
    backend = Recorded({7: [None, errno.EACCES]})      # the member is refused
    said = []
    meter = LlcMeter(backend, said.append)
    assert meter.rate(7, Program(7, [8])) is None
    assert "CAP_PERFMON" in meter.off and len(said) == 1
    assert backend.closed == [701]                       # the leader that opened


def test_running_out_of_fds_turns_one_program_off():
    # Program 7's second thread hits EMFILE; program 9 is fine.
    backend = Recorded({7: [None, None, errno.EMFILE]})
    said = []
    meter = LlcMeter(backend, said.append)
    backend.reads.queued[701] = [group_read(100, 1, 1, 1)]     # read once more on close
    backend.reads.queued[901] = [group_read(100, 1, 1, 1), group_read(300, 3, 2, 2)]
    a, b = Program(7, [8, 80]), Program(9, [10])
    assert meter.rate(7, a) is None
    assert sorted(backend.closed) == [701, 702]          # its first group, closed
    assert len(said) == 1 and "PID 7" in said[0] and "Too many open files" in said[0]
    assert meter.rate(7, a) is None and len(said) == 1   # not tried again, not said again
    assert len(backend.syscalls[7].calls) == 3
    assert meter.rate(9, b) is None and meter.rate(9, b) == pytest.approx(2 / 200)
    assert meter.off is None


def test_recorded_counters_move_the_partition_as_the_model_says():
    """Two programs of 8 busy threads on 8 CPUs: on demand alone 4 + 4;
    once A shows 0.002 LLC misses per cycle and B none, max-qos gives B
    the CPUs (the engine's model: A gains little from more, its misses
    queue at memory) -- the same answer as the engine on these rates."""
    backend = Recorded()
    said = []
    sharing = SpaceSharing(MAX_QOS, log=said.append, counters=LlcMeter(backend, said.append))
    cpus = [{cpu} for cpu in range(8)]
    a = Program(1, range(10, 18), cpus)
    b = Program(2, range(20, 28), cpus)
    # Every read 10,000 cycles more; A's threads 20 misses more, B's none.
    for leader in range(101, 117, 2):
        backend.reads.queued[leader] = [group_read(10_000 * k, 20 * k, 1, 1) for k in range(9)]
    for leader in range(201, 217, 2):
        backend.reads.queued[leader] = [group_read(10_000 * k, 0, 1, 1) for k in range(9)]
    sharing.join(1, a, name="A")
    sharing.join(2, b, name="B")
    assert len(a.cpus) == len(b.cpus) == 4
    for now in (10.0, 12.0, 14.0):                       # two agreeing checks
        sharing.tick(now)
    assert (len(a.cpus), len(b.cpus)) == (1, 7)
    assert "A CPUs 0 (demand 8.0, LLC misses/cycle 0.0020" in said[-1]
    assert "B CPUs 1-7 (demand 8.0, LLC misses/cycle 0.0000" in said[-1]
    sharing.leave(1)
    assert set(backend.closed) >= set(range(101, 117))
    sharing.close()
    assert set(backend.closed) >= set(range(201, 217))


def test_illumos_offers_no_counters_per_program(tmp_path):
    with pytest.raises(Unsupported, match="libpctx, which stops the process"):
        IllumosBackend.program_counters(object.__new__(IllumosBackend), 1)


# -- this machine ---------------------------------------------------------------

def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


@linux
def test_on_this_machine_counters_count_or_are_off_without_a_leak(monkeypatch):
    monkeypatch.undo()                                   # the real machine, whatever it is
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              cwd=REPO)
    try:
        before = open_fds()
        backend = LinuxBackend("/")
        said = []
        meter = LlcMeter(backend, said.append)
        program = Program(worker.pid, backend.thread_ids(worker.pid))
        first = meter.rate(worker.pid, program)
        second = meter.rate(worker.pid, program)
        if perf.probe_support() is None:                 # a machine with a PMU
            assert first is None and second is not None and meter.off is None
        else:                                            # this VM: ENOENT
            assert first is second is None
            reason = perf.probe_support()                # the same errno, tumbler's own thread
            assert meter.off.split(": ")[-1] == reason.split(": ")[-1] and len(said) == 1
            assert "process %d" % worker.pid in meter.off
        meter.close()
        backend.close()
        assert open_fds() == before
    finally:
        worker.kill()
        worker.wait()


class SoftwareBackend:
    """The real kernel, with software events in place of the PMU's."""

    def program_counters(self, pid):
        return perf.ProgramCounters(pid, syscall=SoftwareEvents())


@linux
def test_a_real_programs_threads_are_counted_as_they_come_and_go(monkeypatch):
    monkeypatch.undo()
    code = ("import threading, sys\n"
            "def spin(stop):\n"
            "    while not stop.is_set(): pass\n"
            "stop = threading.Event()\n"
            "t = threading.Thread(target=spin, args=(stop,)); t.start()\n"
            "print(t.native_id, flush=True); sys.stdin.readline(); stop.set(); t.join()\n"
            "print('joined', flush=True); sys.stdin.readline()\n")
    worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        spinner = int(worker.stdout.readline())
        backend = LinuxBackend("/")
        meter = LlcMeter(SoftwareBackend())
        program = Program(worker.pid, backend.thread_ids(worker.pid))
        assert meter.rate(worker.pid, program) is None
        counted = meter._programs[worker.pid]
        if meter.off is not None or counted.counters is None:
            pytest.skip("software events refused here: %s" % meter.off)
        assert counted.tids == set(backend.thread_ids(worker.pid))
        # cpu-clock in place of cycles: the spinner's ns grow between reads.
        _, ns_before = counted.counters.read()
        wait_until(lambda: counted.counters.read()[1] >= ns_before + 10_000_000,
                   timeout=20, what="the spinner to run 10 ms")
        assert meter.rate(worker.pid, program) is not None
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert worker.stdout.readline().strip() == "joined"
        del program.threads[(worker.pid, spinner)]
        _, kept = counted.counters.read()
        meter.rate(worker.pid, program)
        assert spinner not in counted.tids
        assert counted.counters.read()[1] >= kept        # the gone thread's ns kept
        meter.close()
        backend.close()
    finally:
        worker.kill()
        worker.wait()


def test_counters_stop_short_of_the_file_limit():
    """Two fds per thread, at most fd_budget in all: the program that would
    pass it goes on without counters, its fds closed; the others keep theirs."""
    backend = Recorded()
    said = []
    meter = LlcMeter(backend, said.append, fd_budget=6)
    for leader in (701, 703, 901, 903):
        backend.reads.queued[leader] = [group_read(100, 1, 1, 1)]
    assert meter.rate(7, Program(7, [8, 80])) is None          # 4 fds
    assert meter.rate(9, Program(9, [10, 11])) is None         # 4 more would be 8
    assert len(backend.syscalls[9].calls) == 2                  # one group, then stopped
    assert sorted(backend.closed) == [901, 902]
    assert len(said) == 1 and "PID 9" in said[0] and "file limit" in said[0]
    assert meter.off is None and meter._programs[7].counters is not None
    meter.close()
    assert sorted(backend.closed) == [701, 702, 703, 704, 901, 902]


def test_the_default_fd_budget_is_a_share_of_the_soft_limit():
    import resource
    from tumbler.balance.llc import FD_SHARE
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = LlcMeter(Recorded()).fd_budget
    assert budget == (float("inf") if soft == resource.RLIM_INFINITY else int(soft * FD_SHARE))
