"""The auto and speed policies: when speed balancing engages, and what it pins."""

from tumbler.engine import Domain
from tumbler.engine.policy import (SYNC_SWITCHES_PER_CPU_S, WATCH_INTERVAL_MS, ThreadView,
                                   make_policy)
from tumbler.engine.speed import SpeedParams

WALL = 100_000_000      # a 100 ms round
ONE_DOMAIN = [Domain(0, {0, 1})]


#: Context switches per CPU-second as measured here (engine/policy.py):
#: a thread that yields at barriers beside a waiting thread, one that only
#: computes or spins (the scheduler's slice).
YIELDING, COMPUTING = 1300.0, 130.0


def spinner(tid, speed, cpu=None, domain=0, sleeps=0.0, switches=YIELDING):
    """A thread that never leaves the run queue and got ``speed`` of a CPU;
    by default one that yields at barriers (``switches`` per CPU-second)."""
    return ThreadView(tid=tid, load=speed, domain=domain, pinned_cpu=cpu,
                      exec_ns=int(speed * WALL), wall_ns=WALL, runnable=1.0,
                      sleeps_per_s=sleeps, switches_per_cpu_s=switches)


def auto():
    return make_policy("auto", speed=SpeedParams(jitter=False), seed=1)


def test_three_yielders_on_two_cores_engage_speed_balancing():
    decision = auto().decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    assert decision.engaged == [0]
    assert "speed" in decision.notes[0] and "3 runnable threads on 2 cores" in decision.notes[0]
    assert sorted(decision.pins) == [1, 2, 3]
    assert set(decision.pins.values()) == {0, 1}
    # Full rounds calm down; speed balancing steps at its own cadence between.
    assert decision.interval_ms == WATCH_INTERVAL_MS
    assert decision.speed_interval_ms == SpeedParams().interval_ms     # no jitter in auto()


def test_sleeping_threads_are_left_to_the_os():
    threads = [spinner(1, 0.5, sleeps=20.0), spinner(2, 0.5, sleeps=20.0),
               spinner(3, 1.0, sleeps=20.0)]
    decision = auto().decide(threads, ONE_DOMAIN)
    assert decision.engaged == [] and decision.pins == {}
    assert decision.notes[0].startswith("os: 0 runnable of 3")


def test_threads_not_always_runnable_are_left_to_the_os():
    threads = [ThreadView(tid, 0.6, 0, exec_ns=int(0.6 * WALL), wall_ns=WALL, runnable=0.7,
                          sleeps_per_s=0.0) for tid in (1, 2, 3)]
    assert auto().decide(threads, ONE_DOMAIN).engaged == []


def test_no_more_runnable_threads_than_cores_or_equal_speeds_means_os():
    assert auto().decide([spinner(1, 1.0), spinner(2, 1.0)], ONE_DOMAIN).engaged == []
    four = [spinner(tid, 0.5) for tid in range(1, 5)]
    assert auto().decide(four, ONE_DOMAIN).engaged == []


def test_threads_that_only_compute_are_left_to_the_os():
    """The kernel shares CPU-bound threads fairly over seconds: 3 threads of
    independent work on 2 cores, speeds 0.5/0.5/1.0 over one round, are not
    pinned -- nor are spinners, which look the same from outside."""
    threads = [spinner(1, 0.5, switches=COMPUTING), spinner(2, 0.5, switches=COMPUTING),
               spinner(3, 1.0, switches=COMPUTING)]
    decision = auto().decide(threads, ONE_DOMAIN)
    assert decision.engaged == [] and decision.pins == {}
    assert decision.interval_ms == WATCH_INTERVAL_MS
    assert decision.notes[0] == \
        "os: 3 runnable of 3 threads on 2 cores, 130 switches per CPU-second"
    # Just under the evidence threshold: still the OS's.
    near = [t._replace(switches_per_cpu_s=SYNC_SWITCHES_PER_CPU_S - 1) for t in threads]
    assert auto().decide(near, ONE_DOMAIN).engaged == []
    # --policy speed pins them all the same.
    speed = make_policy("speed", speed=SpeedParams(jitter=False), seed=1)
    assert sorted(speed.decide(threads, ONE_DOMAIN).pins) == [1, 2, 3]


def test_unknown_switching_is_judged_before_anything_is_pinned():
    policy = auto()
    unknown = [spinner(1, 0.5, sleeps=None, switches=None),
               spinner(2, 0.5, sleeps=None, switches=None),
               spinner(3, 1.0, sleeps=None, switches=None)]
    first = policy.decide(unknown, ONE_DOMAIN)
    assert first.engaged == [] and first.pins == {}
    assert first.interval_ms == WATCH_INTERVAL_MS and first.watching
    # 0.3 s later the readings say they yield: engaged.
    known = [t._replace(sleeps_per_s=0.0, switches_per_cpu_s=YIELDING) for t in unknown]
    later = policy.decide(known, ONE_DOMAIN)
    assert later.engaged == [0] and sorted(later.pins) == [1, 2, 3]


def test_engaged_domain_lets_go_when_the_yielding_stops():
    policy = auto()
    first = policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    pins = dict(first.pins)
    # Pinned, a yielder alone on its core switches less: a quarter of the
    # threshold keeps it engaged (hysteresis) ...
    still = [spinner(t, 0.66, pins[t], switches=SYNC_SWITCHES_PER_CPU_S / 3) for t in (1, 2, 3)]
    assert policy.decide(still, ONE_DOMAIN).engaged == [0]
    # ... below it the threads only compute now: handed back to the OS.
    done = [spinner(t, 0.66, pins[t], switches=COMPUTING) for t in (1, 2, 3)]
    released = policy.decide(done, ONE_DOMAIN)
    assert released.engaged == [] and released.pins == {1: None, 2: None, 3: None}


def test_crowded_domain_not_yet_judged_is_watched_without_pacing():
    # Equal speeds (the OS shares fairly for now): not engaged, but whether
    # they sleep is still unknown -- rounds stay at the watch's pace (never
    # spaced further: ``watching``) until they are judged.
    threads = [spinner(t, 2 / 3, sleeps=None, switches=None) for t in (1, 2, 3)]
    decision = auto().decide(threads, ONE_DOMAIN)
    assert decision.engaged == []
    assert decision.interval_ms == WATCH_INTERVAL_MS and decision.watching
    # Known sleepers, or no more runnable threads than cores, or a multiple
    # of the cores: nothing to judge, a calm watch (the controller paces it).
    for calm in ([spinner(1, 0.5, sleeps=20.0), spinner(2, 0.5, sleeps=20.0),
                  spinner(3, 1.0, sleeps=20.0)],
                 [spinner(1, 1.0, sleeps=None), spinner(2, 1.0, sleeps=None)],
                 [spinner(t, 0.5, sleeps=None) for t in (1, 2, 3, 4)],
                 [spinner(t, 2 / 3, switches=COMPUTING) for t in (1, 2, 3)]):
        calmly = auto().decide(calm, ONE_DOMAIN)
        assert calmly.interval_ms == WATCH_INTERVAL_MS and not calmly.watching
    # Other work on the domain keeps speed balancing out whatever the
    # threads do (7.): nothing to judge there either.
    assert not auto().decide(threads, ONE_DOMAIN, [0.5]).watching
    assert auto().decide(threads, ONE_DOMAIN, [0.0]).watching
    # Nor while the service holds speed balancing (its CPU budget): nothing
    # could engage, and judging would keep the rounds from being paced.
    held = auto()
    held.speed_held = True
    assert not held.decide(threads, ONE_DOMAIN).watching


def test_a_crowd_judged_or_engaged_over_domains_is_watched_at_the_watch_pace():
    """Over two domains the variation table paces rounds -- up to its idle
    800 ms for loads this even -- except while a crowd in one is judged
    or engaged: then WATCH_INTERVAL_MS at most."""
    domains = [Domain(0, {0, 1}), Domain(1, {2, 3})]
    # Domain 1: three threads that block half the time, as busy as the crowd.
    blocking = [ThreadView(tid, 2 / 3, 1, runnable=0.5) for tid in (7, 8, 9)]
    unknown = [spinner(t, 2 / 3, sleeps=None, switches=None) for t in (1, 2, 3)]
    sleepers = [spinner(t, 2 / 3, sleeps=20.0) for t in (1, 2, 3)]
    calm = auto().decide(sleepers + blocking, domains)
    assert calm.interval_ms > WATCH_INTERVAL_MS and not calm.watching
    judged = auto().decide(unknown + blocking, domains)
    assert judged.interval_ms == WATCH_INTERVAL_MS and judged.watching
    yielders = [spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)]
    engaged = auto().decide(yielders + blocking, domains)
    assert engaged.engaged == [0] and engaged.interval_ms == WATCH_INTERVAL_MS


def test_single_domain_ignores_the_variation_table():
    # Equal loads (CV 0) would make the table say "idle interval" (800 ms):
    # irrelevant with nothing to group across.
    threads = [ThreadView(tid, 0.1, 0, runnable=0.1) for tid in (1, 2, 3)]
    assert auto().decide(threads, ONE_DOMAIN).interval_ms == WATCH_INTERVAL_MS


def test_engaged_domain_stays_engaged_then_releases_pins():
    policy = auto()
    first = policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    pins = dict(first.pins)
    # Balanced speeds now (its own doing): stays engaged while oversubscribed.
    second = policy.decide([spinner(t, 0.66, pins[t]) for t in (1, 2, 3)], ONE_DOMAIN)
    assert second.engaged == [0]
    # Thread 3 starts sleeping at barriers: it is unpinned, and with two
    # runnable threads on two cores the domain goes back to the OS.
    third = policy.decide([spinner(1, 1.0, pins[1]), spinner(2, 1.0, pins[2]),
                           spinner(3, 0.3, pins[3], sleeps=30.0)], ONE_DOMAIN)
    assert third.engaged == []
    assert third.pins == {1: None, 2: None, 3: None}


def test_speed_rotates_threads_through_the_fast_core():
    policy = auto()
    placement = policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)],
                              ONE_DOMAIN).pins
    alone = {1: 0, 2: 0, 3: 0}
    for _ in range(60):
        per_cpu = {}
        for tid, cpu in placement.items():
            per_cpu.setdefault(cpu, []).append(tid)
        views = []
        for tid, cpu in placement.items():
            speed = 1.0 / len(per_cpu[cpu])
            if len(per_cpu[cpu]) == 1:
                alone[tid] += 1
            views.append(spinner(tid, speed, cpu))
        decision = policy.decide(views, ONE_DOMAIN)
        for tid, cpu in decision.pins.items():
            placement[tid] = cpu
    assert all(count >= 5 for count in alone.values()), alone


def test_speed_steps_between_full_rounds_rotate_threads_through_the_fast_core():
    """After a full round engages, steps alone (the controller calls them
    between rounds with the pinned threads only) keep the rotation going."""
    params = SpeedParams(jitter=False, block_intervals=0, interval_ms=20)   # tumbler's defaults
    policy = make_policy("auto", speed=params, seed=1)
    decision = policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    placement = dict(decision.pins)
    alone = {1: 0, 2: 0, 3: 0}
    for _ in range(30):
        per_cpu = {}
        for tid, cpu in placement.items():
            per_cpu.setdefault(cpu, []).append(tid)
        views = [spinner(tid, 1.0 / len(per_cpu[cpu]), cpu) for tid, cpu in placement.items()]
        for tid, cpu in placement.items():
            alone[tid] += len(per_cpu[cpu]) == 1
        pins, interval_ms = policy.speed_step(views, ONE_DOMAIN)
        assert interval_ms == 20
        assert len(pins) == 1               # one pull per step: 2+1 becomes 1+2
        placement.update(pins)
    assert all(count == 10 for count in alone.values()), alone


def test_speed_step_with_balanced_speeds_pins_nothing():
    policy = auto()
    policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    even = [spinner(1, 0.66, 0), spinner(2, 0.67, 1), spinner(3, 0.67, 0)]
    assert policy.speed_step(even, ONE_DOMAIN)[0] == {}


def test_auto_groups_across_domains_and_balances_speed_inside():
    domains = [Domain(0, {0, 1}), Domain(1, {2, 3})]
    threads = [spinner(1, 0.5, domain=0), spinner(2, 0.5, domain=0), spinner(3, 1.0, domain=0),
               spinner(4, 0.2, domain=1)]
    decision = auto().decide(threads, domains)
    assert decision.plan.moves        # wave grouping moved load to domain 1
    assert set(decision.notes) == {0, 1}


def test_speed_policy_pins_every_thread_round_robin_and_never_crosses_domains():
    domains = [Domain(0, {0, 1}), Domain(1, {2, 3})]
    policy = make_policy("speed", speed=SpeedParams(jitter=False), seed=3)
    threads = [ThreadView(tid, 0.9, tid % 2, wall_ns=WALL, exec_ns=int(0.9 * WALL))
               for tid in range(1, 7)]
    decision = policy.decide(threads, domains)
    assert decision.plan.moves == []
    assert sorted(decision.pins) == list(range(1, 7))
    for tid, cpu in decision.pins.items():
        assert cpu in domains[tid % 2].cpus
    assert decision.engaged == [0, 1]


def test_observe_never_moves_or_pins():
    policy = make_policy("observe")
    decision = policy.decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)],
                             [Domain(0, {0}), Domain(1, {1})])
    assert decision.plan.moves == [] and decision.pins == {}


def test_a_multiple_of_the_cores_is_left_to_the_os():
    # 4 spinners on 2 cores: even with noisy speeds the OS shares them 2+2.
    threads = [spinner(1, 0.4), spinner(2, 0.6), spinner(3, 0.5), spinner(4, 0.5)]
    decision = auto().decide(threads, ONE_DOMAIN)
    assert decision.engaged == [] and decision.pins == {}
    assert decision.interval_ms >= 200


def test_single_domain_watches_calmly_until_speed_engages():
    idle = auto().decide([spinner(1, 1.0), spinner(2, 1.0)], ONE_DOMAIN)
    assert idle.interval_ms >= 200
    assert idle.speed_interval_ms is None
    busy = auto().decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)], ONE_DOMAIN)
    assert busy.speed_interval_ms == SpeedParams().interval_ms      # no jitter in auto()


def test_synchronising_threads_with_even_speeds_are_watched_not_paced():
    """Three yielders on two cores whose speeds look even over this window
    stay the OS's, but the decision says it watches them: the controller
    keeps the next window as short (balance/quiet.py, paced_ms), since
    over a longer one the OS's sharing evens any speeds out."""
    even = [spinner(1, 0.67), spinner(2, 0.67), spinner(3, 0.66)]
    watched = auto().decide(even, ONE_DOMAIN)
    assert watched.engaged == [] and watched.pins == {} and watched.watching
    computing = [spinner(t, 0.67, switches=0.0) for t in (1, 2, 3)]
    assert not auto().decide(computing, ONE_DOMAIN).watching       # no barriers seen
    four = even + [spinner(4, 0.67)]
    assert not auto().decide(four, ONE_DOMAIN).watching             # a multiple: the OS's
    assert not auto().decide(even, ONE_DOMAIN, [0.5]).watching      # other work: the OS's
    assert not auto().decide([spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)],
                             ONE_DOMAIN).watching                   # engaged instead


def test_observing_policies_are_those_that_never_move_threads():
    """config.OBSERVING_POLICIES (read before the engine is imported, to
    start exec's command early) agrees with the engine's classes."""
    from tumbler.config import OBSERVING_POLICIES, POLICY_CHOICES
    from tumbler.engine.policy import make_policy
    for name in POLICY_CHOICES:
        assert make_policy(name).moves_threads == (name not in OBSERVING_POLICIES), name


def test_oversubscribed_unevenly_means_no_grouping_gives_equal_threads_per_core():
    from tumbler.engine.merging import oversubscribed_unevenly

    def busy(n, **kw):
        return [spinner(i, 0.5, **kw) for i in range(n)]

    assert oversubscribed_unevenly(busy(3), [1, 1])         # 2 + 1 at best
    assert not oversubscribed_unevenly(busy(4), [1, 1])     # 2 + 2
    assert not oversubscribed_unevenly(busy(2), [1, 1])     # not oversubscribed
    assert oversubscribed_unevenly(busy(5), [2, 2])         # 3 + 2 on 2 + 2 cores
    assert not oversubscribed_unevenly(busy(6), [2, 2])     # 3 + 3: speed inside each
    assert not oversubscribed_unevenly(busy(6), [1, 2])     # 2 + 4
    assert oversubscribed_unevenly(busy(4), [1, 2])
    # Not judged while a runnable thread's sleeping is unknown.
    assert oversubscribed_unevenly(busy(2) + busy(1, sleeps=None), [1, 1]) is None
    # Sleepers and threads that leave the run queue are not counted.
    assert not oversubscribed_unevenly(busy(2) + busy(1, sleeps=5.0), [1, 1])
    assert not oversubscribed_unevenly(busy(2) + [spinner(9, 0.5)._replace(runnable=0.5)],
                                       [1, 1])


def test_other_work_keeps_speed_balancing_out_and_ends_it():
    """engine/policy.py, 3.: beside other work the domain is the OS's."""
    yielders = [spinner(1, 0.5), spinner(2, 0.5), spinner(3, 1.0)]
    decision = auto().decide(yielders, ONE_DOMAIN, [0.5])
    assert decision.engaged == [] and decision.pins == {}
    assert decision.notes[0] == "os: 3 runnable of 3 threads on 2 cores, other work 0.5 CPU"
    # None measured (0.0, below the dead band): engaged as before.
    assert auto().decide(yielders, ONE_DOMAIN, [0.0]).engaged == [0]
    # Engaged, then other work comes: every pin released.
    policy = auto()
    pins = policy.decide(yielders, ONE_DOMAIN).pins
    pinned = [spinner(t, 0.66, pins[t]) for t in (1, 2, 3)]
    released = policy.decide(pinned, ONE_DOMAIN, [0.3])
    assert released.engaged == [] and released.pins == {1: None, 2: None, 3: None}
    # Other work is named only where it kept speed balancing out.
    two = auto().decide([spinner(1, 1.0), spinner(2, 1.0)], ONE_DOMAIN, [0.5])
    assert two.notes[0] == "os: 2 runnable of 2 threads on 2 cores"


def test_threads_that_block_and_wait_beside_other_work_merge_the_domains():
    """engine/merging.py: threads with barriers (runnable 0.7 of the time,
    CPU 0.35) wait beside a hog while the other domain's CPU idles: the OS
    alone would run them there."""
    from tumbler.engine.merging import OTHER_WORK, WAITING_CPU, crowded_by_other_work, merge_wanted

    def blocking(tid, domain, cpu, runnable):
        return spinner(tid, cpu, domain=domain)._replace(runnable=runnable)

    waiting = [blocking(1, 0, 0.4, 0.45), blocking(2, 1, 0.35, 0.7), blocking(3, 1, 0.3, 0.6)]
    assert crowded_by_other_work(waiting, [1, 1], [0.0, 0.4]) is True
    assert merge_wanted(waiting, [1, 1], [0.0, 0.4]) == OTHER_WORK
    # No other work: the grouping's own business (regrouping).
    assert crowded_by_other_work(waiting, [1, 1], [0.0, 0.0]) is False
    # The other domain has no idle CPU to give: nothing to gain.
    busy_elsewhere = [blocking(1, 0, 0.95, 0.97)] + waiting[1:]
    assert crowded_by_other_work(busy_elsewhere, [1, 1], [0.0, 0.4]) is False
    # Other work just past the dead band: the threads wait for each other.
    assert crowded_by_other_work(waiting, [1, 1], [0.0, WAITING_CPU / 2]) is False
    # A little wait, as a program's own bursts overlapping make it.
    short = [blocking(1, 0, 0.4, 0.45), blocking(2, 1, 0.35, 0.35 + WAITING_CPU / 2)]
    assert crowded_by_other_work(short, [1, 1], [0.0, 0.4]) is False


def test_other_work_crowding_a_domain_merges_and_keeps_it_merged():
    from tumbler.engine.merging import (OTHER_WORK, OVERSUBSCRIBED, crowded_by_other_work,
                                        merge_wanted, stay_merged)
    two = [spinner(1, 1.0, domain=0), spinner(2, 0.5, domain=1)]
    # A hog beside the thread of domain 1 (it got 0.5 of the hog's CPU).
    assert crowded_by_other_work(two, [1, 1], [0.0, 0.5]) is True
    assert merge_wanted(two, [1, 1], [0.0, 0.5]) == OTHER_WORK
    # Other work where the busy thread still runs at full speed (a domain
    # of 2 CPUs), or spread evenly, slowing every bound thread alike:
    # another program of two busy threads balanced beside this one.
    full = [spinner(1, 1.0, domain=0), spinner(2, 1.0, domain=1)]
    assert crowded_by_other_work(full, [1, 2], [0.0, 0.5]) is False
    alike = [spinner(1, 0.5, domain=0), spinner(2, 0.5, domain=1)]
    assert crowded_by_other_work(alike, [1, 1], [0.5, 0.5]) is False
    # One busy thread beside a hog, the other CPU idle: it could have a
    # whole CPU there.  Alone on the idle CPU, with the hog on the other,
    # it has what it wants.
    assert crowded_by_other_work([spinner(1, 0.5, domain=1)], [1, 1], [0.0, 0.5]) is True
    assert crowded_by_other_work([spinner(1, 1.0, domain=0)], [1, 1], [0.0, 1.0]) is False
    # Four on two 1-CPU domains, 2 + 2, a hog beside one pair: 0.33 there,
    # 0.5 beside.
    four = [spinner(1, 0.5, domain=0), spinner(2, 0.5, domain=0),
            spinner(3, 0.33, domain=1), spinner(4, 0.33, domain=1)]
    assert merge_wanted(four, [1, 1], [0.0, 0.3]) == OTHER_WORK
    assert merge_wanted(two, [1, 1], [0.0, 0.0]) is False
    assert merge_wanted(two, [1, 1], None) is False
    # A thread that sleeps or leaves the run queue beside it is no reason.
    sleeper = [spinner(1, 1.0, domain=0), spinner(2, 0.5, domain=1, sleeps=20.0)]
    assert crowded_by_other_work(sleeper, [1, 1], [0.0, 0.5]) is False
    light = [spinner(1, 1.0, domain=0), spinner(2, 0.3, domain=1)._replace(runnable=0.3)]
    assert merge_wanted(light, [1, 1], [0.0, 0.5]) is False
    # Judged at once, before the threads' sleeping is known (merging only
    # hands threads back); oversubscription waits for it.
    unknown = [spinner(1, 1.0, domain=0), spinner(2, 0.5, domain=1, sleeps=None)]
    assert merge_wanted(unknown, [1, 1], [0.0, 0.5]) == OTHER_WORK
    assert merge_wanted(unknown + [spinner(3, 0.5, domain=1, sleeps=None)], [1, 1],
                        [0.0, 0.0]) is None
    # Oversubscription first, as before.
    three = [spinner(t, 0.5, domain=t % 2) for t in (1, 2, 3)]
    assert merge_wanted(three, [1, 1], [0.0, 0.0]) == OVERSUBSCRIBED
    # Merged: other work anywhere keeps them so; without it the count decides.
    assert stay_merged(two, [1, 1], 0.7) == OTHER_WORK
    assert stay_merged(two, [1, 1], 0.0) is False
    assert stay_merged(three, [1, 1], 0.0) == OVERSUBSCRIBED
    assert stay_merged(three[:2] + [spinner(3, 0.5, sleeps=None)], [1, 1], None) is None
