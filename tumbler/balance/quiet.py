"""What quiet rounds keep: which threads they read, and their samples.

A quiet round (controller.py) reads the CPU time and run-queue wait of a
fixed list of threads -- the *roster*, one target's threads as the full
round before left them -- into two ``array('q')`` columns, and sums them
over the load window (engine/window.py).  Its sample joins the load
window's history as a ``ColumnSample``, which answers ``threads`` (the
mapping full rounds read) only when a full round asks.
"""

from array import array
from typing import NamedTuple, Optional

from ..engine.window import OUTSIDE


class _Times(NamedTuple):
    """What the load window needs of one thread in a sample."""

    start: int
    run_ns: int
    lat_ns: int


class Roster:
    """The threads quiet rounds read: one target's, in a fixed order, with
    the columns they need (see the module docstring)."""

    __slots__ = ("pid", "threads", "tids", "starts", "domain_of", "assignment", "reader",
                 "born_by", "zeros", "unmeasured", "_base", "_base_columns")

    def __init__(self, pid, threads, reader, assignment):
        self.pid = pid
        self.threads = threads
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

    @staticmethod
    def capacities(domains):
        """CPUs per domain, by index, as the engine's sums take them."""
        return array("i", [d.capacity for d in domains])

    def base_columns(self, sample):
        """(run, lat) columns of ``sample`` in roster order, or None if it
        lacks one of the threads (or names another thread by its TID)."""
        if sample is self._base:
            return self._base_columns
        if type(sample) is ColumnSample and sample.roster is self:
            columns = sample.run, sample.lat
        else:
            found = list(map(sample.threads.get, self.tids))
            if None in found or [t.start for t in found] != self.starts:
                columns = None
            else:
                columns = (array("q", [t.run_ns for t in found]),
                           array("q", [t.lat_ns for t in found]))
        self._base, self._base_columns = sample, columns
        return columns


class ColumnSample(NamedTuple):
    """A quiet round's sample: a roster's CPU times as columns.  It stands
    in the load window's history beside the backend's Samples.  A
    NamedTuple, made with tuple.__new__ once per quiet round; the mapping
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


class QuietRound(NamedTuple):
    """What ``round`` returns for a quiet round: what the loop needs.  The
    whole Decision is built only when asked for (``last_decision``)."""

    interval_ms: int
    summary: object                 # the engine's WindowSummary
    assignment: dict                # thread -> domain, unchanged since the full round
    speed_interval_ms: Optional[int] = None
