"""When auto merges a program's domains into one, and when it splits them
again (engine/policy.py, 3. and 5.; the controller acts on the answers,
balance/merged.py ``DomainMerger.judge``).

Bound to domains, a thread can only have what its domain gives.  That
beats the OS where the program's own load is uneven across domains (the
Tumbler paper), and loses to it in two cases the grouping cannot see:

* **Oversubscribed unevenly.**  More always-runnable threads than the
  CPUs of all the domains, and no grouping gives every domain the same
  threads per CPU: 3 busy threads on two 1-CPU domains stay 2 + 1 (the
  pair at 0.5 each), where the OS alone rotates all three at 0.67.
* **Beside other work.**  A domain whose CPUs other work (another
  program, a hog) competes for, holding always-runnable threads of the
  program that run slower there than a thread of the program runs, or
  could, in another domain: bound, they get their share of that domain
  only (2 busy threads on two 1-CPU domains and a CPU-bound hog on one:
  the thread beside the hog runs at 0.5, the other at 1.0; the OS alone
  runs all three at 0.67).
  Threads that block at barriers show it another way: beside the hog they
  wait in the run queue while another domain's CPU idles, where the OS
  alone would run them (4 uneven threads with barriers beside a hog on
  one of two 1-CPU domains: 1.09-1.19 times the OS's wall time bound).
  Threads cannot be planned around work tumbler does not manage: it can
  neither move it nor know what it will want next.

In both cases every thread is handed back to the OS over the union of the
domains.  The domains split again once the grouping can be even *and*
other work has left the merged domain (below the capacity meter's dead
band, balance/capacity.py): a hog that stays keeps them merged.

Judging oversubscription is tri-state: None while runnable threads whose
sleeping is not known yet could change the answer (a thread that waits for
a CPU most of the time may still block at every period, and blocking
threads leave their CPU to others); other work is judged at once
(crowded_by_other_work).
"""

from .columns import runnable_at_least
from .model import ThreadView
from .policy import RUNNABLE_SHARE, SLEEPS_PER_SECOND
from .speed import thread_speed

try:
    from ._window import domain_figures as _c_domain_figures
except ImportError:         # not built (optional): the same pass in Python
    _c_domain_figures = None

#: Bound threads beside other work run this much slower than they could
#: in another domain before the domains merge (one round's speeds are
#: noisy).  From the speed balancing paper (section 5.1, T_s = 0.9: a core
#: is slow only below 0.9 of the mean, so that timing noise moves nothing),
#: the same question asked of speeds over one round.  The case it is for:
#: a thread beside a CPU-bound hog of equal priority runs at 0.5 against
#: 1.0 elsewhere.  Supported: (0.5, 0.95].
SHORTFALL = 0.9
#: CPUs of run-queue wait of a domain's threads beside other work, of
#: that other work, and of idle CPU in another domain, from which the
#: domains merge (the threads that block: crowded_by_other_work).  Below it, what a
#: program's own bursts overlapping costs (the load window's wait of
#: threads that block is mostly that: engine/window.py, demand).
#: Measured at this value: BENCHMARKS.md, issue 27, "Threads that block,
#: beside a hog" (skewed, 4 threads, beside a hog: 1.089 -> 1.008).
WAITING_CPU = 0.2


def _runnable(threads):
    return runnable_at_least(threads, RUNNABLE_SHARE)


def oversubscribed_unevenly(threads, cores):
    """Whether the always-runnable, not sleeping ``threads`` (auto's
    candidates, engine/policy.py 2.) outnumber the ``cores`` of all the
    domains (CPUs per domain) and no grouping gives every domain the same
    threads per core: domain i would need candidates * cores[i] / total
    threads, a whole number for every i.  Then some domain holds more
    threads per core than the program's share, for as long as the threads
    stay bound to domains.  None: not judged yet (module docstring) --
    while threads whose sleeping is not known yet could change the
    answer: the count of candidates lies between those known not to sleep
    and those plus the threads not known yet, and the answer is given
    where it is the same over that range.  A program that keeps starting
    short busy threads (each unknown for its first 0.3 s) would keep the
    judgement waiting for ever otherwise (issue 49;
    tests/engine/test_engine_scenarios.py)."""
    total = sum(cores)
    runnable = _runnable(threads)
    if len(runnable) <= total:
        return False
    unknown = sum(1 for t in runnable if t.sleeps_per_s is None)
    known = sum(1 for t in runnable
                if t.sleeps_per_s is not None and t.sleeps_per_s < SLEEPS_PER_SECOND)
    answer = _uneven(known, cores, total)
    for candidates in range(known + 1, known + unknown + 1):
        if _uneven(candidates, cores, total) != answer:
            return None
    return answer


def _uneven(candidates, cores, total):
    """Whether ``candidates`` busy threads outnumber the ``total`` CPUs
    of domains of ``cores`` CPUs each, with no grouping even."""
    return candidates > total and any(candidates * c % total for c in cores)


def crowded_by_other_work(threads, cores, other):
    """Whether the always-runnable threads (by their ``domain``) of a
    domain that other work competes for run slower than a thread of the
    program could run elsewhere: their mean speed over the last round
    below SHORTFALL times the best of the other domains -- the mean speed
    of its own such threads, or, where it has none, what its CPUs leave
    idle (``cores[i]`` less ``other[i]``, the CPUs of other work,
    dead-banded: 0.0 when there is none to speak of, less what the
    program's threads there got), at most one CPU.  Other work spread
    evenly over the domains slows every bound thread alike and merging
    gains nothing; a hog on one CPU slows the thread beside it alone.

    Threads whose sleeping is not known yet count: merging only hands
    threads back to the OS, and waiting 0.3 s for the counts kept a thread
    beside a hog that long (a thread that sleeps shows it in its speed and
    runnable share soon enough).  Those known to sleep do not.

    Threads that block (runnable less than RUNNABLE_SHARE of the load
    window) answer True another way: together at least WAITING_CPU of
    run-queue wait over the load window (runnable share less CPU share)
    in a domain where other work takes at least WAITING_CPU too, while
    another domain left at least WAITING_CPU of its CPUs idle over the
    last round -- there the OS would have run them.  (Other work just
    past the dead band is not enough: threads grouped to a full domain
    wait for each other, and a command starting beside them, such as
    ``tumbler restore``, would merge the domains for nothing.)

    Only a domain with other work can answer True: when there is none
    (the usual round), nothing else is computed."""
    if not any(others > 0.0 for others in other):
        return False
    got, speeds, waited = _domain_figures(threads, len(cores))
    idle = [max(0.0, count - others - got[i])
            for i, (count, others) in enumerate(zip(cores, other))]
    best = [sum(speeds[i]) / len(speeds[i]) if i in speeds else min(1.0, idle[i])
            for i in range(len(cores))]
    for index, others in enumerate(other):
        if others <= 0.0:
            continue
        if index in speeds:
            elsewhere = max((b for i, b in enumerate(best) if i != index), default=0.0)
            if best[index] < SHORTFALL * elsewhere:
                return True
        if others >= WAITING_CPU and waited[index] >= WAITING_CPU and \
                max((f for i, f in enumerate(idle) if i != index), default=0.0) >= WAITING_CPU:
            return True
    return False


def _domain_figures(threads, count):
    """(CPU its threads got, {domain: speeds of its always-runnable threads
    not known to sleep}, run-queue wait of its threads that block) per
    domain of ``count``, of the ``threads`` in one of them measured over a
    positive span: crowded_by_other_work's pass over every thread, which
    runs whenever other work shows on a domain.  In C when built
    (_window.c, domain_figures: the same sums in the same order), else
    ``_py_domain_figures``."""
    if _c_domain_figures is not None:
        figures = _c_domain_figures(threads, count, ThreadView, RUNNABLE_SHARE,
                                    SLEEPS_PER_SECOND)
        if figures is not None:
            return figures
    return _py_domain_figures(threads, count)


def _py_domain_figures(threads, count):
    """_domain_figures in Python (the reference)."""
    speeds = {}                     # domain -> speeds of its always-runnable threads
    got = [0.0] * count             # domain -> CPU its threads got
    waited = [0.0] * count          # domain -> run-queue wait of its threads that block
    for t in threads:
        if t.domain is None or not 0 <= t.domain < count or t.wall_ns <= 0:
            continue
        speed = thread_speed(t.exec_ns, t.wall_ns)
        got[t.domain] += speed
        if t.runnable is None:
            continue
        if t.runnable >= RUNNABLE_SHARE:
            if t.sleeps_per_s is None or t.sleeps_per_s < SLEEPS_PER_SECOND:
                speeds.setdefault(t.domain, []).append(speed)
        elif t.runnable > t.load:
            waited[t.domain] += t.runnable - t.load     # load: its CPU share (demand)
    return got, speeds, waited


#: What merge_wanted and stay_merged answer for each reason (true values).
OVERSUBSCRIBED = "oversubscribed"
OTHER_WORK = "other work"


def merge_wanted(threads, cores, other):
    """Whether domains of ``cores`` CPUs each, with ``other`` work (None:
    not measured), should merge: why (OVERSUBSCRIBED, OTHER_WORK), False,
    or None (not judged yet)."""
    uneven = oversubscribed_unevenly(threads, cores)
    if uneven:
        return OVERSUBSCRIBED
    if other and crowded_by_other_work(threads, cores, other):
        return OTHER_WORK
    return None if uneven is None else False


def stay_merged(threads, cores, other):
    """Whether merged domains (split, ``cores`` CPUs each) should stay
    merged, as merge_wanted answers: the program's threads would be
    oversubscribed unevenly across them, or other work takes some of the
    merged domain (``other``: its CPUs, dead-banded; None: not
    measured)."""
    if other:
        return OTHER_WORK
    return oversubscribed_unevenly(threads, cores) and OVERSUBSCRIBED
