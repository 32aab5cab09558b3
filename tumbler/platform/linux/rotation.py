"""Threads asleep read in rotation (issue 47): a round costs the threads
that run, not every thread the program has.

A round reads each thread's schedstat (one pread of a kept-open fd,
linux/threads.py).  A program of 8,000 threads asleep in ``pause()`` and
one busy thread paid 8,000 preads a round for one thread's news.  Here a
thread whose run time did not change at its last read is *asleep*: it is
read only one round in ``SLEEPER_TURNS`` (each its turn by its position),
and between its reads its last values stand for it -- which they are, as
long as it does not run.  Busy threads are read every round.

What keeps that true:

* a sleeper that wakes and runs is read at its next turn at the latest
  (``SLEEPER_TURNS`` rounds), then read every round; its CPU time is
  counted from its run time, so none of it is lost, only seen up to that
  many rounds late;
* sooner than that when it matters: after the reads, the process's own
  CPU time (utime + stime of /proc/PID/stat, one read: the kernel sums
  every thread's run time into it) is compared with what the threads read
  gained.  More than ``UNEXPLAINED_NS`` beyond it -- a sleeper ran, or a
  thread was born -- and every thread is read again at once;
* a thread that exits changes the task directory's link count, which the
  read checks first (the whole read is then refused and the caller reads
  every thread by itself, as before); one that exits while another is
  born (the count unchanged) is found when the exited one's turn comes
  (its read fails) or, if the newborn runs, by the comparison above.

So an idle thread born while another exited is placed up to
``SLEEPER_TURNS`` rounds later than before; nothing else changes.  The
first read of a set of threads reads them all.  Without the C module the
same steps run in Python (``read_columns``), the tests holding both to
the same answers.
"""

import os
import time
from array import array
from operator import attrgetter

from ..base import PlatformError
from .procfs import NS_PER_TICK

# A kept thread file's fields (threads.py's ThreadFiles), for the passes
# that take them as columns here and in threads.py.
SCHEDSTAT_FD = attrgetter("schedstat_fd")
START = attrgetter("start")
NAME = attrgetter("name")

#: A sleeper is read one round in this many.  The rounds come 50-800 ms
#: apart (the variation table), so a sleeper that wakes is read within
#: 0.2-3.2 s, its CPU counted then; any wake-up that costs more than
#: UNEXPLAINED_NS is seen in its round.  4: 8,000 sleepers read as 2,000
#: a round, a quarter of the preads (BENCHMARKS.md, "Threads asleep read in
#: rotation"); more would save less each step (a half, a third...) and
#: leave a short wake-up later.
SLEEPER_TURNS = 4
#: Process CPU time the threads read do not explain, from which every
#: thread is read again: /proc/PID/stat counts utime and stime in clock
#: ticks, each cut down to a whole tick, so two readings' difference is
#: within two ticks of the threads' true sum (20 ms at 100 Hz) ...
UNEXPLAINED_NS = 2 * NS_PER_TICK
#: ... and, for each thread running then, what the kernel has not yet
#: added to its schedstat (updated at its scheduler ticks and switches;
#: the process's figure adds it at once): up to one scheduler tick, 10 ms
#: at the lowest usual CONFIG_HZ (100).
RUNNING_LAG_NS = 10_000_000


class Rotation:
    """One set of threads (their schedstat fds, in order) read in rotation:
    their last values, which of them moved, whose turn it is, and the
    process's CPU time at the last read."""

    __slots__ = ("fds", "run", "lat", "moved", "turn", "process_ns", "reads")

    def __init__(self, fds):
        self.fds = fds
        self.run = array("q", bytes(8 * len(fds)))
        self.lat = array("q", bytes(8 * len(fds)))
        self.moved = array("b", b"\x01" * len(fds))    # all read the first time
        self.turn = 0
        self.process_ns = None      # utime + stime at the last read (ns)
        self.reads = 0              # schedstat reads made (tests, benchmarks)

    def read(self, read_columns, task_fd, zero_ok, process_cpu):
        """(monotonic ns, run, lat) -- new arrays, every thread's values,
        the sleepers' from their last read -- or None when the threads
        changed or a read failed (``read_columns``'s None).
        ``process_cpu()``: the process's CPU time now (ns), None if not
        known (then every thread is read each time)."""
        turns = SLEEPER_TURNS if self.process_ns is not None else 1
        answer = self._read(read_columns, task_fd, zero_ok, turns)
        if answer is None:
            return None
        now, run, lat, moved, gained, running = answer
        process_ns = _cpu_now(process_cpu)
        if turns > 1 and (process_ns is None or process_ns - self.process_ns - gained
                          > UNEXPLAINED_NS + RUNNING_LAG_NS * running):
            # Someone not read ran (a sleeper woke, a thread was born): all.
            answer = self._read(read_columns, task_fd, zero_ok, 1)
            if answer is None:
                return None
            now, run, lat, moved = answer[:4]
            process_ns = _cpu_now(process_cpu)
        self.run, self.lat, self.moved = run, lat, moved
        self.turn = (self.turn + 1) % SLEEPER_TURNS
        self.process_ns = process_ns
        # The caller keeps these: the next read starts from copies.
        return now, run[:], lat[:]

    def _read(self, read_columns, task_fd, zero_ok, turns):
        run, lat, moved = self.run[:], self.lat[:], self.moved[:]
        if turns == 1:
            moved = array("b", b"\x01" * len(moved))
        answer = read_columns(task_fd, self.fds, run, lat, zero_ok, moved, turns,
                              self.turn % turns)
        if answer is None:
            return None
        now, gained, count, running = answer
        self.reads += count
        return now, run, lat, moved, gained, running


class ColumnSet:
    """A process's threads as the last sample found them, every one with
    its schedstat fd open: what the next sample reads as columns
    (``ThreadSampler._column_sample``), in this order."""

    __slots__ = ("tids", "tid_set", "starts", "names", "fds")

    def __init__(self, threads, files):
        self.tids = tuple(threads)
        self.tid_set = frozenset(self.tids)
        self.starts = tuple(map(START, files))
        self.names = tuple(map(NAME, files))
        self.fds = array("i", map(SCHEDSTAT_FD, files))


def _cpu_now(process_cpu):
    try:
        return process_cpu()
    except PlatformError:           # gone: its threads' reads say so
        return None


def read_columns(task_fd, fds, run, lat, zero_ok=True, moved=None, turns=1, turn=0):
    """The C module's ``read_columns`` in Python (_steady.c says what it
    does): None unless the process has ``len(fds)`` threads; else fill
    ``run`` and ``lat`` from each schedstat fd read -- with ``moved``, only
    those that moved at their last read or whose turn it is -- and return
    the monotonic ns (with ``moved``: that, the run time they gained, how
    many were read and how many of them had moved), or None if a read failed or was odd, or
    (``zero_ok`` false) a run time was 0."""
    if not 0 <= turn < turns:
        raise ValueError("read_columns: need 0 <= turn < turns")
    gained = count = running = 0
    try:
        if os.fstat(task_fd).st_nlink - 2 != len(fds):
            return None
        now = time.monotonic_ns()
        pread = os.pread
        for i, fd in enumerate(fds):
            if moved is not None and not moved[i] and i % turns != turn:
                continue
            new_run, new_lat = map(int, pread(fd, 128, 0).split()[:2])
            if not zero_ok and new_run == 0:
                return None
            if moved is not None:
                moved[i] = new_run != run[i]
                running += moved[i]
                gained += new_run - run[i]
                count += 1
            run[i], lat[i] = new_run, new_lat
    except (OSError, ValueError, OverflowError):
        return None
    return now if moved is None else (now, gained, count, running)
