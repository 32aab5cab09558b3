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
  hundreds of busy threads.  It stays harmless because nice only decides
  who runs first, not how much: tumbler asks about 1% of one CPU
  (BENCHMARKS.md) and sleeps between rounds, so the program loses that
  much and no more.  Real-time priority (SCHED_RR 1 with an
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

#: The nice value tumbler runs at when allowed to raise its priority.
NICE = -20

_state = [None]         # how tumbler runs (a note for the summary), once raised


def raise_priority():
    """Raise this process's priority as far as allowed (see the module
    docstring); return a note saying how it runs.  Only the first call
    changes anything."""
    if _state[0] is None:
        _state[0] = _raise()
    return _state[0]


def note():
    """How tumbler runs, for the summary (None if never raised)."""
    return _state[0]


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
