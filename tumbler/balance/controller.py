"""The balancing loop: platform -> samples -> engine -> plan -> platform.

Each round (paper Algorithm 1; ``Controller.round``):

1. sample every thread of every target (one pass over /proc);
2. turn the deltas into loads: what each thread *wants* (``engine.window.
   demand``: for an always-runnable thread delta(CPU time + run-queue
   wait) / delta(wall), capped at one CPU), not only what it got
   (Eq. 1, delta(usr+sys) / delta(wall), kept as ``cpu``): on a saturated
   domain the CPU received sums to its capacity however many threads
   queue there, so Eq. 1 alone cannot see 3 + 1 busy threads on two
   1-CPU domains;
3. ask the policy for a plan (engine, no OS calls);
4. apply the plan's moves through the binder, saving each thread's original
   placement before its first move;
5. log the round (what acted where: mechanisms.py) and sleep the interval.

Between rounds the loop wakes every ``discover_ms`` (its Timings,
timings.py: the defaults and their evidence) to look for new threads
and places them at once (initial placement), and at once for signals.
While speed balancing is engaged (the decision has a
``speed_interval_ms``), it also wakes for speed balancing's steps: each
reads only the threads speed balancing pinned and applies its pins
(``speed_step``), a fraction of a full round's cost at 20 ms intervals.

Quiet rounds.  Most rounds of a program in its stride change nothing.
After a full round that moved and pinned nothing, in a run with no round
observers, the next rounds are *quiet*: decided from two columns of every
thread's times (of every target: a process tree too) and a few sums over
them, exactly as a full round would decide, until something changes
(quiet.py).

Whatever ends the run -- the targets exit, ``--duration`` passes, a signal,
an error -- ``restore_all`` puts every touched thread back the way it was
found, with the threads and child processes born of bound threads, and the
binder removes what it created.

The jobs, one component each, built by ``Controller`` with what it needs
(each owns its state; what several read has one owner, passed to them):

=================  ========================================================
``threads.py``     ThreadTracker: targets, their threads (and new
                   processes: --children); owns the table of threads
``loads.py``       LoadWindow (the tracker's): loads over the load window
``quiet.py``       QuietRounds: quiet rounds (and their data); the paced watch
``speedstep.py``   SpeedSteps: crowded domains, the policy's view, speed steps
``placer.py``      Placer: every change of placement, journalled before it
                   is made; owns the masks tumbler set
``handback.py``    HandBack: every thread back, bound threads' children too
``merged.py``      DomainMerger: merging the domains and splitting them again
``otherwork.py``   OtherWork: other work on the domains' CPUs (measured capacity),
                   counted as the run says (OtherWorkCounting)
``machine.py``     MachineWatch: CPUs off-line and back, cpusets changed
``domains.py``     Layout: the domains balanced over now (the controller's)
``mechanisms.py``  MechanismLog (the stats'): what acted in each domain, when
``timings.py``     Timings (the controller's): the loop's timings, their defaults
=================  ========================================================

This module holds what ties them: one round, following the machine and
space sharing (a reshape), and the cadences -- ``tick`` does whatever is
due (a round, a speed step, a look for new threads) and ``due`` says when
the next is; one loop (service/driver.py) ticks the controllers of every
run, one or many, until the runs end.
"""

import gc
import resource
import time

from ..cpulist import format_cpulist
from ..platform.priority import settle_priority
from ..engine.policy import WATCH_INTERVAL_MS
from ..errors import warn as warn_line
from .domains import DomainChoice, Layout
from .handback import HandBack
from .machine import MachineWatch
from .merged import DomainMerger
from .otherwork import OtherWork, OtherWorkCounting
from .placer import Placer
from .quiet import QuietRound, QuietRounds
from .speedstep import SpeedSteps
from .spreads import RunStats
from .threads import ThreadTracker
from .timings import Timings


#: Rounds and looks for new threads due within this are done at once when
#: one loop ticks several controllers (the service, ``--share space``), so
#: it wakes once for them all (half the default discovery interval).
SLACK_S = 0.05
#: The first binding waits for the first judgement of merging at most this
#: many load windows (_binding_deferred).  Derived: it needs the threads'
#: sleeping counted over 0.3 s (speedstep.py, SWITCH_MIN_SPAN_NS) from the
#: first round (100 ms in), then its hold (merged.py, one window): ~1 s, 2
#: windows; 4 leaves as much again for late rounds.  Supported: [2, 4].
FIRST_JUDGEMENT_WINDOWS = 4
#: While binding waits, a round at most this often (_deferred_ms).  Derived:
#: /proc/stat counts in ticks of 1/100 s (USER_HZ, sysconf(_SC_CLK_TCK)),
#: so other work's reading cannot move in less.
DEFERRED_FLOOR_MS = 10


class Controller:
    """One run's balancing: the round, the cadences, and the components
    that do the jobs (see the module docstring), each owning its state.
    It owns its backend, binder, policy, domains, ``timings`` (timings.py)
    and the ``counting`` of other work (otherwork.py); the run lends it its
    journal, round observers and ``warn`` (service/assembly.py)."""

    def __init__(self, backend, binder, policy, domain_choice, *, timings=Timings(),
                 counting=OtherWorkCounting(), journal=None, observers=(), warn=None,
                 dry_run=False):
        self.backend = backend
        self.binder = binder
        self.policy = policy
        self.layout = Layout(domain_choice)     # the domains balanced over now
        self.dry_run = dry_run
        self.moves_threads = policy.moves_threads
        self.timings = timings
        self.discover_s = timings.discover_ms / 1000.0
        self.load_window_ns = timings.load_window_ms * 1_000_000
        self.regroup_hold_ns = self.load_window_ns  # see _regroup
        self.journal = journal          # crash-safe record of original placements
        self.observers = list(observers)   # each has write_round(controller, plan, moves)
        self.warn = warn = warn or warn_line
        self.stats = RunStats(started=time.monotonic())
        self._last_decision = None
        self._regrouped_ns = None   # sample time of the last round that moved threads
        self._judging_first = True      # no binding yet: see _binding_deferred
        self._next_round = None     # monotonic s; set by start_clock
        self._reshaped = False      # reshape() gave new domains: place every thread
        self.machine = MachineWatch(backend, domain_choice)    # hotplug, cpusets
        self.tell_machine = warn    # says how it followed them (the service: once)
        # The components, each owning its state; what one needs of another
        # is passed to it here.
        layout, stats = self.layout, self.stats
        self.other = OtherWork(backend, layout, self.load_window_ns, warn, counting=counting,
                               merges=policy.merges_domains and self.moves_threads)
        self.placer = Placer(backend, binder, layout, self.machine, stats, warn,
                             journal=journal, dry_run=dry_run)
        self.tracker = ThreadTracker(backend, binder, policy, layout, self.machine, stats, warn,
                                     bound_masks=self.placer.bound_masks,
                                     load_window_ns=self.load_window_ns, journal=journal,
                                     other_meter=self.other.meter,
                                     found=self._threads_found,
                                     changing=self._leave_quiet)
        self.tracker.hand_back = self.handback = HandBack(backend, binder, self.tracker,
                                                          self.placer, warn, journal)
        self.merger = DomainMerger(policy, layout, self.load_window_ns, self.other,
                                   moves_threads=self.moves_threads, reshape=self._reshape,
                                   may_use=self._may_use)
        self.speed = SpeedSteps(backend, policy, layout, self.tracker, self.placer, stats,
                                self.merger.may_merge)
        self.quiet = QuietRounds(backend, policy, layout, self.tracker, stats, self.other,
                                 self.merger.may_merge)
        binder.setup([d.cpus for d in layout.domains])

    # -- what other layers read (observers, the service, the commands) ---------

    @property
    def domains(self):
        return self.layout.domains

    @property
    def choice(self):
        return self.layout.choice

    @property
    def targets(self):
        return self.tracker.targets

    @property
    def threads(self):
        return self.tracker.threads

    @property
    def other_meter(self):
        return self.other.meter

    @property
    def pins_made(self):
        return self.speed.pins_made

    @property
    def steps(self):
        return self.speed.steps

    def add_target(self, pid, allowed=None, children=False, start=None):
        """Start managing ``pid`` (ThreadTracker.add_target)."""
        self.tracker.add_target(pid, allowed, children, start)

    def keep_orphans(self, root, allowed, own_processes=frozenset):
        """``exec``: keep the orphans of ``root``'s tree (ThreadTracker.keep_orphans)."""
        return self.tracker.keep_orphans(root, allowed, own_processes)

    def reap_orphans(self):
        self.tracker.reap_orphans()

    def received_now(self):
        """(domain CPUs, CPU received there) per domain, as the last round
        measured it (LoadWindow.received_now)."""
        return self.tracker.loads.received_now(getattr(self._last_decision, "summary", None))

    def restore_all(self):
        """Put back every thread tumbler touched; return how many failed."""
        self._leave_quiet()
        return self.handback.restore_all()

    # -- what the components hand on -------------------------------------------

    def _threads_found(self, new, inherited):
        """The tracker found threads: those born of a bound thread are
        tumbler's to put back (Placer.adopt_inherited); the new ones are
        placed at once, unless binding waits (_binding_deferred)."""
        if inherited:
            self.placer.adopt_inherited(inherited)
        if new and self.moves_threads and not self.choice.single \
                and not self._binding_deferred():
            self.placer.place_new(new, self.tracker.threads.values())

    def _leave_quiet(self):
        self.quiet.leave()

    # -- one round -----------------------------------------------------------

    @property
    def last_decision(self):
        """The Decision of the last round (of a quiet one too, built now)."""
        decision = self._last_decision
        if type(decision) is QuietRound:
            interval = decision.interval_ms         # paced (quiet.py, paced_ms)
            decision = self._last_decision = self.policy.quiet_decision(
                decision.summary, self.domains, decision.assignment)
            decision.interval_ms = decision.plan.interval_ms = interval
        return decision

    def round(self):
        """One monitor-group-apply round: a quiet one when it may be (see the
        module docstring; returns a QuietRound), else a full one (returns
        the Decision).

        The cyclic GC waits until the round is over: a full round makes a
        view per thread (each a GC container, untracked once made, still
        counted as allocated) and frees them as it ends, so with it running
        10,000 threads triggered ~14 young collections a round, the older
        generations in turn -- 1-5 ms a round (BENCHMARKS.md, issue 29).
        Paused, the count falls back as the round's objects are freed, and
        what survives is collected with the next allocations after it."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._round()
        finally:
            if enabled:
                gc.enable()

    def _round(self):
        """round's work (the cyclic GC paused)."""
        self.tracker.look_at_new_processes()
        change = self.machine.replan(self.targets, self._may_use)
        if change is not None:
            self._follow_machine(*change)
        if self._reshaped:
            self._place_unmeasured()
        quiet = self.quiet
        if quiet.rosters is not None:
            decision = quiet.round(self.other.seen, self.speed.speeding)
            if decision is not None:
                self.speed.pins_made = []
                self._last_decision = decision
                return decision
            quiet.leave()
        samples = self.tracker.sample_all(quiet.take_reads())
        self.tracker.update_loads(samples)
        other = self.other.measure(max((s.wall_ns for s in samples), default=None),
                                   self.tracker)
        # Threads outside every domain (no eligible domain) are left alone.
        measured, views = self.speed.measured_views(other)
        merge_note = self.merger.judge(views, samples, other)
        if merge_note:                  # other domains: other eligibility, views
            other = self.other.held()
            measured, views = self.speed.measured_views(other)
        self.other.seen = other
        decision = self.policy.decide(views, self.domains, other)
        plan = decision.plan
        judging = self.merger.pending       # whether to merge or split: at the watch's pace
        if judging and decision.interval_ms > WATCH_INTERVAL_MS:
            decision.interval_ms = plan.interval_ms = WATCH_INTERVAL_MS
        if merge_note:
            plan.reason += "; " + merge_note
        decision.interval_ms = plan.interval_ms = quiet.paced_ms(
            decision.interval_ms,
            judging or decision.engaged or decision.pins or decision.watching,
            self.speed.speeding)
        placer = self.placer
        applied, placer.placed_between_rounds = placer.placed_between_rounds, []
        for thread, _, _ in applied:
            placer.refresh_name(thread)     # placed at birth, often renamed since
        deferred = self._binding_deferred()
        if deferred:
            # What binding waits for is time (other work's first reading,
            # merging's readings and hold), not rounds: the next comes when
            # it can be decided (_deferred_ms), not at the variation
            # table's pace (50 ms: CPU taken from a busy program for nothing).
            wait = self._deferred_ms(samples)
            decision.interval_ms = plan.interval_ms = wait \
                if self.policy.fixed_interval_ms is None else min(decision.interval_ms, wait)
            decision.pins, decision.engaged, decision.speed_interval_ms = {}, [], None
            self.policy.forget_domains()
            plan.reason = "nothing moved %s (planned: %s)" % (deferred, plan.reason)
        if self.moves_threads and not deferred:
            by_tid = {t.tid: t for t in measured} if plan.moves or decision.pins else {}
            regrouped = self._regroup(plan, [(by_tid[m.tid], m.dst) for m in plan.moves],
                                      samples)
            applied += regrouped
            if self.other.meter is not None:
                self.tracker.loads.note_placed(regrouped, samples)
            self.speed.round_pins(by_tid, decision.pins)
            self.speed.follow(decision, measured)
        self._last_decision = decision
        self.stats.intervals += 1
        self.stats.mechanisms.follow(decision.notes, self.domains, time.monotonic(), merge_note)
        if not self.choice.single:
            self.stats.spreads.append(plan.spread_before)
        for observer in self.observers:
            observer.write_round(self, plan, applied)
        # Merged domains split again on what full rounds see: none quiet.
        if self.timings.quiet_rounds and self.merger.split_choice is None and not (
                self.merger.pending or deferred or self.tracker.loads.placed_at or applied
                or plan.moves or decision.pins
                or self.speed.pins_made or decision.engaged or self.observers):
            quiet.rosters = quiet.rosters_for(samples, decision, placer.placed_between_rounds)
        return decision

    def _binding_deferred(self):
        """Why auto binds no thread yet (a phrase for the round's reason),
        or None: until other work is read, and, for the
        first binding, while the first judgement of merging waits for its
        readings or hold -- 3 busy threads on two 1-CPU domains bound 2 + 1
        until the domains merge cost the pair half their speed for that
        second; the OS alone shares the CPUs.  That wait ends at
        FIRST_JUDGEMENT_WINDOWS load windows (a program making runnable
        threads all the time is never judged: it is grouped).

        Until other work is read: auto over two or more domains that may
        merge moves no thread until then (0.25 s from add_target by
        default): a thread bound beside work it has not seen yet -- a hog
        on one of the CPUs -- goes at that work's pace until a round merges
        the domains (3-4% of a 5 s barrier program, BENCHMARKS.md);
        meanwhile the OS places every thread, as it would alone.  Domains
        that never merge (packages, NUMA nodes, measured capacity) bind at
        once: a thread's memory is placed where it first runs."""
        if self.other.unread() and not self.choice.single and self.merger.may_merge():
            return "until other work is read"
        if self._judging_first:
            if self.merger.pending and self.merger.split_choice is None and \
                    self._first_judgement_left_s() > 0:
                return "while merging is judged"
            self._judging_first = False
        return None

    def _first_judgement_left_s(self):
        """Seconds left of the first binding's wait for the judgement of
        merging (FIRST_JUDGEMENT_WINDOWS load windows from the run's start,
        on the run's clock); <= 0 once it is over."""
        return (self.stats.started + FIRST_JUDGEMENT_WINDOWS * self.load_window_ns / 1e9
                - time.monotonic())

    def _deferred_ms(self, samples):
        """The interval to the next round while binding is deferred: to when
        other work can first be read, or a merge's hold ends
        (DomainMerger.due_ns) -- a judgement at its end sees the loads of
        the whole hold, which reach back a load window -- or
        WATCH_INTERVAL_MS while merging waits for readings that mature
        with the threads' own; never past the first judgement's end.  Two
        1-CPU domains, 3 busy threads: 6 rounds to the merge, not 10."""
        due = self.other.readable_at_ns() if self.other.unread() else self.merger.due_ns
        now = samples[0].wall_ns if samples else time.monotonic_ns()
        # A millisecond late rather than early: a round before it decides nothing.
        wait = WATCH_INTERVAL_MS if due is None else (due - now) // 1_000_000 + 1
        if self._judging_first:
            wait = min(wait, int(1000 * self._first_judgement_left_s()) + 1)
        # Never a tight loop, whatever the clocks say (DEFERRED_FLOOR_MS).
        return max(DEFERRED_FLOOR_MS, wait)

    def _place_unmeasured(self):
        """The first round after ``reshape``: threads not measured yet are
        placed now, in the new domains (the plan places measured ones)."""
        self._reshaped = False
        unplaced = [t for t in self.threads.values()
                    if t.domain is None and t.load is None and t.eligible and not t.unmovable]
        if unplaced and self.moves_threads and not self.choice.single \
                and not self._binding_deferred():
            self.placer.place_new(unplaced, self.threads.values())

    def _regroup(self, plan, moves, samples):
        """Apply a plan's moves -- unless the last regrouping is less than a
        load window old: the loads it was planned from still reach back
        before it (and a moved thread's run-queue wait is its old domain's),
        so planning again from them would move threads back and forth on
        noise (seen: 10 migrations a second of four equal threads under
        outside load).  Placements of threads not yet placed are never
        held.  Returns the moves made."""
        now = samples[0].wall_ns if samples else time.monotonic_ns()
        if self._regrouped_ns is not None and now - self._regrouped_ns < self.regroup_hold_ns:
            held = [(t, dst) for t, dst in moves if t.domain is not None]
            if held:
                moves = [(t, dst) for t, dst in moves if t.domain is None]
                plan.reason += "; held: the last regrouping is not yet a load window old"
        made = self.placer.apply(moves)
        if any(src is not None for _, src, _ in made):
            self._regrouped_ns = now
        return made

    def _may_use(self):
        """Every CPU the targets may use (their allowed CPUs when added)."""
        return frozenset().union(*self.tracker.base_allowed.values())

    # -- space sharing ---------------------------------------------------------

    def reshape(self, domains, confined):
        """Balance over ``domains`` (CPU sets) from now on: space sharing
        (balance/sharing.py) gave the program other CPUs.  ``confined``:
        they are not all it may use, so even one domain has every thread
        bound to it.

        A thread bound to a domain that is still one (same CPUs) stays; the
        others are placed again at a round made at once -- placements,
        which the regrouping hold never delays, so a program that lost CPUs
        leaves them within one round.  Handed back to the OS when the
        program gets all it may use back as one domain."""
        note = "space sharing: %s %s" % ("CPUs" if confined else "all it may use, CPUs",
                                         " / ".join(format_cpulist(d) for d in domains))
        level = self.merger.unmerged().level
        self.merger.forget()
        self.machine.planned = DomainChoice(level, tuple(domains), note, confined)
        self._reshape(self.machine.planned)

    def _reshape(self, choice):
        """Balance over ``choice``'s domains from now on (see reshape)."""
        old, was_single = self.domains, self.choice.single
        self._leave_quiet()
        self.layout.set(choice)
        self.binder.setup([d.cpus for d in self.domains])
        if self.journal is not None:
            self.journal.attach(self.binder, [d.cpus for d in self.domains])
        self.policy.forget_domains()
        # A binder of its own sets (cpuset, pset) made them anew: every
        # thread is bound again; so is every thread after a single domain,
        # which bound none (handed back to the OS).
        index_of = {d.cpus: d.index for d in self.domains} \
            if self.binder.binds_masks and not was_single else {}
        for thread in self.threads.values():
            thread.eligible = self.tracker.eligible_for(thread.allowed)
            if thread.domain is not None:
                thread.domain = index_of.get(old[thread.domain].cpus)
            if thread.domain is None or thread.pinned_cpu not in self.domains[thread.domain].cpus:
                thread.pinned_cpu = None
            if self.choice.single and thread.eligible:
                if thread.saved is not None and not thread.unmovable:
                    self.placer.hand_back(thread)
                thread.domain = 0
        self.speed.reset()
        self._regrouped_ns = None
        self._last_decision = None
        self._reshaped = True
        if self._next_round is not None:    # balancing has started: a round now
            self._next_round = self._scanned = time.monotonic()
            self._next_step = None

    def _follow_machine(self, choice, note):
        """The on-line CPUs or a cpuset changed (balance/machine.py): balance
        over ``choice`` (the planned domains cut to the CPUs usable now)
        from now on; merged domains are judged anew; every thread still
        bound whose mask the kernel reset is placed again."""
        self.merger.forget()
        self._reshape(choice)
        if self.binder.binds_masks and not self.dry_run:
            for thread in list(self.threads.values()):
                if thread.bound_mask is None or thread.unmovable:
                    continue
                if self.placer.still_ours(thread) and thread.bound_mask is None \
                        and not self.choice.single:
                    thread.domain = None    # the kernel's reset: placed again
        self.tell_machine(note)

    # -- the cadences (service/driver.py, the one loop) --------------------------

    def start_clock(self):
        """Balancing starts now: the first round comes first_interval_ms
        later, looks for new threads every discover_ms; tumbler's start-up
        priority settles (platform/priority.py)."""
        settle_priority()
        now = time.monotonic()
        self._next_round = now + self.timings.first_interval_ms / 1000.0
        self._next_step = None          # next speed balancing step between rounds
        self._scanned = now             # last look for new threads

    def resume(self):
        """A full round at the next tick, unpaced: the service woke this
        program from parking (service/loop.py), nothing from before holds."""
        self._leave_quiet()
        self.quiet.calm = None
        self._next_round = time.monotonic()

    def tick(self, slack=0.0):
        """Do the one thing due now, if any -- a round, a speed balancing
        step, or a look for new threads -- and return the monotonic time
        the next is due.  A round or a look due within ``slack`` seconds
        is done now: a loop of several programs passes SLACK_S, so that
        their looks fall together and it wakes once for all of them, not
        once for each."""
        now = time.monotonic()
        early = now + slack
        if early >= self._next_round:
            decision = self.round()
            # A round samples every thread, which finds new ones too; one
            # clock reading for both, so that with an interval equal to
            # discover_ms no separate scan is made.
            self._scanned = time.monotonic()
            self._next_round = self._scanned + decision.interval_ms / 1000.0
            self._next_step = None
            if decision.speed_interval_ms and self.moves_threads:
                self._next_step = self._scanned + decision.speed_interval_ms / 1000.0
        elif self._next_step is not None and now >= self._next_step:
            step_ms = self.speed.step()
            self._next_step = None if step_ms is None else time.monotonic() + step_ms / 1000.0
        elif self.quiet.calm is None and early - self._scanned >= self.discover_s:
            self.tracker.discover()
            self._scanned = now
        return self.due()

    def due(self):
        """The monotonic time the next round, speed step or look for new
        threads is due (what ``tick`` returns)."""
        # A paced watch (quiet.py) looks for new threads at its rounds only.
        wake = self._next_round if self.quiet.calm else min(self._next_round, self._scanned
                                                       + self.discover_s)
        if self._next_step is not None:
            wake = min(wake, self._next_step)
        return wake

    # -- accounting ------------------------------------------------------------

    def own_cpu_seconds(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
