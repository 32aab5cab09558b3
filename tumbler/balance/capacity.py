"""Measured capacity (``--capacity measured``; the default is ``cpus``):
how much of each domain's CPUs the managed program can have.

Wave grouping gives each domain a share of the load in proportion to its
capacity.  Counted in CPUs, a domain whose CPUs other work keeps busy --
other programs, interrupts, a hypervisor's steal time -- gets as much as
an idle one, and the program waits for its slowest domain.  The weighted
micro-scheduling paper (papers/weighted-micro-scheduling.md) weighs each
CPU by what is left of it instead.  Here:

    other(d)    = busy time of d's CPUs (Backend.cpu_times: /proc/stat,
                  steal included; illumos cpu::sys kstats)
                  - CPU time the program's threads in d received,
                  both over the load window;
    capacity(d) = CPUs(d) - other(d)

Smoothed, twice: over the load window (the same one thread loads are
measured over), and by a dead band that keeps a domain's capacity at
its CPU count until other work takes at least a *step* of it (0.1 CPU,
or 5% of the domain's CPUs if that is more), then moves it in whole
steps, and only when the measurement is three quarters of a step away
from the value in use.  So a machine with nothing else running plans
exactly as with ``--capacity cpus`` -- integral capacities, the same
slots, the same plan -- and measurement noise moves nothing; a domain is
never given less than one step.

Why not the default: wave grouping gives every domain at least one slot,
so a domain that a high-priority hog keeps 90% busy still gets a thread,
and a program that meets at barriers waits for it every phase (measured:
BENCHMARKS.md, issue 18).  Leaving such a domain out of the plan is the
missing piece.

Cost: one read of /proc/stat per full round with two or more domains
(a single domain has nothing to weigh and reads nothing), and per quiet
round, which ends when a capacity leaves its CPU count (quiet rounds
plan with CPU counts).
"""

from collections import deque

from ..engine.model import Domain
from ..platform.base import PlatformError, Unsupported

#: The dead band's step, in CPUs: at least this, at least STEP_SHARE of
#: the domain's CPUs.
MIN_STEP_CPUS = 0.1
STEP_SHARE = 0.05
#: A capacity moves when the measurement is this many steps from it.
HYSTERESIS_STEPS = 0.75


def step_of(cpus):
    """The dead band's step for a domain of ``cpus`` CPUs."""
    return max(MIN_STEP_CPUS, STEP_SHARE * cpus)


def busy_shares(before, after, span_ns):
    """Each CPU's busy share between two ``Backend.cpu_times()`` readings
    ``span_ns`` apart: {cpu: CPUs}, 0 where a counter went backwards."""
    return {cpu: (busy - before[cpu][0]) / span_ns if busy > before[cpu][0] else 0.0
            for cpu, (busy, _) in after.items() if cpu in before}


def other_work(cpus, busy, received):
    """CPUs of ``cpus`` that work other than the program's took: their
    summed busy share (``busy_shares``) less the CPU the program's threads
    there ``received``, never below 0."""
    return max(0.0, sum(busy.get(cpu, 0.0) for cpu in cpus) - received)


class CapacityMeter:
    """Per-domain capacity of one program's domains, from the CPUs' busy
    time over the load window.  ``backend.cpu_times()`` is read once per
    ``update``; the clock is the caller's (monotonic ns of its sample)."""

    def __init__(self, backend, window_ns, warn=None):
        self.backend = backend
        self.window_ns = window_ns
        self.warn = warn
        self.readings = deque()         # (wall_ns, Backend.cpu_times()), oldest first
        self.other = {}                 # domain CPUs -> other work in use (CPUs, in steps)
        self.failed = None              # why cpu_times cannot be read: measuring stopped

    def update(self, domains, domain_cpu, wall_ns):
        """Capacities of ``domains`` (by index) given the CPU their threads
        received over the load window (``domain_cpu``, CPUs by index):
        ints (the CPU count) where no other work shows, else floats."""
        busy = self._read(wall_ns)
        if busy is None:
            return [len(d.cpus) for d in domains]
        capacities = []
        for domain, managed in zip(domains, domain_cpu):
            cpus = domain.cpus
            other = other_work(cpus, busy, managed)
            step = step_of(len(cpus))
            held = self.other.get(cpus, 0.0)
            if abs(other - held) >= HYSTERESIS_STEPS * step:
                held = round(other / step) * step
                self.other[cpus] = held
            if held <= 0.0:
                capacities.append(len(cpus))
            else:
                capacities.append(max(step, len(cpus) - held))
        return capacities

    def _read(self, wall_ns):
        """Each CPU's busy share over the load window, {cpu: CPUs}; None
        until the readings span half a window, or when they cannot be read."""
        if self.failed is not None:
            return None
        try:
            times = self.backend.cpu_times()
        except PlatformError as exc:
            # The platform cannot tell (Unsupported): CPU counts, as
            # --capacity cpus, silently; anything else is said once.
            self.failed = str(exc)
            if self.warn is not None and not isinstance(exc, Unsupported):
                self.warn("capacity counted in CPUs from now on: %s" % exc)
            return None
        readings = self.readings
        readings.append((wall_ns, times))
        # The base: the newest reading at least a window old (or the oldest).
        while len(readings) > 2 and wall_ns - readings[1][0] >= self.window_ns:
            readings.popleft()
        base_ns, base = readings[0]
        span = wall_ns - base_ns
        if span < self.window_ns // 2:
            # /proc/stat counts in clock ticks (10 ms): over 100 ms one tick
            # is a tenth of a CPU, a whole step of the dead band.
            return None
        return busy_shares(base, times, span)


def weighed(domains, capacities):
    """``domains`` with ``capacities`` (the same objects where unchanged)."""
    result = []
    for domain, capacity in zip(domains, capacities):
        if domain.capacity == capacity and type(domain.capacity) is type(capacity):
            result.append(domain)
        else:
            result.append(Domain(domain.index, domain.cpus,
                                 None if capacity == len(domain.cpus) else capacity))
    return result
