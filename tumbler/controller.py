"""The balancing loop: platform -> samples -> engine -> plan -> platform.

Each round (paper Algorithm 1):

1. sample every thread of every target (one pass over /proc);
2. turn the deltas into loads (Eq. 1: delta(usr+sys) / delta(wall));
3. ask the policy for a plan (engine, no OS calls);
4. apply the plan's moves through the binder, saving each thread's original
   placement before its first move;
5. log the round and sleep the interval the plan chose.

Between rounds the loop wakes every ``discover_ms`` to look for new threads
and places them at once (initial placement), and at once for signals.

Whatever ends the run -- the targets exit, ``--duration`` passes, a signal,
an error -- ``restore_all`` puts every touched thread back the way it was
found, and the binder removes what it created.
"""

import contextlib
import resource
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

from .cpulist import format_cpulist
from .engine.model import Domain, ThreadLoad
from .engine.policy import RUNNABLE_SHARE, ThreadView
from .platform.base import NoSuchProcess, Unmovable
from .targets import allowed_union


#: Span over which voluntary context switches are counted (see _sleeps_per_second).
SWITCH_WINDOW_NS = 2_000_000_000
#: Shortest span over which a thread may be judged not to sleep.
SWITCH_MIN_SPAN_NS = 300_000_000


@dataclass
class TrackedThread:
    pid: int
    tid: int
    start: int
    name: str
    allowed: frozenset              # CPUs it was allowed when first seen
    eligible: frozenset             # domain indices it may use
    history: deque                  # (wall_ns, run_ns, lat_ns) samples in the load window
    load: Optional[float] = None    # None until measured over one interval
    runnable: Optional[float] = None
    domain: Optional[int] = None    # domain tumbler bound it to
    saved: Optional[dict] = None    # original placement, once touched
    migrations: int = 0
    unmovable: bool = False         # the OS refused, or someone else manages it now
    pinned_cpu: Optional[int] = None    # speed balancing pinned it to this CPU
    bound_mask: Optional[frozenset] = None  # the mask tumbler last set
    switches: Optional[deque] = None    # (wall_ns, voluntary switches) at rounds


@dataclass
class RunStats:
    started: float
    intervals: int = 0
    threads_seen: int = 0
    migrations: int = 0             # moves between domains
    pins: int = 0                   # speed balancing's core changes
    spreads: list = None
    warnings: int = 0

    def __post_init__(self):
        self.spreads = []


class Controller:
    def __init__(self, backend, binder, policy, domain_choice, *, dry_run=False,
                 discover_ms=100, observers=(), warn=None, first_interval_ms=100,
                 load_window_ms=500, journal=None):
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
        self.last_decision = None
        self.pins_made = []
        self.base_allowed = {}              # pid -> CPUs the process may use
        self.images = {}                    # pid -> program image token (exec detection)
        self._bound_masks = set()           # CPU sets tumbler bound threads to
        self.threads = {}           # (pid, tid) -> TrackedThread
        self.stats = RunStats(started=time.monotonic())
        self._cpu_domain = {cpu: d.index for d in self.domains for cpu in d.cpus}
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

    def _track(self, sample, place):
        """Start tracking threads of ``sample`` not seen before."""
        new = []
        for tid, times in sample.threads.items():
            key = (sample.pid, tid)
            known = self.threads.get(key)
            if known is not None and known.start == times.start:
                continue
            try:
                allowed = self._original_allowed(sample.pid, tid)
            except NoSuchProcess:
                continue
            eligible = frozenset(d.index for d in self.domains if d.cpus & allowed)
            thread = TrackedThread(domain=0 if self.choice.single else None,
                                   pid=sample.pid, tid=tid, start=times.start,
                                   name=times.name, allowed=allowed, eligible=eligible,
                                   history=deque([(sample.wall_ns, times.run_ns,
                                                    times.lat_ns)]))
            self.threads[key] = thread
            self.stats.threads_seen += 1
            new.append(thread)
        if place and new and self.moves_threads and not self.choice.single:
            self._place_new(new)
        return new

    def _original_allowed(self, pid, tid):
        """The CPUs a thread may use, as if tumbler had never run.

        A new thread inherits its creator's mask; if its creator was bound
        by tumbler, that mask is tumbler's doing, and the thread's real
        allowance is the process's.
        """
        allowed = self.backend.allowed_cpus(pid, tid)
        if allowed in self._bound_masks:
            return self.base_allowed.get(pid, allowed)
        return allowed

    def _place_new(self, new):
        from .engine.grouping import place_new
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
                zombie, image = self.backend.process_state(pid)
                if zombie:
                    raise NoSuchProcess(pid)
                self._check_exec(pid, image)
                samples.append(self.backend.sample(pid))
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

    def update_loads(self, samples):
        """Compute each thread's load over the last interval; drop vanished ones."""
        seen = set()
        for sample in samples:
            self._track(sample, place=True)
            for tid, times in sample.threads.items():
                thread = self.threads.get((sample.pid, tid))
                if thread is None or thread.start != times.start:
                    continue
                seen.add((sample.pid, tid))
                self._measure(thread, sample.wall_ns, times)
        for key in [k for k in self.threads if k not in seen]:
            del self.threads[key]
            self.backend.forget(*key)
            self.policy.forget(key[1])
            if self.journal is not None:
                self.journal.drop(*key)

    def _measure(self, thread, wall_ns, times):
        """Load (Eq. 1) and runnable share over the load window.

        Eq. 1 over a single short interval is mostly noise for programs
        whose phases are longer than the interval: a thread that happened
        to wait at a barrier for most of 50 ms looks idle.  The load is
        therefore taken over the newest sample at least ``load_window`` old
        (or the oldest one kept), which is Eq. 1 with a longer delta.
        """
        history = thread.history
        history.append((wall_ns, times.run_ns, times.lat_ns))
        while len(history) > 2 and wall_ns - history[1][0] >= self.load_window_ns:
            history.popleft()
        old_wall, old_run, old_lat = history[0]
        wall = wall_ns - old_wall
        if wall <= 0:
            return
        run = max(times.run_ns - old_run, 0)
        thread.load = run / wall
        if times.lat_ns is not None and old_lat is not None:
            thread.runnable = (run + max(times.lat_ns - old_lat, 0)) / wall

    def round(self):
        """One monitor-group-apply round; returns the Decision."""
        samples = self.sample_all()
        self.update_loads(samples)
        measured = [t for t in self.threads.values() if t.load is not None and not t.unmovable]
        crowded = self._crowded_domains(measured)
        decision = self.policy.decide([self._view(t, t.domain in crowded) for t in measured],
                                      self.domains)
        plan = decision.plan
        by_tid = {t.tid: t for t in measured}
        applied, self.placed_between_rounds = self.placed_between_rounds, []
        for thread, _, _ in applied:
            self._refresh_name(thread)      # placed at birth, often renamed since
        if self.moves_threads:
            applied += self._apply([(by_tid[m.tid], m.dst) for m in plan.moves])
            self.pins_made = self._pin(by_tid, decision.pins)
        self.last_decision = decision
        self.stats.intervals += 1
        if not self.choice.single:
            self.stats.spreads.append(plan.spread_before)
        for observer in self.observers:
            observer.write_round(self, plan, applied)
        return decision

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

    def _view(self, thread, crowded):
        """The policy's view of a thread: loads, last-round speed, sleeping."""
        history = thread.history
        exec_ns = wall_ns = 0
        if len(history) >= 2:
            wall_ns = history[-1][0] - history[-2][0]
            exec_ns = max(history[-1][1] - history[-2][1], 0)
        sleeps = None
        if crowded and (thread.runnable or 0) >= RUNNABLE_SHARE:
            sleeps = self._sleeps_per_second(thread)
        return ThreadView(thread.tid, thread.load or 0.0, thread.domain, thread.eligible,
                          thread.pinned_cpu, exec_ns, wall_ns, thread.runnable, sleeps)

    def _sleeps_per_second(self, thread):
        """Voluntary context switches per second over the last 2 s or more.

        Longer than the load window: a thread blocking at barriers between
        long phases may not block within any one 500 ms.

        Read only for always-runnable threads of crowded domains, since it
        costs a /proc status read; None until the readings span 1 s.
        """
        reader = getattr(self.backend, "voluntary_switches", None)
        if reader is None:
            return None
        try:
            count = reader(thread.pid, thread.tid)
        except NoSuchProcess:
            return None
        now = thread.history[-1][0]
        if thread.switches is None:
            thread.switches = deque()
        switches = thread.switches
        switches.append((now, count))
        while len(switches) > 2 and now - switches[1][0] >= SWITCH_WINDOW_NS:
            switches.popleft()
        if now - switches[0][0] < SWITCH_MIN_SPAN_NS:
            return None         # too short to tell a spinner from a sleeper
        return (count - switches[0][1]) * 1e9 / (now - switches[0][0])

    def _pin(self, by_tid, pins):
        """Apply speed balancing's pins: a CPU, or None for the whole domain."""
        made = []
        for tid, cpu in sorted(pins.items()):
            thread = by_tid.get(tid)
            if thread is None or thread.domain is None or thread.pinned_cpu == cpu:
                continue
            if self._bind(thread, thread.domain, cpu):
                made.append((thread, cpu))
                self.stats.pins += 1
        return made

    def _apply(self, moves):
        """Bind each (thread, domain); return the moves actually made."""
        moves = [(thread, dst) for thread, dst in moves if thread.domain != dst]
        self._save_first([thread for thread, _ in moves])
        made = []
        for thread, dst in moves:
            src = thread.domain
            if src == dst or not self._bind(thread, dst):
                continue
            if src is not None:
                thread.migrations += 1
                self.stats.migrations += 1
            made.append((thread, src, dst))
        return made

    def _bind(self, thread, dst, cpu=None):
        """Bind ``thread`` to domain ``dst`` (or to ``cpu`` of it); True if done."""
        cpus = self.domains[dst].cpus & thread.allowed
        if cpu is not None:
            cpus = cpus & {cpu}
        if not cpus:
            return False
        if not self.dry_run:
            try:
                if thread.saved is None:
                    self._save(thread)
                elif self._changed_by_someone_else(thread):
                    return False
                self._bound_masks.add(cpus)
                self.binder.bind(thread.pid, thread.tid, dst, cpus)
            except NoSuchProcess:
                return False
            except Unmovable as exc:
                thread.unmovable = True
                self.stats.warnings += 1
                self.warn("%s; leaving it where it is" % exc)
                return False
        thread.domain, thread.pinned_cpu, thread.bound_mask = dst, cpu, cpus
        self._refresh_name(thread)
        return True

    def _refresh_name(self, thread):
        """Threads often name themselves after they start; moves are logged by name."""
        reader = getattr(self.backend, "thread_name", None)
        if reader is not None:
            try:
                thread.name = reader(thread.pid, thread.tid)
            except NoSuchProcess:
                pass

    def _save_first(self, threads):
        """Save the original placement of threads about to be changed for
        the first time: with a journal, all in one write, on disk before any
        of them is changed."""
        todo = [t for t in threads if t.saved is None]
        if self.dry_run or not todo:
            return
        batch = self.journal.batch() if self.journal is not None else contextlib.nullcontext()
        with batch:
            for thread in todo:
                try:
                    self._save(thread)
                except (NoSuchProcess, Unmovable):
                    continue        # _bind meets it again and says so

    def _save(self, thread):
        saved = self.binder.save(thread.pid, thread.tid)
        if "cpus" in saved:
            saved["cpus"] = sorted(thread.allowed)
        if self.journal is not None:
            # On disk before the first change, so a tumbler killed by
            # SIGKILL can still be undone with `tumbler restore`.
            self.journal.record(thread.pid, thread.tid, thread.start, self.binder.kind, saved)
        thread.saved = saved

    def _changed_by_someone_else(self, thread):
        """True (and hands the thread over) if its mask is no longer ours.

        An admin or the program itself changed the affinity of a thread
        tumbler had bound: its new mask is now its allowed set, tumbler
        stops managing it and will not "restore" over that choice.
        """
        if self.binder.kind != "affinity" or thread.bound_mask is None:
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
        while True:
            for signum in waiter.take():
                if on_signal is None or on_signal(signum):
                    return "signal %d" % signum
            if child is not None and child.poll() is not None:
                return "command exited"
            if not self.targets:
                return "target exited"
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "duration reached"
            if now >= next_round:
                decision = self.round()
                next_round = time.monotonic() + decision.interval_ms / 1000.0
                continue
            self.discover()
            wake = min(next_round, now + self.discover_s)
            if deadline is not None:
                wake = min(wake, deadline)
            waiter.sleep(max(0.0, wake - time.monotonic()))

    def discover(self):
        """Look for new threads (cheap: a directory listing) and place them."""
        for pid in list(self.targets):
            try:
                tids = self.backend.thread_ids(pid)
            except NoSuchProcess:
                continue
            if any((pid, tid) not in self.threads for tid in tids):
                try:
                    self._track(self.backend.sample(pid), place=True)
                except NoSuchProcess:
                    continue

    # -- restore -------------------------------------------------------------

    def restore_all(self):
        """Put back every thread tumbler touched; return how many failed."""
        failed = 0
        for pid in self.targets:
            try:
                self._check_exec(pid, self.backend.process_state(pid)[1])
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

    def own_cpu_seconds(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
