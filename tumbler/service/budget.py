"""The service's CPU budget (``service.cpu_budget``, issue 47): whatever
users run that a rule selects, the service uses at most that many CPUs.

What the service spends goes three ways:

* scans (loop.py): each stops once it has used SCAN_SHARE of the budget
  over its interval, and the next goes on where it stopped;
* what cannot be spaced -- the looks at parked programs, the control
  socket, the metrics file, the look at the machine, the scans: measured
  over the last scan interval (``window_s``: one scan in it, not zero or
  two), as the service's own CPU time (every thread's) less its
  programs' ticks;
* each program's ticks (rounds, speed steps, looks for new threads),
  measured one by one by the loop (driver.py, ``Pace``).

Every PLAN_EVERY_S the rounds get what the other two left of the budget
(at least ROUNDS_FLOOR of it), shared out max-min fairly: a program
whose ticks at their own pace cost less than an equal share keeps its
pace, and what it leaves goes to the others; each program that would
cost more is given an equal share and its ticks are spaced to fit it --
``spacing`` = its CPU per tick / its share, so a program whose rounds
cost more (rounds cost about in proportion to threads) gets them less
often.  A program slowed so is said once in the log, and ``tumbler
status`` shows its pace.

Between two rounds a slowed program's threads stay where its last round
put them: bound to their domains, which the kernel balances within,
recorded, and put back on every exit as any other's; only a change of
its load between domains waits for the next round.  Speed balancing is
held off in a slowed program (``hold_speed``): its pins would stay put
between steps seconds apart.
"""

import collections
import time

from ..balance.controller import SLACK_S
from .log import INFO

#: Of the budget, what one scan may use over its scan interval: with the
#: rest, rounds keep a pace while a user's processes make scans long (the
#: scan stops and goes on at the next one, loop.py).  At the defaults 20 ms
#: a scan; a service with no program on this 2-CPU VM (~130 processes)
#: used 80 ms over 20 s, 8 ms per scan interval (measured by hand at
#: 08db185, `tumbler service` with a rule matching nothing, utime + stime).
SCAN_SHARE = 0.5
#: Rounds always get at least this share of the budget: if looks and the
#: socket took it all, no program would be balanced again.  SCAN_SHARE +
#: ROUNDS_FLOOR leave a quarter for the rest: the looks at parked programs
#: cost 6-25 us each for 100 threads (loop.py PARKED_LOOKS), 64 programs
#: x 1.5 looks a second x 25 us = 0.24% of a CPU, half that quarter of the
#: default budget (tests/service/test_budget.py checks the sum).
ROUNDS_FLOOR = 0.25
#: How often the shares are planned again, in s: within a second a
#: program's first rounds are measured and fitted to the budget.
PLAN_EVERY_S = 1.0
#: Weight of the newest window in the smoothed costs (half: one odd
#: round -- a first placement, a full round among quiet ones -- moves a
#: program's spacing by half of what it weighed, and is forgotten within
#: a few plans).
NEWEST_WEIGHT = 0.5


class Pace:
    """What the loop (driver.py) measured of one run's ticks since the last
    plan, and the ``spacing`` asked of them."""

    __slots__ = ("spacing", "ticks", "cpu_s", "asked_s", "ticked_at", "cost_s", "gap_s",
                 "understated", "said")

    def __init__(self):
        self.spacing = 0.0          # s at least between two ticks; 0: its own pace
        self.ticks = 0              # since the last plan
        self.cpu_s = 0.0            # the service's CPU in those ticks
        self.asked_s = 0.0          # the intervals its controller asked after them
        self.ticked_at = None       # monotonic s the last tick ended
        self.cost_s = None          # smoothed CPU s per tick
        self.gap_s = None           # smoothed interval its controller asks, s
        self.understated = 1.0      # its ticks' CPU at its own pace / what it asked, smoothed
        self.said = False           # the log said it is slowed

    def add(self, cpu_s, asked_s, now):
        self.ticks += 1
        self.cpu_s += cpu_s
        self.asked_s += max(asked_s, 0.0)
        self.ticked_at = now

    def due(self, due):
        """When the next tick may come: ``due`` (its controller's) or
        ``spacing`` after the last -- and SLACK_S more, since the loop
        ticks a run up to SLACK_S before it is due (driver.py)."""
        if self.spacing and self.ticked_at is not None:
            return max(due, self.ticked_at + self.spacing + SLACK_S)
        return due

    def demand(self):
        """CPUs its ticks cost at their own pace; None before one is
        measured.  What its controller asks is not all: the loop ticks
        early by up to SLACK_S, and a round, a speed step and a look for
        new threads each ask their own; so the CPU its ticks took at their
        own pace over what that predicted (``understated``, at least 1,
        last measured while not slowed) scales the prediction."""
        if self.cost_s is None:
            return None
        return self.cost_s / max(self.gap_s, 1e-3) * self.understated

    def _settle(self, elapsed):
        """Fold the ticks of the last ``elapsed`` s (since the last plan)
        into the smoothed figures."""
        if self.ticks:
            cost, gap = self.cpu_s / self.ticks, self.asked_s / self.ticks
            if self.cost_s is None:
                self.cost_s, self.gap_s = cost, gap
            else:
                self.cost_s += NEWEST_WEIGHT * (cost - self.cost_s)
                self.gap_s += NEWEST_WEIGHT * (gap - self.gap_s)
            if not self.spacing and elapsed > 0 and self.cost_s > 0:
                ratio = max(self.cpu_s / elapsed * max(self.gap_s, 1e-3) / self.cost_s, 1.0)
                self.understated += NEWEST_WEIGHT * (ratio - self.understated)
        self.ticks, self.cpu_s, self.asked_s = 0, 0.0, 0.0


class CpuBudget:
    """``cpus`` CPUs for the whole service (the module doc)."""

    def __init__(self, cpus, window_s, cpu_clock=time.process_time):
        self.cpus = cpus
        self.window_s = window_s    # what is not ticks is measured over this (a scan interval)
        self.cpu_clock = cpu_clock
        # (monotonic s, the service's CPU s, of it in ticks) at each plan of
        # the last window_s, and the one before them.
        self.marks = collections.deque()
        self.in_ticks = 0.0         # CPU s in ticks since the service began
        self.other = 0.0            # CPUs spent outside ticks over the window
        self.for_rounds = cpus      # CPUs the last plan shared out

    def scan_cpu_s(self, scan_interval):
        """CPU s one scan may use."""
        return SCAN_SHARE * self.cpus * scan_interval

    def plan(self, now, paces, parked=frozenset()):
        """Share the budget out among ``paces`` (key -> Pace, every run's)
        but those ``parked`` (not ticked: their looks are the service's):
        each one's ``spacing`` set; returns the keys of those slowed now
        that were not before."""
        spent = self.cpu_clock()
        self.in_ticks += sum(pace.cpu_s for pace in paces.values())
        elapsed = now - self.marks[-1][0] if self.marks else 0.0
        for pace in paces.values():
            pace._settle(elapsed)
        marks = self.marks
        marks.append((now, spent, self.in_ticks))
        while len(marks) > 2 and now - marks[1][0] >= self.window_s:
            marks.popleft()
        first = marks[0]
        if now > first[0]:
            self.other = max(spent - first[1] - (self.in_ticks - first[2]), 0.0) \
                / (now - first[0])
        left = self.for_rounds = max(self.cpus - self.other, ROUNDS_FLOOR * self.cpus)
        measured = sorted((pace.demand(), key) for key, pace in paces.items()
                          if pace.demand() is not None and key not in parked)
        slowed = []
        for index, (demand, key) in enumerate(measured):
            pace = paces[key]
            share = left / (len(measured) - index)
            if demand <= share:
                pace.spacing = 0.0
                left -= demand
                continue
            # This and every later one (they cost more) get an equal share.
            pace.spacing = pace.cost_s / share
            left -= share
            if not pace.said:
                pace.said = True
                slowed.append(key)
        return slowed

    def pace_programs(self, now, paces, programs, events):
        """``plan`` for the service (loop.py): ``programs`` (pid -> Program),
        the parked ones left out; one line to ``events`` (the rate-limited
        log of lines about users' processes, log.py) for each program
        slowed for the first time."""
        parked = {pid for pid, program in programs.items() if program.parked}
        slowed_now = self.plan(now, paces, parked)
        for pid, program in programs.items():
            hold_speed(program.controller, paces.get(pid))
        for pid in slowed_now:
            program = programs.get(pid)
            if program is not None:
                events(program.rule.name, "programs slowed by service.cpu_budget", INFO,
                       "PID %d (%s): %s (%.3f CPUs for %d programs' rounds; %d threads)"
                       % (pid, program.name, slowed(paces[pid]), self.for_rounds,
                          len(programs) - len(parked), len(program.controller.threads)))


def hold_speed(controller, pace):
    """No speed balancing in a program whose ticks the budget spaces: its
    steps (every 20 ms) would come seconds apart, leaving its threads
    pinned two to a core in a rotation that no longer turns -- slower than
    the kernel alone.  Held, the policy engages nothing (engine/policy.py,
    ``speed_held``) and a round at once hands its pins back; let go when
    its ticks are no longer spaced."""
    held = bool(pace is not None and pace.spacing)
    policy = controller.policy
    if held == policy.speed_held:
        return
    policy.speed_held = held
    decision = controller.last_decision
    if held and decision is not None and decision.engaged:
        controller.resume()             # the round that releases the pins ...
        pace.ticked_at = None           # ... now, whatever the spacing


def slowed(pace):
    """How the budget slows a run's rounds (a phrase for the log and
    ``tumbler status``), or None."""
    if pace is None or not pace.spacing:
        return None
    return "rounds every %.3g s instead of %.3g s: service.cpu_budget" % (
        pace.spacing, pace.gap_s)
