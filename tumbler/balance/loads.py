"""Loads over the load window (the loop's second step): each tracked
thread's demand, CPU received and runnable share, from the round samples
a process's history keeps (``LoadWindow``), and the CPU received per
domain that other work is measured against (balance/capacity.py)."""

import time
from collections import deque
from itertools import islice, repeat
from operator import attrgetter

from ..engine.policy import RUNNABLE_SHARE
from ..engine.window import demand
from ..platform.base import ThreadTimes
from ..platform.columns import ThreadColumns

try:
    from ._rounds import measure_columns as _c_measure_columns
    from ._rounds import measure_threads as _c_measure_threads
    from ._rounds import received as _c_received
except ImportError:         # not built (optional): the same passes in Python
    _c_measure_columns = _c_measure_threads = _c_received = None

_START = attrgetter("start")


class LoadWindow:
    """Each thread's load over the load window.

    Owns: ``histories`` (pid -> round samples within the load window; a
    quiet round appends its ColumnSample) and ``placed_at`` ((pid, tid) ->
    monotonic ns a thread measured where the OS put it was first bound,
    for a load window).  Measures the threads of ``tracked`` (the
    ThreadTracker's table, (pid, tid) -> TrackedThread, which owns this
    window; ``thread_class``: TrackedThread, whose slots the C pass reads,
    given here because threads.py imports this module) over the Layout's
    domains."""

    def __init__(self, tracked, thread_class, layout, load_window_ns):
        self.tracked = tracked
        self.thread_class = thread_class
        self.layout = layout
        self.load_window_ns = load_window_ns
        self.histories = {}         # pid -> round Samples within the load window
        # (pid, tid) -> monotonic ns it was first bound at, having run where
        # the OS put it before (_before_placed); for a load window.
        self.placed_at = {}
        # pid -> (tids, starts, [TrackedThread]) of its last column sample
        # (_aligned): the tracked threads in the columns' order.
        self._aligned = {}

    def forget(self, pid):
        """``pid`` exited: its samples go."""
        self.histories.pop(pid, None)
        self._aligned.pop(pid, None)

    def changed(self, pid):
        """The tracker's table gained or lost threads of ``pid``."""
        self._aligned.pop(pid, None)

    def measure(self, sample):
        """Load (demand: controller.py's docstring), CPU received and runnable
        share of the threads of ``sample`` over
        the load window, and their CPU time over the last round; returns how
        many tracked threads it measured and the TIDs it does not track (a
        TID now naming another thread; new ones are tracked before).

        A load over a single short interval is mostly noise for programs
        whose phases are longer than the interval: a thread that happened
        to wait at a barrier for most of 50 ms looks idle.  The load is
        therefore taken against the newest round sample at least
        ``load_window`` old (or the oldest one kept): the same ratio over a
        longer delta; a thread born since is measured from when it was
        first seen.  The window's samples are kept per process, not per
        thread: this runs for every thread every round.
        """
        history = self.histories.get(sample.pid)
        if history is None:
            history = self.histories[sample.pid] = deque()
        history.append(sample)
        for _ in range(self.window_start(history, sample.wall_ns, appended=True)):
            history.popleft()
        return self.measure_threads(sample, history[0])

    def window_start(self, history, now, appended):
        """The index in ``history`` of the load window's base sample for a
        sample taken at ``now``, the samples before it to be dropped: the
        newest sample at least ``load_window`` old, or the oldest kept,
        never the new sample itself nor the one just before it.
        ``appended``: whether the new sample is already at its end."""
        count = len(history) + (0 if appended else 1)
        start = 0
        while count - start > 2 and now - history[start + 1].wall_ns >= self.load_window_ns:
            start += 1
        return start

    def measure_threads(self, sample, base):
        """measure's per-thread part, against the window's ``base`` sample:
        in one C pass (balance/_rounds.c) when that module was built, else
        ``_py_measure_threads``, the same arithmetic.  A sample read as
        columns (platform/columns.py) whose base holds the same threads is
        measured from its columns (_measure_columns), no per-thread object
        read or built but the numbers the threads keep."""
        threads, base_threads = sample.threads, base.threads
        if type(threads) is ThreadColumns:
            if _c_measure_columns is not None and type(base_threads) is ThreadColumns \
                    and base_threads.same_threads(threads):
                measured = self._measure_columns(sample, base)
                if measured is not None:
                    return measured
            threads = threads.as_dict()
        if type(base_threads) is ThreadColumns:
            base_threads = base_threads.as_dict()
        if _c_measure_threads is None or type(threads) is not dict \
                or type(base_threads) is not dict:
            return self._py_measure_threads(sample.pid, sample.wall_ns, threads, base.wall_ns,
                                            base_threads)
        measured, unknown, done = _c_measure_threads(
            self.tracked, sample.pid, threads, sample.wall_ns, base.wall_ns, base_threads,
            RUNNABLE_SHARE, self.thread_class, ThreadTimes)
        if done < len(threads):     # counters the C pass does not take (not plain ints)
            more, unknown_too = self._py_measure_threads(
                sample.pid, sample.wall_ns, dict(islice(threads.items(), done, None)),
                base.wall_ns, base_threads)
            measured, unknown = measured + more, unknown + unknown_too
        return measured, unknown

    def _measure_columns(self, sample, base):
        """measure_threads of a column sample whose base sample holds the
        same threads (balance/_rounds.c, measure_columns: the arithmetic of
        ``_py_measure_threads``, which the tests hold it to); None when some
        thread of the sample is not tracked as read (a TID now naming
        another thread): the mapping's pass then says which."""
        columns, base_columns = sample.threads, base.threads
        threads = self._aligned_threads(sample.pid, columns)
        if threads is None:
            return None
        done = _c_measure_columns(threads, sample.wall_ns, columns.run, columns.lat,
                                  base.wall_ns, base_columns.run, base_columns.lat,
                                  RUNNABLE_SHARE, self.thread_class)
        if done < len(threads):     # counters the C pass does not take (not plain ints)
            more, _ = self._py_measure_threads(
                sample.pid, sample.wall_ns, dict(islice(columns.items(), done, None)),
                base.wall_ns, base_columns.as_dict())
            done += more
        return done, []

    def _aligned_threads(self, pid, columns):
        """The tracked threads of ``columns`` (a column sample of ``pid``)
        in its order, or None unless every one is tracked as that thread
        (same start).  Kept while the columns' threads and the tracker's
        are the same (``changed``): looked up once, not every round."""
        kept = self._aligned.get(pid)
        if kept is not None and kept[0] is columns.tids and kept[1] is columns.starts:
            return kept[2]
        threads = list(map(self.tracked.get, zip(repeat(pid), columns.tids)))
        if None in threads or list(map(_START, threads)) != list(columns.starts):
            return None
        self._aligned[pid] = (columns.tids, columns.starts, threads)
        return threads

    def _py_measure_threads(self, pid, now, threads, base_wall, base_threads):
        """measure_threads in Python."""
        get = self.tracked.get
        measured = 0
        unknown = []
        for tid, times in threads.items():
            thread = get((pid, tid))
            if thread is None or thread.start != times.start:
                unknown.append(tid)
                continue
            measured += 1
            run_ns = times.run_ns
            thread.exec_ns = run_ns - thread.prev_run if run_ns > thread.prev_run else 0
            thread.wall_ns = now - thread.prev_wall
            thread.prev_wall, thread.prev_run = now, run_ns
            old = base_threads.get(tid)
            first = thread.first
            if first[0] < base_wall < now and old is not None and old.start == times.start:
                old_wall, old_run, old_lat = base_wall, old.run_ns, old.lat_ns
            else:       # first seen after the base sample (or this is the only one)
                old_wall, old_run, old_lat = first
            wall = now - old_wall
            if wall <= 0:
                continue
            run = run_ns - old_run if run_ns > old_run else 0
            thread.cpu = run / wall
            lat_ns = times.lat_ns
            if lat_ns is not None and old_lat is not None:
                runnable = (run + (lat_ns - old_lat if lat_ns > old_lat else 0)) / wall
                thread.runnable = runnable
                # Demand (engine.window.demand, as quiet rounds sum it).
                thread.load = demand(thread.cpu, runnable, RUNNABLE_SHARE)
            else:           # no run-queue wait known (schedstat off): Eq. 1
                thread.load = thread.cpu
        return measured, unknown

    def received_all(self):
        """The CPU the program's threads received in each domain over the
        load window (CPUs, by domain index), and last the CPU received by
        the threads not placed yet (in no domain, movable, with a domain
        they may use: the OS ran them on any of the domains' CPUs; an
        outsider's ran outside them, and someone else's placement is other
        work) or before they were bound (_before_placed); one C pass when
        built."""
        received = None
        count = len(self.layout.domains)
        if _c_received is not None:
            received = _c_received(self.tracked.values(), count)
        if received is None:
            received = [0.0] * (count + 1)
            unplaced = count
            for thread in self.tracked.values():
                if thread.cpu is None:
                    continue
                if thread.domain is not None:
                    received[thread.domain] += thread.cpu
                elif thread.eligible and not thread.unmovable:
                    received[unplaced] += thread.cpu
        if self.placed_at:
            self._before_placed(received)
        return received

    def note_placed(self, made, samples):
        """Threads measured where the OS put them and bound now (the first
        binding after other work was read, or after a split): for a load
        window their CPU counts in their domain only from now on
        (_before_placed)."""
        now = samples[0].wall_ns if samples else time.monotonic_ns()
        placed = self.placed_at
        for key in [k for k, at in placed.items() if now - at >= self.load_window_ns]:
            del placed[key]
        for thread, src, _ in made:
            if src is None:
                placed[(thread.pid, thread.tid)] = now

    def _before_placed(self, received):
        """Move from ``received``'s domains to its last entry (not placed)
        the part of each thread's CPU over the load window from before it
        was bound (note_placed): the OS ran it anywhere until then.
        Time-weighted: the thread's CPU is a rate over the window, taken as
        even over it."""
        unplaced = len(received) - 1
        for key, placed in list(self.placed_at.items()):
            thread = self.tracked.get(key)
            history = self.histories.get(key[0])
            if thread is None or thread.domain is None or thread.cpu is None or not history:
                del self.placed_at[key]
                continue
            base = max(history[0].wall_ns, thread.first[0])
            span = thread.prev_wall - base
            if placed <= base:
                del self.placed_at[key]         # its whole window is in its domain
                continue
            if span <= 0:
                continue
            before = thread.cpu * min(1.0, (placed - base) / span)
            received[thread.domain] -= before
            received[unplaced] += before

    def received_now(self, summary=None):
        """(domain CPUs, CPU the threads received there) per domain over the
        load window, as the last round measured it -- a quiet one from its
        columns' sums (``summary``, its WindowSummary): what the service's
        other programs do not count as other work (balance/capacity.py)."""
        domains = self.layout.domains
        if summary is not None and len(summary.domain_cpu) == len(domains):
            received = summary.domain_cpu
        else:
            *received, unplaced = self.received_all()
            if unplaced:
                # Not placed yet: spread over the domains by their CPUs, as
                # a parked program's use (service/loop.py).
                total = sum(len(domain.cpus) for domain in domains)
                received = [cpu + unplaced * len(domain.cpus) / total
                            for domain, cpu in zip(domains, received)]
        return [(domain.cpus, cpu) for domain, cpu in zip(domains, received)]

