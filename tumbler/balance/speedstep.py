"""Speed balancing's side of the loop (``SpeedSteps``): which domains are
crowded, the policy's view of each thread, and the steps between full
rounds that re-pin the threads speed balancing took over
(``engine.speed``)."""

from collections import deque

from ..engine.model import ThreadView, ThreadViews
from ..engine.policy import RUNNABLE_SHARE
from ..platform.base import NoSuchProcess, Unsupported

try:
    from ._rounds import thread_views as _c_thread_views
except ImportError:         # not built (optional): the same pass in Python
    _c_thread_views = None


#: Span over which context switches are counted (see _switch_rates).
#: Reasoned: four load windows, so that a thread blocking at barriers
#: between phases longer than one window shows it, and at
#: SLEEPS_PER_SECOND (1) one that blocks is counted twice in it.
SWITCH_WINDOW_NS = 2_000_000_000
#: Shortest span over which a thread may be judged not to sleep.
#: Derived: one voluntary switch in it is 3.3 per second, over
#: SLEEPS_PER_SECOND; threads sleeping at barriers 3 on 2 CPUs (3.96 per
#: second at least, BENCHMARKS.md, "auto's thresholds against what
#: threads show") show 1.2 in it.  With rounds at WATCH_INTERVAL_MS
#: (engine/policy.py) a crowd is first judged at the second round after
#: it is seen, 400 ms.
SWITCH_MIN_SPAN_NS = 300_000_000
#: Context switches are read at most this often per thread; in between,
#: the last rates stand (speed balancing rounds come every 20 ms, and a
#: /proc status read costs more than the rest of a thread's round).
SWITCH_READ_NS = 100_000_000
#: CPU time a thread must have run over the span for its switches per
#: CPU-second to mean anything.  Derived: at 50 ms one switch more or less
#: moves the rate by 20 per CPU-second, small against the gap between the
#: slice's ~330 and SYNC_SWITCHES_PER_CPU_S (800); and the slowest thread
#: of a crowd not yet balanced, 3 on 2 CPUs at 0.5, runs 150 ms in
#: SWITCH_MIN_SPAN_NS, so it is judged then.  Supported: [3 ms, 150 ms]
#: (below a 3 ms slice one switch is the whole count).  A thread that runs
#: less over a whole SWITCH_WINDOW_NS (a crowd of over 40 per CPU) shows
#: no sign of barriers: its crowd is not judged for ever.
SWITCH_MIN_RUN_NS = 50_000_000


_UNKNOWN = (None, None)
#: What a backend that cannot count switches gives: known, and no sign of
#: barriers -- auto leaves such threads to the OS instead of judging them
#: (its rounds never paced) for ever.
_NO_EVIDENCE = (0.0, 0.0)


class SpeedSteps:
    """Speed balancing between and within rounds.

    Owns: ``speeding`` (the threads a step samples), ``speed_domains``
    (the domains where speed balancing is engaged), ``pins_between`` (pins
    of steps since the last round), ``pins_made`` ((thread, cpu, step) of
    the last round and the steps before it) and ``steps`` (steps so far,
    rounds included).  Reads the tracker's threads and the Layout's
    domains; pins through the Placer; ``may_merge()``: whether the run's
    domains may merge (DomainMerger.may_merge)."""

    def __init__(self, backend, policy, layout, tracker, placer, stats, may_merge):
        self.backend = backend
        self.policy = policy
        self.layout = layout
        self.tracker = tracker
        self.placer = placer
        self.stats = stats
        self.may_merge = may_merge
        self.speeding = []              # threads step() samples
        self.speed_domains = []         # domains where it is engaged
        self.pins_between = []          # pins of speed steps since the last round
        self.pins_made = []             # (thread, cpu, step) of the last round and the
                                        # speed steps before it
        self.steps = 0                  # speed balancing steps so far (rounds included)
        # frozenset of CPUs -> deque of (monotonic ns, switches on them so far)
        self._cpu_switch_readings = {}

    def reset(self):
        """The domains changed: nothing engaged, nothing pinned between rounds."""
        self.speeding, self.speed_domains, self.pins_between = [], [], []
        self._cpu_switch_readings = {}

    def follow(self, decision, measured):
        """Note the threads speed balancing pinned in the domains where it is
        engaged: step() samples only those between full rounds."""
        engaged = set(decision.engaged) if decision.speed_interval_ms else ()
        self.speed_domains = [d for d in self.layout.domains if d.index in engaged]
        self.speeding = [t for t in measured
                         if t.pinned_cpu is not None and t.domain in engaged] if engaged else []

    def round_pins(self, by_tid, pins):
        """A full round's pins: applied, and with the steps' since the last
        round, what the round reports (``pins_made``)."""
        self.pins_made = self.pins_between + self.pin(by_tid, pins)
        self.pins_between = []

    def step(self):
        """One step of speed balancing between full rounds; returns the ms to
        the next step, or None when there is nothing to step.

        Reads only the CPU time of the threads speed balancing pinned (one
        read each), takes their speeds over the time since their last
        reading, and applies the pins the balancer decides.  Everything
        else (new threads, sleepers, loads, grouping) waits for the next
        full round: a step costs a fraction of one, and comes every 20 ms.
        """
        threads = [t for t in self.speeding if t.pinned_cpu is not None and not t.unmovable]
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
        views = self.views(read, crowded=())
        pins, interval_ms = self.policy.speed_step(views, self.speed_domains)
        self.pins_between += self.pin({t.tid: t for t in threads}, pins)
        return interval_ms

    def measured_views(self, other):
        """The threads the policy decides on -- measured, movable, with a
        domain they may use (the others are left alone) -- and its views
        of them (``other``: other work per domain, or None).  One C pass
        (balance/_rounds.c) when built and nothing is crowded, which gives
        the views' fields as columns too (ThreadViews)."""
        threads = self.tracker.threads
        fast = None if _c_thread_views is None else \
            _c_thread_views(threads.values(), ThreadView, RUNNABLE_SHARE)
        if fast is None:
            measured = [t for t in threads.values()
                        if t.load is not None and not t.unmovable and t.eligible]
            return measured, self.views(measured, self.crowded_domains(measured, other))
        measured, views, runnable, fields = fast
        crowded = self._crowded(runnable, other) if self.policy.needs_sleep_data else set()
        if crowded:
            return measured, self.views(measured, crowded)
        views = ThreadViews(views)      # with their fields as columns (engine/model.py)
        views.fields = fields
        return measured, views

    def crowded_domains(self, threads, other=None):
        """Domains with more always-runnable threads than CPUs; every domain,
        when its domains may merge (merged.py), if the program has more of
        them than all its domains have CPUs, or they and other work
        (``other``: CPUs per domain, or None) want more than some domain's
        CPUs.

        Only there can speed balancing engage, or domains merge
        (engine/policy.py, 3., 5. and 6.), so only there is it worth
        reading each thread's voluntary context switches.
        """
        if not self.policy.needs_sleep_data:
            return set()
        runnable = {}
        for thread in threads:
            if (thread.runnable or 0) >= RUNNABLE_SHARE:
                runnable[thread.domain] = runnable.get(thread.domain, 0) + 1
        return self._crowded(runnable, other)

    def _crowded(self, runnable, other):
        """crowded_domains from ``runnable``: always-runnable threads per domain."""
        domains = self.layout.domains
        crowded = {d.index for d in domains if runnable.get(d.index, 0) > len(d.cpus)}
        if not runnable or not self.may_merge():
            return crowded
        # None: the threads not placed yet (controller.py, _binding_deferred)
        # are judged with the program, as where they will be placed.
        if sum(runnable.values()) > sum(len(d.cpus) for d in domains):
            return {d.index for d in domains} | {None}
        if other and any(others > 0.0 and runnable.get(d.index, 0) + others > len(d.cpus)
                         for d, others in zip(domains, other)):
            # Other work crowds a domain: its threads are compared with
            # those of every other (engine/merging.py).
            return {d.index for d in domains} | {None}
        return crowded

    def views(self, threads, crowded):
        """The policy's view of each thread: loads, last-round speed,
        sleeping and switching.

        How often a thread sleeps and switches is read (a /proc read per
        thread) only for the always-runnable threads of crowded domains.
        """
        # tuple.__new__: a named tuple's own __new__ is a Python call.  One
        # comprehension, no rates looked up when nothing is crowded: this
        # runs for every thread every round.
        new = tuple.__new__
        if not crowded:
            return [new(ThreadView, (t.tid, t.load, t.domain, t.eligible, t.pinned_cpu,
                                     t.exec_ns, t.wall_ns, t.runnable, None, None))
                    for t in threads]
        rates = self._rates_if_crowded
        views = [new(ThreadView, (t.tid, t.load, t.domain, t.eligible, t.pinned_cpu,
                                  t.exec_ns, t.wall_ns, t.runnable) + rates(t, crowded))
                 for t in threads]
        if self.backend.counts_cpu_switches:
            self._discount_foreign_switches(threads, views, crowded)
        return views

    def _discount_foreign_switches(self, threads, views, crowded):
        """Take from the switching of a crowded domain's threads what other
        tasks' wake-ups on its CPUs explain.

        A task that wakes on a busy CPU preempts one of the threads (a
        switch of that thread's) and gives the CPU back when it sleeps (a
        switch of its own); threads that yield to each other at barriers
        make every switch themselves.  So the domain's CPUs count switches
        (``Backend.cpu_switches``) beyond the threads' own only as often as
        other tasks took the CPU from them: those are taken off, shared
        over the threads' CPU-seconds.  A neighbour waking every 0.3 ms
        made threads that only compute switch 1,500 times per CPU-second
        here, as often as threads at yield barriers (engine/policy.py,
        SYNC_SWITCHES_PER_CPU_S); what is left of theirs is the
        scheduler's slices.
        """
        domains = self.layout.domains
        in_crowded = {}
        for i, view in enumerate(views):
            if view.domain in crowded:
                in_crowded.setdefault(view.domain, []).append(i)
        for index, positions in in_crowded.items():
            if index is None or index >= len(domains):
                continue            # not placed yet: judged as the domain they join
            # Counted from the first round the domain is crowded, on the
            # clock of the threads' samples, as their own switches are.
            try:
                cpus_switches = self._cpus_switches(
                    domains[index].cpus, max(threads[i].prev_wall for i in positions))
            except Unsupported:
                continue            # the threads' own counts stand
            judged = [i for i in positions if views[i].switches_per_cpu_s is not None]
            if not judged:
                continue
            own = [_own_switching(threads[i]) for i in judged]
            if cpus_switches is None or None in own:
                # Not counted over SWITCH_MIN_SPAN_NS yet: not judged yet.
                for i in judged:
                    views[i] = views[i]._replace(switches_per_cpu_s=None)
                continue
            foreign = cpus_switches - sum(switches for switches, _ in own)
            cpu = sum(cpu for _, cpu in own)
            if foreign <= 0 or cpu <= 0:
                continue
            cut = foreign / cpu
            for i in judged:
                view = views[i]
                views[i] = view._replace(
                    switches_per_cpu_s=max(0.0, view.switches_per_cpu_s - cut))

    def _cpus_switches(self, cpus, now):
        """Context switches per second on ``cpus`` over the last
        ``SWITCH_WINDOW_NS`` (read at most every ``SWITCH_READ_NS``, as the
        threads' own), or None while that spans less than
        ``SWITCH_MIN_SPAN_NS``; Unsupported where they are not counted."""
        key = frozenset(cpus)
        readings = self._cpu_switch_readings.get(key)
        if readings is None or now - readings[-1][0] >= SWITCH_READ_NS:
            count = self.backend.cpu_switches(key)
            if readings is None:
                readings = self._cpu_switch_readings[key] = deque()
            readings.append((now, count))
            while len(readings) > 2 and now - readings[1][0] >= SWITCH_WINDOW_NS:
                readings.popleft()
        first, last = readings[0], readings[-1]
        if last[0] - first[0] < SWITCH_MIN_SPAN_NS:
            return None
        return (last[1] - first[1]) * 1e9 / (last[0] - first[0])

    def _rates_if_crowded(self, thread, crowded):
        if thread.domain in crowded and (thread.runnable or 0) >= RUNNABLE_SHARE:
            return self._switch_rates(thread)
        return _UNKNOWN

    def _switch_rates(self, thread):
        """(voluntary switches per second, switches per CPU-second) over the
        last 2 s or more: how often the thread blocks, and how often it
        is switched at all for each second of CPU it gets -- a thread that
        only computes (or spins) is switched at the scheduler's slice,
        every few ms, one that calls sched_yield at barriers while another
        thread waits for its CPU is switched at every yield
        (engine/policy.py, SYNC_SWITCHES_PER_CPU_S).

        Longer than the load window: a thread blocking at barriers between
        long phases may not block within any one 500 ms.

        Read only for always-runnable threads of crowded domains, and at
        most every ``SWITCH_READ_NS``, since it costs a /proc status read;
        None until the readings span ``SWITCH_MIN_SPAN_NS`` (0.3 s).
        """
        if not self.backend.counts_context_switches:
            return _NO_EVIDENCE
        now = thread.prev_wall          # this round's sample
        switches = thread.switches
        if switches and now - switches[-1][0] < SWITCH_READ_NS:
            return thread.sleeps_per_s, thread.switch_rate
        try:
            voluntary, involuntary = self.backend.context_switches(thread.pid, thread.tid)
        except NoSuchProcess:
            return _UNKNOWN
        if switches is None:
            switches = thread.switches = deque()
        switches.append((now, voluntary, voluntary + involuntary, thread.prev_run))
        while len(switches) > 2 and now - switches[1][0] >= SWITCH_WINDOW_NS:
            switches.popleft()
        first = switches[0]
        if now - first[0] < SWITCH_MIN_SPAN_NS:
            sleeps = rate = None        # too short to tell a spinner from a sleeper
        else:
            sleeps = (voluntary - first[1]) * 1e9 / (now - first[0])
            ran = thread.prev_run - first[3]
            if ran >= SWITCH_MIN_RUN_NS:
                rate = (voluntary + involuntary - first[2]) * 1e9 / ran
            else:
                # Starved for a whole window (a crowd of over 40 per CPU):
                # no sign of barriers, rather than judged for ever.
                rate = 0.0 if now - first[0] >= SWITCH_WINDOW_NS else None
        thread.sleeps_per_s, thread.switch_rate = sleeps, rate
        return sleeps, rate

    def pin(self, by_tid, pins):
        """Apply speed balancing's pins: a CPU, or None for the whole domain.
        Returns the (thread, cpu, step) made."""
        self.steps += 1
        wanted = []
        for tid, cpu in sorted(pins.items()):
            thread = by_tid.get(tid)
            if thread is None or thread.domain is None or thread.pinned_cpu == cpu:
                continue
            wanted.append((thread, thread.domain, cpu))
        made = [(thread, cpu, self.steps) for thread, _, cpu in self.placer.bind_all(wanted)]
        self.stats.pins += len(made)
        return made


def _own_switching(thread):
    """(switches per second, CPU-seconds per second) of ``thread`` over its
    switch readings (SpeedSteps._switch_rates), or None without two."""
    readings = thread.switches
    if not readings or len(readings) < 2:
        return None
    first, last = readings[0], readings[-1]
    span = last[0] - first[0]
    if span <= 0:
        return None
    return (last[2] - first[2]) * 1e9 / span, (last[3] - first[3]) / span
