"""Stand-ins for what the observers (tumbler/observers/) read of a run: a
controller with its stats, domains, threads and last decision.  Plain
objects with exactly the attributes the observers read, so that their
tests fix what each writes for given inputs, whatever builds them."""

from types import SimpleNamespace

from tumbler.balance.mechanisms import MechanismLog
from tumbler.balance.spreads import SpreadHistory


def make_controller(domains, *, intervals=0, policy="tumbler", dry_run=False, threads=None,
                    decision=None, pins_made=(), steps=0, note="explicit domains",
                    targets=(), **stats):
    """A controller after ``intervals`` rounds; ``stats``: RunStats
    fields other than ``intervals``.  Its warnings land in ``warned``."""
    fields = dict(intervals=intervals, quiet=0, threads_seen=0, processes_seen=set(),
                  migrations=0, threads_moved=0, pins=0,
                  spreads=SpreadHistory(), warnings=0, outsiders=0, priority=None,
                  startup_s=0.0, mechanisms=MechanismLog())
    fields.update(stats)
    warned = []
    merger = SimpleNamespace(unmerged=lambda: SimpleNamespace(domains=[d.cpus for d in domains]))
    return SimpleNamespace(merger=merger,
        stats=SimpleNamespace(**fields), policy=SimpleNamespace(name=policy),
        domains=list(domains), dry_run=dry_run, threads=threads or {},
        last_decision=decision, pins_made=list(pins_made), steps=steps,
        choice=SimpleNamespace(note=note), targets=list(targets), warned=warned,
        warn=warned.append)


def thread(tid, name, domain=None, cpu=None):
    """A tracked thread: bound to ``domain``, ``cpu`` CPUs received."""
    return SimpleNamespace(tid=tid, name=name, domain=domain, cpu=cpu)


class Clock:
    """time.monotonic (s) and monotonic_ns that the test sets."""

    def __init__(self, now=100.0):
        self.now = now

    def monotonic(self):
        return self.now

    def monotonic_ns(self):
        return round(self.now * 1e9)
