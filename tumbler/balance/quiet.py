"""Quiet rounds (``QuietRounds``): which threads they read, their samples,
and the rounds decided from them.

A quiet round (controller.py) reads the CPU time and run-queue wait of a
fixed list of threads -- a *roster* per target, its threads as the full
round before left them -- into two ``array('q')`` columns, and sums them
over the load window (engine/window.py): one target's over one span, the
targets of a process tree (a wrapper shell and its program, --children)
each over its own, in one call.  Each roster's sample joins its target's
load window history as a ``ColumnSample``, which answers ``threads`` (the
mapping full rounds read) only when a full round asks.

A quiet round whose threads were read but which cannot decide (the verdict
fails, a capacity moved) is followed at once by a full round; that round
takes the reads just made (``QuietRounds.take_reads``) as its samples
instead of reading every thread again (issue 47: each thread read twice
in such a round, 14-37 ms a read of 8,000).
"""

from __future__ import annotations

import math
from array import array

from ..engine.policy import RUNNABLE_SHARE, WATCH_INTERVAL_MS
from ..engine.leftout import left_out_of_total
from ..engine.grouping import spread
from ..engine.window import OUTSIDE, summarize_window
from ..platform.base import NoSuchProcess, Sample
from ..platform.columns import ThreadColumns
from ..records import record


@record
class _Times:
    """What the load window needs of one thread in a sample."""

    start: int
    run_ns: int
    lat_ns: int


class Roster:
    """The threads quiet rounds read: one target's, in a fixed order, with
    the columns they need (see the module docstring)."""

    __slots__ = ("pid", "threads", "read", "tids", "starts", "domain_of", "assignment",
                 "reader", "born_by", "zeros", "unmeasured", "_base", "_base_columns")

    def __init__(self, pid, threads, reader, assignment, read):
        self.pid = pid
        self.threads = threads
        self.read = read            # the full round's sample's threads, in roster order
        self.tids = [t.tid for t in threads]
        self.starts = [t.start for t in threads]
        # A thread outside every domain is counted nowhere (window.OUTSIDE).
        self.domain_of = array("i", [OUTSIDE if t.domain is None else t.domain
                                     for t in threads])
        self.assignment = assignment        # the full round's plan: nothing moved since
        self.reader = reader
        self.born_by = max(t.first[0] for t in threads)     # newest first sighting
        self.zeros = array("q", bytes(8 * len(threads)))
        self.unmeasured = False     # quiet rounds ran since the threads were last measured
        self._base = self._base_columns = None

    def base_columns(self, sample):
        """(run, lat) columns of ``sample`` in roster order, or None if it
        lacks one of the threads (or names another thread by its TID)."""
        if sample is self._base:
            return self._base_columns
        if type(sample) is ColumnSample:
            threads = None if sample.roster is self else sample.threads
        else:
            threads = sample.threads
        if threads is None:
            columns = sample.run, sample.lat
        elif type(threads) is ThreadColumns and list(threads.tids) == self.tids \
                and list(threads.starts) == self.starts:
            columns = threads.run, threads.lat      # a full round's, read as columns
        else:
            found = list(map(threads.get, self.tids))
            if None in found or [t.start for t in found] != self.starts:
                columns = None
            else:
                columns = (array("q", [t.run_ns for t in found]),
                           array("q", [t.lat_ns for t in found]))
        self._base, self._base_columns = sample, columns
        return columns

    def sample(self, run, lat, read_at):
        """The Sample a full round would read of the roster's threads, made
        from a quiet round's columns read at ``read_at``: the same threads
        as the full round that made the roster (a reader answers only
        while they are), as columns sharing that round's TIDs, starts and
        names when it read them so (loads.py pairs such samples by
        position), else as its mapping with the new times."""
        read = self.read
        if type(read) is ThreadColumns:
            threads = ThreadColumns(read.tids, read.tid_set, read.starts, read.names, run, lat)
        else:
            threads = {tid: read[tid]._replace(run_ns=run_ns, lat_ns=lat_ns)
                       for tid, run_ns, lat_ns in zip(self.tids, run, lat)}
        return Sample(pid=self.pid, wall_ns=read_at, threads=threads)


@record
class ColumnSample:
    """A quiet round's sample: a roster's CPU times as columns.  It stands
    in the load window's history beside the backend's Samples.  A
    named tuple, made with tuple.__new__ once per quiet round; the mapping
    ``threads`` is built only when a full round looks at the sample (once
    or twice, when quiet rounds end)."""

    pid: int
    wall_ns: int
    roster: "Roster"
    run: array
    lat: array

    @property
    def threads(self):
        roster = self.roster
        return dict(zip(roster.tids, map(_Times, roster.starts, self.run, self.lat)))


@record
class QuietRound:
    """What ``round`` returns for a quiet round: what the loop needs.  The
    whole Decision is built only when asked for (``last_decision``)."""

    interval_ms: int
    summary: object                 # the engine's WindowSummary
    assignment: dict                # thread -> domain, unchanged since the full round
    speed_interval_ms: int | None = None


class QuietRounds:
    """Rounds decided from two columns and a few sums, and the pace of a
    watch that keeps finding the same.

    Owns: ``rosters`` (the threads quiet rounds read, while they may; None
    when the next round is a full one) and ``calm`` ((threads, ms) of the
    last paced watch, None when rounds are not paced).  Reads the
    tracker's threads and load window histories (and measures them when
    quiet rounds end), the Layout's domains and capacities, other work
    (``other``, the run's OtherWork: its meters);
    ``may_merge()``: DomainMerger.may_merge."""

    def __init__(self, backend, policy, layout, tracker, stats, other, may_merge):
        self.backend = backend
        self.policy = policy
        self.layout = layout
        self.tracker = tracker
        self.stats = stats
        self.other = other
        self.may_merge = may_merge
        self.rosters = None         # the threads quiet rounds read, while they may
        self.calm = None            # (threads, ms) of the last paced watch
        self.reads = {}             # pid -> Sample: a failed quiet round's reads

    def rosters_for(self, samples, decision, placed_between_rounds):
        """The rosters for quiet rounds after a full round that changed
        nothing, one per target, or None when the next round must be a
        full one too (``placed_between_rounds``: placements not logged yet)."""
        tracker = self.tracker
        if not samples or len(samples) != len(tracker.targets) or placed_between_rounds:
            return None
        meter = self.other.capacity_meter
        if meter is not None and meter.left_out:
            # A domain left out or on trial (balance/capacity.py): only full
            # rounds change that state, so only they run meanwhile.
            return None
        if sum(len(sample.threads) for sample in samples) != len(tracker.threads):
            return None
        rosters = []
        for sample in samples:
            threads = [tracker.threads.get((sample.pid, tid)) for tid in sample.threads]
            if None in threads or any(
                    t.load is None or t.runnable is None or t.unmovable
                    or t.pinned_cpu is not None
                    or (t.eligible and (t.domain is None or t.domain not in t.eligible))
                    for t in threads):
                return None     # (a thread outside every domain is read, counted nowhere)
            reader = self.backend.columns_reader(sample.pid, list(sample.threads))
            if reader is None:
                return None
            rosters.append(Roster(sample.pid, threads, reader, decision.plan.assignment,
                                  sample.threads))
        return rosters

    def round(self, other_seen, speeding):
        """A round from two columns and a few sums; None when a full round
        must be made instead (nothing is changed then).  ``other_seen``:
        other work per domain at the last full round; ``speeding``: speed
        balancing samples threads between rounds (no paced watch then)."""
        rosters = self.rosters
        if len(rosters) != len(self.tracker.targets):
            return None         # a new process of the tree: a full round places it
        reads = []
        for roster in rosters:
            read = self._read_roster(roster)
            if read is None:
                break
            reads.append(read)
            if read[4] is None:
                break
        decision = None if len(reads) < len(rosters) or reads[-1][4] is None \
            else self._decide(reads, other_seen, speeding)
        if decision is None:
            # The full round that follows takes what was read (take_reads).
            self.reads = {roster.pid: roster.sample(run, lat, read_at)
                          for roster, run, lat, read_at, _, _ in reads}
        return decision

    def take_reads(self):
        """{pid: Sample} of the targets the last quiet round read before it
        found that a full round must decide, for that full round, which
        follows at once (nothing read since); empty after."""
        reads, self.reads = self.reads, {}
        return reads

    def _decide(self, reads, other_seen, speeding):
        """round's decision from ``reads`` (every roster's), or None."""
        rosters = self.rosters
        domains = self.layout.domains
        if len(reads) == 1:
            _, run, lat, now, base, start = reads[0]
            columns = rosters[0].base_columns(base)
            summary = summarize_window(run, lat, columns[0], columns[1], now - base.wall_ns,
                                       rosters[0].domain_of, self.layout.capacities,
                                       RUNNABLE_SHARE)
        else:
            summary = self._tree_summary(reads)
            now = max(read[3] for read in reads)
        capacities = self.layout.capacities
        meter = self.other.capacity_meter
        if meter is not None and len(domains) > 1:
            # Weighed as the last full round weighed them, if that still
            # holds.  For a full round to weigh: a capacity that moved, or
            # a domain the threads' load now says to leave out.  (No domain
            # is out or on trial: no rosters then, rosters_for.)
            planned = [d.capacity for d in domains]
            if meter.update(domains, summary.domain_cpu, now,
                            unplaced=self._untracked(now, summary)) != planned:
                return None
            if left_out_of_total(planned, sum(summary.threads),
                                 math.fsum(summary.domain_loads)):
                return None
            if any(d.measured is not None for d in domains):
                capacities = planned
                summary = summary._replace(spread=spread(summary.domain_loads, planned))
        elif self.other.meter is not None and len(domains) > 1 and self.may_merge():
            # Other work that rose (or fell) on a domain may merge them
            # (engine/merging.py): a full round judges it.
            if self.other.meter.other_work(domains, summary.domain_cpu, now,
                                           self._untracked(now, summary)) \
                    not in (None, other_seen):
                return None
        verdict = self.policy.quiet_verdict(summary, capacities)
        if verdict is None:
            return None
        for roster, run, lat, read_at, _, start in reads:
            history = self.tracker.loads.histories[roster.pid]
            for _ in range(start):
                history.popleft()
            history.append(tuple.__new__(ColumnSample, (roster.pid, read_at, roster, run, lat)))
            roster.unmeasured = True
        decision = tuple.__new__(QuietRound, (self.paced_ms(verdict[0], speeding=speeding),
                                              summary, rosters[0].assignment, None))
        self.stats.intervals += 1
        self.stats.quiet += 1
        if not self.layout.choice.single:
            self.stats.spreads.append(verdict[1])
        return decision

    def _untracked(self, now, summary):
        """The program's threads born and gone since the last full round (a
        thread gone that was read ends the quiet round): their CPU is the
        program's, no other work (balance/otherwork.py)."""
        return self.other.untracked_cpu(now, self.tracker, math.fsum(summary.domain_cpu))

    def _read_roster(self, roster):
        """(roster, run, lat, read at, the window's base sample, samples to
        drop before it) of one target now, or None if a full round must
        look at it (gone, exec'd, a thread born or exited); the base None
        when the threads were read but a full round must measure them (one
        born since the base, or the base lacks one)."""
        pid = roster.pid
        try:
            zombie, image = self.backend.process_state(pid)
        except NoSuchProcess:
            return None
        if zombie or image != self.tracker.images.get(pid):
            return None
        run, lat = roster.zeros[:], roster.zeros[:]
        now = roster.reader(run, lat)
        if now is None:
            return None
        history = self.tracker.loads.histories[pid]
        start = self.tracker.loads.window_start(history, now, appended=False)
        base = history[start]
        if roster.born_by >= base.wall_ns or base.wall_ns >= now \
                or roster.base_columns(base) is None:
            base = None         # (a thread born since the base: measured from birth)
        return roster, run, lat, now, base, start

    def _tree_summary(self, reads):
        """The WindowSummary of several targets' rosters read now, each
        thread over its own target's window span (engine/window.py)."""
        run, lat, base_run, base_lat, spans = (array("q") for _ in range(5))
        domain_of = array("i")
        for roster, roster_run, roster_lat, now, base, _ in reads:
            columns = roster.base_columns(base)
            run += roster_run
            lat += roster_lat
            base_run += columns[0]
            base_lat += columns[1]
            spans += array("q", [now - base.wall_ns]) * len(roster_run)
            domain_of += roster.domain_of
        return summarize_window(run, lat, base_run, base_lat, spans, domain_of,
                                self.layout.capacities, RUNNABLE_SHARE)

    def leave(self):
        """End quiet rounds: give every thread of the rosters the numbers the
        last quiet round would have given it as a full round (load and
        runnable share over the window, CPU time over that round), so that
        what follows sees no difference."""
        rosters, self.rosters = self.rosters, None
        for roster in rosters or ():
            if not roster.unmeasured:
                continue
            history = self.tracker.loads.histories.get(roster.pid)
            if history is None or len(history) < 2:
                continue            # the process is gone: nothing to measure
            before = history[-2].threads
            for thread in roster.threads:
                thread.prev_wall = history[-2].wall_ns
                thread.prev_run = before[thread.tid].run_ns
            self.tracker.loads.measure_threads(history[-1], history[0])

    def paced_ms(self, interval, acting=False, speeding=False):
        """The interval to the next round: the decision's (``interval``;
        ``acting``: it engaged, pinned, judges a crowd or whether domains
        merge or split, or watches synchronising threads' speeds, which a
        longer window would even out; ``speeding``: speed balancing samples
        threads between rounds), except where auto only watches a single
        domain (WATCH_INTERVAL_MS, nothing acting; merged domains too) and
        the rounds keep finding the same threads: then twice the last, up to the
        variation table's idle interval (800 ms).  Such rounds can only
        find that speed balancing should engage now, and each costs CPU the
        program could use: 24 rounds in 4.5 s took 30 ms of CPU beside an
        OpenMP kernel of 3 threads on 2 CPUs (BENCHMARKS.md, issue 27).
        Any other decision, or another thread count, starts again from the
        decision's own interval."""
        policy = self.policy
        if acting or interval != WATCH_INTERVAL_MS or policy.name != "auto" \
                or policy.fixed_interval_ms is not None or not self.layout.choice.single \
                or speeding:
            self.calm = None
            return interval
        count = len(self.tracker.threads)
        if self.calm is not None and self.calm[0] == count:
            interval = min(2 * self.calm[1], policy.table.idle_interval_ms)
        self.calm = (count, interval)
        return interval
