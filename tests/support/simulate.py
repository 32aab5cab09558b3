"""A small deterministic simulator of threads pinned to cores, for testing and
benchmarking balancers without an OS.

Model
-----
* Each core time-shares equally among its runnable threads (processor
  sharing, the fluid limit of a fair per-core scheduler such as CFS): with n
  runnable threads on a core, each progresses at 1/n of a CPU.  A core may
  also carry ``background`` foreign threads that are always runnable (a
  cpu-hog, paper 6.3); they take their share but are never balanced.
* A workload gives every thread the CPU work (ns) of each phase.  Phases are
  separated by barriers across all threads:
  - ``spin``: a thread waiting at a barrier keeps its core share (busy-wait,
    ``sched_yield``, OpenMP ``KMP_BLOCKTIME=infinite``), so it still slows
    its co-runners while it makes no progress;
  - ``sleep``: a waiting thread leaves the run queue and its co-runners speed
    up.
  A thread that finishes its last phase exits (joins do not spin).
* Time is event driven and exact: CPU time is kept in units of
  1/L ns, L = lcm(1..max threads per core), so every share is an integer.
  Reported CPU times are whole nanoseconds (floored).  No floats, no RNG:
  the same inputs always give the same run.

``run`` drives a balancer (anything with ``initial_placement``, ``step``,
``next_interval_ms`` and ``forget``, e.g. ``SpeedBalancer``) against a
workload, interval by interval, and reports completion time against the
ideal, time each thread spent alone on a core and the moves made.  With no
balancer it measures static pinning.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tumbler.engine.speed import CoreMove

SPIN = "spin"
SLEEP = "sleep"
BARRIERS = (SPIN, SLEEP)

NS_PER_MS = 1_000_000

_WORKING, _WAITING, _DONE = "working", "waiting", "done"


@dataclass(frozen=True)
class Workload:
    """tid -> CPU work (ns) per phase; every thread has the same number of phases."""

    work_ns: Mapping[int, Tuple[int, ...]]
    barrier: str = SPIN

    def __post_init__(self):
        if self.barrier not in BARRIERS:
            raise ValueError("barrier must be one of %s, got %r" % (", ".join(BARRIERS), self.barrier))
        if not self.work_ns:
            raise ValueError("a workload needs at least one thread")
        lengths = {len(phases) for phases in self.work_ns.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError("every thread needs the same, non-zero number of phases")
        for tid, phases in self.work_ns.items():
            if any(not isinstance(w, int) or w < 0 for w in phases):
                raise ValueError("work of thread %r must be integers >= 0 ns" % (tid,))

    @classmethod
    def uniform(cls, tids: Sequence[int], phases: int, phase_work_ns: int,
                barrier: str = SPIN) -> "Workload":
        """Every thread does ``phase_work_ns`` per phase for ``phases`` phases."""
        return cls({tid: (phase_work_ns,) * phases for tid in tids}, barrier)

    @property
    def tids(self) -> List[int]:
        return sorted(self.work_ns)

    @property
    def phases(self) -> int:
        return len(next(iter(self.work_ns.values())))

    def ideal_ns(self, cores: int) -> int:
        """Lower bound on completion on ``cores`` idle cores with perfect sharing.

        Each phase takes at least its longest thread and at least its total
        work spread over all cores.
        """
        total = 0
        for p in range(self.phases):
            works = [w[p] for w in self.work_ns.values()]
            total += max(max(works), -(-sum(works) // cores))
        return total


class Simulator:
    """Threads of one ``Workload`` pinned to cores; advance with ``run_for``."""

    def __init__(self, cpus: Sequence[int], workload: Workload,
                 placement: Mapping[int, int],
                 background: Optional[Mapping[int, int]] = None):
        self._cpus = tuple(sorted(set(cpus)))
        if not self._cpus:
            raise ValueError("the simulator needs at least one CPU")
        self._work = workload
        self._barrier = workload.barrier
        self._background = {cpu: 0 for cpu in self._cpus}
        for cpu, n in (background or {}).items():
            self._check_cpu(cpu)
            if n < 0:
                raise ValueError("background thread count must be >= 0")
            self._background[cpu] = n
        self._placement: Dict[int, int] = {}
        for tid in workload.tids:
            if tid not in placement:
                raise ValueError("thread %r has no CPU" % (tid,))
            self._check_cpu(placement[tid])
            self._placement[tid] = placement[tid]
        self._scale = _lcm_upto(len(workload.tids) + max(self._background.values()))
        self._now = 0
        self._state: Dict[int, str] = {}
        self._phase: Dict[int, int] = {}
        self._left: Dict[int, int] = {}          # work left in phase, 1/scale ns
        self._exec: Dict[int, int] = {}          # CPU time so far, 1/scale ns
        self._alone: Dict[int, int] = {}         # wall ns alone on a core
        self._finished: Dict[int, int] = {}      # tid -> exit time
        for tid in workload.tids:
            self._exec[tid] = 0
            self._alone[tid] = 0
            self._start_phase(tid, 0)
        self._settle()

    # -- observation -----------------------------------------------------------

    @property
    def now_ns(self) -> int:
        return self._now

    @property
    def done(self) -> bool:
        return len(self._finished) == len(self._state)

    @property
    def completion_ns(self) -> Optional[int]:
        """When the last thread exited, or None while threads remain."""
        return max(self._finished.values()) if self.done else None

    @property
    def placement(self) -> Dict[int, int]:
        """tid -> CPU of the threads that have not exited."""
        return {t: c for t, c in self._placement.items() if self._state[t] != _DONE}

    def exec_ns(self) -> Dict[int, int]:
        """tid -> cumulative CPU time (ns) of every thread, exited ones included."""
        return {t: u // self._scale for t, u in self._exec.items()}

    def alone_ns(self) -> Dict[int, int]:
        """tid -> wall time (ns) it ran as the only runnable thread on its core."""
        return dict(self._alone)

    # -- control ---------------------------------------------------------------

    def migrate(self, tid: int, cpu: int) -> None:
        """Re-pin a live thread (takes effect immediately, like sched_setaffinity)."""
        self._check_cpu(cpu)
        if tid not in self._state or self._state[tid] == _DONE:
            raise ValueError("thread %r is not running" % (tid,))
        self._placement[tid] = cpu

    def run_for(self, wall_ns: int) -> int:
        """Advance up to ``wall_ns``; stop early when all threads exit.  Return the time advanced."""
        if wall_ns <= 0:
            raise ValueError("wall_ns must be > 0")
        end = self._now + wall_ns
        start = self._now
        while self._now < end and not self.done:
            self._advance(end - self._now)
        return self._now - start

    # -- internals -------------------------------------------------------------

    def _check_cpu(self, cpu: int) -> None:
        if cpu not in self._cpus:
            raise ValueError("CPU %r is not simulated" % (cpu,))

    def _runnable(self, tid: int) -> bool:
        state = self._state[tid]
        return state == _WORKING or (state == _WAITING and self._barrier == SPIN)

    def _run_queues(self) -> Dict[int, List[int]]:
        queues: Dict[int, List[int]] = {cpu: [] for cpu in self._cpus}
        for tid in sorted(self._state):
            if self._runnable(tid):
                queues[self._placement[tid]].append(tid)
        return queues

    def _advance(self, limit_ns: int) -> None:
        """Advance to the next event (a thread ends a phase) or by ``limit_ns``."""
        queues = self._run_queues()
        rate: Dict[int, int] = {}                 # units per wall ns
        for cpu, tids in queues.items():
            n = len(tids) + self._background[cpu]
            for tid in tids:
                rate[tid] = self._scale // n
        dt = limit_ns
        for tid, r in rate.items():
            if self._state[tid] == _WORKING:
                dt = min(dt, -(-self._left[tid] // r))
        for cpu, tids in queues.items():
            alone = len(tids) == 1 and self._background[cpu] == 0
            for tid in tids:
                used = dt * rate[tid]
                self._exec[tid] += used
                if alone:
                    self._alone[tid] += dt
                if self._state[tid] == _WORKING:
                    self._left[tid] -= used
        self._now += dt
        for tid in sorted(rate):
            if self._state[tid] == _WORKING and self._left[tid] <= 0:
                self._end_phase(tid)
        self._settle()

    def _start_phase(self, tid: int, phase: int) -> None:
        self._phase[tid] = phase
        self._left[tid] = self._work.work_ns[tid][phase] * self._scale
        self._state[tid] = _WORKING
        if self._left[tid] == 0:
            self._end_phase(tid)

    def _end_phase(self, tid: int) -> None:
        if self._phase[tid] == self._work.phases - 1:
            self._state[tid] = _DONE
            self._finished[tid] = self._now
        else:
            self._state[tid] = _WAITING

    def _settle(self) -> None:
        """Release barriers while every live thread is waiting at one."""
        while True:
            live = [t for t in sorted(self._state) if self._state[t] != _DONE]
            if not live or any(self._state[t] == _WORKING for t in live):
                return
            for tid in live:
                self._start_phase(tid, self._phase[tid] + 1)


def _lcm_upto(n: int) -> int:
    result = 1
    for k in range(2, n + 1):
        result = result * k // math.gcd(result, k)
    return result


# -- driving a balancer --------------------------------------------------------

@dataclass
class RunResult:
    """What one simulated run measured."""

    completion_ns: int
    ideal_ns: int
    intervals: int                                   # balance intervals run
    moves: List[Tuple[int, CoreMove]] = field(default_factory=list)   # (round, move)
    migrations: Dict[int, int] = field(default_factory=dict)          # tid -> moves
    alone_ns: Dict[int, int] = field(default_factory=dict)
    exec_ns: Dict[int, int] = field(default_factory=dict)

    @property
    def slowdown(self) -> float:
        """completion / ideal (1.0 is perfect)."""
        return self.completion_ns / self.ideal_ns


def round_robin(tids: Sequence[int], cpus: Sequence[int]) -> Dict[int, int]:
    """Static pinning: i-th thread (tid order) on the (i mod M)-th CPU."""
    order = sorted(set(cpus))
    return {tid: order[i % len(order)] for i, tid in enumerate(sorted(tids))}


def run(cpus: Sequence[int], workload: Workload, balancer=None,
        placement: Optional[Mapping[int, int]] = None,
        background: Optional[Mapping[int, int]] = None,
        interval_ms: int = 100) -> RunResult:
    """Run ``workload`` to completion, balancing every interval.

    With ``balancer`` the intervals come from ``balancer.next_interval_ms()``
    and its moves are applied after each interval; exited threads are
    forgotten.  Without one, threads stay where ``placement`` (default
    round-robin) puts them.  The initial placement defaults to the
    balancer's own.
    """
    tids = workload.tids
    if placement is None:
        placement = balancer.initial_placement(tids) if balancer is not None else round_robin(tids, cpus)
    sim = Simulator(cpus, workload, placement, background)
    result = RunResult(completion_ns=0, ideal_ns=workload.ideal_ns(len(set(cpus))), intervals=0)
    last_exec = sim.exec_ns()
    live = set(sim.placement)
    while not sim.done:
        ms = balancer.next_interval_ms() if balancer is not None else interval_ms
        elapsed = sim.run_for(ms * NS_PER_MS)
        result.intervals += 1
        if balancer is None or sim.done:
            continue
        now_live = sim.placement
        for tid in sorted(live - set(now_live)):
            balancer.forget(tid)
        live = set(now_live)
        exec_total = sim.exec_ns()
        delta = {t: exec_total[t] - last_exec[t] for t in now_live}
        last_exec = exec_total
        for move in balancer.step(delta, elapsed, now_live):
            sim.migrate(move.tid, move.dst)
            result.moves.append((result.intervals, move))
            result.migrations[move.tid] = result.migrations.get(move.tid, 0) + 1
    result.completion_ns = sim.completion_ns
    result.alone_ns = sim.alone_ns()
    result.exec_ns = sim.exec_ns()
    return result
