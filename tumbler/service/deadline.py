"""Reads a hostile process can stall, run against a deadline.

Reading ``/proc/PID/cmdline`` makes the kernel take the target's memory
map lock and read its memory.  A process can hold that lock, or make the
read wait on a page fault it never lets finish (a FUSE file or a
userfaultfd region mapped where its arguments are), for as long as it
likes; the read is then killable, nothing else -- a stop signal whose
handler only records it waits too.  The service must hand every program
back within a second of SIGTERM, so such reads run in a worker thread,
and the loop waits ``DEADLINE_S`` for each.  A worker that misses it is
left to its read (a daemon thread: it never holds up the exit) and a
new one takes over; the one left exits when its read ends, whenever
that is.  While ``MAX_STUCK`` workers are left in their reads, reads are
refused (``Refused``: the thread count stays bounded) -- until one of
them ends: a read that was only slow (a loaded machine, a process busy
mapping memory) costs nothing for good.
"""

import queue
import threading

#: How long the loop waits for one read.
DEADLINE_S = 0.05
#: Workers left stuck in a read before reads are refused.
MAX_STUCK = 8


class Stalled(Exception):
    """A read missed its deadline (or reads are refused: too many stuck)."""


class Refused(Stalled):
    """No read was tried: MAX_STUCK workers are still in theirs."""


class DeadlineReader:
    """``reader(function, *args)``: ``function(*args)`` run in the worker,
    its result or exception returned or raised here, or Stalled."""

    def __init__(self, deadline=DEADLINE_S):
        self.deadline = deadline
        self.stuck = 0              # workers left in a read that missed its deadline
        self._lock = threading.Lock()
        self._worker = None

    def __call__(self, function, *args):
        with self._lock:
            if self.stuck >= MAX_STUCK:
                raise Refused("%d reads are stuck already" % self.stuck)
        if self._worker is None:
            self._worker = _Worker(self)
        worker = self._worker
        worker.requests.put((function, args))
        try:
            ok, value = worker.results.get(timeout=self.deadline)
        except queue.Empty:
            with self._lock:
                try:                # it answered between the timeout and the lock
                    ok, value = worker.results.get_nowait()
                except queue.Empty:
                    worker.abandoned = True     # it exits when its read ends
                    self.stuck += 1
                    self._worker = None         # the next read: a new worker
                    raise Stalled("no answer within %.0f ms"
                                  % (self.deadline * 1000)) from None
        if ok:
            return value
        raise value

    def _finished(self, worker, outcome):
        """A worker's read ended: its outcome to the caller, or, if the
        caller gave up on it, the worker is no longer stuck (returns
        False: the worker exits)."""
        with self._lock:
            if worker.abandoned:
                self.stuck -= 1
                return False
            worker.results.put(outcome)
            return True


class _Worker:
    __slots__ = ("requests", "results", "abandoned")

    def __init__(self, reader):
        self.requests, self.results = queue.SimpleQueue(), queue.SimpleQueue()
        self.abandoned = False
        threading.Thread(target=self._work, args=(reader,), name="tumbler-reader",
                         daemon=True).start()

    def _work(self, reader):
        while True:
            function, args = self.requests.get()
            try:
                outcome = (True, function(*args))
            except Exception as exc:        # handed to the caller
                outcome = (False, exc)
            if not reader._finished(self, outcome):
                return
