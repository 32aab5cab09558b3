"""The numbers a quiet round decides on, from columns of CPU times.

Most rounds of a program in its stride change nothing: the same threads,
the domains within the error tolerance of each other, nobody crowding a
domain.  The policy's full decision on such a round
needs only a few sums over the threads, not the threads one by one
(``policy.quiet_verdict``):

* each domain's summed load over the load window, from which
  policy.quiet_verdict takes the deviation plan_tumbler compares with the
  tolerance, and their spread (the CV of the per-CPU domain loads), which
  the summary reports.  A thread's load is its demand (``demand``): for an
  always-runnable thread (CPU time + run-queue wait) / wall time, else
  its CPU time, capped at one CPU, as the controller measures it -- not
  Eq. 1's CPU time alone, which on a saturated domain sums to its
  capacity however many threads queue there;
* the CV of the thread loads, which picks the interval from the
  variation-interval table;
* per domain, the CPU its threads received (``domain_cpu``: what measured
  capacity subtracts from the domain's busy time, balance/capacity.py);
* per domain, how many threads it holds and how many stay runnable
  (runnable share >= ``RUNNABLE_SHARE``), and how many domains hold more
  runnable threads than CPUs -- what the auto policy engages speed
  balancing on.

``summarize_window`` computes them from aligned columns -- CPU time and
run-queue wait now and at the start of the load window, one entry per
thread -- with exactly the arithmetic the controller uses per thread
(balance/loads.py, LoadWindow.measure_threads: integer deltas, one division each, a counter
that went backwards counting 0) and the engine's own ``cv`` and
``spread``.  A thread of domain -1 (allowed only CPUs outside every
domain, see controller.py) counts nowhere, in no sum, count or CV.  The optional C module ``_window`` does the same in one call;
its sums are compensated (Neumaier), which agree with ``math.fsum`` to the
last bit or two.  It matters because a quiet round runs once per interval
right after a sleep, with tumbler's code out of the CPU's caches: the
engine's ``cv`` of two floats then costs ~75 us of CPU (~3 us in a loop),
the C call for 64 threads ~20 (BENCHMARKS.md).
"""

from __future__ import annotations

import math

from ..records import record
from .grouping import spread
from .variation import cv

try:
    from ._window import summarize_window as _c_summarize_window
except ImportError:         # not built (optional): the same arithmetic in Python
    _c_summarize_window = None


#: ``domain_of`` of a thread that counts nowhere (outside every domain).
OUTSIDE = -1


@record
class WindowSummary:
    """What a quiet round knows of the threads of its target."""

    domain_loads: tuple[float, ...]     # summed load per domain (CPUs)
    thread_cv: float                    # CV of the thread loads
    spread: float                       # CV of the per-CPU domain loads
    threads: tuple[int, ...]            # threads per domain
    runnable: tuple[int, ...]           # of them, runnable share >= the share asked
    crowded: int                        # domains with more runnable threads than CPUs
    domain_cpu: tuple[float, ...] = ()  # summed CPU received per domain (CPUs)


def demand(cpu, runnable, runnable_share):
    """A thread's load: what it wants of a CPU.  A thread runnable for at
    least ``runnable_share`` of the time wants a whole CPU whatever it got
    (its run-queue wait counts: on a saturated domain the CPU received sums
    to the capacity however many threads queue there); one runnable less
    of the time got what it asked for, and its wait is only the overlap
    with its neighbours' bursts (which moves with every regrouping: counted,
    it made tumbler chase it).  Capped at one CPU."""
    if runnable >= runnable_share:
        return runnable if runnable < 1.0 else 1.0
    return cpu if cpu < 1.0 else 1.0


def py_summarize_window(run, lat, base_run, base_lat, span_ns, domain_of, capacities,
                        runnable_share):
    """``summarize_window`` in Python (see the module docstring)."""
    spans = [span_ns] * len(run) if isinstance(span_ns, int) else list(span_ns)
    if any(span <= 0 for span in spans):
        raise ValueError("span_ns must be positive, got %r" % (span_ns,))
    if not len(run) == len(lat) == len(base_run) == len(base_lat) == len(domain_of) \
            == len(spans):
        raise ValueError("columns differ in length")
    if not capacities or min(capacities) < 1:
        raise ValueError("every domain needs a CPU, got %r" % (list(capacities),))
    domain_count = len(capacities)
    runs = [now - old if now > old else 0 for now, old in zip(run, base_run)]
    shares = [(r + (now - old if now > old else 0)) / span
              for r, now, old, span in zip(runs, lat, base_lat, spans)]
    loads = []
    sums = [[] for _ in range(domain_count)]
    cpu_sums = [[] for _ in range(domain_count)]
    threads = [0] * domain_count
    runnable = [0] * domain_count
    for ran, share, domain, span in zip(runs, shares, domain_of, spans):
        if domain == OUTSIDE:
            continue
        if not 0 <= domain < domain_count:
            raise ValueError("domain %r out of range" % (domain,))
        load = demand(ran / span, share, runnable_share)
        loads.append(load)
        sums[domain].append(load)
        cpu_sums[domain].append(ran / span)
        threads[domain] += 1
        if share >= runnable_share:
            runnable[domain] += 1
    domain_loads = tuple(math.fsum(part) for part in sums)
    crowded = sum(1 for count, cpus in zip(runnable, capacities) if count > cpus)
    return WindowSummary(domain_loads, cv(loads), spread(domain_loads, capacities),
                         tuple(threads), tuple(runnable), crowded,
                         tuple(math.fsum(part) for part in cpu_sums))


def summarize_window(run, lat, base_run, base_lat, span_ns, domain_of, capacities,
                     runnable_share):
    """The WindowSummary of the threads of one or more processes over the
    load window.

    ``run``/``lat``: CPU time and run-queue wait (ns) of each thread now;
    ``base_run``/``base_lat``: the same at the window's start, ``span_ns``
    before (an int; or a column, one per thread: the threads of several
    processes, each read over its own window); ``domain_of``: the index of each thread's domain (OUTSIDE:
    none, the thread counts nowhere);
    ``capacities``: CPUs per domain.  Sequences of ints (``array('q')``,
    and ``array('i')`` for the last two, for the C module).
    """
    if _c_summarize_window is not None:
        # tuple.__new__: a named tuple's own _make is a Python call.
        return tuple.__new__(WindowSummary, _c_summarize_window(
            run, lat, base_run, base_lat, span_ns, domain_of, capacities, runnable_share))
    return py_summarize_window(run, lat, base_run, base_lat, span_ns, domain_of, capacities,
                               runnable_share)
