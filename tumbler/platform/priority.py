"""The priority tumbler runs at: overload must not starve the balancer.

A program of 1,000 busy threads leaves a process at nice 0 about 1/1,000
of the machine: discovery, ``--duration``, signals and restore all wait
(a 5 s observe run took 68 s, and saw 125 of 1,001 threads).  Start-up is
part of it: Python and tumbler's imports take tens of ms of CPU, seconds
to minutes of wall time on such a machine.  So ``raise_priority`` runs
first thing (``launch.py``, before the imports; for ``exec`` right after
its command starts, so that the command keeps the priority it was given)
and again, idempotently, at the start of a balancing run (``run.py``, for
any other way in):

* as root (CAP_SYS_NICE): nice ``NICE`` (-20), weight 88761 against 1024
  for a thread at nice 0, so tumbler runs when it asks to even behind
  hundreds of busy threads -- for its start-up only.  Once balancing
  starts (``settle_priority``) it goes back to nice 0, and rises to
  ``NICE`` again only when the machine shows it is needed: a wake-up of
  its loop ``LATE_S`` (50 ms) or more behind time ``LATE_WAKES`` (3)
  times in a row (``woke``, from the loop's waiter).  Raised, it goes
  back to nice 0 once its wake-ups have been on time for ``CALM_S``
  (10 s; at least ``LATE_WAKES`` of them): what made it late (a program
  of 16,000 threads, issue 47) may have gone, and a service kept at -20
  would weigh on every program it manages from then on.  At -20 its waits
  are short because it is raised, so going back is a trial: raised again
  within the calm period it had waited, it waits twice as long the next
  time, up to ``CALM_MAX_S`` (80 s) -- under a lasting overload about one
  trial in 80 s, three late wake-ups each (3% of its wake-ups late at
  the service's fewest, 1.5 a second), and once the overload is gone,
  back at nice 0 within 80 s.  Nice is not
  harmless: a nice -20 task's load weight is 87 times a nice-0 one's, so
  even at 1% of a CPU it weighs on the kernel's load balancer about like
  one more busy thread on the CPU it runs on, and the program's threads
  are spread around a phantom (beside a CPU hog, spmd 3 threads on 2
  CPUs ran 10.8% slower under a tumbler at nice -20 that moved nothing,
  3.1% at nice 0: BENCHMARKS.md, issue 27).  Real-time priority (SCHED_RR 1 with an
  RLIMIT_RTTIME budget) was tried and not adopted: in 1 of 4 runs of
  spmd with speed balancing engaged the 500 ms budget was reported spent
  (SIGXCPU) and tumbler's CPU time rose from 0.1 to 1.08 s, which is
  not explained (issue 13 report), so it was not shown harmless.
* not root: unchanged, and an overloaded machine delays tumbler as it
  delays everything else.

``SCHED_RESET_ON_FORK``: what tumbler starts while raised (bpftrace,
compare's workloads) runs at nice 0, not at tumbler's -20.  illumos has
no such flag; ``exec``'s command is started before the raise on either
system.
"""

import os
import time

from .files import read_file

#: The nice value tumbler runs at when allowed to raise its priority.
NICE = -20
#: A loop wake-up this late (seconds), LATE_WAKES times in a row, raises
#: the priority of a settled tumbler (module docstring).
LATE_S = 0.05
LATE_WAKES = 3
#: Raised, back to nice 0 after this long (seconds) with every wake-up on
#: time, LATE_WAKES of them at least: five scans of the service at its
#: default interval (2 s), fifteen of its looks at parked programs, twelve
#: or more of ``-p``'s rounds (50-800 ms apart, engine/variation.py) -- on
#: time over several turns of any loop, not one lucky wake-up.  Short against what staying raised
#: costs the programs (module docstring, 10.8% against 3.1%).
CALM_S = 10.0
#: Raised again before a calm period had passed at nice 0: the next calm
#: period is twice the last, up to this (seconds).  Under a lasting
#: overload a trial at nice 0 costs LATE_WAKES late wake-ups, one trial
#: per CALM_MAX_S (at 1.5 wake-ups a second, the service's fewest -- its
#: looks at parked programs -- 3% of its wake-ups late or less:
#: tests/platform/test_priority.py), and a tumbler whose overload has gone
#: is back at nice 0 within it.
CALM_MAX_S = 80.0

_clock = time.monotonic
_state = [None]         # how tumbler ran at start-up (raise_priority's note)
_run = [None]           # _Settled once balancing starts at nice 0 (settle_priority)


class _Settled:
    """A tumbler balancing at nice 0 that rises while its wake-ups run
    late and comes back once they are on time (the module docstring)."""

    def __init__(self, now):
        self.raised_at = None       # monotonic s it rose at; None: at nice 0
        self.waited_s = 0.0         # the wait that raised it
        self.late = 0               # late wake-ups in a row (at nice 0)
        self.calm_from = None       # raised: since when every wake-up was on time
        self.calm_wakes = 0         # raised: on-time wake-ups since calm_from
        self.calm_s = CALM_S        # the calm period a raised tumbler waits for
        self.lowered_at = now       # when it was last set to nice 0
        self.times = 0              # how often it rose
        self.raised_s = 0.0         # time raised, rises that ended

    def woke(self, waited, now):
        if self.raised_at is None:
            if waited < LATE_S:
                self.late = 0
                return
            self.late += 1
            if self.late >= LATE_WAKES:
                self._rise(waited, now)
            return
        if waited >= LATE_S:
            self.calm_from, self.calm_wakes = now, 0    # late even at NICE: the calm restarts
            return
        self.calm_wakes += 1
        if self.calm_wakes >= LATE_WAKES and now - self.calm_from >= self.calm_s:
            self._lower(now)

    def _rise(self, waited, now):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, NICE)
        except OSError:
            return
        # Late again before a calm period had passed at nice 0: the trial
        # failed, the next calm is longer; a new overload starts at CALM_S.
        if self.times and now - self.lowered_at < self.calm_s:
            self.calm_s = min(self.calm_s * 2, CALM_MAX_S)
        else:
            self.calm_s = CALM_S
        self.raised_at, self.waited_s, self.late = now, waited, 0
        self.calm_from, self.calm_wakes = now, 0
        self.times += 1

    def _lower(self, now):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            return
        self.raised_s += now - self.raised_at
        self.raised_at, self.lowered_at = None, now

    def note(self, now):
        if self.raised_at is None:
            if not self.times:
                return ("nice 0 (it starts at -20, and rises again only while its balancing "
                        "falls %d ms behind schedule)" % (LATE_S * 1000))
            return "nice 0 (raised to %d for %s while its balancing fell behind schedule)" % (
                NICE, self._spells(self.raised_s))
        earlier = "" if self.times == 1 else "; %s earlier" % self._spells(
            self.raised_s, self.times - 1)
        return "nice %d for the last %.0f s (its balancing waited %d ms for a CPU at nice 0; " \
            "back to 0 after %.0f s on schedule%s)" % (
                NICE, now - self.raised_at, self.waited_s * 1000, self.calm_s, earlier)

    def _spells(self, seconds, times=None):
        times = self.times if times is None else times
        return "%.0f s" % seconds if times == 1 else "%.0f s in %d spells" % (seconds, times)


def raise_priority():
    """Raise this process's priority as far as allowed (see the module
    docstring); return a note saying how it runs.  Only the first call
    changes anything."""
    if _state[0] is None:
        _state[0] = _raise()
    return _state[0]


def note():
    """How tumbler runs, for the summary and ``status`` (None if never
    raised)."""
    if _run[0] is not None:
        return _run[0].note(_clock())
    return _state[0]


def settle_priority():
    """Balancing starts: back to nice 0 if raised at start-up (see the
    module docstring), raised again by ``woke`` while the loop runs late.
    Only the first call changes anything."""
    if _run[0] is not None or not (_state[0] or "").startswith("nice"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        return
    _run[0] = _Settled(_clock())


def woke(late_s):
    """The loop woke ``late_s`` seconds after the time it asked for (its
    waiter calls this at every sleep).  What counts is how long tumbler
    waited for a CPU since the last call: on Linux its own run-queue wait
    (schedstat), elsewhere ``late_s``.  After LATE_WAKES waits of LATE_S
    or more in a row, up to NICE; raised, back to nice 0 after a calm
    period of waits under LATE_S (the module docstring)."""
    run = _run[0]
    if run is None:
        return
    waited = _run_queue_wait_s()
    if waited is None:
        waited = late_s
    run.woke(waited, _clock())


_wait_seen = [None]     # this thread's run-queue wait at the last call (ns)


def _run_queue_wait_s():
    """Seconds this thread waited on a run queue since the last call
    (/proc/thread-self/schedstat's second field), None where unreadable."""
    try:
        now = int(read_file("/proc/thread-self/schedstat").split()[1])
    except (OSError, ValueError, IndexError):
        return None
    before, _wait_seen[0] = _wait_seen[0], now
    return None if before is None else (now - before) / 1e9


def _raise():
    reset = getattr(os, "SCHED_RESET_ON_FORK", 0)
    if reset:
        # First, so that no child ever starts at nice -20 (exec's command
        # would inherit it otherwise).
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER | reset, os.sched_param(0))
        except OSError:
            return "unchanged (not root: an overloaded machine can delay tumbler)"
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except (OSError, AttributeError):
        return "unchanged (not root: an overloaded machine can delay tumbler)"
    return "nice %d" % NICE
