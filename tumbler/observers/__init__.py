"""Observers of a balancing run: the run log (runlog.py), the verbose
report (verbose.py), the probes (probes.py, through ``tumbler.tracing``),
the exit summary (summary.py), and the service's metrics file
(metrics.py).  They watch; they never change a thread.

The loop calls ``write_round`` after every full round; the command that
runs the loop calls ``start`` once the targets are known, then ``close``
and ``summary_lines`` when balancing ends.  Every hook has a no-op
default here, so an observer implements only what it needs.
"""


class Observer:
    """Base of the observers; see the module doc."""

    def start(self, controller):
        """The targets are known and balancing begins."""

    def write_round(self, controller, plan, applied):
        """After a full round: its plan and the moves ``applied``
        ((thread, from, to) each)."""

    def close(self):
        """Balancing ended (every thread is back): release what is held."""

    def processes(self):
        """The PIDs of the processes it started (a tracer), running now."""
        return ()

    def summary_lines(self):
        """Lines for the exit summary."""
        return []

    def summary_fields(self):
        """Keys for the JSON summary (``--summary-json``)."""
        return {}
