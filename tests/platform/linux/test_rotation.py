"""Threads asleep read in rotation (tumbler/platform/linux/rotation.py,
issue 47): a round reads the threads that ran and a turn's share of the
sleepers; a sleeper that runs is counted in full in the round after, its
turn or not; the C module and its Python twin answer alike.  On real
threads of a child process, asleep on events, and on schedstat-like files."""

import os
import subprocess
import sys
import textwrap
from array import array

import pytest

from support.helpers import wait_until
from tumbler.platform.linux import rotation
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.linux.rotation import SLEEPER_TURNS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SLEEPERS = 40

#: N threads asleep on events; "burn I MS" makes thread I run MS of CPU
#: time (its own clock), then sleep again, and prints "done".
CHILD = textwrap.dedent("""
    import sys, threading, time
    n = int(sys.argv[1])
    wake = [threading.Event() for _ in range(n)]
    done = threading.Event()
    ask = [0.0]
    tids = [None] * n
    def sleeper(i):
        tids[i] = threading.get_native_id()
        while True:
            wake[i].wait()
            wake[i].clear()
            end = time.thread_time() + ask[0]
            while time.thread_time() < end:
                pass
            done.set()
    for i in range(n):
        threading.Thread(target=sleeper, args=(i,), daemon=True).start()
    while None in tids:
        time.sleep(0.01)
    print(" ".join(map(str, tids)), flush=True)
    for line in sys.stdin:
        _, i, ms = line.split()
        ask[0] = int(ms) / 1000.0
        done.clear()
        wake[int(i)].set()
        done.wait()
        print("done", flush=True)
""")


@pytest.fixture
def sleepers():
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(SLEEPERS)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        tids = [int(t) for t in proc.stdout.readline().split()]
        wait_until(lambda: len(os.listdir("/proc/%d/task" % proc.pid)) == SLEEPERS + 1,
                   "the sleepers to start")
        yield proc, tids
    finally:
        proc.kill()
        proc.wait()


def c_backend():
    backend = LinuxBackend()
    if backend.sampler._c_read_columns is None:
        pytest.skip("the full rounds read columns only with the C module built")
    return backend


def rotating(backend, pid):
    """Sample until the threads are read as columns in rotation (the first
    reads read every thread; a thread counts as asleep once a read finds
    it unchanged): the Rotation."""
    for _ in range(6):
        backend.sample(pid)
        found = backend.sampler._rotations.get(pid)
        if found is not None and found.process_ns is not None and not any(found.moved):
            return found
    pytest.fail("the sleepers were never read in rotation")


def test_threads_asleep_are_read_one_round_in_sleeper_turns(sleepers):
    """All asleep: each round reads a turn's share, and SLEEPER_TURNS
    rounds read every thread exactly once -- a quarter of the reads of
    reading them all every round."""
    proc, _ = sleepers
    backend = c_backend()
    found = rotating(backend, proc.pid)
    threads = SLEEPERS + 1
    per_round = []
    for _ in range(SLEEPER_TURNS):
        before = found.reads
        backend.sample(proc.pid)
        assert backend.sampler._rotations[proc.pid] is found
        per_round.append(found.reads - before)
    assert sum(per_round) == threads, per_round
    assert max(per_round) <= -(-threads // SLEEPER_TURNS), per_round


def test_a_sleeper_that_runs_is_counted_in_full_in_the_next_round_turn_or_not(sleepers):
    """A sleeper whose turn it is not runs 150 ms: the process's CPU time
    says someone not read ran, every thread is read again, and the round's
    sample has all of its run time -- not a turn later."""
    proc, tids = sleepers
    backend = c_backend()
    found = rotating(backend, proc.pid)
    kept = backend.sampler._column_sets[proc.pid]
    before = backend.sample(proc.pid)
    reads = found.reads
    # A sleeper the next round's turn does not read.
    tid = next(t for i, t in enumerate(kept.tids)
               if t in tids and i % SLEEPER_TURNS != found.turn)
    proc.stdin.write("burn %d 150\n" % tids.index(tid))
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"
    after = backend.sample(proc.pid)
    assert after.threads[tid].run_ns - before.threads[tid].run_ns >= 150_000_000
    assert found.reads - reads >= SLEEPERS + 1        # the check read them all


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_a_rotated_read_reads_the_moved_and_the_turns_threads_only(implementation,
                                                                  schedstat_files, task_dir):
    """``read_columns`` with ``moved``: thread i is read if it moved at its
    last read or i % turns == turn; the others keep the values they had;
    the answer says what the read threads gained and how many were read.
    The C module and the Python twin alike."""
    if implementation == "c":
        from tumbler.platform.linux import threads
        read = threads._c_read_columns
        if read is None:
            pytest.skip("the C module is not built")
    else:
        read = rotation.read_columns
    now_run = [100, 200, 300, 400, 500, 600]
    fds = array("i", schedstat_files(["%d %d 1\n" % (r, r // 10) for r in now_run]))
    run = array("q", [100, 150, 300, 350, 500, 600])         # the last read's values
    lat = array("q", [7] * 6)
    moved = array("b", [0, 1, 0, 0, 0, 1])
    now, gained, count, running = read(task_dir(6), fds, run, lat, True, moved, 3, 1)
    # Read: 1 and 5 (moved), 1 and 4 (turn 1 of 3): 1, 4, 5; 1 moved again.
    assert count == 3 and running == 1
    assert gained == (200 - 150) + (500 - 500) + (600 - 600)
    assert list(run) == [100, 200, 300, 350, 500, 600]      # 3 not read: its last value
    assert list(lat) == [7, 20, 7, 7, 50, 60]
    assert list(moved) == [0, 1, 0, 0, 0, 0]
    assert read(task_dir(6), fds, run, lat) is not None             # without: every thread
    assert list(lat) == [r // 10 for r in now_run]
    assert read(task_dir(7), fds, run, lat, True, moved, 3, 0) is None   # a thread more
    with pytest.raises(ValueError):
        read(task_dir(6), fds, run, lat, True, moved, 3, 3)


@pytest.fixture
def schedstat_files(tmp_path):
    fds = []

    def make(texts):
        for text in texts:
            path = tmp_path / ("schedstat%d" % len(fds))
            path.write_text(text)
            fds.append(os.open(path, os.O_RDONLY))
        return fds[-len(texts):]
    yield make
    for fd in fds:
        os.close(fd)
