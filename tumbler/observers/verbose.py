"""``-v``: the run's decisions on stderr as they are made."""

import sys

from . import Observer


class VerboseReport(Observer):
    """``-v``: one stderr line per interval, plus one per move."""

    def write_round(self, controller, plan, moves):
        print("tumbler: round %d: cv %.2f, next %d ms, domain loads %s: %s"
              % (controller.stats.intervals, plan.thread_cv, plan.interval_ms,
                 " ".join("%.2f" % x for x in plan.domain_loads), plan.reason),
              file=sys.stderr)
        for thread, src, dst in moves:
            print("tumbler:   %s %d (%s) -> domain %d" % (
                "place" if src is None else "move", thread.tid, thread.name, dst),
                file=sys.stderr)
