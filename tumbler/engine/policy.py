"""Policy choice: which mechanism plans each interval.

* ``tumbler`` -- wave grouping across domains (grouping.py) with the
  variation-interval table and the error tolerance.
* ``observe`` -- the same numbers (thread CV, interval, per-domain loads),
  never a move: the plan keeps every thread where it is.
* ``auto``    -- tumbler across domains; see ``plan_auto`` once speed
  balancing is available.

A policy is a small object with ``plan(threads, domains) -> Plan`` so the
controller never branches on policy names.
"""

from .grouping import DEFAULT_TOLERANCE, plan_tumbler
from .model import Plan
from .variation import VariationTable


class TumblerPolicy:
    name = "tumbler"
    moves_threads = True

    def __init__(self, table=None, tolerance=DEFAULT_TOLERANCE, fixed_interval_ms=None):
        self.table = table or VariationTable()
        self.tolerance = tolerance
        self.fixed_interval_ms = fixed_interval_ms

    def plan(self, threads, domains):
        plan = plan_tumbler(threads, domains, self.table, self.tolerance)
        return self._with_interval(plan)

    def _with_interval(self, plan):
        if self.fixed_interval_ms is not None:
            plan.interval_ms = self.fixed_interval_ms
        return plan


class ObservePolicy(TumblerPolicy):
    """Plans like tumbler so the log shows what it sees; moves nothing."""

    name = "observe"
    moves_threads = False

    def plan(self, threads, domains):
        plan = super().plan(threads, domains)
        kept = {t.tid: t.domain for t in threads}
        return Plan(moves=[], assignment=kept, thread_cv=plan.thread_cv,
                    interval_ms=plan.interval_ms, regroup=False,
                    domain_loads=plan.domain_loads, predicted_loads=plan.domain_loads,
                    spread_before=plan.spread_before, spread_after=plan.spread_before,
                    reason="observe: " + plan.reason)


def make_policy(name, table=None, tolerance=DEFAULT_TOLERANCE, fixed_interval_ms=None):
    if name in ("tumbler", "auto"):
        policy = TumblerPolicy(table, tolerance, fixed_interval_ms)
        policy.name = name
        return policy
    if name == "observe":
        return ObservePolicy(table, tolerance, fixed_interval_ms)
    raise ValueError("unknown policy %r" % name)
