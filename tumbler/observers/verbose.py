"""``-v``: the run's decisions on stderr as they are made."""

import sys

from ..cpulist import format_cpulist
from . import Observer
from .summary import percent


class VerboseReport(Observer):
    """``-v``: one stderr line per interval, plus one per move.  A round's
    reason is said when it differs from the last round's: a single domain's
    "nothing to group across" once, not every round."""

    def __init__(self):
        self._last_reason = None
        self._changes = 0           # the lines of the run's MechanismLog said so far

    def write_round(self, controller, plan, moves):
        reason = "" if plan.reason == self._last_reason else "; " + plan.reason
        self._last_reason = plan.reason
        print("tumbler: round %d: thread loads vary %s (CV); %s; next round in %d ms%s"
              % (controller.stats.intervals, percent(100 * plan.thread_cv),
                 demand(controller.domains, plan.domain_loads), plan.interval_ms, reason),
              file=sys.stderr)
        # What changed in a domain's state (balance/mechanisms.py), once.
        changes, self._changes = controller.stats.mechanisms.since_cursor(self._changes)
        for line in changes:
            print("tumbler: %s" % line, file=sys.stderr)
        for thread, src, dst in moves:
            print("tumbler:   %s thread %d (%s) %sdomain %s" % (
                "place" if src is None else "move", thread.tid, thread.name,
                "in " if src is None else "to ", _cpus(controller.domains, dst)),
                file=sys.stderr)


def demand(domains, loads):
    """``domain 0-1 carries 2.98 CPUs of demand`` or, over several,
    ``domains 0-3 / 4-7 carry 2.98 / 1.02 CPUs of demand``."""
    names = " / ".join(_cpus(domains, index) for index in range(len(loads)))
    return "domain%s %s carr%s %s CPUs of demand" % (
        "s" if len(loads) > 1 else "", names, "y" if len(loads) > 1 else "ies",
        " / ".join("%.2f" % load for load in loads))


def _cpus(domains, index):
    """Domain ``index`` by its CPUs where the plan's domains are the run's."""
    try:
        return format_cpulist(domains[index].cpus)
    except (IndexError, AttributeError, TypeError):
        return "#%d" % index
