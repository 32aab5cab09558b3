"""A sample's threads as columns (``ThreadColumns``): what a backend may
give as ``Sample.threads`` when it read the same threads as the sample
before, in one pass that builds no object per thread.

A full round reads every thread of its targets; building a ThreadTimes,
two ints and a dict entry per thread cost a third of the reads themselves
(issue 29, BENCHMARKS.md).  The round's own passes take the columns as
they are (balance/loads.py); anyone else who reads the sample as the
mapping ``{tid: ThreadTimes}`` gets it, built once, when first asked.
"""

from collections.abc import Mapping
from itertools import repeat

from .base import NO_MICROSTATES, ThreadTimes


class ThreadColumns(Mapping):
    """The threads of one sample as columns: ``tids`` (a tuple), their
    start tokens ``starts`` and names ``names`` (tuples, in that order),
    and their CPU time ``run`` and run-queue wait ``lat`` (``array('q')``,
    ns).  ``tid_set``: the same TIDs as a frozenset.

    Samples of one steady set of threads share ``tids``, ``tid_set``,
    ``starts`` and ``names``: the same objects tell the same threads
    (read through the same kept-open files), so passes over two samples
    may pair their columns by position.

    As a mapping: tid -> ThreadTimes(tid, start, name, run_ns, lat_ns),
    what the backend's per-thread path would have built (usr, sys, cpu
    unknown, state "?"), built on first use."""

    __slots__ = ("tids", "tid_set", "starts", "names", "run", "lat", "_mapping")

    def __init__(self, tids, tid_set, starts, names, run, lat):
        self.tids = tids
        self.tid_set = tid_set
        self.starts = starts
        self.names = names
        self.run = run
        self.lat = lat
        self._mapping = None

    def same_threads(self, other):
        """Whether ``other`` (ThreadColumns) holds the same threads in the
        same order (a sample of the same steady set)."""
        return other.tids is self.tids and other.starts is self.starts

    def as_dict(self):
        """The mapping as a dict (built once)."""
        mapping = self._mapping
        if mapping is None:
            tids = self.tids
            mapping = self._mapping = dict(zip(tids, map(tuple.__new__, repeat(ThreadTimes), zip(
                tids, self.starts, self.names, self.run, repeat(None), repeat(None), self.lat,
                repeat(None), repeat("?"), repeat(NO_MICROSTATES)))))
        return mapping

    def __getitem__(self, tid):
        return self.as_dict()[tid]

    def __iter__(self):
        return iter(self.tids)

    def __len__(self):
        return len(self.tids)

    def __contains__(self, tid):
        return tid in self.tid_set

    def items(self):
        return self.as_dict().items()

    def values(self):
        return self.as_dict().values()

    def get(self, tid, default=None):
        return self.as_dict().get(tid, default)

    def __eq__(self, other):
        if isinstance(other, ThreadColumns):
            other = other.as_dict()
        return self.as_dict() == other

    __hash__ = None

    def __repr__(self):
        return "ThreadColumns(%r)" % (self.as_dict(),)
