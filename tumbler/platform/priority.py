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
  times in a row (``woke``, from the loop's waiter).  Nice is not
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

from .files import read_file

#: The nice value tumbler runs at when allowed to raise its priority.
NICE = -20
#: A loop wake-up this late (seconds), LATE_WAKES times in a row, raises
#: the priority of a settled tumbler (module docstring).
LATE_S = 0.05
LATE_WAKES = 3

_state = [None]         # how tumbler runs (a note for the summary), once raised
_settled = [None]       # True: back at nice 0 while balancing; False: raised again (for good)
_late = [0]             # late wake-ups in a row


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


def settle_priority():
    """Balancing starts: back to nice 0 if raised (see the module
    docstring), raised again by ``woke`` when the loop runs late."""
    if _settled[0] is not None or not (_state[0] or "").startswith("nice"):
        return          # once: a tumbler raised for its late wake-ups stays raised
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        return
    _settled[0] = True
    _late[0] = 0
    _state[0] = "nice 0 (-20 at start-up; raised again if its wake-ups run %d ms late)" % (
        LATE_S * 1000)


def woke(late_s):
    """The loop woke ``late_s`` seconds after the time it asked for (its
    waiter calls this at every sleep).  What counts is how long tumbler
    waited for a CPU since the last call: on Linux its own run-queue wait
    (schedstat), elsewhere ``late_s``.  After LATE_WAKES waits of LATE_S
    or more in a row, back to NICE for the rest of the run."""
    if not _settled[0]:
        return
    waited = _run_queue_wait_s()
    if waited is None:
        waited = late_s
    if waited < LATE_S:
        _late[0] = 0
        return
    _late[0] += 1
    if _late[0] < LATE_WAKES:
        return
    _settled[0] = False
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except OSError:
        return
    _state[0] = "nice %d (raised: it waited %d ms for a CPU at nice 0)" % (NICE, waited * 1000)


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
