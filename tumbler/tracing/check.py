"""``tumbler probe --check``: the probes against the kernel's own accounting.

Over the window of ``tumbler probe`` (between two prints of the tracing
scripts, with the kernel's per-thread times sampled right after each),
every figure the kernel also keeps is compared, thread by thread:

* LAT (run-queue latency) against the kernel's run delay of the same
  thread: ``ThreadTimes.lat_ns``, on Linux schedstat's 2nd field, on
  illumos lwpusage's pr_wtime (the LAT microstate);
* LCK against illumos's pr_ltime (the LCK microstate itself).  Linux keeps
  no lock time of its own: there, :class:`LockControls` puts two threads
  of known lock time into tumbler's own process, traced with the targets
  -- one blocked on a lock from before the trace starts to after it ends
  (100%), one asleep all along but never on a lock (0%).

Figures are percentages of the window.  A probe figure agrees with the
kernel's when they differ by at most ``RELATIVE_TOLERANCE`` of the kernel's
figure, or by ``WINDOW_TOLERANCE`` of the window where that is more (a
thread that hardly waits: a few ms the probe misses are a large share of
little) -- plus, for LAT, ``PER_WAIT_NS`` for each wait in the window.
That last part is a difference of clocks, not of waits: the probe times a
wait from the sched_wakeup tracepoint to sched_switch, the kernel's run
delay from the run-queue clock at the enqueue to that clock at the switch,
read before the scheduler picks the next task; on the machine of
tumbler(8)'s figures a thread that sleeps 2 ms at a time is given 13-20 us
more per wait by the probe.  The kernel also counts a wait only when it
ends, the probe as it goes: a thread still waiting for a CPU at either end
of the window makes them differ by that wait, which on a lightly loaded
machine lasts a few ms.
"""

import os
import threading
import time

from ..errors import TumblerError
from ..records import record

#: Largest difference from the kernel's figure, as a share of it ...
RELATIVE_TOLERANCE = 0.05
#: ... or in percent of the window, whichever allows more ...
WINDOW_TOLERANCE = 0.5
#: ... plus this much per run-queue wait (LAT only; see above).
PER_WAIT_NS = 25_000


@record
class Figure:
    """One compared figure: ``what`` is "LAT" or "LCK"; ``thread`` the
    thread's TID, or the name of a control thread; ``probe`` and
    ``kernel`` (the kernel's, or the known, share) in % of the window."""

    what: str
    pid: int
    thread: object
    probe: float
    kernel: float
    ok: bool


def agrees(probe, kernel, allowance=0.0):
    """Whether two shares of a window (in %) agree; ``allowance`` (% of the
    window) is added to the tolerance."""
    return abs(probe - kernel) <= max(RELATIVE_TOLERANCE * kernel, WINDOW_TOLERANCE) + allowance


def figure(what, pid, thread, probe, kernel, allowance=0.0):
    return Figure(what, pid, thread, round(probe, 2), round(kernel, 2),
                  agrees(probe, kernel, allowance))


def _kernel_share(before, after, name, wall_ns):
    """The kernel's share of the window for one thread: ``lat`` (run delay)
    or ``lck`` (illumos LCK microstate); None where it keeps none.  Of the
    thread's own elapsed time where the kernel keeps it (illumos pr_rtime,
    as prstat -mL), else of the wall time between the samples."""
    if name == "lat":
        was, now = before.lat_ns, after.lat_ns
    else:
        was, now = before.micro.get("lck"), after.micro.get("lck")
    if "rtime" in before.micro and "rtime" in after.micro:
        wall_ns = after.micro["rtime"] - before.micro["rtime"]
    if was is None or now is None or wall_ns <= 0:
        return None
    return max(0, now - was) * 100.0 / wall_ns


def kernel_figures(pid, rows, start, end, latency_s):
    """Figures of the threads of ``pid`` traced over the whole window.

    ``rows``: the probe's rows of ``tumbler probe`` (``tid``, ``lck`` and
    ``lat`` in % of the window, ``runq_count``; None where not traced);
    ``start``/``end``: the kernel's Samples of ``pid`` right after the
    window's first and last print; ``latency_s`` the seconds the latency
    values cover.  A thread missing from either sample, or another thread
    under the same TID, is left out: the kernel's figure would not cover
    the window.
    """
    wall_ns = end.wall_ns - start.wall_ns
    out = []
    for row in rows:
        before, after = start.threads.get(row["tid"]), end.threads.get(row["tid"])
        if before is None or after is None or before.start != after.start:
            continue
        for what, key in (("LAT", "lat"), ("LCK", "lck")):
            kernel = _kernel_share(before, after, key, wall_ns)
            if row[key] is None or kernel is None:
                continue
            allowance = 0.0
            if what == "LAT" and latency_s:
                allowance = PER_WAIT_NS * row["runq_count"] * 100.0 / (latency_s * 1e9)
            out.append(figure(what, pid, row["tid"], row[key], kernel, allowance))
    return out


class LockControls:
    """Two threads of this process with a known lock time over any window
    that starts after :meth:`start` and ends before :meth:`stop`:
    ``blocked`` waits on a lock all along (LCK 100%), ``asleep`` waits in
    read(2), which is no lock (LCK 0%).  Both leave the interpreter's lock
    while they wait, so nothing else of this process wakes them."""

    NAMES = ("blocked", "asleep")

    def __init__(self):
        self.tids = {}
        self._lock = threading.Lock()
        self._pipe = None
        self._threads = []

    def start(self, backend):
        """Start both and return once ``blocked`` is asleep on its lock
        (seen through ``backend.lock_waiters``), so that the trace starts
        with a wait in progress; ``{name: tid}``."""
        self._lock.acquire()
        self._pipe = os.pipe()
        named = threading.Event()

        def run(name, wait):
            self.tids[name] = threading.get_native_id()
            if len(self.tids) == len(self.NAMES):
                named.set()
            wait()

        for name, wait in (("blocked", self._wait_on_lock), ("asleep", self._wait_in_read)):
            thread = threading.Thread(target=run, args=(name, wait), daemon=True,
                                      name="tumbler-check-" + name)
            thread.start()
            self._threads.append(thread)
        named.wait()
        pid = os.getpid()
        deadline = time.monotonic() + 10.0
        while self.tids["blocked"] not in backend.lock_waiters(pid, [self.tids["blocked"]]):
            if time.monotonic() > deadline:
                self.stop()
                raise TumblerError("the check's control thread never blocked on its lock")
            time.sleep(0.005)
        return dict(self.tids)

    def _wait_on_lock(self):
        self._lock.acquire()
        self._lock.release()

    def _wait_in_read(self):
        os.read(self._pipe[0], 1)

    def stop(self):
        """Release both and wait for them to end."""
        if self._pipe is None:
            return
        self._lock.release()
        os.write(self._pipe[1], b"x")
        for thread in self._threads:
            thread.join()
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None

    def figures(self, values, window_ns):
        """The controls' LCK figures from the probe's values over the window
        (``{(pid, tid): record}``, ``window_ns`` the locks kind's)."""
        pid = os.getpid()
        expected = {"blocked": 100.0, "asleep": 0.0}
        out = []
        for name in self.NAMES:
            lock_ns = values.get((pid, self.tids[name]), {}).get("lock_ns", 0)
            share = lock_ns * 100.0 / window_ns if window_ns > 0 else 0.0
            out.append(figure("LCK", pid, name, share, expected[name]))
        return out
