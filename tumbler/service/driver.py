"""The one loop: drives any number of runs (assembly.py) and named
deadlines until something ends it -- ``tumbler -p`` and ``exec`` (one
run), ``--share space`` (a run per program) and the service (a run per
managed program, and its scans).

Each turn:

1. signals: ``on_signal(signum)`` says what one means (a reason to end,
   or None to go on: exec forwards it, the service reloads on SIGHUP);
   without it, any signal ends the loop;
2. ``checks``: each returns a reason to end, or None (exec: its command
   exited);
3. no run left: the loop ends with ``ends_when_empty``, unless that is
   None (the service runs on without programs);
4. the named deadlines that are due, in the order they were set: each
   action returns when it is due next (``end_at``'s deadline ends the
   loop: ``--duration``);
5. every run not parked whose controller has something due within
   ``slack`` (``Controller.due``): its ``tick``.  A run whose targets
   are gone leaves (``on_exit``); a tick that fails is ``on_error``'s
   (the service drops that program alone), or ends the loop with the
   error; ``on_tick`` sees every run that goes on (the service's thread
   caps).  A run's ticks come at least its ``Pace.spacing`` apart
   (``paces``: the service's CPU budget, budget.py, sets it from the
   CPU each tick took, which the loop measures);
6. sleep until the next deadline or run is due, a signal, or a watched
   descriptor (``on_ready``: the service's control socket).

Several runs tick with SLACK_S (controller.py): their cadences fall
together and the loop wakes once for them all; a loop of one run passes
0.0 and wakes when its one controller asks.  Handing runs back is the
caller's (assembly.py), whatever ended the loop.
"""

import gc
import time

from ..balance.controller import SLACK_S
from ..errors import TumblerError
from ..platform.base import PlatformError
from .budget import Pace

__all__ = ["Driver", "SLACK_S"]


class Driver:
    """One loop over ``runs`` (key -> assembly.Run) and named deadlines
    (the module doc)."""

    def __init__(self, runs=None, slack=SLACK_S, ends_when_empty=None):
        self.runs = {} if runs is None else runs
        self.paces = {}         # run key -> Pace: its ticks measured, their spacing
        self.slack = slack
        self.ends_when_empty = ends_when_empty
        self.deadlines = {}     # name -> [due (monotonic s), action(now)]
        self.checks = []        # () -> reason to end, or None
        self.on_signal = None   # signum -> reason to end, or None to go on
        self.on_ready = None    # () when a watched descriptor is readable
        self.on_error = None    # (run, exception) when its tick failed
        self.on_tick = None     # (run) after a tick, while it goes on
        self.on_exit = None     # (run) once its targets are gone (it has left ``runs``)
        self._ended = None

    def add(self, run):
        """Drive ``run`` from now on (its targets added): its controller's
        clock starts -- the first round comes its first interval later."""
        run.controller.start_clock()
        self.runs[run.key] = run

    def tick_soon(self, key):
        """Let run ``key`` tick when its controller asks, not after the
        budget's spacing -- once: its measured cost and spacing stay (a
        program woken from parking, or gone, whose tick drops it)."""
        pace = self.paces.get(key)
        if pace is not None:
            pace.ticked_at = None

    def at(self, name, due, action):
        """Call ``action(now)`` once ``due`` (monotonic s) comes; it returns
        when it is due next."""
        self.deadlines[name] = [due, action]

    def end_at(self, due, reason):
        """End the loop with ``reason`` at ``due`` (``--duration``)."""
        def end(now):
            self._ended = reason
            return due
        self.at("end", due, end)

    def run(self, waiter):
        """Drive until something ends the loop; returns why (a short text).

        What was made before it (the imports, the runs) lives as long as
        the loop: moved out of the cyclic GC's way (``gc.freeze``), which
        ``exec`` pauses for its set-up (commands/quick.py) and turns on
        here."""
        gc.freeze()
        gc.enable()
        runs = self.runs
        while True:
            for signum in waiter.take():
                reason = ("signal %d" % signum if self.on_signal is None
                          else self.on_signal(signum))
                if reason:
                    return reason
            for check in self.checks:
                reason = check()
                if reason:
                    return reason
            if not runs and self.ends_when_empty is not None:
                return self.ends_when_empty
            wake = None
            for entry in list(self.deadlines.values()):
                due, action = entry
                if time.monotonic() >= due:
                    due = entry[0] = action(time.monotonic())
                    if self._ended is not None:
                        return self._ended
                if wake is None or due < wake:
                    wake = due
            for run in list(runs.values()):
                if run.parked:
                    continue
                due = run.controller.due() if run.controller.targets else None
                pace = self.paces.get(run.key)
                if due is not None and pace is not None:
                    due = pace.due(due)
                if due is None or due <= time.monotonic() + self.slack:
                    due = self._tick(run)
                    if due is None:
                        continue
                if wake is None or due < wake:
                    wake = due
            if not runs and self.ends_when_empty is not None:
                continue                # the last run left: ended, at the next turn's checks
            ready = waiter.sleep(max(0.0, wake - time.monotonic()))
            if ready and self.on_ready is not None:
                self.on_ready()

    def _tick(self, run):
        """Tick ``run`` (unless its targets are gone already); when it is
        due next, or None if it left."""
        controller = run.controller
        if controller.targets:
            spent = time.process_time()
            try:
                due = controller.tick(self.slack)
            except (TumblerError, PlatformError) as exc:
                if self.on_error is None:
                    raise
                self.paces.pop(run.key, None)
                self.on_error(run, exc)
                return None
            now = time.monotonic()
            pace = self.paces.get(run.key)
            if pace is None:
                pace = self.paces[run.key] = Pace()
            pace.add(time.process_time() - spent, due - now, now)
            due = pace.due(due)
        if not controller.targets:
            self.runs.pop(run.key, None)
            self.paces.pop(run.key, None)
            if self.on_exit is not None:
                self.on_exit(run)
            return None
        if self.on_tick is not None:
            self.on_tick(run)
            if run.key not in self.runs:
                return None
        return due
