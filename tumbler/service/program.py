"""A program the service manages (loop.py): its run (assembly.py) and what
``tumbler status`` and the metrics file report of it."""

import time

from ..cpulist import format_cpulist
from .assembly import Run


class Program(Run):
    """A managed program: its run (assembly.py) and what the status reports."""

    __slots__ = ("rule", "since", "cpu_mark", "used", "received")

    def __init__(self, pid, name, rule, *parts, **options):
        """The run of ``parts`` and ``options`` (assembly.Run's)."""
        super().__init__(pid, *parts, name=name, **options)
        self.rule = rule
        self.since = time.monotonic()
        self.cpu_mark = None        # (monotonic s, process CPU ns) at the last scan
        self.used = 0.0             # CPUs it used between the last two scans
        self.received = None        # (rounds, controller.received_now()) cached

    @property
    def pid(self):
        return self.key

    def received_on(self, cpus):
        """CPU this program's threads received on ``cpus`` (CPUs) as its last
        round measured it, each domain's spread evenly over its CPUs; a
        parked program's use between the last two scans, spread over all
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
                "parked": self.parked,
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
