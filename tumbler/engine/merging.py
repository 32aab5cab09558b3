"""When auto merges a program's domains into one, and when it splits them
again (engine/policy.py, 5. and 7.; the controller acts on the answers,
balance/controller.py ``_merge_or_split``).

Bound to domains, a thread can only have what its domain gives.  That
beats the OS where the program's own load is uneven across domains (the
Tumbler paper), and loses to it in two cases the grouping cannot see:

* **Oversubscribed unevenly.**  More always-runnable threads than the
  CPUs of all the domains, and no grouping gives every domain the same
  threads per CPU: 3 busy threads on two 1-CPU domains stay 2 + 1 (the
  pair at 0.5 each), where the OS alone rotates all three at 0.67.
* **Beside other work.**  A domain whose CPUs other work (another
  program, a hog) competes for, holding always-runnable threads of the
  program that run slower there than the OS would run them over all the
  domains: bound, they get their share of that domain only (2 busy
  threads on two 1-CPU domains and a CPU-bound hog on one: the thread
  beside the hog runs at 0.5; the OS alone runs all three at 0.67).
  Threads cannot be planned around work tumbler does not manage: it can
  neither move it nor know what it will want next.

In both cases every thread is handed back to the OS over the union of the
domains.  The domains split again once the grouping can be even *and*
other work has left the merged domain (below the capacity meter's dead
band, balance/capacity.py): a hog that stays keeps them merged.

Every judgement is tri-state: None while some runnable thread's sleeping
is not known yet (a thread that waits for a CPU most of the time may still
block at every period, and blocking threads leave their CPU to others).
"""

from .policy import RUNNABLE_SHARE, SLEEPS_PER_SECOND
from .speed import thread_speed

#: Bound threads beside other work run this much slower than the fair
#: share of the merged domains before the domains merge (noise in one
#: round's speeds, and the other work's own demand, which the CPU it
#: received understates, make the estimate rough).
SHORTFALL = 0.9


def _runnable(threads):
    return [t for t in threads if t.runnable is not None and t.runnable >= RUNNABLE_SHARE]


def oversubscribed_unevenly(threads, cores):
    """Whether the always-runnable, not sleeping ``threads`` (auto's
    candidates, engine/policy.py 1.) outnumber the ``cores`` of all the
    domains (CPUs per domain) and no grouping gives every domain the same
    threads per core: domain i would need candidates * cores[i] / total
    threads, a whole number for every i.  Then some domain holds more
    threads per core than the program's share, for as long as the threads
    stay bound to domains.  None: not judged yet (module docstring)."""
    total = sum(cores)
    runnable = _runnable(threads)
    if len(runnable) <= total:
        return False
    if any(t.sleeps_per_s is None for t in runnable):
        return None
    candidates = sum(1 for t in runnable if t.sleeps_per_s < SLEEPS_PER_SECOND)
    return candidates > total and any(candidates * c % total for c in cores)


def crowded_by_other_work(threads, cores, other):
    """Whether the always-runnable, not sleeping ``threads`` (by their
    ``domain``) of some domain i -- ``cores[i]`` CPUs, ``other[i]`` CPUs of
    other work (dead-banded: 0.0 when there is none to speak of) -- run
    slower than the OS would run them over all the domains: their mean
    speed over the last round below SHORTFALL times the fair share of
    the merged domains, sum(cores) / (candidates + sum(other)), at most 1.
    Other work spread evenly over the domains slows every bound thread
    alike and merging gains nothing; a hog on one CPU slows the thread
    beside it alone.  None: not judged yet for such a domain and no other
    says yes."""
    runnable = _runnable(threads)
    # Threads not judged yet count as candidates here: the fair share is
    # then, if anything, too low, and merges fewer.
    maybe = sum(1 for t in runnable
                if t.sleeps_per_s is None or t.sleeps_per_s < SLEEPS_PER_SECOND)
    if not maybe:
        return False
    fair = min(1.0, sum(cores) / (maybe + sum(other)))
    unknown = False
    for index, others in enumerate(other):
        if others <= 0.0:
            continue
        here = [t for t in runnable if t.domain == index]
        if any(t.sleeps_per_s is None for t in here):
            unknown = True
            continue
        speeds = [thread_speed(t.exec_ns, t.wall_ns) for t in here
                  if t.sleeps_per_s < SLEEPS_PER_SECOND and t.wall_ns > 0]
        if speeds and sum(speeds) / len(speeds) < SHORTFALL * fair:
            return True
    return None if unknown else False


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
    crowded = crowded_by_other_work(threads, cores, other) if other else False
    if crowded:
        return OTHER_WORK
    return None if uneven is None or crowded is None else False


def stay_merged(threads, cores, other):
    """Whether merged domains (split, ``cores`` CPUs each) should stay
    merged, as merge_wanted answers: the program's threads would be
    oversubscribed unevenly across them, or other work takes some of the
    merged domain (``other``: its CPUs, dead-banded; None: not
    measured)."""
    if other:
        return OTHER_WORK
    return oversubscribed_unevenly(threads, cores) and OVERSUBSCRIBED
