"""Speed balancing inside one domain (Hofmeyr, Iancu, Blagojevic: "Load
Balancing on Speed", PPoPP 2010, sections 4 and 5).

The problem
-----------
N threads of one program pinned to M cores of a domain, N > M and
N mod M != 0: some cores run T = N // M threads, others T + 1.  A fair
per-core scheduler gives the threads on the crowded ("slow") cores 1/(T+1)
of a core and the others 1/T.  When the threads spin or ``sched_yield`` at
barriers they never leave the run queue, so a queue-length balancer sees a
balanced machine and moves nothing: the program runs at the speed of its
slowest thread, 1/(T+1).  If every thread instead takes turns on the fast
cores, each one averages the fair share M/N (2/3 of a core for 3 threads on
2 cores instead of 1/2).  Speed balancing produces those turns.

Speeds (paper 5, 5.1)
---------------------
* thread speed  ``s_i = exec_ns / wall_ns`` over the last interval: the share
  of a CPU the thread actually received.  It is clamped to [0, 1]: a thread
  cannot receive more than one CPU, and the clamp keeps sampling noise from
  inflating the global mean.  A thread with no sample (new, or a counter that
  went backwards because its id was reused) has no speed this round.
* core speed    ``s_j = mean(s_i)`` over the sampled threads on core j.  A core
  with threads but no sampled thread has no speed this round and takes no
  part in it.  A core with *no* thread of ours has speed ``EMPTY_CORE_SPEED``
  (1.0): a thread pulled there would run alone.  That speed counts in the
  global mean, which is what lets an empty core look fast and pull, and lets
  a crowded core look slow next to it (two threads on one core and one empty
  core: speeds 0.5 and 1.0, global 0.75, ratio 0.67 < T_s).
* global speed  ``s_global = mean(s_j)`` over the cores that have a speed.

Speed captures priorities, foreign load (a cpu-hog sharing a core) and
sleeping co-runners without special cases, which is why the paper prefers it
to queue length.

One round (paper 5.1; ``SpeedBalancer.step``)
---------------------------------------------
The paper runs one balancer per core, each waking on its own jittered timer.
Here one ``step`` plays all of a domain's balancers for one interval, in an
order drawn from a seeded RNG, which stands for the arbitrary order in which
independent per-core timers fire.

1. Pullers: every core with ``s_j > s_global``.  Empty cores go first (they
   absorb a thread without slowing anyone), then the others; each group is
   shuffled.
2. A puller picks a donor: a remote core k with ``s_k / s_global < T_s``
   (T_s = ``threshold``, 0.9 in the paper: timing noise must not move threads
   between perfectly balanced queues), not blocked, with a movable thread.
   The slowest such core is preferred (ties: lowest CPU id).  A donor keeps
   its last thread unless the puller is empty: moving a lone thread to a busy
   core only moves the slowness (its slowness comes from foreign load we
   cannot move), while moving it to an empty core gives it a whole CPU.
3. The puller takes the donor thread that has migrated least (no "hot
   potato" threads; ties: lowest tid).  Only threads that ran in the interval
   are movable: pulling a sleeping thread relieves nobody.
4. Both cores are then blocked for ``block_intervals`` further rounds (2 in
   the paper, 0 by default here: see "Interval"): the threads on both must
   run a full interval before their speeds mean anything again.  A blocked core neither pulls nor donates, and
   no core takes part in two migrations of one round.  This bounds the
   migration rate to one per pair of cores per ``block_intervals + 1`` rounds,
   and together with least-migrated-first it makes the threads take turns on
   the fast cores instead of bouncing between two queues.

Speeds are not re-estimated after a move within a round: both cores of every
move are blocked, so no decision ever rests on a stale speed.

The balancer never crosses its domain: it only knows the CPUs it was built
with, ignores threads placed elsewhere, and only moves threads between its
own CPUs (the paper blocks migrations across NUMA nodes the same way).

Interval (paper 5.1, 6.1)
-------------------------
The paper balances every 100 ms and blocks both cores of a migration for 2
intervals, on 16 cores with phases of seconds.  A thread's turn on a fast
core only helps if it comes within a barrier phase, so for phases of ~0.1 s
tumbler steps every 20 ms without blocking (``SpeedParams`` defaults,
measured in BENCHMARKS.md); ``speed: {interval_ms: 100, block_intervals:
2}`` in the config file restores the paper's settings.  Either way a
uniformly random extra of up to a quarter of an interval
(``JITTER_SHARE``) is added each round when ``jitter`` is on: the
randomness breaks cycles in which threads move repeatedly between the
same two queues, and lock-step with a program's own period.  The paper's
per-core timers jitter by up to a whole interval; at 20 ms that made the
mean step 30 ms and left 3 spinning threads on 2 cores 5% behind a free
rotation every 20 ms, against 2.3% without jitter (BENCHMARKS.md).

When to engage (paper 4)
------------------------
Speed balancing only pays when a domain has more runnable threads than cores
and the core speeds actually differ beyond the threshold.  With sleeping
barriers the core speeds even out by themselves (a sleeping thread speeds
up its co-runners) and the OS balancer already does well, so the policy
leaves those domains alone (``engine.policy``, auto).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..records import record

#: Speed of a core that runs none of our threads: a thread moved there would
#: run alone.  See the module docstring.
EMPTY_CORE_SPEED = 1.0


# -- parameters and results --------------------------------------------------

#: With jitter, each interval gets a random extra of up to this share of it
#: (see "Interval" above).
JITTER_SHARE = 0.25


@record
class SpeedParams:
    """Tunables of one speed balancer: tumbler's defaults (module doc,
    "Interval"); the paper's are ``block_intervals=2, interval_ms=100``."""

    threshold: float = 0.9      # T_s: pull only from cores with s_k/s_global < T_s
    block_intervals: int = 0    # rounds a core sits out after a migration (paper: 2)
    interval_ms: int = 20       # balance interval (paper: 100)
    jitter: bool = True         # add a random extra of up to JITTER_SHARE of an interval

    def validate(self) -> "SpeedParams":
        """Return self, or raise ValueError naming the bad field."""
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
            raise ValueError("speed threshold must be a number in (0, 1], got %r" % (t,))
        b = self.block_intervals
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise ValueError("block_intervals must be an integer >= 0, got %r" % (b,))
        i = self.interval_ms
        if isinstance(i, bool) or not isinstance(i, int) or i < 1:
            raise ValueError("interval_ms must be an integer >= 1, got %r" % (i,))
        if not isinstance(self.jitter, bool):
            raise ValueError("jitter must be True or False, got %r" % (self.jitter,))
        return self


@record
class CoreMove:
    """Move thread ``tid`` from CPU ``src`` to CPU ``dst``."""

    tid: int
    src: int
    dst: int


@record
class Speeds:
    """What one round measured, for logging: tid -> speed, cpu -> speed, global."""

    threads: dict[int, float]
    cores: dict[int, float]
    global_speed: float


# -- speed arithmetic --------------------------------------------------------

def thread_speed(exec_ns: int, wall_ns: int) -> float:
    """Share of one CPU a thread received: exec/wall, clamped to [0, 1]."""
    if wall_ns <= 0:
        raise ValueError("wall_ns must be > 0, got %r" % (wall_ns,))
    return min(1.0, max(0.0, exec_ns / wall_ns))


def global_speed(core_speeds: Mapping[int, float]) -> float:
    """Mean core speed; 0.0 when no core has a speed."""
    if not core_speeds:
        return 0.0
    return sum(core_speeds.values()) / len(core_speeds)


def is_slow(core: float, global_: float, threshold: float) -> bool:
    """True if a core is slow enough to donate: s_k / s_global < T_s."""
    return global_ > 0.0 and core / global_ < threshold


def _measure_threads(exec_ns: Mapping[int, int], wall_ns: int,
                     members: Mapping[int, list[int]]) -> dict[int, float]:
    """Speeds of the sampled threads among ``members`` (negative deltas skipped)."""
    speeds = {}
    for tids in members.values():
        for tid in tids:
            ns = exec_ns.get(tid)
            if ns is not None and ns >= 0:
                speeds[tid] = thread_speed(ns, wall_ns)
    return speeds


def _measure_cores(members: Mapping[int, list[int]],
                   speeds: Mapping[int, float]) -> dict[int, float]:
    """Core speeds; empty cores are EMPTY_CORE_SPEED, unsampled cores absent."""
    cores = {}
    for cpu, tids in members.items():
        if not tids:
            cores[cpu] = EMPTY_CORE_SPEED
            continue
        sampled = [speeds[t] for t in tids if t in speeds]
        if sampled:
            cores[cpu] = sum(sampled) / len(sampled)
    return cores


# -- the balancer ------------------------------------------------------------

class SpeedBalancer:
    """Speed balancing over one domain's CPUs; see the module docstring.

    Deterministic for a given ``seed`` and sequence of calls: visit order and
    interval jitter come from two RNGs derived from it, so asking for the
    next interval does not change which moves a round makes.
    """

    def __init__(self, cpus: Sequence[int], params: SpeedParams = SpeedParams(),
                 seed: int | None = None):
        params.validate()
        for cpu in cpus:
            if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
                raise ValueError("CPU ids must be integers >= 0, got %r" % (cpu,))
        cpu_list = sorted(set(cpus))
        if not cpu_list:
            raise ValueError("a speed balancer needs at least one CPU")
        self._cpus: tuple[int, ...] = tuple(cpu_list)
        self._cpu_set: frozenset[int] = frozenset(cpu_list)
        self._params = params
        self._seed = seed
        self._rngs = None           # (order, jitter): made at first use, see _rng
        self._round = 0
        self._blocked_through: dict[int, int] = {}   # cpu -> last blocked round
        self._migrations: dict[int, int] = {}
        self._last = Speeds({}, {}, 0.0)

    def _rng(self, which):
        """The visit-order (0) or jitter (1) generator.  Made at first use:
        a balancer is made per domain whether or not it ever engages, and
        ``random``'s import costs ~1 ms of a ``tumbler exec``'s start."""
        if self._rngs is None:
            import random
            master = random.Random(self._seed)
            self._rngs = (random.Random(master.getrandbits(64)),
                          random.Random(master.getrandbits(64)))
        return self._rngs[which]

    @property
    def cpus(self) -> tuple[int, ...]:
        return self._cpus

    @property
    def last_speeds(self) -> Speeds:
        """Thread, core and global speeds of the last round (empty before one)."""
        return self._last

    def migrations(self) -> dict[int, int]:
        """tid -> number of times this balancer moved it."""
        return dict(self._migrations)

    def forget(self, tid: int) -> None:
        """Drop what is known about a thread that exited."""
        self._migrations.pop(tid, None)

    def blocked_cpus(self) -> frozenset[int]:
        """CPUs that may not take part in a migration in the next round."""
        nxt = self._round + 1
        return frozenset(c for c, last in self._blocked_through.items() if nxt <= last)

    def next_interval_ms(self) -> int:
        """The next balance interval: interval_ms plus, with jitter, up to
        JITTER_SHARE of it."""
        base = self._params.interval_ms
        if not self._params.jitter:
            return base
        return base + self._rng(1).randint(0, int(base * JITTER_SHARE))

    # -- initial placement ---------------------------------------------------

    def initial_placement(self, tids: Sequence[int],
                          current: Mapping[int, int] | None = None) -> dict[int, int]:
        """Pin threads round-robin over our CPUs (paper 5.2).

        A thread already on one of our CPUs in ``current`` stays there; each
        new thread, in tid order, goes to the CPU with the fewest threads
        (ties: lowest CPU id), so repeated calls stay balanced by count.
        """
        current = current or {}
        wanted = sorted(set(tids))
        placement: dict[int, int] = {}
        counts = {cpu: 0 for cpu in self._cpus}
        for tid in wanted:
            cpu = current.get(tid)
            if cpu in self._cpu_set:
                placement[tid] = cpu
                counts[cpu] += 1
        for tid in wanted:
            if tid not in placement:
                cpu = min(self._cpus, key=lambda c: (counts[c], c))
                placement[tid] = cpu
                counts[cpu] += 1
        return placement

    # -- one round -----------------------------------------------------------

    def step(self, exec_ns: Mapping[int, int], wall_ns: int,
             placement: Mapping[int, int]) -> list[CoreMove]:
        """Run one balancing round and return the moves it decides.

        ``exec_ns``: CPU time each thread received during the interval;
        ``wall_ns``: length of the interval; ``placement``: tid -> CPU now.
        Threads on CPUs outside this domain are ignored.  The caller applies
        the moves; the balancer assumes they succeed.
        """
        if wall_ns <= 0:
            raise ValueError("wall_ns must be > 0, got %r" % (wall_ns,))
        self._round += 1
        members = self._members(placement)
        speeds = _measure_threads(exec_ns, wall_ns, members)
        cores = _measure_cores(members, speeds)
        global_ = global_speed(cores)
        self._last = Speeds(speeds, cores, global_)
        moves: list[CoreMove] = []
        if global_ <= 0.0:
            return moves
        for dst in self._puller_order(cores, global_, members):
            if self._is_blocked(dst):
                continue
            src = self._pick_donor(dst, cores, global_, members, speeds)
            if src is None:
                continue
            tid = self._pick_thread(members[src], speeds)
            moves.append(CoreMove(tid, src, dst))
            members[src].remove(tid)
            members[dst].append(tid)
            self._migrations[tid] = self._migrations.get(tid, 0) + 1
            self._block(src)
            self._block(dst)
        return moves

    def _members(self, placement: Mapping[int, int]) -> dict[int, list[int]]:
        """cpu -> sorted tids on it, for every CPU of the domain."""
        members: dict[int, list[int]] = {cpu: [] for cpu in self._cpus}
        for tid in sorted(placement):
            cpu = placement[tid]
            if cpu in self._cpu_set:
                members[cpu].append(tid)
        return members

    def _puller_order(self, cores: Mapping[int, float], global_: float,
                      members: Mapping[int, list[int]]) -> list[int]:
        """Cores faster than global: empty ones first, each group shuffled."""
        fast = [cpu for cpu in sorted(cores) if cores[cpu] > global_]
        empty = [cpu for cpu in fast if not members[cpu]]
        busy = [cpu for cpu in fast if members[cpu]]
        self._rng(0).shuffle(empty)
        self._rng(0).shuffle(busy)
        return empty + busy

    def _pick_donor(self, dst: int, cores: Mapping[int, float], global_: float,
                    members: Mapping[int, list[int]],
                    speeds: Mapping[int, float]) -> int | None:
        """The unblocked core below threshold that should give ``dst`` a thread.

        Slowest first, but speeds within (1 - T_s) * s_global of the slowest
        are equal as far as the threshold can tell; among those, the core
        offering the least-migrated thread wins, so turns spread over every
        slow core instead of cycling through the lowest-numbered ones.
        """
        candidates = [
            cpu for cpu in cores
            if cpu != dst
            and not self._is_blocked(cpu)
            and is_slow(cores[cpu], global_, self._params.threshold)
            and self._can_donate(members[cpu], speeds, dst_empty=not members[dst])
        ]
        if not candidates:
            return None
        slowest = min(cores[cpu] for cpu in candidates)
        band = slowest + (1.0 - self._params.threshold) * global_
        tier = [cpu for cpu in candidates if cores[cpu] < band or cores[cpu] == slowest]
        return min(tier, key=lambda cpu: (self._least_migrations(members[cpu], speeds),
                                          cores[cpu], cpu))

    def _least_migrations(self, tids: Sequence[int], speeds: Mapping[int, float]) -> int:
        """Fewest migrations among the movable threads of a core."""
        return min(self._migrations.get(t, 0) for t in tids if speeds.get(t, 0.0) > 0.0)

    @staticmethod
    def _can_donate(tids: Sequence[int], speeds: Mapping[int, float], dst_empty: bool) -> bool:
        """A donor needs a thread that ran, and keeps its last one for busy pullers."""
        if len(tids) < 2 and not dst_empty:
            return False
        return any(speeds.get(t, 0.0) > 0.0 for t in tids)

    def _pick_thread(self, tids: Sequence[int], speeds: Mapping[int, float]) -> int:
        """The thread that ran and has migrated least (ties: lowest tid)."""
        movable = [t for t in tids if speeds.get(t, 0.0) > 0.0]
        return min(movable, key=lambda t: (self._migrations.get(t, 0), t))

    def _is_blocked(self, cpu: int) -> bool:
        """True if ``cpu`` took part in a migration too recently (or this round)."""
        return self._round <= self._blocked_through.get(cpu, 0)

    def _block(self, cpu: int) -> None:
        """Keep ``cpu`` out of migrations for the rest of this round and block_intervals more."""
        self._blocked_through[cpu] = self._round + self._params.block_intervals
