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
new one takes over; after ``MAX_STUCK`` stuck workers, reads are refused
outright until the service restarts (thread count bounded).
"""

import queue
import threading

#: How long the loop waits for one read.
DEADLINE_S = 0.05
#: Workers left stuck in a read before reads are refused.
MAX_STUCK = 8


class Stalled(Exception):
    """A read missed its deadline (or reads are refused: too many stuck)."""


class DeadlineReader:
    """``reader(function, *args)``: ``function(*args)`` run in the worker,
    its result or exception returned or raised here, or Stalled."""

    def __init__(self, deadline=DEADLINE_S):
        self.deadline = deadline
        self.stuck = 0
        self._requests = None
        self._results = None

    def __call__(self, function, *args):
        if self.stuck >= MAX_STUCK:
            raise Stalled("%d reads are stuck already" % self.stuck)
        if self._requests is None:
            self._start()
        self._requests.put((function, args))
        try:
            ok, value = self._results.get(timeout=self.deadline)
        except queue.Empty:
            self.stuck += 1
            self._requests = self._results = None       # the next read: a new worker
            raise Stalled("no answer within %.0f ms" % (self.deadline * 1000)) from None
        if ok:
            return value
        raise value

    def _start(self):
        requests, results = queue.SimpleQueue(), queue.SimpleQueue()

        def work():
            while True:
                function, args = requests.get()
                try:
                    results.put((True, function(*args)))
                except Exception as exc:        # handed to the caller
                    results.put((False, exc))

        threading.Thread(target=work, name="tumbler-reader", daemon=True).start()
        self._requests, self._results = requests, results
