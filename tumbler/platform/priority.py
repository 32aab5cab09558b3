"""The priority tumbler runs at: overload must not starve the balancer.

A program of 1,000 busy threads leaves a process at nice 0 about 1/1,000
of the machine: discovery, ``--duration``, signals and restore all wait
(a 5 s observe run took 68 s, and saw 125 of 1,001 threads).  Start-up is
part of it: Python and tumbler's imports take ~0.2 s of CPU, 20 s or more
of wall time on such a machine.  So ``raise_priority`` runs first thing
(``launch.py``, before the imports) and again, idempotently, at the start
of a balancing run (``run.py``, for any other way in):

* as root (CAP_SYS_NICE): SCHED_RR at priority ``RT_PRIORITY`` (1, the
  lowest real-time level: IRQ threads and watchdogs still come first),
  with a budget of ``RT_BUDGET_US`` of CPU time between two sleeps
  (RLIMIT_RTTIME).  tumbler sleeps between rounds and a round of 10,000
  threads takes well under it; a tumbler that spends it (a bug) gets
  SIGXCPU and carries on at nice ``NICE`` for the rest of the run, so it
  can never hold a CPU.  The kernel's real-time throttling
  (``kernel.sched_rt_runtime_us``, 95% of each CPU by default) is a
  second fence.
* if real-time is refused but raising the nice value is allowed: nice
  ``NICE`` (-20; weight 88761 against 1024 at nice 0).
* otherwise (not root): unchanged, and an overloaded machine can delay
  tumbler as it delays everything else.

``SCHED_RESET_ON_FORK``: what tumbler starts (``exec``'s command,
bpftrace, compare's workloads) runs at normal priority.
"""

import os
import resource
import signal

#: SCHED_RR priority as root: the lowest real-time level.
RT_PRIORITY = 1
#: CPU time (us) tumbler may use at real-time priority without sleeping.
RT_BUDGET_US = 500_000
#: The nice value when real-time priority is refused or its budget spent.
NICE = -20

_RESET = getattr(os, "SCHED_RESET_ON_FORK", 0)
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
    if hasattr(os, "sched_setscheduler") and hasattr(resource, "RLIMIT_RTTIME"):
        try:
            resource.setrlimit(resource.RLIMIT_RTTIME, (RT_BUDGET_US, resource.RLIM_INFINITY))
            signal.signal(signal.SIGXCPU, _leave_real_time)
            os.sched_setscheduler(0, os.SCHED_RR | _RESET, os.sched_param(RT_PRIORITY))
            return "real-time (SCHED_RR %d, at most %d ms of CPU between sleeps)" % (
                RT_PRIORITY, RT_BUDGET_US // 1000)
        except (OSError, ValueError):
            signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except (OSError, AttributeError):
        return "unchanged (not root: an overloaded machine can delay tumbler)"
    if _RESET:
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER | _RESET, os.sched_param(0))
        except OSError:
            pass
    return "nice %d" % NICE


def _leave_real_time(signum, frame):
    """SIGXCPU: the real-time budget is spent; carry on at nice NICE."""
    os.sched_setscheduler(0, os.SCHED_OTHER | _RESET, os.sched_param(0))
    os.setpriority(os.PRIO_PROCESS, 0, NICE)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    _state[0] = "real-time until its budget was spent, then nice %d" % NICE
