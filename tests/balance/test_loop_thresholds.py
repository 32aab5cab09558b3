"""The loop's side of auto's thresholds against the evidence their
comments name (derivations from kernel facts and from the other
thresholds, recorded figures: BENCHMARKS.md, "auto's thresholds against
what threads show").  A test here fails when its constant moves out of
the range that evidence supports -- each names the range -- not when it
is merely rewritten.  The engine's are in tests/engine/."""

import os
from types import SimpleNamespace

from support.scripted import MS, PID, ScriptedBackend
from tumbler.balance.capacity import CapacityMeter
from tumbler.balance.controller import Controller
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.merged import DomainMerger
from tumbler.balance.otherwork import OtherWork
from tumbler.balance.speedstep import SpeedSteps
from tumbler.engine.model import Domain, ThreadView
from tumbler.engine.policy import WATCH_INTERVAL_MS, make_policy
from tumbler.platform.base import NullBinder, Unsupported

WINDOW_NS = 500 * MS
ZERO, ONE = frozenset({0}), frozenset({1})
SPLIT = DomainChoice("explicit", (ZERO, ONE), "test")


class BusyTimes:
    """/proc/stat's busy time per CPU, which the test advances."""

    def __init__(self):
        self.busy = {0: 0, 1: 0}

    def current_cpu(self):
        return None

    def cpu_times(self):
        return {cpu: (busy, 10 ** 15) for cpu, busy in self.busy.items()}


def held_other_work(steps):
    """The other work the capacity meter holds on a 1-CPU domain after each
    of ``steps`` ((other work in CPUs, rounds of 100 ms)): CPU 0 busy all
    the time, the program getting the rest."""
    backend, domains = BusyTimes(), [Domain(0, {0})]
    meter = CapacityMeter(backend, WINDOW_NS)
    now = 0
    meter.other_work(domains, [0.0], now)
    held = []
    for other, rounds in steps:
        for _ in range(rounds):
            backend.busy[0] += 100 * MS
            now += 100 * MS
            result = meter.other_work(domains, [1.0 - other], now)
        held.append(result[0])
    return held


def test_other_work_wandering_a_tick_around_a_half_step_moves_its_capacity_once():
    """HYSTERESIS_STEPS, supported (0.7, 1): /proc/stat counts in 10 ms
    ticks, 0.02 CPU over a load window.  Other work of 0.15 CPU (half way
    between two 0.1 CPU steps) read a tick low, then high, then low ...
    moves the value in use once, not at every reading."""
    held = held_other_work([(0.13, 6), (0.17, 6), (0.13, 6), (0.17, 6), (0.13, 6)])
    assert len({round(h, 6) for h in held}) == 1, held


def test_other_work_of_one_whole_step_shows():
    """HYSTERESIS_STEPS, the other side: 0.1 CPU of other work, one step,
    taken all the time, is seen."""
    held = held_other_work([(0.1, 10)])
    assert abs(held[-1] - 0.1) < 1e-9, held


def merger():
    layout = Layout(SPLIT)

    class Scripted:
        def cpu_times(self):
            raise Unsupported("scripted")
    other = OtherWork(Scripted(), layout, WINDOW_NS, None, merges=True)
    return DomainMerger(make_policy("auto"), layout, WINDOW_NS, other, moves_threads=True,
                        reshape=layout.set, may_use=lambda: ZERO | ONE), layout


def busy(count):
    return [ThreadView(100 + i, 1.0, i % 2, ZERO | ONE, None, 10 ** 8, 10 ** 8, 1.0, 0.0, None)
            for i in range(count)]


def test_a_moment_of_idleness_does_not_split_merged_domains_a_lasting_change_does():
    """SPLIT_HOLD_WINDOWS, supported: 2.  Merged for 3 busy threads on two
    1-CPU domains; one goes idle for a moment, which the loads show for a
    load window after it: judged at every 100 ms round through that window,
    the domains stay merged.  Idle for good, they split within two windows
    and a round."""
    judge, layout = merger()
    judge.judge(busy(3), [SimpleNamespace(wall_ns=0)], None)
    judge.judge(busy(3), [SimpleNamespace(wall_ns=WINDOW_NS)], None)
    assert layout.choice.single
    start = 10 * WINDOW_NS
    for ms in range(0, 501, 100):           # the moment, as the loads show it
        judge.judge(busy(2), [SimpleNamespace(wall_ns=start + ms * MS)], None)
    judge.judge(busy(3), [SimpleNamespace(wall_ns=start + 600 * MS)], None)
    assert layout.choice.single
    start = 20 * WINDOW_NS
    for ms in range(0, 1101, 100):
        judge.judge(busy(2), [SimpleNamespace(wall_ns=start + ms * MS)], None)
    assert not layout.choice.single


def test_rounds_at_the_watching_pace_each_read_new_counts_and_judge_by_the_third():
    """WATCH_INTERVAL_MS, supported [100, 200]; SWITCH_MIN_RUN_NS, supported
    up to 150 ms.  A crowded thread at the slowest speed of 3 on 2 CPUs
    (0.5) read at every round: no round re-uses the last counts (switch
    counts are read at most every 100 ms), and its sleeping and switching
    are known by the third reading, 400 ms after the first (the shortest
    span they are judged over is 300 ms)."""
    reads = []

    class Counting:
        counts_context_switches = True

        def context_switches(self, pid, tid):
            reads.append(tid)
            return 0, len(reads) * 2
    steps = SpeedSteps(Counting(), None, None, None, None, None, lambda: False)
    thread = SimpleNamespace(pid=PID, tid=7, prev_wall=0, prev_run=0, switches=None,
                             sleeps_per_s=None, switch_rate=None)
    rounds, judged_at = 0, None
    for at_ms in range(0, 1001, WATCH_INTERVAL_MS):
        thread.prev_wall, thread.prev_run = at_ms * MS, at_ms * MS // 2
        sleeps, rate = steps._switch_rates(thread)
        rounds += 1
        if sleeps is not None and rate is not None:
            judged_at = at_ms
            break
    assert len(reads) == rounds, (reads, rounds)
    # The first reading spanning 300 ms: the fourth at 100 ms, the third at 150 or 200.
    assert rounds == -(-300 // WATCH_INTERVAL_MS) + 1 and judged_at <= 400, (rounds, judged_at)


def test_a_thread_starved_for_a_whole_switch_window_shows_no_sign_of_barriers():
    """SWITCH_MIN_RUN_NS over SWITCH_WINDOW_NS: a crowd so large (over 40
    runnable threads per CPU) that a thread runs under 50 ms in 2 s.  Its
    switches per CPU-second cannot be told, and a crowd with one unknown
    is judged -- its rounds never paced -- for ever.  Over a whole window
    it shows no sign of barriers (0.0), as on a backend that cannot count
    switches; before that it is unknown."""
    class Counting:
        counts_context_switches = True

        def context_switches(self, pid, tid):
            return 0, 5

    steps = SpeedSteps(Counting(), None, None, None, None, None, lambda: False)
    thread = SimpleNamespace(pid=PID, tid=7, prev_wall=0, prev_run=0, switches=None,
                             sleeps_per_s=None, switch_rate=None)
    rates = []
    for at_ms in range(0, 2401, WATCH_INTERVAL_MS):
        thread.prev_wall, thread.prev_run = at_ms * MS, at_ms * MS // 100    # 1% of a CPU
        rates.append((at_ms, steps._switch_rates(thread)))
    assert all(rate is None for at_ms, (_, rate) in rates if at_ms < 2000), rates
    assert all(rate == 0.0 and sleeps == 0.0 for at_ms, (sleeps, rate) in rates
               if at_ms >= 2000), rates


class CountingSwitches(ScriptedBackend):
    """CPUs' busy time the test sets, and threads' context switches counted
    as a CPU-bound thread's: none voluntary, one per 3 ms slice."""

    counts_context_switches = True

    def __init__(self):
        super().__init__()
        self.busy = {0: 0, 1: 0}

    def cpu_times(self):
        return {cpu: (busy, self.now) for cpu, busy in self.busy.items()}

    def context_switches(self, pid, tid):
        return 0, self.threads[tid][1] // (3 * MS)


def test_three_busy_threads_on_two_one_cpu_domains_are_never_bound_before_the_merge():
    """FIRST_JUDGEMENT_WINDOWS, supported [2, 4]: three CPU-bound threads
    on two 1-CPU domains.  Whether they sleep is known 0.3-0.4 s after the
    first round sees them crowded, then the merge waits its hold: bound at once
    they would stay 2 + 1 until then; the first binding waits for that
    judgement, and they are never bound.  The loop sleeps what each round
    asks."""
    tids = (101, 102, 103)
    backend = CountingSwitches()
    for tid in tids:
        backend.run(tid, 0)
    controller = Controller(backend, NullBinder(), make_policy("auto"), SPLIT, dry_run=True)
    controller.add_target(PID)
    clock = {"now": 0}
    # The first judgement's deadline on the test's clock, not the machine's.
    controller._first_judgement_left_s = lambda: _left_s(controller, clock["now"])
    elapsed, interval, bound, merged_at, waits = 0, 100, [], None, []
    while elapsed < 3000 and merged_at is None:
        backend.now += interval * MS
        elapsed += interval
        clock["now"] = elapsed
        for tid in tids:
            backend.run(tid, 2 / 3 * interval, lat_ms=1 / 3 * interval)
        backend.busy[0] += interval * MS
        backend.busy[1] += interval * MS
        decision = controller.round()
        bound.append(any(t.domain is not None for t in controller.threads.values())
                     and not controller.choice.single)
        if controller.choice.single:
            merged_at = elapsed
        interval = decision.interval_ms
        waits.append((interval, decision.plan.reason))
    assert merged_at is not None, bound
    assert not any(bound), (bound, merged_at)
    # While the judgement waits for the threads' readings: rounds at the
    # watch's pace (then to the end of the merge's hold).
    assert (WATCH_INTERVAL_MS, True) in [(ms, "while merging is judged" in reason)
                                         for ms, reason in waits], waits


def _left_s(controller, elapsed_ms):
    """Controller._first_judgement_left_s on the test's clock."""
    from tumbler.balance import controller as module
    return module.FIRST_JUDGEMENT_WINDOWS * controller.load_window_ns / 1e9 - elapsed_ms / 1000


def test_a_round_waiting_to_bind_comes_no_sooner_than_proc_stat_can_change():
    """DEFERRED_FLOOR_MS, supported: at least one clock tick of /proc/stat
    (1000 / sysconf(_SC_CLK_TCK) ms).  A merge's hold that ended already
    asks for the next round at once -- no sooner than a tick."""
    backend = CountingSwitches()
    backend.run(101, 0)
    controller = Controller(backend, NullBinder(), make_policy("auto"), SPLIT, dry_run=True)
    controller.add_target(PID)
    controller.other.unread = lambda: False
    controller.merger.due_ns = backend.now - 10 ** 9
    wait = controller._deferred_ms([SimpleNamespace(wall_ns=backend.now)])
    assert wait >= 1000 // os.sysconf("SC_CLK_TCK"), wait


def test_one_clock_tick_of_other_work_over_the_shortest_span_read_never_shows():
    """MIN_STEP_CPUS, supported above 0.053 CPU (with HYSTERESIS_STEPS
    0.75): /proc/stat counts in 10 ms ticks, and the meter reads from
    half a load window on, so one tick too many is 0.04 CPU of other work
    that is not there.  Read all the time, it never shows."""
    held = held_other_work([(0.04, 3), (0.04, 3), (0.04, 10)])
    assert held == [0.0, 0.0, 0.0], held
