"""``--log FILE``: one JSON object per interval (JSON lines).

Keys of each line (stable; scripts may rely on them):

``t``               seconds since tumbler started
``round``           interval number, from 1
``policy``          the policy that planned it
``reason``          why the plan is what it is (human text)
``threads``         threads measured this interval
``thread_cv``       CV of the thread loads (selects the interval)
``interval_ms``     the interval chosen for the next round
``domains``         the domains, as CPU lists
``domain_loads``    summed load per domain before the moves (CPUs' worth);
                    a thread's load is its demand, CPU time plus run-queue
                    wait over wall time, capped at one CPU
``domain_cpu``      CPU time the threads of each domain received over the
                    load window (utilisation, CPUs' worth)
``domain_spread``   CV of per-capacity domain loads before the moves
``predicted_loads`` the same after the plan, ``predicted_spread`` its CV
``moves``           moves made: ``{"tid", "name", "from", "to"}`` (``from``
                    is null for a thread's first placement)
``dry_run``         true if nothing was really moved
``mechanisms``      per domain index, which mechanism acted and why: ``os``
                    (placement inside the domain left to the OS) or
                    ``speed: ...`` (speed balancing engaged, with the reason)
``pins``            speed balancing's pins this round: ``{"tid", "name",
                    "cpu"}``, ``cpu`` null when handed back to the domain
"""

import json
import time

from .cpulist import format_cpulist


class RunLog:
    def __init__(self, path):
        self.path = path
        self.file = open(path, "w", buffering=1)
        self.started = time.monotonic()
        self.extra = []         # callables(controller) -> dict merged into each line

    def write_round(self, controller, plan, applied):
        record = {
            "t": round(time.monotonic() - self.started, 4),
            "round": controller.stats.intervals,
            "policy": controller.policy.name,
            "reason": plan.reason,
            "threads": len(plan.assignment),
            "thread_cv": round(plan.thread_cv, 4),
            "interval_ms": plan.interval_ms,
            "domains": [format_cpulist(d.cpus) for d in controller.domains],
            "domain_loads": [round(x, 4) for x in plan.domain_loads],
            "domain_spread": round(plan.spread_before, 4),
            "domain_cpu": _received_per_domain(controller),
            "predicted_loads": [round(x, 4) for x in plan.predicted_loads],
            "predicted_spread": round(plan.spread_after, 4),
            "moves": [{"tid": t.tid, "name": t.name, "from": src, "to": dst}
                      for t, src, dst in applied],
            "dry_run": controller.dry_run,
        }
        decision = controller.last_decision
        if decision is not None:
            record["mechanisms"] = {str(d): note for d, note in sorted(decision.notes.items())}
            record["pins"] = [{"tid": t.tid, "name": t.name, "cpu": cpu, "step": step}
                              for t, cpu, step in controller.pins_made]
        for extra in self.extra:
            record.update(extra(controller))
        self.file.write(json.dumps(record) + "\n")

    def close(self):
        self.file.close()


def _received_per_domain(controller):
    """CPU received per domain (Eq. 1 summed; loads are demand)."""
    sums = [0.0] * len(controller.domains)
    for thread in controller.threads.values():
        if thread.domain is not None and thread.cpu is not None:
            sums[thread.domain] += thread.cpu
    return [round(x, 4) for x in sums]
