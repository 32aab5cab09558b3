"""LinuxBackend.sample on real threads: the batched steady-state path.

A round calls sample and then process_state; when the thread count (the
link count of /proc/PID/task) is unchanged, sample reads the kept-open
schedstat fds of the threads it knew without listing /proc/PID/task, in
one batch.  These tests
check that the batch agrees with the per-thread path, and that threads
exiting and starting between rounds are neither kept nor missed for long.
"""

import os
import subprocess
import sys
import textwrap
import time

from array import array

import pytest

from support.helpers import wait_until
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.linux.threads import FD_FENCE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

C_MODULE_MISSING = ("tumbler.platform.linux._steady was not built: scripts/setup.sh "
                    "builds it (it needs gcc and Python's headers, python3-dev)")

CHILD = textwrap.dedent("""
    import sys, threading, time
    threads = []
    def worker(stop, ready):
        ready.append(threading.get_native_id())
        x = 0
        while not stop.is_set():
            for _ in range(20000):
                x += 1
            time.sleep(0.001)
    def start():
        stop, ready = threading.Event(), []
        t = threading.Thread(target=worker, args=(stop, ready))
        t.start()
        while not ready:
            time.sleep(0.001)
        threads.append((t, stop, ready[0]))
        return ready[0]
    for _ in range(3):
        start()
    print("ready", *[tid for _, _, tid in threads], flush=True)
    for line in sys.stdin:
        if line.strip() == "swap":           # the oldest thread exits, a new one starts
            t, stop, tid = threads.pop(0)
            stop.set()
            t.join()
            print("swapped", tid, start(), flush=True)
        elif line.strip() == "more":         # one more thread
            print("started", start(), flush=True)
        elif line.strip() == "less":         # the newest thread exits
            t, stop, tid = threads.pop()
            stop.set()
            t.join()
            print("stopped", tid, flush=True)
""")


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, universal_newlines=True)
    words = proc.stdout.readline().split()
    assert words[0] == "ready"
    yield proc, [int(w) for w in words[1:]]
    proc.kill()
    proc.wait()


def reaped(pid, tid):
    """Wait until an exited thread is gone from /proc: pthread_join returns
    when the thread has exited, a moment before the kernel releases it."""
    wait_until(lambda: not os.path.exists("/proc/%d/task/%d" % (pid, tid)),
               "thread %d to be released" % tid)


def round_sample(backend, pid):
    """What the controller does each round: sample, then process_state."""
    sample = backend.sample(pid)
    backend.process_state(pid)
    return sample


@pytest.fixture(params=["c", "python"])
def steady(child, request):
    """(child process, its worker TIDs, a LinuxBackend past two rounds of
    it: every schedstat file open, the thread count known).  Each test runs
    with the steady sample in C (``_steady``) and in Python."""
    proc, workers = child
    backend = LinuxBackend()
    if request.param == "python":
        backend.sampler._c_steady_times = backend.sampler._c_read_columns = None
    else:
        assert backend.sampler._c_steady_times is not None, C_MODULE_MISSING
        assert backend.sampler._c_read_columns is not None, C_MODULE_MISSING
    round_sample(backend, proc.pid)
    round_sample(backend, proc.pid)
    yield proc, workers, backend
    backend.close()


def test_batched_sample_agrees_with_the_per_thread_path(steady):
    proc, workers, backend = steady
    calls = []
    sampler = backend.sampler
    for name in ("thread_ids", "_read_times"):
        original = getattr(sampler, name)
        setattr(sampler, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    batched = round_sample(backend, proc.pid)       # steady: fds open, count known
    assert calls == []          # neither listed nor read thread by thread
    careful = backend.sample(proc.pid, detail=True)  # per thread, stat read too
    assert "thread_ids" in calls and "_read_times" in calls
    assert set(batched.threads) == set(careful.threads) == {proc.pid, *workers}
    for tid, times in batched.threads.items():
        other = careful.threads[tid]
        assert (times.tid, times.start, times.name) == (other.tid, other.start, other.name)
        assert 0 < times.run_ns <= other.run_ns      # read a moment earlier
        assert times.lat_ns is not None and times.lat_ns <= other.lat_ns
    # Same numbers as the kernel's own file.
    with open("/proc/%d/task/%d/schedstat" % (proc.pid, workers[0])) as f:
        run_now = int(f.read().split()[0])
    assert batched.threads[workers[0]].run_ns <= run_now


def test_a_steady_sample_reads_columns_that_give_the_batched_mapping(steady):
    """With the C module, a sample of the threads of the sample before
    reads them as columns (platform/columns.py: one C call, no object per
    thread); as a mapping it gives what the batched path builds.  A thread
    found renamed, or gone, and the next sample reads thread by thread."""
    from tumbler.platform.columns import ThreadColumns
    proc, workers, backend = steady
    sampler = backend.sampler
    if sampler._c_steady_times is None:
        pytest.skip("samples are columns only with the C module")
    sample = round_sample(backend, proc.pid)
    assert type(sample.threads) is ThreadColumns
    batched = sampler._steady_sample(proc.pid, list(sample.threads))
    assert type(batched) is dict and list(batched) == list(sample.threads)
    assert len(sample.threads) == len(workers) + 1 and workers[0] in sample.threads
    for tid, times in sample.threads.items():
        other = batched[tid]
        assert type(times) is type(other)
        assert times._replace(run_ns=0, lat_ns=0) == other._replace(run_ns=0, lat_ns=0)
        assert 0 < times.run_ns <= other.run_ns and times.lat_ns <= other.lat_ns
    # Renamed since (as thread_name finds): read anew, the new name given.
    files = sampler._files[(proc.pid, workers[1])]
    real, files.name = files.name, "old name"
    assert backend.thread_name(proc.pid, workers[1]) == real
    again = round_sample(backend, proc.pid)
    assert type(again.threads) is dict and again.threads[workers[1]].name == real
    assert type(round_sample(backend, proc.pid).threads) is ThreadColumns
    # A thread exits and another starts (the count unchanged): the gone
    # one's read fails -- at its turn, if it slept (linux/rotation.py) --
    # and that sample is read thread by thread, the gone one left out.
    from tumbler.platform.linux.rotation import SLEEPER_TURNS
    words = send(proc, "swap")
    reaped(proc.pid, int(words[1]))
    for _ in range(SLEEPER_TURNS):
        after = round_sample(backend, proc.pid)
        if type(after.threads) is dict:
            break
    assert type(after.threads) is dict and int(words[1]) not in after.threads


def test_thread_replaced_between_rounds_is_dropped_and_the_new_one_found(steady):
    proc, workers, backend = steady
    proc.stdin.write("swap\n")
    proc.stdin.flush()
    words = proc.stdout.readline().split()
    assert words[0] == "swapped"
    gone, new = int(words[1]), int(words[2])
    assert gone == workers[0]
    reaped(proc.pid, gone)
    # Same number of threads as before: the first round after may not list
    # the new thread yet, but never reports the one that exited, and lets go
    # of its file.
    first = round_sample(backend, proc.pid)
    assert gone not in first.threads
    assert (proc.pid, gone) not in backend.sampler._files
    second = round_sample(backend, proc.pid)
    assert set(second.threads) == {proc.pid, new, *workers[1:]}
    third = round_sample(backend, proc.pid)
    assert set(third.threads) == set(second.threads)


def test_a_listing_that_finds_a_replaced_thread_makes_the_next_sample_list_too(steady):
    """discover lists the threads, sees a new one and samples the process: a
    thread replaced one that exited, so the count is the same, but the
    sample must still find the newcomer."""
    proc, workers, backend = steady
    proc.stdin.write("swap\n")
    proc.stdin.flush()
    words = proc.stdout.readline().split()
    gone, new = int(words[1]), int(words[2])
    reaped(proc.pid, gone)
    assert new in backend.thread_ids(proc.pid)
    sample = backend.sample(proc.pid)
    assert new in sample.threads and gone not in sample.threads
    assert proc.pid not in backend.sampler._relist      # and the next one is batched again


def test_exited_process_raises_no_such_process(steady):
    from tumbler.platform.base import NoSuchProcess
    proc, _, backend = steady
    proc.kill()
    proc.wait()
    with pytest.raises(NoSuchProcess):
        backend.sample(proc.pid)


def test_thread_count_is_the_task_directory_link_count(steady):
    proc, workers, backend = steady
    assert backend.thread_count(proc.pid) == len(workers) + 1 \
        == len(os.listdir("/proc/%d/task" % proc.pid))


def test_process_state_is_read_again_only_when_threads_change(steady, monkeypatch):
    """The main thread's stat (zombie? another program?) is re-read when a
    sample finds threads gone or new -- an exec ends every other thread --
    and otherwise at most every STATE_READ_NS."""
    proc, _, backend = steady
    reads = []
    original = backend._read_state
    monkeypatch.setattr(backend, "_read_state", lambda pid: reads.append(pid) or original(pid))
    for _ in range(3):
        round_sample(backend, proc.pid)
    assert reads == []                  # same threads, within a second: the last answer
    proc.stdin.write("swap\n")
    proc.stdin.flush()
    assert proc.stdout.readline().split()[0] == "swapped"
    # A thread gone: read again -- when its read fails, at its turn if it
    # slept (linux/rotation.py).
    from tumbler.platform.linux.rotation import SLEEPER_TURNS
    for _ in range(SLEEPER_TURNS):
        round_sample(backend, proc.pid)
        if reads:
            break
    assert reads == [proc.pid]
    assert backend.process_state(proc.pid, fresh=True) == original(proc.pid)
    monkeypatch.setattr("tumbler.platform.linux.backend.STATE_READ_NS", 0)
    del reads[:]
    round_sample(backend, proc.pid)
    round_sample(backend, proc.pid)
    assert len(reads) == 2              # no answer is recent enough any more


def test_thread_run_ns_reads_the_same_clock_as_sample(steady):
    """Speed balancing's steps read only the threads it pinned."""
    from tumbler.platform.base import Backend
    proc, workers, backend = steady
    before = round_sample(backend, proc.pid)
    run_ns, now = backend.thread_run_ns(proc.pid, workers[:2] + [999999999])
    after = round_sample(backend, proc.pid)
    assert set(run_ns) == set(workers[:2])          # an unknown TID is left out
    assert before.wall_ns <= now <= after.wall_ns
    for tid in workers[:2]:
        assert before.threads[tid].run_ns <= run_ns[tid] <= after.threads[tid].run_ns
    # The generic fallback (a whole sample) agrees on which threads it finds.
    generic, _ = Backend.thread_run_ns(backend, proc.pid, workers[:2] + [999999999])
    assert set(generic) == set(workers[:2])


def send(proc, command):
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().split()


def columns(backend, pid, tids):
    """A reader of ``tids`` and one read of it: (reader, now, run, lat)."""
    reader = backend.columns_reader(pid, tids)
    assert reader is not None
    run, lat = array("q", bytes(8 * len(tids))), array("q", bytes(8 * len(tids)))
    return reader, reader(run, lat), run, lat


def test_columns_reader_reads_what_sample_reads(steady):
    """Quiet rounds read the same numbers, on the same clock, as sample."""
    proc, workers, backend = steady
    before = round_sample(backend, proc.pid)
    tids = list(before.threads)
    reader, now, run, lat = columns(backend, proc.pid, tids)
    after = round_sample(backend, proc.pid)
    assert before.wall_ns <= now <= after.wall_ns
    for i, tid in enumerate(tids):
        assert before.threads[tid].run_ns <= run[i] <= after.threads[tid].run_ns
        assert before.threads[tid].lat_ns <= lat[i] <= after.threads[tid].lat_ns
    assert max(run[i] - before.threads[tid].run_ns for i, tid in enumerate(tids)) > 0 \
        or after.wall_ns - before.wall_ns < 2_000_000       # workers did run meanwhile
    # Another read of the same reader: later numbers.
    again_run, again_lat = array("q", run), array("q", lat)
    assert reader(again_run, again_lat) >= now
    assert all(a >= b for a, b in zip(again_run, run))


def test_columns_reader_is_refused_for_threads_sample_has_not_seen(steady):
    proc, workers, backend = steady
    tids = list(round_sample(backend, proc.pid).threads)
    assert backend.columns_reader(proc.pid, tids[:-1]) is None
    assert backend.columns_reader(proc.pid, tids + [999999999]) is None


def test_columns_reader_says_none_once_threads_change(steady):
    proc, workers, backend = steady
    tids = list(round_sample(backend, proc.pid).threads)
    reader, now, run, lat = columns(backend, proc.pid, tids)
    assert now is not None
    # One exits and another starts: the same count, but the exited one's
    # kept-open file reads as an error.
    # (At its turn, if it slept: linux/rotation.py.)
    from tumbler.platform.linux.rotation import SLEEPER_TURNS
    words = send(proc, "swap")
    reaped(proc.pid, int(words[1]))
    assert None in [reader(run, lat) for _ in range(SLEEPER_TURNS)]
    # The round after drops the exited thread, the one after finds the new
    # one (see test_thread_replaced_between_rounds...).
    round_sample(backend, proc.pid)
    tids = list(round_sample(backend, proc.pid).threads)
    assert int(words[2]) in tids and int(words[1]) not in tids
    reader, now, run, lat = columns(backend, proc.pid, tids)
    assert now is not None
    # One more thread: the count says so.
    send(proc, "more")
    assert reader(run, lat) is None


@pytest.fixture
def read_columns():
    from tumbler.platform.linux import threads
    assert threads._c_read_columns is not None, C_MODULE_MISSING
    return threads._c_read_columns


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_read_columns_fills_both_columns_or_says_none(implementation, read_columns,
                                                       schedstat_file, task_dir):
    from tumbler.platform.linux import rotation
    read = read_columns if implementation == "c" else rotation.read_columns
    fds = array("i", [schedstat_file(b"123 456 7\n"), schedstat_file(b"5 0 1\n")])
    run, lat = array("q", [0, 0]), array("q", [0, 0])
    before = time.monotonic_ns()
    now = read(task_dir(2), fds, run, lat)
    assert before <= now <= time.monotonic_ns()
    assert (list(run), list(lat)) == ([123, 5], [456, 0])
    assert read(task_dir(2), fds, run, lat, False) is not None  # no run time of 0
    assert read(task_dir(3), fds, run, lat) is None             # a thread more
    # A run time of 0, while schedstat is not known to be accounted: None.
    idle = array("i", [fds[0], schedstat_file(b"0 3 1\n")])
    assert read(task_dir(2), idle, run, lat, False) is None
    assert read(task_dir(2), idle, run, lat, True) is not None and list(run) == [123, 0]
    for text in (b"", b"x 1 2\n", b"12\n", b"%d 1 1\n" % 2 ** 63):
        odd = array("i", [fds[0], schedstat_file(text)])
        assert read(task_dir(2), odd, run, lat) is None, text
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    assert read(task_dir(2), array("i", [fds[0], closed]), run, lat) is None


def test_c_read_columns_rejects_bad_arguments(read_columns, schedstat_file, task_dir):
    fds = array("i", [schedstat_file(b"1 2 3\n")])
    task = task_dir(1)
    with pytest.raises(TypeError):
        read_columns(task, fds, array("d", [0.0]), array("q", [0]))      # not int64
    with pytest.raises(TypeError):
        read_columns(task, [fds[0]], array("q", [0]), array("q", [0]))   # fds not an array
    with pytest.raises(ValueError):
        read_columns(task, fds, array("q", [0, 0]), array("q", [0]))     # lengths differ
    with pytest.raises(BufferError):
        read_columns(task, fds, b"\0" * 8, array("q", [0]))             # read-only


# -- the C steady sample on its own: every unusual case answers None ----------

class Files:
    """What _steady reads of threads.ThreadFiles."""

    def __init__(self, schedstat_fd, start=7, name="worker"):
        self.schedstat_fd, self.start, self.name = schedstat_fd, start, name


@pytest.fixture
def steady_times():
    from tumbler.platform.linux import threads
    assert threads._c_steady_times is not None, C_MODULE_MISSING
    return threads._c_steady_times


@pytest.fixture
def schedstat_file(tmp_path):
    """open(text) -> fd of a file holding ``text`` (closed at the end)."""
    fds = []

    def make(text):
        path = tmp_path / ("schedstat%d" % len(fds))
        path.write_bytes(text)
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]
    yield make
    for fd in fds:
        os.close(fd)


def call(steady_times, files, tids, zero_ok=True):
    from tumbler.platform.base import NO_MICROSTATES, ThreadTimes
    return steady_times(files, 42, tids, zero_ok, ThreadTimes, NO_MICROSTATES)


def test_c_steady_sample_builds_the_same_thread_times_as_python(steady_times, schedstat_file):
    from tumbler.platform.base import ThreadTimes
    big = 2 ** 64 - 1
    files = {(42, 1): Files(schedstat_file(b"123 456 7\n"), 11, "a"),
             (42, 2): Files(schedstat_file(b"%d 0 1\n" % big), 12, "b")}
    got = call(steady_times, files, [1, 2])
    assert got == {1: ThreadTimes(tid=1, start=11, name="a", run_ns=123, lat_ns=456),
                   2: ThreadTimes(tid=2, start=12, name="b", run_ns=big, lat_ns=0)}
    assert all(type(times) is ThreadTimes for times in got.values())
    assert got[1].state == "?" and got[1].usr_ns is None and got[1].micro == {}
    # Read from offset 0 every time, like os.pread: the same answer again.
    assert call(steady_times, files, [1, 2]) == got
    assert call(steady_times, files, []) == {}


def test_c_steady_sample_leaves_its_thread_times_to_reference_counting(steady_times,
                                                                       schedstat_file):
    """A ThreadTimes can hold nothing that holds it (no reference cycle):
    the cyclic GC does not track the C-built ones, which the load window
    keeps for rounds (issue 29: 13% of a round at 10,000 threads went to
    collections walking them)."""
    import gc
    files = {(42, 1): Files(schedstat_file(b"123 456 7\n"), 11, "a")}
    got = call(steady_times, files, [1])
    assert got[1] == (1, 11, "a", 123, None, None, 456, None, "?", {})
    assert not gc.is_tracked(got[1])


@pytest.mark.parametrize("text", [b"", b"x 1 2\n", b"12\n", b"1 -2 3\n",
                                  b"%d 1 1\n" % 2 ** 64])
def test_c_steady_sample_answers_none_for_an_odd_read(steady_times, schedstat_file, text):
    files = {(42, 1): Files(schedstat_file(b"5 6 7\n")), (42, 2): Files(schedstat_file(text))}
    assert call(steady_times, files, [1, 2]) is None


def test_c_steady_sample_answers_none_for_threads_it_cannot_read(steady_times, schedstat_file):
    good = Files(schedstat_file(b"5 6 7\n"))
    assert call(steady_times, {(42, 1): good}, [1, 2]) is None            # not known
    for fd in (None, -1):                                                  # read by path / no schedstat
        assert call(steady_times, {(42, 1): good, (42, 2): Files(fd)}, [1, 2]) is None
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    assert call(steady_times, {(42, 1): good, (42, 2): Files(closed)}, [1, 2]) is None
    # A zero run time when schedstat is not known to be accounted.
    zero = {(42, 1): good, (42, 2): Files(schedstat_file(b"0 0 0\n"))}
    assert call(steady_times, zero, [1, 2], zero_ok=False) is None
    assert call(steady_times, zero, [1, 2], zero_ok=True)[2].run_ns == 0


def test_c_steady_sample_rejects_bad_arguments(steady_times, schedstat_file):
    from tumbler.platform.base import NO_MICROSTATES
    files = {(42, 1): Files(schedstat_file(b"5 6 7\n"))}
    with pytest.raises(TypeError):
        steady_times(files, 42, [1], True, dict, NO_MICROSTATES)        # not a tuple type
    with pytest.raises(TypeError):
        steady_times([], 42, [1], True, tuple, NO_MICROSTATES)          # files not a dict
    with pytest.raises(AttributeError):
        call(steady_times, {(42, 1): object()}, [1])
    with pytest.raises(TypeError):
        call(steady_times, {(42, 1): Files("3")}, [1])


FENCED = textwrap.dedent("""
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from tumbler.platform.linux.backend import LinuxBackend
    backend = LinuxBackend()
    pid = int(sys.argv[1])
    sampled = [len(backend.sample(pid).threads) for _ in range(2)]
    kept = [f.schedstat_fd for f in backend.sampler._files.values()
            if f.schedstat_fd is not None and f.schedstat_fd >= 0]
    free = os.open(os.devnull, os.O_RDONLY)         # a file can still be opened
    print(*sampled, len(kept), max(kept), free)
""")


def test_kept_schedstat_fds_stop_short_of_the_file_limit(crowd):
    # 101 threads under a limit of 64 open files: the sampler keeps fds
    # up to the fence, reads the rest by path, and leaves room to open
    # files (without the fence every fd was taken and the next thread's
    # stat could not be opened: the sample failed).
    program = subprocess.Popen([crowd, "60", "100", "0.01", "1000"], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert program.stdout.readline().split() == ["ready", "100"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        out = subprocess.run([sys.executable, "-c", FENCED, str(program.pid), "64"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        first, second, kept, highest, free = map(int, out.stdout.split())
        assert (first, second) == (101, 101)
        fence = int(64 * FD_FENCE)          # 56
        assert 0 < kept and highest < fence <= free < 64
    finally:
        program.kill()
        program.wait()


def test_a_new_thread_is_read_alone_the_others_in_one_batch(steady):
    """Issue 47: a thread born to a process makes the next sample list the
    threads and read the new one by itself; the threads it knew are still
    read in one batch (C or Python), not one by one -- whatever the number
    of threads, a birth costs one thread's reads."""
    proc, workers, backend = steady
    sampler = backend.sampler
    read_one_by_one = []
    original = sampler._read_times
    sampler._read_times = lambda tid, *a: read_one_by_one.append(tid) or original(tid, *a)
    words = send(proc, "more")
    new = int(words[1])
    sample = round_sample(backend, proc.pid)
    assert read_one_by_one == [new]
    assert list(sample.threads) == sorted([proc.pid, *workers, new])
    assert sample.threads[new].start == sampler._files[(proc.pid, new)].start
    for tid in workers:
        assert sample.threads[tid].run_ns > 0 and sample.threads[tid].lat_ns is not None
    # And the next sample is the steady one again.
    read_one_by_one.clear()
    again = round_sample(backend, proc.pid)
    assert read_one_by_one == [] and set(again.threads) == set(sample.threads)


def test_sample_threads_reads_only_those_and_the_next_sample_batches_them(steady):
    """A look for new threads reads the newcomers alone (sample_threads);
    their files are kept, so the round after reads every thread, the
    newcomers too, in one batch."""
    proc, workers, backend = steady
    sampler = backend.sampler
    read_one_by_one = []
    original = sampler._read_times
    sampler._read_times = lambda tid, *a: read_one_by_one.append(tid) or original(tid, *a)
    new = int(send(proc, "more")[1])
    found = backend.sample_threads(proc.pid, [new])
    assert list(found.threads) == [new] and read_one_by_one == [new]
    read_one_by_one.clear()
    sample = round_sample(backend, proc.pid)
    assert read_one_by_one == [] and set(sample.threads) == {proc.pid, *workers, new}


def test_process_cpu_and_name_follows_a_rename_and_escapes_it(procs):
    """The name comes with the per-process CPU read (the service's look at
    each program): a new one after a rename (as after an exec), escaped as
    every name is -- a newline and a journald prefix in it stay one line."""
    child = procs.start([sys.executable, "-c", textwrap.dedent("""
        import sys
        print("ready", flush=True)
        sys.stdin.readline()
        with open("/proc/self/comm", "w") as f:
            f.write("x\\n<3>forged")
        print("renamed", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    backend = LinuxBackend()
    try:
        cpu_ns, name = backend.process_cpu_and_name(child.pid)
        assert name.startswith("python")
        assert cpu_ns >= 0
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "renamed"
        later_ns, name = backend.process_cpu_and_name(child.pid)
        assert name == "x\\n<3>forged" and later_ns >= cpu_ns
    finally:
        backend.close()


def test_a_thread_a_look_opened_and_gone_before_the_next_sample_is_forgotten(steady):
    """A look reads a new thread alone (sample_threads) and keeps its
    files; if it exits before a sample finds it -- the count back to what
    the last sample saw, nothing else changed -- the next sample forgets
    it: its files closed, its TID not kept for ever."""
    proc, _, backend = steady
    sampler = backend.sampler
    tid = int(send(proc, "more")[1])
    assert tid in backend.sample_threads(proc.pid, [tid]).threads
    assert (proc.pid, tid) in sampler._files
    assert send(proc, "less") == ["stopped", str(tid)]
    reaped(proc.pid, tid)
    round_sample(backend, proc.pid)
    round_sample(backend, proc.pid)
    assert (proc.pid, tid) not in sampler._files
    assert tid not in sampler._read_alone.get(proc.pid, ())
