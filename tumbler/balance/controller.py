"""The balancing loop: platform -> samples -> engine -> plan -> platform.

Each round (paper Algorithm 1):

1. sample every thread of every target (one pass over /proc);
2. turn the deltas into loads: what each thread *wants*, delta(CPU time +
   run-queue wait) / delta(wall) capped at one CPU, not only what it got
   (Eq. 1, delta(usr+sys) / delta(wall), kept as ``cpu``): on a saturated
   domain the CPU received sums to its capacity however many threads
   queue there, so Eq. 1 alone cannot see 3 + 1 busy threads on two
   1-CPU domains (``_measure_threads``);
3. ask the policy for a plan (engine, no OS calls);
4. apply the plan's moves through the binder, saving each thread's original
   placement before its first move;
5. log the round and sleep the interval the plan chose.

Between rounds the loop wakes every ``discover_ms`` to look for new threads
and places them at once (initial placement), and at once for signals.
While speed balancing is engaged (the decision has a
``speed_interval_ms``), it also wakes for speed balancing's steps: each
reads only the threads speed balancing pinned and applies its pins
(``speed_step``), a fraction of a full round's cost at 20 ms intervals.

Quiet rounds.  Most rounds of a program in its stride change nothing: the
same threads, the domains within the error tolerance of each other, no
domain crowded.  After a full round that moved and pinned nothing, in a
run with one target and no round observers (log file, probes), the next
rounds are *quiet*: the backend fills two columns (CPU time and run-queue
wait) for the same threads in one call, ``engine.window`` sums them over
the load window in one more, and ``policy.quiet_verdict`` answers from
those sums -- the interval the full round would choose, or None.  Anything
else (a thread born or gone, an exec, a spread over the tolerance, a
crowded domain) falls back to the full round at once, which first brings
every thread's numbers up to date as if each quiet round had been a full
one (``_leave_quiet``).  A quiet round makes no Python object per thread:
for 64 threads at 100 ms it costs less than half a full one (BENCHMARKS.md).
Its data (the roster of threads, column samples) is in quiet.py.

Whatever ends the run -- the targets exit, ``--duration`` passes, a signal,
an error -- ``restore_all`` puts every touched thread back the way it was
found, and the binder removes what it created.
"""

import contextlib
import resource
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

from ..cpulist import format_cpulist
from ..engine.model import Domain, ThreadLoad
from ..engine.policy import RUNNABLE_SHARE, ThreadView
from ..engine.window import summarize_window
from ..platform.base import NoSuchProcess, PlatformError, Unmovable
from .quiet import ColumnSample, QuietRound, Roster
from .spreads import SpreadHistory
from .targets import allowed_union


#: Span over which voluntary context switches are counted (see _sleeps_per_second).
SWITCH_WINDOW_NS = 2_000_000_000
#: Shortest span over which a thread may be judged not to sleep.
SWITCH_MIN_SPAN_NS = 300_000_000
#: Child processes of bound threads are looked for this often (and once
#: more when balancing ends): a read of /proc/PID/task/TID/children per
#: bound thread, so not at every discovery.
CHILD_SCAN_NS = 1_000_000_000
#: At exit, threads and children born of bound threads are looked for
#: until a pass finds none, at most this many passes.
SWEEP_PASSES = 20
#: Voluntary context switches are read at most this often per thread; in
#: between, the last rate stands (speed balancing rounds come every 20 ms,
#: and a /proc status read costs more than the rest of a thread's round).
SWITCH_READ_NS = 100_000_000


@dataclass
class TrackedThread:
    pid: int
    tid: int
    start: int
    name: str
    allowed: frozenset              # CPUs it was allowed when first seen
    eligible: frozenset             # domain indices it may use
    first: tuple                    # (wall_ns, run_ns, lat_ns) when first seen
    prev_wall: int = 0              # wall_ns and run_ns at the last round's sample
    prev_run: int = 0
    exec_ns: int = 0                # CPU time over the last round
    wall_ns: int = 0                # length of the last round
    load: Optional[float] = None    # demand, CPUs; None until measured over one interval
    cpu: Optional[float] = None     # CPU received (Eq. 1), what utilisation reports
    runnable: Optional[float] = None
    domain: Optional[int] = None    # domain tumbler bound it to
    saved: Optional[dict] = None    # original placement, once touched
    migrations: int = 0
    unmovable: bool = False         # the OS refused, or someone else manages it now
    pinned_cpu: Optional[int] = None    # speed balancing pinned it to this CPU
    bound_mask: Optional[frozenset] = None  # the mask tumbler last set
    touched: bool = False           # tumbler has set its mask (children may carry it)
    switches: Optional[deque] = None    # (wall_ns, voluntary switches) at rounds
    sleeps_per_s: Optional[float] = None    # rate from the last reading of them


@dataclass
class RunStats:
    started: float
    intervals: int = 0
    quiet: int = 0                  # of them, quiet rounds
    threads_seen: int = 0
    migrations: int = 0             # moves between domains
    pins: int = 0                   # speed balancing's core changes
    spreads: SpreadHistory = None   # every round's spread (before its moves)
    warnings: int = 0
    outsiders: int = 0              # threads allowed no CPU of any domain, left alone
    priority: object = None         # () -> how the loop ran, for the summary (run.py)
    startup_s: float = 0.0          # wall time from tumbler's start to balancing

    def __post_init__(self):
        self.spreads = SpreadHistory()


class Controller:
    def __init__(self, backend, binder, policy, domain_choice, *, dry_run=False,
                 discover_ms=100, observers=(), warn=None, first_interval_ms=100,
                 load_window_ms=500, journal=None, quiet_rounds=True):
        self.backend = backend
        self.binder = binder
        self.policy = policy
        self.choice = domain_choice
        self.domains = [Domain(i, cpus) for i, cpus in enumerate(domain_choice.domains)]
        self.dry_run = dry_run
        self.moves_threads = policy.moves_threads
        self.discover_s = discover_ms / 1000.0
        self.load_window_ns = load_window_ms * 1_000_000
        self.first_interval_ms = first_interval_ms
        self.journal = journal          # crash-safe record of original placements
        self.observers = list(observers)   # each has write_round(controller, plan, moves)
        self.warn = warn or (lambda message: print("tumbler: warning: " + message,
                                                   file=sys.stderr))
        self.targets = []
        self.placed_between_rounds = []     # initial placements, logged next round
        self._last_decision = None
        self.pins_made = []                 # (thread, cpu, step) of the last round and the
                                            # speed steps before it
        self.steps = 0                      # speed balancing steps so far (rounds included)
        self._pins_between = []             # pins of speed steps since the last round
        self._speeding = []                 # threads speed_step samples
        self._speed_domains = []            # domains where it is engaged
        self.base_allowed = {}              # pid -> CPUs the process may use
        self.images = {}                    # pid -> program image token (exec detection)
        self._bound_masks = set()           # CPU sets tumbler bound threads to
        self._children_scanned = 0          # monotonic ns of the last look for children
        self.threads = {}           # (pid, tid) -> TrackedThread
        self.histories = {}         # pid -> round Samples within the load window
        self._tracked = {}          # pid -> TIDs in self.threads
        self.stats = RunStats(started=time.monotonic())
        self.quiet_rounds = quiet_rounds    # False: every round is a full one
        self._roster = None         # the threads quiet rounds read, while they may
        self._capacities = Roster.capacities(self.domains)
        binder.setup([d.cpus for d in self.domains])

    # -- targets and threads -------------------------------------------------

    def add_target(self, pid, allowed=None):
        """Start managing ``pid``.  ``allowed`` is the CPU set the process
        may use (default: the union of its threads' masks now)."""
        sample = self.backend.sample(pid)
        if allowed is None:
            allowed = allowed_union(self.backend, [pid])
        self.base_allowed[pid] = frozenset(allowed)
        try:
            self.images[pid] = self.backend.process_state(pid)[1]
        except NoSuchProcess:
            pass
        self.targets.append(pid)
        self._track(sample, place=True)

    def _track(self, sample, place, tids=None):
        """Start tracking threads of ``sample`` (or those of ``tids``) not seen before."""
        new = []
        threads = sample.threads
        inherited = []
        for tid, times in (threads.items() if tids is None
                           else [(tid, threads[tid]) for tid in tids]):
            key = (sample.pid, tid)
            known = self.threads.get(key)
            if known is not None and known.start == times.start:
                continue
            try:
                mask = self.backend.allowed_cpus(sample.pid, tid)
            except NoSuchProcess:
                continue
            allowed = self._original_allowed(sample.pid, mask)
            eligible = frozenset(d.index for d in self.domains if d.cpus & allowed)
            if not eligible:
                self._note_outsider(sample.pid, tid, times.name, allowed)
            thread = TrackedThread(domain=0 if self.choice.single and eligible else None,
                                   pid=sample.pid, tid=tid, start=times.start,
                                   name=times.name, allowed=allowed, eligible=eligible,
                                   first=(sample.wall_ns, times.run_ns, times.lat_ns),
                                   prev_wall=sample.wall_ns, prev_run=times.run_ns)
            self.threads[key] = thread
            self._tracked.setdefault(sample.pid, set()).add(tid)
            self.stats.threads_seen += 1
            new.append(thread)
            if mask != allowed and self.binder.binds_masks:
                inherited.append((thread, mask))
        if inherited:
            self._adopt_inherited(inherited)
        if place and new and self.moves_threads and not self.choice.single:
            self._place_new(new)
        return new

    def _note_outsider(self, pid, tid, name, allowed):
        """A thread allowed only CPUs outside every domain is someone else's
        placement (an application pinning its I/O or polling thread): it is
        never moved and its load counts in no domain.  Said once per thread."""
        self.stats.outsiders += 1
        self.warn("thread %d (%s) may only run on CPUs %s, outside the domains; "
                  "tumbler leaves it alone" % (tid, name, format_cpulist(allowed)))

    def _original_allowed(self, pid, mask):
        """The CPUs a thread whose mask is ``mask`` may use, as if tumbler
        had never run.

        A new thread inherits its creator's mask; if its creator was bound
        by tumbler, that mask is tumbler's doing, and the thread's real
        allowance is the process's.
        """
        if mask in self._bound_masks:
            return self.base_allowed.get(pid, mask)
        return mask

    def _adopt_inherited(self, inherited):
        """Threads born of a bound thread carry its mask (Linux and illumos
        alike): tumbler's doing, so tumbler's to put back.  Each is recorded
        as if tumbler had bound it, before anything else can happen to it;
        with one domain, where only speed balancing pins threads, the
        newcomer is handed back to the OS at once (its creator's pin is no
        place for it); with several, it is placed like any new thread."""
        with self._journal_batch():
            for thread, mask in inherited:
                thread.saved = {"cpus": sorted(thread.allowed)}
                thread.bound_mask = mask
                if self.journal is not None:
                    self.journal.record(thread.pid, thread.tid, thread.start,
                                        self.binder.kind, thread.saved)
        if self.journal is not None:
            self.journal.set_masks([(t.pid, t.tid, t.start, mask, None)
                                    for t, mask in inherited])
            self.journal.masks_set()
        if self.choice.single:
            for thread, _ in inherited:
                self._hand_back(thread)

    def _hand_back(self, thread):
        """Put one thread back where it was found, now; True if done (if
        not, restore_all tries again at the end)."""
        try:
            if self._changed_by_someone_else(thread):
                return False
            self.binder.restore(thread.pid, thread.tid, thread.saved)
        except NoSuchProcess:
            return False
        except PlatformError as exc:
            self.stats.warnings += 1
            self.warn("could not hand back thread %d: %s" % (thread.tid, exc))
            return False
        thread.saved = thread.bound_mask = thread.pinned_cpu = None
        if self.journal is not None:
            self.journal.drop(thread.pid, thread.tid)
        return True

    def _journal_batch(self):
        return self.journal.batch() if self.journal is not None else contextlib.nullcontext()

    def _place_new(self, new):
        from ..engine.grouping import place_new
        # A placed thread not measured yet counts as busy (1 CPU): threads
        # created one by one then alternate between domains.
        placed = [ThreadLoad(t.tid, 1.0 if t.load is None else t.load, t.domain, t.eligible)
                  for t in self.threads.values() if t.domain is not None]
        movable = [t for t in new if t.eligible]
        moves = place_new([ThreadLoad(t.tid, 0.0, None, t.eligible) for t in movable],
                          placed, self.domains)
        by_tid = {t.tid: t for t in movable}
        self.placed_between_rounds += self._apply([(by_tid[m.tid], m.dst) for m in moves])

    # -- one round -----------------------------------------------------------

    def sample_all(self):
        """Sample every target; drop targets that exited. Returns live samples."""
        samples = []
        for pid in list(self.targets):
            try:
                # Sample first: the backend may answer process_state from
                # the last round when the sample found the same threads.
                sample = self.backend.sample(pid)
                zombie, image = self.backend.process_state(pid)
                if zombie:
                    raise NoSuchProcess(pid)
                self._check_exec(pid, image)
                samples.append(sample)
            except NoSuchProcess:
                self.targets.remove(pid)
                self._drop_process(pid)
                if self.journal is not None:
                    self.journal.release(pid)
        return samples

    def _check_exec(self, pid, image):
        """After an execve(2) by a thread other than the main one, that
        thread carries on under the process's ID (same start time) with its
        own mask.  A mask tumbler set is tumbler's doing wherever it turns
        up: take it as the thread's binding, not as someone else's change."""
        old = self.images.get(pid)
        self.images[pid] = image
        if old is None or image is None or image == old:
            return
        for thread in [t for t in self.threads.values()
                       if t.pid == pid and t.bound_mask is not None]:
            try:
                mask = self.backend.allowed_cpus(pid, thread.tid)
            except NoSuchProcess:
                continue
            if mask in self._bound_masks:
                thread.bound_mask = mask
                thread.domain = next((d.index for d in self.domains if mask <= d.cpus),
                                     thread.domain)

    def _drop_process(self, pid):
        for key in [k for k in self.threads if k[0] == pid]:
            del self.threads[key]
        self.histories.pop(pid, None)
        self._tracked.pop(pid, None)

    def update_loads(self, samples):
        """Compute each thread's load over the last interval; drop vanished ones."""
        measured = 0
        for sample in samples:
            # New threads are placed before anyone is measured this round:
            # threads placed a moment ago then still count as busy (1 CPU,
            # see _place_new) rather than at a load measured over a sliver
            # of an interval, which would make the newcomers pile up.
            new = sample.threads.keys() - self._tracked.get(sample.pid, ())
            if new:
                self._track(sample, place=True, tids=sorted(new))
            count, reused = self._measure(sample)
            measured += count
            if reused:          # a TID now naming another thread
                measured += len(self._track(sample, place=True, tids=reused))
        if measured != len(self.threads):
            live = {(sample.pid, tid) for sample in samples for tid in sample.threads}
            for key in [k for k in self.threads if k not in live]:
                del self.threads[key]
                self._tracked.get(key[0], set()).discard(key[1])
                self.backend.forget(*key)
                self.policy.forget(key[1])
                if self.journal is not None:
                    self.journal.drop(*key)

    def _measure(self, sample):
        """Load (demand, see the module docstring), CPU received and runnable
        share of the threads of ``sample`` over
        the load window, and their CPU time over the last round; returns how
        many tracked threads it measured and the TIDs it does not track (a
        TID now naming another thread; new ones are tracked before).

        A load over a single short interval is mostly noise for programs
        whose phases are longer than the interval: a thread that happened
        to wait at a barrier for most of 50 ms looks idle.  The load is
        therefore taken against the newest round sample at least
        ``load_window`` old (or the oldest one kept): the same ratio over a
        longer delta; a thread born since is measured from when it was
        first seen.  The window's samples are kept per process, not per
        thread: this runs for every thread every round.
        """
        history = self.histories.get(sample.pid)
        if history is None:
            history = self.histories[sample.pid] = deque()
        history.append(sample)
        for _ in range(self._window_start(history, sample.wall_ns, appended=True)):
            history.popleft()
        return self._measure_threads(sample, history[0])

    def _window_start(self, history, now, appended):
        """The index in ``history`` of the load window's base sample for a
        sample taken at ``now``, the samples before it to be dropped: the
        newest sample at least ``load_window`` old, or the oldest kept,
        never the new sample itself nor the one just before it.
        ``appended``: whether the new sample is already at its end."""
        count = len(history) + (0 if appended else 1)
        start = 0
        while count - start > 2 and now - history[start + 1].wall_ns >= self.load_window_ns:
            start += 1
        return start

    def _measure_threads(self, sample, base):
        """_measure's per-thread part, against the window's ``base`` sample."""
        pid, now = sample.pid, sample.wall_ns
        base_wall, base_threads = base.wall_ns, base.threads
        get = self.threads.get
        measured = 0
        unknown = []
        for tid, times in sample.threads.items():
            thread = get((pid, tid))
            if thread is None or thread.start != times.start:
                unknown.append(tid)
                continue
            measured += 1
            run_ns = times.run_ns
            thread.exec_ns = run_ns - thread.prev_run if run_ns > thread.prev_run else 0
            thread.wall_ns = now - thread.prev_wall
            thread.prev_wall, thread.prev_run = now, run_ns
            old = base_threads.get(tid)
            first = thread.first
            if first[0] < base_wall < now and old is not None and old.start == times.start:
                old_wall, old_run, old_lat = base_wall, old.run_ns, old.lat_ns
            else:       # first seen after the base sample (or this is the only one)
                old_wall, old_run, old_lat = first
            wall = now - old_wall
            if wall <= 0:
                continue
            run = run_ns - old_run if run_ns > old_run else 0
            thread.cpu = run / wall
            lat_ns = times.lat_ns
            if lat_ns is not None and old_lat is not None:
                runnable = (run + (lat_ns - old_lat if lat_ns > old_lat else 0)) / wall
                thread.runnable = runnable
                # Demand: the CPU it got plus the time it queued for one
                # (engine/window.py computes the same for quiet rounds).
                thread.load = runnable if runnable < 1.0 else 1.0
            else:           # no run-queue wait known (schedstat off): Eq. 1
                thread.load = thread.cpu
        return measured, unknown

    @property
    def last_decision(self):
        """The Decision of the last round (of a quiet one too, built now)."""
        decision = self._last_decision
        if type(decision) is QuietRound:
            decision = self._last_decision = self.policy.quiet_decision(
                decision.summary, self.domains, decision.assignment)
        return decision

    def round(self):
        """One monitor-group-apply round: a quiet one when it may be (see the
        module docstring; returns a QuietRound), else a full one (returns
        the Decision)."""
        if self._roster is not None:
            decision = self._quiet_round()
            if decision is not None:
                return decision
            self._leave_quiet()
        samples = self.sample_all()
        self.update_loads(samples)
        # Threads outside every domain (no eligible domain) are left alone.
        measured = [t for t in self.threads.values()
                    if t.load is not None and not t.unmovable and t.eligible]
        crowded = self._crowded_domains(measured)
        decision = self.policy.decide(self._views(measured, crowded), self.domains)
        plan = decision.plan
        applied, self.placed_between_rounds = self.placed_between_rounds, []
        for thread, _, _ in applied:
            self._refresh_name(thread)      # placed at birth, often renamed since
        if self.moves_threads:
            by_tid = {t.tid: t for t in measured} if plan.moves or decision.pins else {}
            applied += self._apply([(by_tid[m.tid], m.dst) for m in plan.moves])
            self.pins_made = self._pins_between + self._pin(by_tid, decision.pins)
            self._pins_between = []
            self._follow_speed(decision, measured)
        self._last_decision = decision
        self.stats.intervals += 1
        if not self.choice.single:
            self.stats.spreads.append(plan.spread_before)
        for observer in self.observers:
            observer.write_round(self, plan, applied)
        if self.quiet_rounds and not (applied or plan.moves or decision.pins or self.pins_made
                                      or decision.engaged or self.observers):
            self._roster = self._quiet_roster(samples, decision)
        return decision

    # -- quiet rounds ----------------------------------------------------------

    def _quiet_roster(self, samples, decision):
        """The roster for quiet rounds after a full round that changed
        nothing, or None when the next round must be a full one too."""
        if len(samples) != 1 or len(self.targets) != 1 or self.placed_between_rounds:
            return None
        sample = samples[0]
        if len(sample.threads) != len(self.threads):
            return None
        threads = [self.threads.get((sample.pid, tid)) for tid in sample.threads]
        if None in threads or any(
                t.load is None or t.runnable is None or t.unmovable or t.pinned_cpu is not None
                or (t.eligible and (t.domain is None or t.domain not in t.eligible))
                for t in threads):
            return None     # (a thread outside every domain is read, counted nowhere)
        reader = self.backend.columns_reader(sample.pid, list(sample.threads))
        if reader is None:
            return None
        return Roster(sample.pid, threads, reader, decision.plan.assignment)

    def _quiet_round(self):
        """A round from two columns and a few sums; None when a full round
        must be made instead (nothing is changed then)."""
        roster = self._roster
        pid = roster.pid
        try:
            zombie, image = self.backend.process_state(pid)
        except NoSuchProcess:
            return None
        if zombie or image != self.images.get(pid):
            return None
        run, lat = roster.zeros[:], roster.zeros[:]
        now = roster.reader(run, lat)
        if now is None:
            return None
        history = self.histories[pid]
        start = self._window_start(history, now, appended=False)
        base = history[start]
        if roster.born_by >= base.wall_ns or base.wall_ns >= now:
            return None         # a thread born since the base: measured from birth
        columns = roster.base_columns(base)
        if columns is None:
            return None
        summary = summarize_window(run, lat, columns[0], columns[1], now - base.wall_ns,
                                   roster.domain_of, self._capacities, RUNNABLE_SHARE)
        verdict = self.policy.quiet_verdict(summary, self._capacities)
        if verdict is None:
            return None
        for _ in range(start):
            history.popleft()
        history.append(tuple.__new__(ColumnSample, (pid, now, roster, run, lat)))
        roster.unmeasured = True
        self.pins_made = []
        self._last_decision = decision = tuple.__new__(
            QuietRound, (verdict[0], summary, roster.assignment, None))
        self.stats.intervals += 1
        self.stats.quiet += 1
        if not self.choice.single:
            self.stats.spreads.append(verdict[1])
        return decision

    def _leave_quiet(self):
        """End quiet rounds: give every thread of the roster the numbers the
        last quiet round would have given it as a full round (load and
        runnable share over the window, CPU time over that round), so that
        what follows sees no difference."""
        roster, self._roster = self._roster, None
        if roster is None or not roster.unmeasured:
            return
        history = self.histories.get(roster.pid)
        if history is None or len(history) < 2:
            return              # the process is gone: nothing to measure
        before = history[-2].threads
        for thread in roster.threads:
            thread.prev_wall = history[-2].wall_ns
            thread.prev_run = before[thread.tid].run_ns
        self._measure_threads(history[-1], history[0])

    def _follow_speed(self, decision, measured):
        """Note the threads speed balancing pinned in the domains where it is
        engaged: speed_step samples only those between full rounds."""
        engaged = set(decision.engaged) if decision.speed_interval_ms else ()
        self._speed_domains = [d for d in self.domains if d.index in engaged]
        self._speeding = [t for t in measured
                          if t.pinned_cpu is not None and t.domain in engaged] if engaged else []

    def speed_step(self):
        """One step of speed balancing between full rounds; returns the ms to
        the next step, or None when there is nothing to step.

        Reads only the CPU time of the threads speed balancing pinned (one
        read each), takes their speeds over the time since their last
        reading, and applies the pins the balancer decides.  Everything
        else (new threads, sleepers, loads, grouping) waits for the next
        full round: a step costs a fraction of one, and comes every 20 ms.
        """
        threads = [t for t in self._speeding if t.pinned_cpu is not None and not t.unmovable]
        if not threads:
            return None
        by_pid = {}
        for thread in threads:
            by_pid.setdefault(thread.pid, []).append(thread)
        read = []
        for pid, group in by_pid.items():
            try:
                run_times, now = self.backend.thread_run_ns(pid, [t.tid for t in group])
            except NoSuchProcess:
                continue
            for thread in group:
                run_ns = run_times.get(thread.tid)
                if run_ns is None:
                    continue        # gone, or unreadable now: the full round will say
                thread.exec_ns = run_ns - thread.prev_run if run_ns > thread.prev_run else 0
                thread.wall_ns = now - thread.prev_wall
                thread.prev_wall, thread.prev_run = now, run_ns
                read.append(thread)
        # No sleeping counts: a step does not judge who sleeps (full rounds do).
        views = self._views(read, crowded=())
        pins, interval_ms = self.policy.speed_step(views, self._speed_domains)
        self._pins_between += self._pin({t.tid: t for t in threads}, pins)
        return interval_ms

    def _crowded_domains(self, threads):
        """Domains with more always-runnable threads than CPUs.

        Only there can speed balancing engage, so only there is it worth
        reading each thread's voluntary context switches.
        """
        if not self.policy.needs_sleep_data:
            return set()
        runnable = {}
        for thread in threads:
            if (thread.runnable or 0) >= RUNNABLE_SHARE:
                runnable[thread.domain] = runnable.get(thread.domain, 0) + 1
        return {d.index for d in self.domains if runnable.get(d.index, 0) > len(d.cpus)}

    def _views(self, threads, crowded):
        """The policy's view of each thread: loads, last-round speed, sleeping.

        How often a thread sleeps is read (a /proc read per thread) only for
        the always-runnable threads of crowded domains.
        """
        # tuple.__new__: a NamedTuple's own __new__ is a Python call.
        new = tuple.__new__
        return [new(ThreadView, (t.tid, t.load, t.domain, t.eligible, t.pinned_cpu,
                                 t.exec_ns, t.wall_ns, t.runnable,
                                 self._sleeps_if_crowded(t, crowded) if crowded else None))
                for t in threads]

    def _sleeps_if_crowded(self, thread, crowded):
        if thread.domain in crowded and (thread.runnable or 0) >= RUNNABLE_SHARE:
            return self._sleeps_per_second(thread)
        return None

    def _sleeps_per_second(self, thread):
        """Voluntary context switches per second over the last 2 s or more.

        Longer than the load window: a thread blocking at barriers between
        long phases may not block within any one 500 ms.

        Read only for always-runnable threads of crowded domains, and at
        most every ``SWITCH_READ_NS``, since it costs a /proc status read;
        None until the readings span ``SWITCH_MIN_SPAN_NS`` (0.3 s).
        """
        if not self.backend.counts_voluntary_switches:
            return None
        now = thread.prev_wall          # this round's sample
        switches = thread.switches
        if switches and now - switches[-1][0] < SWITCH_READ_NS:
            return thread.sleeps_per_s
        try:
            count = self.backend.voluntary_switches(thread.pid, thread.tid)
        except NoSuchProcess:
            return None
        if switches is None:
            switches = thread.switches = deque()
        switches.append((now, count))
        while len(switches) > 2 and now - switches[1][0] >= SWITCH_WINDOW_NS:
            switches.popleft()
        if now - switches[0][0] < SWITCH_MIN_SPAN_NS:
            rate = None         # too short to tell a spinner from a sleeper
        else:
            rate = (count - switches[0][1]) * 1e9 / (now - switches[0][0])
        thread.sleeps_per_s = rate
        return rate

    def _pin(self, by_tid, pins):
        """Apply speed balancing's pins: a CPU, or None for the whole domain.
        Returns the (thread, cpu, step) made."""
        self.steps += 1
        wanted = []
        for tid, cpu in sorted(pins.items()):
            thread = by_tid.get(tid)
            if thread is None or thread.domain is None or thread.pinned_cpu == cpu:
                continue
            wanted.append((thread, thread.domain, cpu))
        made = [(thread, cpu, self.steps) for thread, _, cpu in self._bind_all(wanted)]
        self.stats.pins += len(made)
        return made

    def _apply(self, moves):
        """Bind each (thread, domain); return the moves actually made."""
        sources = {id(thread): thread.domain for thread, _ in moves}
        made = []
        for thread, dst, _ in self._bind_all([(t, dst, None) for t, dst in moves
                                              if t.domain != dst]):
            src = sources[id(thread)]
            if src is not None:
                thread.migrations += 1
                self.stats.migrations += 1
            made.append((thread, src, dst))
        return made

    def _bind_all(self, wanted):
        """Bind each (thread, domain, cpu or None for the whole domain);
        return those done.

        The journal has each thread's original placement and the mask about
        to be set on disk before any is set (``tumbler.state``), in one
        write each, whatever the number of threads."""
        todo = []
        for thread, dst, cpu in wanted:
            cpus = self.domains[dst].cpus & thread.allowed
            if cpu is not None:
                cpus = cpus & {cpu}
            if cpus:
                todo.append((thread, dst, cpu, frozenset(cpus)))
        if self.dry_run:
            for thread, dst, cpu, cpus in todo:
                self._bound(thread, dst, cpu, cpus)
            return [(thread, dst, cpu) for thread, dst, cpu, _ in todo]
        self._save_first([thread for thread, _, _, _ in todo])
        todo = [item for item in todo if item[0].saved is not None and self._still_ours(item[0])]
        if not todo:
            return []
        journal = self.journal
        if journal is not None:
            journal.set_masks([(t.pid, t.tid, t.start, cpus, None) for t, _, _, cpus in todo])
        done = []
        try:
            for thread, dst, cpu, cpus in todo:
                self._bound_masks.add(cpus)
                try:
                    self.binder.bind(thread.pid, thread.tid, dst, cpus)
                except NoSuchProcess:
                    continue
                except Unmovable as exc:
                    self._unmovable(thread, exc)
                    continue
                self._bound(thread, dst, cpu, cpus)
                done.append((thread, dst, cpu))
        finally:
            if journal is not None:
                journal.masks_set()
        return done

    def _bound(self, thread, dst, cpu, cpus):
        rotating = cpu is not None and thread.pinned_cpu is not None
        thread.domain, thread.pinned_cpu, thread.bound_mask = dst, cpu, cpus
        thread.touched = True
        if not rotating:
            # Speed balancing moves a pinned thread between cores every few
            # rounds; its name was read when it was first pinned.
            self._refresh_name(thread)

    def _refresh_name(self, thread):
        """Threads often name themselves after they start; moves are logged by name."""
        try:
            name = self.backend.thread_name(thread.pid, thread.tid)
        except NoSuchProcess:
            return
        if name is not None:
            thread.name = name

    def _save_first(self, threads):
        """Save the original placement of threads about to be changed for
        the first time: with a journal, all in one write, on disk before any
        of them is changed."""
        todo = [t for t in threads if t.saved is None]
        if self.dry_run or not todo:
            return
        with self._journal_batch():
            for thread in todo:
                try:
                    self._save(thread)
                except NoSuchProcess:
                    continue
                except Unmovable as exc:
                    self._unmovable(thread, exc)

    def _unmovable(self, thread, exc):
        """The OS refuses to move the thread: say so once, leave it be."""
        thread.unmovable = True
        self.stats.warnings += 1
        self.warn("%s; leaving it where it is" % exc)

    def _save(self, thread):
        saved = self.binder.save(thread.pid, thread.tid)
        if "cpus" in saved:
            saved["cpus"] = sorted(thread.allowed)
        if self.journal is not None:
            # On disk before the first change, so a tumbler killed by
            # SIGKILL can still be undone with `tumbler restore`.
            self.journal.record(thread.pid, thread.tid, thread.start, self.binder.kind, saved)
        thread.saved = saved

    def _still_ours(self, thread):
        """False if the thread is gone or someone else placed it since."""
        try:
            return not self._changed_by_someone_else(thread)
        except NoSuchProcess:
            return False

    def _changed_by_someone_else(self, thread):
        """True (and hands the thread over) if its mask is no longer ours.

        An admin or the program itself changed the affinity of a thread
        tumbler had bound: its new mask is now its allowed set, tumbler
        stops managing it and will not "restore" over that choice.
        """
        if not self.binder.binds_masks or thread.bound_mask is None:
            return False
        current = self.backend.allowed_cpus(thread.pid, thread.tid)
        if current == thread.bound_mask:
            return False
        thread.unmovable = True
        thread.allowed = current
        thread.saved = None
        if self.journal is not None:
            self.journal.drop(thread.pid, thread.tid)
        self.warn("thread %d (%s): its affinity was changed to %s by someone else; "
                  "tumbler leaves it alone from now on"
                  % (thread.tid, thread.name, format_cpulist(current)))
        return True

    # -- the loop ------------------------------------------------------------

    def run(self, waiter, deadline=None, child=None, on_signal=None):
        """Balance until targets exit, the deadline passes or a stop signal.

        Returns a short reason string.  ``on_signal(signum)`` decides what a
        signal means (exec mode forwards it); it returns True to stop.
        """
        next_round = time.monotonic() + self.first_interval_ms / 1000.0
        next_step = None                # next speed balancing step between rounds
        scanned = time.monotonic()      # last look for new threads
        # A waiter that records SIGCHLD says when the child may have
        # exited: only then is it polled (a wait4 call each time).
        poll_child = child is not None
        while True:
            for signum in waiter.take():
                if signum == signal.SIGCHLD:
                    poll_child = child is not None
                if on_signal is None or on_signal(signum):
                    return "signal %d" % signum
            if poll_child:
                if child.poll() is not None:
                    return "command exited"
                poll_child = not waiter.watches_children
            if not self.targets:
                return "target exited"
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "duration reached"
            if now >= next_round:
                decision = self.round()
                # A round samples every thread, which finds new ones too; one
                # clock reading for both, so that with an interval equal to
                # discover_ms no separate scan is made.
                scanned = time.monotonic()
                next_round = scanned + decision.interval_ms / 1000.0
                next_step = None
                if decision.speed_interval_ms and self.moves_threads:
                    next_step = scanned + decision.speed_interval_ms / 1000.0
                continue
            if next_step is not None and now >= next_step:
                step_ms = self.speed_step()
                next_step = None if step_ms is None else time.monotonic() + step_ms / 1000.0
                continue
            if now - scanned >= self.discover_s:
                self.discover()
                scanned = now
            wake = min(next_round, scanned + self.discover_s)
            if next_step is not None:
                wake = min(wake, next_step)
            if deadline is not None:
                wake = min(wake, deadline)
            waiter.sleep(max(0.0, wake - time.monotonic()))

    def discover(self):
        """Look for new threads (cheap: a directory listing) and place them;
        every CHILD_SCAN_NS, hand back child processes born of bound threads."""
        now = time.monotonic_ns()
        if self.binder.binds_masks and self._bound_masks \
                and now - self._children_scanned >= CHILD_SCAN_NS:
            self._children_scanned = now
            for pid in list(self.targets):
                self._put_back_children(pid, [t for t in self.threads.values()
                                              if t.pid == pid and t.touched])
        for pid in list(self.targets):
            try:
                tids = self.backend.thread_ids(pid)
            except NoSuchProcess:
                continue
            if any((pid, tid) not in self.threads for tid in tids):
                # New threads are placed by the loads of the others, and
                # sampling may reuse the fds of threads that exited.
                self._leave_quiet()
                try:
                    self._track(self.backend.sample(pid), place=True)
                except NoSuchProcess:
                    continue

    # -- restore -------------------------------------------------------------

    def restore_all(self):
        """Put back every thread tumbler touched; return how many failed."""
        failed = 0
        self._leave_quiet()
        for pid in self.targets:
            try:
                self._check_exec(pid, self.backend.process_state(pid, fresh=True)[1])
            except NoSuchProcess:
                pass
        for thread in self.threads.values():
            if thread.saved is None:
                continue
            try:
                if self._changed_by_someone_else(thread):
                    continue
                self.binder.restore(thread.pid, thread.tid, thread.saved)
            except NoSuchProcess:
                pass
            except Exception as exc:      # keep restoring the others
                failed += 1
                self.warn("could not restore thread %d: %s" % (thread.tid, exc))
                continue
            thread.saved = None
            if self.journal is not None:
                self.journal.drop(thread.pid, thread.tid)
        failed += self._sweep()
        try:
            self.binder.close()
        except Exception as exc:
            failed += 1
            self.warn(str(exc))
        if self.journal is not None:
            # Kept when something could not be restored: `tumbler restore`
            # can retry from it.
            self.journal.close(keep=failed > 0)
        self.backend.close()
        return failed

    def _sweep(self):
        """After the tracked threads are put back: threads born of bound
        threads since the last look (tumbler never saw them) and child
        processes born of them carry tumbler's masks; put those back too,
        looking again until a pass finds none (a thread being created while
        its creator was put back may show up only in the next listing).
        Returns how many could not be put back."""
        if not (self.binder.binds_masks and self._bound_masks):
            return 0
        failed = 0
        for _ in range(SWEEP_PASSES):
            found = 0
            for pid in list(self.targets):
                try:
                    tids = self.backend.thread_ids(pid)
                except NoSuchProcess:
                    continue
                original = self.base_allowed[pid]
                for tid in tids:
                    if (pid, tid) not in self.threads:
                        done, error = self._put_back_inherited(pid, tid, original)
                        found += done
                        failed += error
                threads = [self.threads.get((pid, tid)) for tid in tids]
                done, error = self._put_back_children(
                    pid, [t for t in threads if t is not None], untracked=[
                        tid for tid, t in zip(tids, threads) if t is None])
                found += done
                failed += error
            if not found:
                break
        return failed

    def _put_back_children(self, pid, threads, untracked=()):
        """Hand back the threads of the child processes of ``threads`` (and
        of the ``untracked`` TIDs), and of their children, that carry a mask
        tumbler set: a child starts with the mask of the thread that forked
        it.  tumbler was not asked to manage them; they go back to the CPUs
        their parent thread was allowed.  Returns (handed back, failed)."""
        todo = []
        for thread in threads:
            try:
                children = self.backend.children(pid, [thread.tid])
            except NoSuchProcess:
                continue
            todo += [(child, thread.allowed) for child in children]
        if untracked:
            try:
                children = self.backend.children(pid, untracked)
            except NoSuchProcess:
                children = ()
            todo += [(child, self.base_allowed[pid]) for child in children]
        done = failed = 0
        seen = set()
        while todo:
            child, original = todo.pop()
            if child in seen or child in self.base_allowed:
                continue            # a target of its own
            seen.add(child)
            try:
                tids = self.backend.thread_ids(child)
                for tid in tids:
                    put, error = self._put_back_inherited(child, tid, original)
                    done += put
                    failed += error
                todo += [(grandchild, original)
                         for grandchild in self.backend.children(child, tids)]
            except NoSuchProcess:
                continue
        return done, failed

    def _put_back_inherited(self, pid, tid, original):
        """One thread tumbler never bound: if its mask is one tumbler set
        (inherited from its creator), put ``original`` back.  Returns
        (1 if put back, 1 if that failed)."""
        try:
            mask = self.backend.allowed_cpus(pid, tid)
            if mask == original or mask not in self._bound_masks:
                return 0, 0
            self.binder.restore(pid, tid, {"cpus": sorted(original)})
        except NoSuchProcess:
            return 0, 0
        except Exception as exc:          # keep putting back the others
            self.warn("could not restore thread %d of process %d: %s" % (tid, pid, exc))
            return 0, 1
        return 1, 0

    def own_cpu_seconds(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
