"""Each of auto's thresholds against the evidence its comment names: the
figures below were read from real threads on this 2-CPU machine
(BENCHMARKS.md, "auto's thresholds against what threads show":
benchmarks/thread_signals.py over the bundled spmd program), or come from
a paper or a derivation the constant's comment shows.  A test here fails
when its constant moves out of the range that evidence supports -- each
test names the range -- not when it is merely rewritten."""

from tumbler.engine import Domain
from tumbler.engine.grouping import place_new
from tumbler.engine.merging import crowded_by_other_work, oversubscribed_unevenly
from tumbler.engine.model import ThreadLoad
from tumbler.engine.columns import checked_columns
from tumbler.engine.policy import ThreadView, make_policy
from tumbler.engine.speed import SpeedParams
from tumbler.engine.swaps import cancel_swaps
from tumbler.engine.window import demand

WALL = 100_000_000      # a 100 ms round
ONE_DOMAIN = [Domain(0, {0, 1})]

# -- recorded: benchmarks/thread_signals.py, 500 ms windows ------------------
#: Runnable share of threads that spin or yield at barriers, 3 on 2 CPUs:
#: the lowest window, on a loaded machine (0.978 on a quiet one).
ALWAYS_RUNNABLE_LOWEST = 0.908
#: Runnable share and CPU share of threads that sleep at barriers, 3 on 2:
#: the median window.
SLEEPER_RUNNABLE_MEDIAN, SLEEPER_CPU_MEDIAN = 0.868, 0.656
#: Runnable share of a sleeper's window at its highest (3 on 2).
SLEEPER_RUNNABLE_HIGHEST = 0.982
#: Voluntary switches per second: spinners and yielders in every window;
#: sleepers at their fewest over a 2 s span (3 on 2 CPUs, a loaded machine).
SPINNER_SLEEPS, SLEEPER_SLEEPS_FEWEST = 0.0, 1.0
#: Switches per CPU-second over 2 s: yield barriers, the crowd's mean in
#: its second-lowest of 6 spans (794, 1,186, 1,293, 1,553, 1,973, 2,496);
#: spin barriers, the crowd's mean at its highest (per thread at most 196).
YIELD_CROWD_SECOND_LOWEST, SPIN_CROWD_HIGHEST = 1186.0, 160.0
#: A main thread waiting in join (load, CPUs); the least loaded worker of
#: the barrier programs measured, sleeping barriers on a loaded machine
#: (0.458 on a quiet one; once, in one window of ~530, 0.016).
IDLE_MAIN_LOAD, LIGHTEST_WORKER_LOAD = 0.002, 0.14
#: Equal threads' loads in one window: 90th percentile of their spread.
EQUAL_LOAD_NOISE = 0.012


def thread(tid, speed, *, runnable=1.0, sleeps=0.0, switches=1300.0, cpu=None, domain=0,
           load=None):
    return ThreadView(tid=tid, load=speed if load is None else load, domain=domain,
                      pinned_cpu=cpu, exec_ns=int(speed * WALL), wall_ns=WALL,
                      runnable=runnable, sleeps_per_s=sleeps, switches_per_cpu_s=switches)


def auto():
    return make_policy("auto", speed=SpeedParams(jitter=False), seed=1)


def crowd(**kw):
    """3 threads on 2 cores, speeds as the OS leaves them over a round."""
    return [thread(1, 0.5, **kw), thread(2, 0.5, **kw), thread(3, 1.0, **kw)]


def test_runnable_share_counts_spinners_as_always_runnable_and_not_a_sleepers_median():
    """RUNNABLE_SHARE, supported (0.868, 0.908]: a spinner's lowest window
    is a candidate and wants a whole CPU; a sleeper's median window keeps
    the CPU it got as its load."""
    assert auto().decide(crowd(runnable=ALWAYS_RUNNABLE_LOWEST), ONE_DOMAIN).engaged == [0]
    assert demand(0.66, ALWAYS_RUNNABLE_LOWEST, _share()) == ALWAYS_RUNNABLE_LOWEST
    assert demand(SLEEPER_CPU_MEDIAN, SLEEPER_RUNNABLE_MEDIAN, _share()) == SLEEPER_CPU_MEDIAN
    assert auto().decide(crowd(runnable=SLEEPER_RUNNABLE_MEDIAN), ONE_DOMAIN).engaged == []


def _share():
    from tumbler.engine.policy import RUNNABLE_SHARE
    return RUNNABLE_SHARE


def test_sleeping_not_the_runnable_share_tells_a_sleeper_from_a_spinner():
    """SLEEPS_PER_SECOND, supported (0, 1.0]: a sleeper whose window was
    as runnable as a spinner's (0.982) is still left to the OS, on its
    fewest measured sleeps; a spinner (0 sleeps) is a candidate."""
    sleepers = crowd(runnable=SLEEPER_RUNNABLE_HIGHEST, sleeps=SLEEPER_SLEEPS_FEWEST)
    decision = auto().decide(sleepers, ONE_DOMAIN)
    assert decision.engaged == [] and decision.notes[0].startswith("os: 0 runnable of 3")
    assert auto().decide(crowd(sleeps=SPINNER_SLEEPS), ONE_DOMAIN).engaged == [0]
    # Merging counts the same candidates (engine/merging.py).
    busy = [thread(t, 0.5, domain=t % 2) for t in (1, 2, 3)]
    assert oversubscribed_unevenly(busy, [1, 1])
    assert not oversubscribed_unevenly(
        [t._replace(sleeps_per_s=SLEEPER_SLEEPS_FEWEST) for t in busy], [1, 1])


def test_switching_engages_on_yield_barriers_and_never_on_spin_barriers():
    """SYNC_SWITCHES_PER_CPU_S, supported (330, 1,186]: above what the
    scheduler's slice allows threads that only compute or spin (~330 at a
    3 ms slice; 160 measured), at most the yield barriers' mean over 2 s
    in 5 spans of 6 (the sixth, 794, is below 800: that span would not
    engage, the next would)."""
    assert auto().decide(crowd(switches=YIELD_CROWD_SECOND_LOWEST), ONE_DOMAIN).engaged == [0]
    assert auto().decide(crowd(switches=330.0), ONE_DOMAIN).engaged == []


def test_an_engaged_crowd_stays_while_it_yields_and_lets_go_when_it_spins():
    """STAY_ENGAGED_SWITCHES_PER_CPU_S, supported (160, 577]: pinned 3 on
    2, two yielders sharing a core and one alone at the slice switch
    (2 x 800 + 130) / 3 = 577 at the least: engaged still; spinning, the
    crowd's 160: handed back."""
    policy = auto()
    pins = policy.decide(crowd(), ONE_DOMAIN).pins
    still = [thread(t, 0.66, cpu=pins[t], switches=577.0) for t in (1, 2, 3)]
    assert policy.decide(still, ONE_DOMAIN).engaged == [0]
    spinning = [thread(t, 0.66, cpu=pins[t], switches=SPIN_CROWD_HIGHEST) for t in (1, 2, 3)]
    released = policy.decide(spinning, ONE_DOMAIN)
    assert released.engaged == [] and released.pins == {1: None, 2: None, 3: None}


def test_an_idle_main_thread_is_not_pinned_nor_taken_for_a_worker():
    """IDLE_LOAD, supported (0.002, 0.14): the speed policy pins the
    lightest worker measured and leaves a main thread waiting in join
    unpinned; a new thread is assumed as busy as the workers, not as the
    average with the main thread."""
    speed = make_policy("speed", speed=SpeedParams(jitter=False), seed=1)
    main = thread(9, IDLE_MAIN_LOAD, runnable=IDLE_MAIN_LOAD)
    workers = [thread(t, LIGHTEST_WORKER_LOAD) for t in (1, 2, 3)]
    assert sorted(speed.decide([main] + workers, ONE_DOMAIN).pins) == [1, 2, 3]
    # Two 1-CPU domains: the main thread and one worker on 0, a worker on
    # 1; two new threads go one each way only if each counts as a worker.
    placed = [ThreadLoad(9, IDLE_MAIN_LOAD, 0), ThreadLoad(1, LIGHTEST_WORKER_LOAD, 0),
              ThreadLoad(2, LIGHTEST_WORKER_LOAD, 1)]
    new = [ThreadLoad(10, 0.0, None), ThreadLoad(11, 0.0, None)]
    moves = place_new(new, placed, [Domain(0, {0}), Domain(1, {1})])
    assert sorted(m.dst for m in moves) == [0, 1]


def test_a_swap_of_threads_equal_within_the_noise_is_not_made():
    """SWAP_EPSILON, supported [0.012, 0.10): two equal threads whose loads
    differ by the measured noise, moving opposite ways, stay; two that
    differ by the tolerance of a 1-CPU domain (0.10 CPU) move."""
    def swapped(a, b):
        threads = [ThreadLoad(1, a, 0), ThreadLoad(2, b, 1)]
        loads = {1: a, 2: b}
        return cancel_swaps(checked_columns(threads, 2), {1: 1, 2: 0}, loads)
    assert swapped(1.0, 1.0 - EQUAL_LOAD_NOISE) == {1: 0, 2: 1}
    assert swapped(1.0, 0.9) == {1: 1, 2: 0}


def test_a_thread_beside_a_hog_merges_the_domains_a_noisy_round_does_not():
    """SHORTFALL, supported (0.5, 0.95]: a thread beside a CPU-bound hog of
    equal priority runs at 0.5 against 1.0 in the other domain: merge;
    0.95 against 1.0 is within the timing noise the speed balancing paper
    allows (section 5.1, T_s = 0.9): no merge."""
    def beside_hog(speed):
        return [thread(1, speed, domain=0), thread(2, 1.0, domain=1)]
    assert crowded_by_other_work(beside_hog(0.5), [1, 1], [1.0, 0.0])
    assert not crowded_by_other_work(beside_hog(0.95), [1, 1], [0.1, 0.0])
