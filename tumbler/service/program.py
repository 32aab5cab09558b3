"""A program the service manages (loop.py): its run (assembly.py) and what
``tumbler status`` and the metrics file report of it.

Parked programs (issue 29).  A program using too little CPU to make any
of its domains busier than the tolerance allows -- less than ``park_below``
CPUs between two scans, by default the tolerance times its smallest
domain's CPUs (0.1 CPU on one-CPU domains), and less than its rule's
``min_cpu`` -- cannot be imbalanced enough to matter: it is *parked*.  Its
controller is not ticked (no per-thread read, no round); PARKED_LOOKS (loop.py)
times per scan interval one per-process figure is read
(``Backend.process_cpu_and_name``: utime + stime of /proc/PID/stat, or
psinfo's pr_time; the name in it renames a program that exec'd), and the first look that sees it rise to WAKE_ABOVE times
``park_below`` (hysteresis, so that one near the threshold does not
flap) wakes it for a full round at once: one using that much or
more is back under full rounds within one scan interval (the second look
after it rose at the latest, two thirds of an interval; one using ten
times ``park_below``, at the first).
Its threads stay where they are, still recorded: every exit and
``tumbler restore`` put them back as any other's.  ``status`` and the
metrics show who is parked and why.
"""

import time

from ..cpulist import format_cpulist
from ..platform.base import PlatformError
from .assembly import Run

#: A parked program wakes when it uses this many times its ``park_below``
#: over one look; a program not parked is parked below ``park_below`` over
#: a scan interval.  The band between is hysteresis: process CPU is counted
#: in ticks (USER_HZ, 10 ms), one tick over a look of 2/3 s (PARKED_LOOKS
#: at the default 2 s scan interval) is 0.015 CPU, and 20 programs x 100
#: mostly sleeping threads using 0.074-0.091 CPU each crossed 0.100 on their
#: looks every second or two, parked again at the next scan (issue 47: the
#: service at 1.3-1.8% of a core instead of 0.3%).  Over 240 looks of four
#: such programs 32 reached park_below and none 1.5 x park_below (the most
#: 0.120; BENCHMARKS.md, "Parking with hysteresis"); a program that truly
#: turns busy uses far more.  tests/service/test_parking_looks.py holds it
#: between 9 and 11 ticks a look.
WAKE_ABOVE = 1.5


class Program(Run):
    """A managed program: its run (assembly.py) and what the status reports."""

    __slots__ = ("rule", "since", "cpu_mark", "used", "received", "unparked_at", "said")

    def __init__(self, pid, name, rule, *parts, **options):
        """The run of ``parts`` and ``options`` (assembly.Run's)."""
        super().__init__(pid, *parts, name=name, **options)
        self.rule = rule
        self.since = time.monotonic()
        self.cpu_mark = None        # (monotonic s, process CPU ns) at the last look
        self.used = 0.0             # CPUs it used between the last two looks
        self.received = None        # (rounds, controller.received_now()) cached
        self.unparked_at = None     # monotonic s its last wake from parking was decided
        self.said = 0               # its MechanismLog's lines logged so far

    def changes(self):
        """The lines its domains' changes of state made since the last call
        (balance/mechanisms.py): "speed balancing on in domain 0-3: ..."."""
        lines, self.said = self.controller.stats.mechanisms.since_cursor(self.said)
        return lines

    def weigh(self, shortest, below, why):
        """Park or wake this program by the CPUs it used since the last look
        (the module doc): under ``below`` CPUs it is parked
        (``why`` says whose threshold); a parked one wakes for a full round
        at once when it uses WAKE_ABOVE times ``below`` or more, and stays
        parked in the band between (hysteresis: one near the threshold does
        not flap).  A look less than ``shortest`` s after
        the last reads nothing: the kernel counts process CPU in ticks, and
        over a short window one tick more or less is a large rate.  A
        program that exited is left to its next tick.  True if it was
        parked and is no longer: its tick is due now, whatever its pace
        (budget.py)."""
        mark = self.cpu_mark
        if mark is not None and time.monotonic() - mark[0] < shortest:
            return False
        try:
            cpu_ns, self.name = self.controller.backend.process_cpu_and_name(self.pid)
        except PlatformError:
            if self.parked:
                self.parked = None          # its tick finds it gone and drops it
                return True
            return False
        now = time.monotonic()
        self.cpu_mark = (now, cpu_ns)
        if mark is None or now <= mark[0]:
            return False
        used = self.used = (cpu_ns - mark[1]) / 1e9 / (now - mark[0])
        if not self.parked:
            if used < below:
                self.parked = "%.3f CPUs used, below %.3f (%s)" % (used, below, why)
        elif used >= below * WAKE_ABOVE:
            self.parked = None
            self.unparked_at = now
            self.controller.resume()        # a full round at once
            return True
        return False

    def alive(self):
        """Whether its process is still there (one per-process read: a
        program whose rounds the budget spaces is not left unnoticed,
        gone, until its next round)."""
        try:
            self.controller.backend.process_cpu_and_name(self.pid)
        except PlatformError:
            return False
        return True

    def threads_now(self):
        """How many threads its process has now (one fstat on Linux), None
        if the OS cannot tell cheaply: a program whose rounds the budget
        spaces may grow past its cap between two of them."""
        try:
            return self.controller.backend.thread_count(self.pid)
        except PlatformError:
            return None

    def park_below(self, default):
        """(CPUs below which this program is parked, whose threshold that
        is): its rule's ``park_below``, else ``default`` (the service's),
        else its policy's tolerance times its smallest domain's CPUs, and
        at least its rule's ``min_cpu`` (the module doc)."""
        below = self.rule.park_below
        if below is None:
            below = default
        if below is not None:
            return below, "park_below"
        controller = self.controller
        below = controller.policy.tolerance * min(d.capacity for d in controller.domains)
        return max(below, self.rule.min_cpu), "tolerance x smallest domain, min_cpu"

    @property
    def pid(self):
        return self.key

    def received_on(self, cpus):
        """CPU this program's threads received on ``cpus`` (CPUs) as its last
        round measured it, each domain's spread evenly over its CPUs; a
        parked program's use between the last two looks, spread over all
        its domains (balance/capacity.py: not other work to the others)."""
        controller = self.controller
        if self.parked:
            everywhere = frozenset().union(*(d.cpus for d in controller.domains))
            shares = [(everywhere, self.used)]
        else:
            rounds = controller.stats.intervals
            if self.received is None or self.received[0] != rounds:
                self.received = (rounds, controller.received_now())
            shares = self.received[1]
        return sum(cpu * len(cpus & where) / len(where) for where, cpu in shares
                   if cpu and not cpus.isdisjoint(where))

    def status(self):
        c = self.controller
        decision = c.last_decision
        minutes = max(time.monotonic() - self.since, 1e-9) / 60.0
        loads = list(decision.plan.domain_loads) if decision is not None else []
        return {"pid": self.pid, "name": self.name, "rule": self.rule.name,
                "policy": c.policy.name,
                "domains": [format_cpulist(d.cpus) for d in c.domains],
                "domain_load": [round(x, 3) for x in loads],
                "capacity": [round(d.capacity, 3) for d in c.domains],
                "threads": len(c.threads), "moves": c.stats.migrations,
                "moves_per_min": round(c.stats.migrations / minutes, 2),
                "pins": c.stats.pins,
                "parked": self.parked, "unparked_at": self.unparked_at,
                "other_work": _per_domain(c.other_meter, "other", c.domains),
                "other_programs": _per_domain(c.other_meter, "elsewhere", c.domains),
                "speed": bool(decision is not None and decision.engaged),
                "intervals": c.stats.intervals, "quiet_intervals": c.stats.quiet}


def _per_domain(meter, table, domains):
    """A meter's ``table`` (other work held, or the service's other programs'
    CPU taken off it) per domain, rounded; None without a meter."""
    if meter is None:
        return None
    values = getattr(meter, table)
    return [round(values.get(d.cpus, 0.0), 3) for d in domains]
