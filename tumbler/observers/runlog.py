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
``capacity``        each domain's capacity: its CPU count, or with
                    ``--capacity measured`` what other work leaves of its
                    CPUs once that is a step or more (balance/capacity.py)
``domain_spread``   CV of per-capacity domain loads before the moves
``predicted_loads`` the same after the plan, ``predicted_spread`` its CV
``moves``           moves made: ``{"tid", "name", "from", "to"}`` (``from``
                    is null for a thread's first placement)
``dry_run``         true if nothing was really moved
``mechanisms``      per domain index, which mechanism acted and why: ``os``
                    (placement inside the domain left to the OS) or
                    ``speed: ...`` (speed balancing engaged, with the reason)
``pins``            speed balancing's pins since the last line: ``{"tid",
                    "name", "cpu", "step"}``, ``cpu`` null when handed back
                    to the domain, ``step`` the number of the speed
                    balancing step that made it
``step``            the number of this round's own step (rounds and the
                    speed steps between them are numbered together, so a
                    pin of a lower ``step`` was made between rounds)
``changes``         only in a round where some domain's state changed: one
                    plain line each (balance/mechanisms.py), as ``-v`` says
"""

import json
import time

from ..cpulist import format_cpulist
from .. import errors
from ..errors import UsageError
from ..safefile import UnsafePath, open_output
from . import Observer


def open_run_log(path, **options):
    """A RunLog of ``path`` (RunLog's ``options``); UsageError, one line,
    if it cannot be written or tumbler.safefile refuses it."""
    try:
        return RunLog(path, **options)
    except UnsafePath as exc:
        raise UsageError("cannot write log: %s" % exc) from None
    except OSError as exc:
        raise UsageError("cannot write log %s: %s" % (path, exc.strerror)) from None


class RunLog(Observer):
    """Writes the log.  A write that fails (a full disk, ``/dev/full``)
    stops the log, not the balancing: one warning says so, and the summary
    counts it."""

    def __init__(self, path, warn=None, append=False, started=None):
        """``append``: add to ``path`` (the service: one log, a line per
        round of each program, whole lines since each is one write to an
        O_APPEND file); ``started``: the monotonic time ``t`` counts from."""
        self.path = path
        self.file = open_output(path, append=append)
        self.started = time.monotonic() if started is None else started
        self.extra = []         # callables(controller) -> dict merged into each line
        self.changes = 0        # the lines of the run's MechanismLog logged so far
        self.warn = warn or errors.warn

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
            "capacity": [round(d.capacity, 3) for d in controller.domains],
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
            record["step"] = controller.steps
        changes, self.changes = controller.stats.mechanisms.since_cursor(self.changes)
        if changes:
            record["changes"] = changes
        for extra in self.extra:
            record.update(extra(controller))
        if self.file is None:
            return
        try:
            self.file.write(json.dumps(record) + "\n")
        except OSError as exc:
            self._fail(exc)
            controller.stats.warnings += 1

    def _fail(self, exc):
        self.warn("cannot write log %s: %s; the log stops here" % (self.path, exc.strerror))
        try:
            self.file.close()
        except OSError:
            pass            # what was buffered is lost either way
        self.file = None

    def close(self):
        if self.file is not None:
            try:
                self.file.close()
            except OSError as exc:
                self._fail(exc)


def _received_per_domain(controller):
    """CPU received per domain (Eq. 1 summed; loads are demand)."""
    sums = [0.0] * len(controller.domains)
    for thread in controller.threads.values():
        if thread.domain is not None and thread.cpu is not None:
            sums[thread.domain] += thread.cpu
    return [round(x, 4) for x in sums]
