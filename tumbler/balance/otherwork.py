"""Other work on the domains' CPUs, as one run measures it (``OtherWork``):
with ``--capacity measured`` the domains are weighed by what other work
leaves of them (balance/capacity.py has the meter and its smoothing);
``auto`` measures it too, with capacity counted in CPUs, and leaves
domains other work competes for to the OS (engine/policy.py, 3.).
How a run counts it is the run's to say (``OtherWorkCounting``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ..platform.base import NoSuchProcess, PlatformError
from ..records import record
from .capacity import CapacityMeter, weighed


@record
class OtherWorkCounting:
    """How a run counts other work (balance/capacity.py has the why):
    ``capacity`` -- "cpus", a domain's capacity is its CPU count, or
    "measured" (--capacity), what other work leaves of it;
    ``managed_elsewhere(cpus)`` -- the CPU the service's other programs
    received on those CPUs, not counted as other work (None: no other
    program is balanced beside this one); ``smooth_windows`` -- measured
    capacity's other work is averaged over this many load windows (1:
    not at all; the service's: loop.py, CAPACITY_SMOOTH_WINDOWS)."""

    capacity: str = "cpus"
    managed_elsewhere: Callable | None = None
    smooth_windows: int = 1


class OtherWork:
    """Other work per domain over the load window.

    Owns the meters -- ``capacity_meter`` (--capacity measured: it weighs
    the domains; None otherwise) and ``meter`` (the one other work is read
    from: the capacity meter, or for a policy that merges domains one that
    counts capacity in CPUs; None when nothing measures it) -- and
    ``seen`` (other work per domain at the last full round).  Reads the
    CPU the tracker's threads received (its LoadWindow); weighs the
    Layout's domains."""

    def __init__(self, backend, layout, load_window_ns, warn, *, merges,
                 counting=OtherWorkCounting()):
        self.layout = layout
        # --capacity measured: the service's other programs not counted,
        # and smoothed over ``smooth_windows`` (balance/capacity.py).
        elsewhere = counting.managed_elsewhere
        self.capacity_meter = (CapacityMeter(backend, load_window_ns, warn,
                                             managed_elsewhere=elsewhere,
                                             smooth_windows=counting.smooth_windows)
                               if counting.capacity == "measured" else None)
        self.meter = self.capacity_meter
        if self.meter is None and merges:
            self.meter = CapacityMeter(backend, load_window_ns, warn,
                                       managed_elsewhere=elsewhere)
        self.seen = None            # other work per domain at the last full round
        self.backend = backend
        self.load_window_ns = load_window_ns
        # pid -> (sample clock ns, process CPU ns) readings over the load
        # window (untracked_cpu), None once the backend cannot tell.
        self._process_cpu = {}

    def unread(self):
        """Whether other work is measured but not read yet (readings over
        half a load window, from the first target: ThreadTracker.add_target)."""
        meter = self.meter
        return meter is not None and not meter.ready and meter.failed is None

    def readable_at_ns(self):
        """When other work can first be read (the samples' clock: half a
        load window after the meter's first reading), None if it is read
        already, not measured, or the meter has no reading yet."""
        meter = self.meter
        if not self.unread() or not meter.readings:
            return None
        return meter.readings[0][0] + meter.ready_span_ns

    def measure(self, now_ns, tracker):
        """Other work per domain (CPUs, dead-banded: balance/capacity.py)
        over the load window, from the CPU ``tracker``'s threads received
        there; None when it is not measured.  With --capacity measured the
        domains are weighed by it first (``now_ns``: the samples' clock,
        None if there were none)."""
        meter = self.meter
        if meter is None:
            return None
        if now_ns is None:
            now_ns = time.monotonic_ns()
        domains = self.layout.domains
        *received, unplaced = tracker.loads.received_all()
        unplaced += self.untracked_cpu(now_ns, tracker)
        if self.capacity_meter is not None and len(domains) > 1:
            # Each domain weighed by what other work leaves of its CPUs.
            loads = [t.load for t in tracker.threads.values()
                     if t.load is not None and not t.unmovable and t.eligible]
            self.layout.domains = weighed(domains, self.capacity_meter.update(
                domains, received, now_ns, loads, unplaced))
        else:
            meter.other_work(domains, received, now_ns, unplaced)
        return self.held()

    def untracked_cpu(self, now_ns, tracker, placed_cpu=None):
        """CPUs the program's processes (``tracker``'s targets) got over
        the load window beyond what its tracked threads got: threads that
        exited since they were last sampled, or were born and exited in
        between.  The CPUs' busy time keeps their CPU for a load window;
        it is the program's, no other work (a program that keeps starting
        short threads would otherwise keep merged domains merged for
        ever: issue 49, tests/balance/test_loop_scenarios.py).  Where they
        ran is not known: it is taken as the CPU of threads not placed
        (balance/capacity.py, spread_unplaced).  From each process's CPU
        time (``Backend.process_cpu_and_name``, which keeps the CPU of its
        threads that exited); 0.0 where the backend cannot tell.  Linux
        counts that time in clock ticks (10 ms): two readings' difference
        is within a tick of the truth, 0.04 CPU over half a load window,
        under the dead band's 0.1 CPU step (balance/capacity.py).

        ``placed_cpu``: what the threads in the domains got over the window
        as a quiet round just read it (their ``cpu`` is the last full
        round's, stale then: a program whose use rose would have the rise
        taken for threads gone, and other work read low); None in a full
        round, which has just updated every thread's ``cpu``."""
        process_cpu = self._process_cpu
        for pid in [p for p in process_cpu if p not in tracker.targets]:
            del process_cpu[pid]
        got = 0.0
        spans = {}                  # pid -> span of its readings (ns)
        for pid in tracker.targets:
            readings = process_cpu.get(pid, ())
            if readings is None:
                continue
            if readings and readings[-1][0] == now_ns:
                # Read at this sample time already (a quiet round that
                # could not decide, then the full round at once).
                cpu_ns = readings[-1][1]
            else:
                try:
                    cpu_ns = self.backend.process_cpu_and_name(pid)[0]
                except NoSuchProcess:
                    continue
                except (PlatformError, NotImplementedError):
                    process_cpu[pid] = None
                    continue
                if not readings:
                    readings = process_cpu[pid] = deque()
                readings.append((now_ns, cpu_ns))
                # The base: the newest reading at least a window old (or the oldest).
                while len(readings) > 2 and now_ns - readings[1][0] >= self.load_window_ns:
                    readings.popleft()
            span = spans[pid] = now_ns - readings[0][0]
            if span > 0:
                got += (cpu_ns - readings[0][1]) / span
        if got <= 0.0:
            return 0.0
        # What the tracked threads got over the same spans: a thread's CPU
        # share is over the load window or, born since, since it was first
        # seen (loads.py), so over that part of the span.
        tracked = 0.0 if placed_cpu is None else placed_cpu
        for (pid, _), thread in tracker.threads.items():
            span = spans.get(pid)
            if span and thread.cpu is not None and (placed_cpu is None or thread.domain is None):
                tracked += thread.cpu * min(span, now_ns - thread.first[0]) / span
        return max(0.0, got - tracked)

    @property
    def weighs_domains(self):
        """--capacity measured: the domains are weighed by other work (and
        so never merged: merging would hand threads back to CPUs it found
        taken)."""
        return self.capacity_meter is not None

    def hold(self, cpus, other):
        """Take ``other`` CPUs as the other work on ``cpus`` until the meter
        reads them (domains just merged: what the split ones held)."""
        if self.meter is not None:
            self.meter.other[cpus] = other

    def held(self):
        """Other work per domain as the meter holds it now (0.0 where not
        measured yet), None without a meter."""
        meter = self.meter
        if meter is None:
            return None
        return [meter.other.get(d.cpus, 0.0) for d in self.layout.domains]
