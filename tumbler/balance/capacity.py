"""Measured capacity (``--capacity measured``; the default, ``cpus``, counts CPUs):
how much of each domain's CPUs the managed program can have.

Wave grouping gives each domain a share of the load in proportion to its
capacity.  Counted in CPUs, a domain whose CPUs other work keeps busy --
other programs, interrupts, a hypervisor's steal time -- gets as much as
an idle one, and the program waits for its slowest domain.  The weighted
micro-scheduling paper (papers/weighted-micro-scheduling.md) weighs each
CPU by what is left of it instead.  Here:

    other(d)    = busy time of d's CPUs (Backend.cpu_times: /proc/stat,
                  steal included; illumos cpu::sys kstats)
                  - CPU time the program's threads in d received
                  - tumbler's own CPU time there (booked to the CPU it
                    measures on, Backend.current_cpu; not on illumos),
                  all over the load window;
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

Left out.  Wave grouping gives every domain at least one slot, so a
domain that a high-priority hog keeps 90% busy would still get a thread,
and a program that meets at barriers would wait for it every phase
(measured: BENCHMARKS.md, issue 18).  Such a domain -- one thread there
would get less than every thread gets without it, engine.grouping.left_out
-- gets capacity 0: the plan leaves it out and its threads move to the
others.  Once left out, the domain's busy time no longer shows what one of
our threads would get there (a CPU-bound hog of equal priority fills a CPU
it has to itself, and would take half of it beside one of ours), so it
stays out while it still looks too busy -- back at once when its other
work drops -- and is tried again, for TRIAL_WINDOWS load windows, after
RETRY_WINDOWS windows, then after twice as long each time it fails, up to
MAX_RETRY_WINDOWS.  A failed trial costs one thread's slow progress for
those few windows.

In the service.  The other programs it manages are balanced themselves:
their threads' CPU is no other work to plan around.  Each meter there is
given ``managed_elsewhere(cpus)`` -- the CPU the service's other
programs received on those CPUs, as their last rounds measured it (a
parked program's: its process CPU, spread over its domains) -- and takes
it off the busy time with the program's own.  What remains is other work
proper, and with measured capacity it is also smoothed over
``smooth_windows`` load windows (an exponential average of that time
constant) before the dead band: the bursts of neighbours that are not
managed come and go faster than that, and moved capacities (and threads)
for noise (BENCHMARKS.md, issue 29).

Cost: one read of /proc/stat per round with two or more domains (a
single domain has nothing to weigh; auto still reads its other work each
full round, balance/otherwork.py).  A quiet round
(quiet.py) weighs the domains as the full round before it did, and hands
over to a full round when a capacity has moved since or a domain is left
out: with other work that holds steady -- the other programs a service
manages, a hog -- rounds stay quiet.
"""

import math
import time
from collections import deque

from ..engine.leftout import left_out
from ..engine.model import Domain
from ..platform.base import PlatformError, Unsupported

#: The dead band's step, in CPUs: at least this, at least STEP_SHARE of
#: the domain's CPUs.  MIN_STEP_CPUS derived: /proc/stat counts in ticks
#: of 10 ms (USER_HZ), 0.04 CPU over the shortest span read (half a 500 ms
#: window), so a step is 2.5 ticks there (supported: above 0.053 CPU, or
#: one tick too many shows at HYSTERESIS_STEPS); STEP_SHARE reasoned (half the
#: grouping's 10% tolerance: a domain's capacity moves before its load
#: per CPU can leave the tolerance).
MIN_STEP_CPUS = 0.1
STEP_SHARE = 0.05
#: A capacity moves when the measurement is this many steps from it.
#: Derived: once moved, the value in use is the measurement rounded to a
#: step, at most half a step from it, so a measurement must then move by
#: (HYSTERESIS_STEPS - 0.5) steps to move it again: more than one tick
#: over a load window (0.02 CPU, a fifth of the 0.1 CPU step) needs more
#: than 0.7; other work of one whole step must still show: at most 1.
#: Supported: (0.7, 1].
HYSTERESIS_STEPS = 0.75
#: A left-out domain is tried again after this many load windows, then
#: after twice as many each time the trial fails, up to MAX_RETRY_WINDOWS;
#: a trial lasts TRIAL_WINDOWS (a move may wait a window for the last
#: regrouping to age, then the measurement needs a window of its own).
#: Reasoned (--capacity measured only): a failed trial costs one thread's
#: slow progress for TRIAL_WINDOWS, at most 3 / 20 = 15% of the time after
#: the first failure and 3 / 160 < 2% once the retries have backed off.
RETRY_WINDOWS = 20
MAX_RETRY_WINDOWS = 160
TRIAL_WINDOWS = 3


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


def spread_unplaced(domains, busy, managed, unplaced):
    """``managed`` (CPU the program got per domain) with ``unplaced``, the
    CPU its threads got where the OS ran them -- in no domain yet, or
    before they were bound within the load window (loads.py,
    ``LoadWindow._before_placed``) -- spread over the domains in proportion to what
    their CPUs were busy with beyond ``managed``.
    Where those threads ran is not known (the OS placed them); spread so,
    a program alone shows no other work, and work beside it shows where
    it is only once the threads are bound -- which the controller does
    not do before other work is read (controller.py, ``_binding_deferred``)."""
    free = [max(0.0, sum(busy.get(cpu, 0.0) for cpu in domain.cpus) - mine)
            for domain, mine in zip(domains, managed)]
    total = sum(free)
    if total <= 0.0:
        return managed
    share = min(1.0, unplaced / total)
    return [mine + share * spare for mine, spare in zip(managed, free)]


class CapacityMeter:
    """Per-domain capacity of one program's domains, from the CPUs' busy
    time over the load window.  ``backend.cpu_times()`` is read once per
    ``update``; the clock is the caller's (monotonic ns of its sample)."""

    def __init__(self, backend, window_ns, warn=None, own_ns=time.process_time_ns,
                 managed_elsewhere=None, smooth_windows=1):
        self.backend = backend
        self.window_ns = window_ns
        self.warn = warn
        # cpus -> CPUs the service's other programs received there (module doc).
        self.managed_elsewhere = managed_elsewhere
        self.elsewhere = {}             # domain CPUs -> that, at the last reading
        self.smooth_ns = window_ns * smooth_windows if smooth_windows > 1 else 0
        self._smoothed = {}             # domain CPUs -> (wall_ns, other work averaged)
        self.own_ns = own_ns            # tumbler's own CPU time so far (ns)
        self._own_last = own_ns()
        self._own_booked = {}           # CPU -> tumbler's own ns booked there so far
        self.readings = deque()         # (wall_ns, CPU times less tumbler's own), oldest first
        self.other = {}                 # domain CPUs -> other work in use (CPUs, in steps)
        self.left_out = {}              # domain CPUs -> _LeftOut, while it is out or on trial
        self.failed = None              # why cpu_times cannot be read: measuring stopped
        self.ready = False              # a reading has spanned ready_span_ns
        # /proc/stat counts in clock ticks (10 ms): over 100 ms one tick is a
        # tenth of a CPU, a whole step of the dead band.  Other work is read
        # once the readings span half a window.
        self.ready_span_ns = window_ns // 2

    def start(self, wall_ns):
        """The first reading, when the first target is added (``wall_ns``:
        its sample's clock): other work is known half a window later
        (``ready``), not half a window after the first round."""
        self._read(wall_ns)

    def update(self, domains, domain_cpu, wall_ns, loads=None, unplaced=0.0):
        """Capacities of ``domains`` (by index) given the CPU their threads
        received over the load window (``domain_cpu``, CPUs by index) and
        the loads of the threads to plan: ints (the CPU count) where no
        other work shows, 0.0 where the domain is left out, else floats.
        ``loads`` None (a quiet round's check, which plans nothing): the
        domains left out stay so, and none is left out anew.  ``unplaced``:
        as other_work's."""
        held = self.other_work(domains, domain_cpu, wall_ns, unplaced)
        if held is None:
            return [len(d.cpus) for d in domains]
        capacities = [len(domain.cpus) if other <= 0.0
                      else max(step_of(len(domain.cpus)), len(domain.cpus) - other)
                      for domain, other in zip(domains, held)]
        if len(domains) > 1 and loads is not None:
            self._leave_out(domains, capacities, wall_ns, left_out(capacities, loads))
        elif self.left_out:
            for index, domain in enumerate(domains):
                state = self.left_out.get(domain.cpus)
                if state is not None and state.trial_until is None:
                    capacities[index] = 0.0
        return capacities

    def other_work(self, domains, domain_cpu, wall_ns, unplaced=0.0):
        """CPUs of each of ``domains`` (by index) that other work took over
        the load window, through the dead band: 0.0 until it takes most of
        a step, then whole steps (the module docstring); ``domain_cpu``:
        the CPU the program's threads received there; ``unplaced``: the
        CPU received by its threads in no domain yet, which the OS ran
        anywhere (``spread_unplaced``).  None until the readings span half
        a window, or when they cannot be read.

        auto reads this with ``--capacity cpus`` too: a domain where other
        work competes with the program's threads is left to the OS
        (engine/policy.py, 3.)."""
        busy = self._read(wall_ns)
        if busy is None:
            return None
        managed = list(domain_cpu)
        if self.managed_elsewhere is not None:
            for index, domain in enumerate(domains):
                self.elsewhere[domain.cpus] = elsewhere = self.managed_elsewhere(domain.cpus)
                managed[index] += elsewhere
        if unplaced > 0.0:
            managed = spread_unplaced(domains, busy, managed, unplaced)
        result = []
        for domain, mine in zip(domains, managed):
            cpus = domain.cpus
            other = other_work(cpus, busy, mine)
            if self.smooth_ns:
                other = self._smooth(cpus, other, wall_ns)
            step = step_of(len(cpus))
            held = self.other.get(cpus, 0.0)
            if abs(other - held) >= HYSTERESIS_STEPS * step:
                held = round(other / step) * step
                self.other[cpus] = held
            result.append(held)
        return result

    def _smooth(self, cpus, other, wall_ns):
        """``other`` averaged exponentially over ``smooth_ns`` (per domain;
        the first reading is taken as it is)."""
        last = self._smoothed.get(cpus)
        if last is not None and wall_ns > last[0]:
            weight = 1.0 - math.exp(-(wall_ns - last[0]) / self.smooth_ns)
            other = last[1] + weight * (other - last[1])
        elif last is not None:
            other = last[1]
        self._smoothed[cpus] = (wall_ns, other)
        return other

    def _leave_out(self, domains, capacities, wall_ns, starved):
        """Set the capacity of the domains to leave out to 0.0 (see the
        module docstring: out, on trial, back)."""
        window = self.window_ns
        for index, domain in enumerate(domains):
            state = self.left_out.get(domain.cpus)
            if state is not None and state.trial_until is not None:
                if wall_ns < state.trial_until:
                    continue                    # on trial: planned as measured
                if index not in starved:
                    del self.left_out[domain.cpus]      # the trial showed it is worth a thread
                    continue
                state.retry_windows = min(2 * state.retry_windows, MAX_RETRY_WINDOWS)
                state.retry_at = wall_ns + state.retry_windows * window
                state.trial_until = None
            elif index not in starved:
                self.left_out.pop(domain.cpus, None)    # its other work dropped: back
                continue
            elif state is None:
                state = self.left_out[domain.cpus] = _LeftOut(wall_ns + RETRY_WINDOWS * window)
            elif wall_ns >= state.retry_at:
                state.trial_until = wall_ns + TRIAL_WINDOWS * window
                continue
            capacities[index] = 0.0

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
        times = self._less_own(times)
        readings = self.readings
        readings.append((wall_ns, times))
        # The base: the newest reading at least a window old (or the oldest).
        while len(readings) > 2 and wall_ns - readings[1][0] >= self.window_ns:
            readings.popleft()
        base_ns, base = readings[0]
        span = wall_ns - base_ns
        if span < self.ready_span_ns:
            return None
        self.ready = True
        return busy_shares(base, times, span)


    def _less_own(self, times):
        """``times`` with tumbler's own CPU time taken out of the busy time:
        what it used since the last reading is booked to the CPU it runs on
        now, where the round that used most of it ran.  tumbler (and the
        service, with all its programs) is no other work to plan around: at
        a round every 50 ms with --log it is ~0.05 CPU, and with the
        kernel's own it crossed the dead band of an otherwise idle CPU."""
        own = self.own_ns()
        spent, self._own_last = own - self._own_last, own
        cpu = self.backend.current_cpu()
        if cpu is not None and spent > 0:
            self._own_booked[cpu] = self._own_booked.get(cpu, 0) + spent
        booked = self._own_booked
        if not booked:
            return times
        return {c: (busy - booked.get(c, 0), total) for c, (busy, total) in times.items()}


class _LeftOut:
    """A domain left out of the plan: when to try it again."""

    __slots__ = ("retry_at", "retry_windows", "trial_until")

    def __init__(self, retry_at):
        self.retry_at = retry_at            # wall ns of the next trial
        self.retry_windows = RETRY_WINDOWS  # load windows from a failed trial to the next
        self.trial_until = None             # wall ns the current trial ends, None: none on


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
