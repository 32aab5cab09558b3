"""Measured capacity (``--capacity measured``): the meter on a stand-in
backend whose CPU times the test writes (dead band, steps, hysteresis,
the load window, failures), then on real processes -- a hog pinned to one
CPU makes tumbler put fewer threads there (real masks), and with nothing
else running every round's capacity is the CPU count, so the plan is the
one ``--capacity cpus`` makes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support.capacity import (busiest_window, hog, linux_root, other_work_reading,
                              other_work_since, rounds_of, split)
from support.helpers import REPO, thread_masks, tumbler_cmd
from support.processes import env_for, finish, wait_until
from support.sharing import spinners
from tumbler.balance.capacity import HYSTERESIS_STEPS, CapacityMeter, step_of, weighed
from tumbler.engine.model import Domain
from tumbler.platform.base import PlatformError, Unsupported

MS = 1_000_000
WINDOW = 500 * MS


class Times:
    """A backend whose cpu_times() the test advances."""

    def __init__(self, cpus):
        self.busy = {cpu: 0 for cpu in cpus}
        self.reads = 0
        self.error = None

    def current_cpu(self):
        return None             # tumbler's own time is booked nowhere (see the own-time test)

    def cpu_times(self):
        self.reads += 1
        if self.error is not None:
            raise self.error
        return {cpu: (busy, 10 ** 15) for cpu, busy in self.busy.items()}

    def run(self, shares, span_ns):
        for cpu, share in shares.items():
            self.busy[cpu] += int(share * span_ns)


DOMAINS = [Domain(0, {0}), Domain(1, {1})]
#: Two light threads: a domain of one step (0.1 CPU) still gives each of
#: them what it uses, so no domain is left out (see the left-out tests).
LOADS = [0.05, 0.05]
#: Four busy threads: one of them on a domain of 0.1 CPU would get less
#: than the 0.25 each gets sharing the other CPU.
BUSY = [1.0] * 4


def measure(meter, backend, shares, managed, rounds=4, span=100 * MS, start=0, loads=LOADS):
    """Run ``rounds`` rounds of ``span`` with CPUs busy ``shares`` and the
    program's threads getting ``managed`` per domain; the last capacities."""
    t = start
    capacities = None
    for _ in range(rounds):
        backend.run(shares, span)
        t += span
        capacities = meter.update(DOMAINS, managed, t, loads)
    return capacities, t


def test_an_idle_machine_gives_cpu_counts_exactly():
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    assert meter.update(DOMAINS, [0.0, 0.0], 0, LOADS) == [1, 1]      # one reading: nothing yet
    # The program's own threads use both CPUs fully; others 3% (tumbler,
    # kernel threads): inside the dead band.
    capacities, _ = measure(meter, backend, {0: 1.0, 1: 1.0}, [0.97, 0.97], rounds=10)
    assert capacities == [1, 1] and all(type(c) is int for c in capacities)
    assert weighed(DOMAINS, capacities)[0] is DOMAINS[0]


def test_a_hog_lowers_its_domain_in_whole_steps():
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
    # CPU 1: busy all the time, the program got 0.42 of it: others took 0.58.
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.42], rounds=8)
    assert capacities[0] == 1
    assert capacities[1] == pytest.approx(1 - 0.6)      # 0.58 in steps of 0.1
    domains = weighed(DOMAINS, capacities)
    assert domains[1].capacity == pytest.approx(0.4) and domains[1].cpus == {1}
    # Noise within three quarters of a step moves nothing ...
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.47], start=t, rounds=8)
    assert capacities[1] == pytest.approx(0.4)
    # ... a real change does, and the hog gone gives the CPU count back.
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 1.0], start=t, rounds=8)
    assert capacities == [1, 1]


def test_never_below_one_step_and_steps_grow_with_the_domain():
    assert step_of(1) == pytest.approx(0.1) and step_of(64) == pytest.approx(3.2)
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
    capacities, _ = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=6)
    assert capacities[1] == pytest.approx(0.1)


def test_the_load_window_bounds_what_is_remembered():
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
    _, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.5], rounds=10)
    assert len(meter.readings) <= WINDOW // (100 * MS) + 2
    # Two windows of an idle hog later, nothing of it is left.
    capacities, _ = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 1.0], start=t, rounds=10)
    assert capacities == [1, 1]


def test_an_unreadable_source_falls_back_to_cpu_counts_once():
    backend = Times([0, 1])
    said = []
    meter = CapacityMeter(backend, WINDOW, warn=said.append)
    backend.error = PlatformError("cannot read /proc/stat: EIO")
    assert meter.update(DOMAINS, [0.0, 0.0], 0, LOADS) == [1, 1]
    assert meter.update(DOMAINS, [0.0, 0.0], 100 * MS, LOADS) == [1, 1]
    assert backend.reads == 1 and len(said) == 1 and "EIO" in said[0]
    # A platform that cannot tell at all: CPU counts, nothing said.
    quiet = CapacityMeter(Times([0, 1]), WINDOW, warn=said.append)
    quiet.backend.error = Unsupported("no per-CPU times here")
    assert quiet.update(DOMAINS, [0.0, 0.0], 0, LOADS) == [1, 1] and len(said) == 1


def test_a_starved_domain_is_left_out_tried_again_and_back_when_free():
    from tumbler.balance.capacity import MAX_RETRY_WINDOWS, RETRY_WINDOWS, TRIAL_WINDOWS
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0, BUSY)
    # A high-priority hog keeps CPU 1; the thread there gets 0.03 of it.
    span, t, capacities = 100 * MS, 0, None
    while capacities != [1, 0.0]:
        assert t < WINDOW
        capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.03], rounds=1,
                                start=t, loads=BUSY)
    # Out: the program gets nothing there, the hog all of it.  It stays out
    # until RETRY_WINDOWS windows after it was left out ...
    out_at = t
    while t + span < out_at + RETRY_WINDOWS * WINDOW:
        capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=1,
                                start=t, loads=BUSY)
        assert capacities == [1, 0.0], t
    # ... then is planned as measured for TRIAL_WINDOWS windows (one step:
    # wave grouping gives it a thread) ...
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=1,
                            start=t, loads=BUSY)
    trial_at = t
    assert capacities[1] == pytest.approx(0.1)
    while t + span < trial_at + TRIAL_WINDOWS * WINDOW:
        capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.03], rounds=1,
                                start=t, loads=BUSY)
        assert capacities[1] == pytest.approx(0.1)
    # ... the trial shows the same hog: out again, the next trial twice as far.
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.03], rounds=1,
                            start=t, loads=BUSY)
    assert capacities == [1, 0.0]
    state = meter.left_out[frozenset({1})]
    assert state.retry_windows == min(2 * RETRY_WINDOWS, MAX_RETRY_WINDOWS)
    assert state.retry_at == t + state.retry_windows * WINDOW
    # The hog ends: back at once, no trial needed.
    capacities, t = measure(meter, backend, {0: 1.0, 1: 0.0}, [1.0, 0.0], rounds=10,
                            start=t, loads=BUSY)
    assert capacities == [1, 1] and not meter.left_out


def test_a_trial_that_shows_a_fair_share_keeps_the_domain():
    from tumbler.balance.capacity import RETRY_WINDOWS, TRIAL_WINDOWS
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0, BUSY)
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=6, loads=BUSY)
    assert capacities == [1, 0.0]
    # An equal-priority hog: alone it fills CPU 1, beside one of ours it
    # takes half.  Only a trial can tell.
    rounds = (RETRY_WINDOWS + TRIAL_WINDOWS) * WINDOW // (100 * MS) + 2
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0],
                            rounds=RETRY_WINDOWS * WINDOW // (100 * MS), start=t, loads=BUSY)
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.5],
                            rounds=rounds, start=t, loads=BUSY)
    assert capacities == [1, pytest.approx(0.5)] and not meter.left_out


def test_a_quiet_rounds_check_keeps_the_left_out_state_as_it_is():
    """A quiet round checks capacity without loads (it plans nothing): a
    domain left out stays out, none is left out anew, no trial advances."""
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW)
    meter.update(DOMAINS, [0.0, 0.0], 0)
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=6,
                            loads=None)
    assert capacities == [1, pytest.approx(0.1)] and not meter.left_out
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.0], rounds=1,
                            start=t, loads=BUSY)
    assert capacities == [1, 0.0]
    out = meter.left_out[frozenset({1})]
    before = (out.retry_at, out.trial_until)
    capacities, t = measure(meter, backend, {0: 1.0, 1: 0.0}, [1.0, 0.0], rounds=10,
                            start=t, loads=None)
    # The hog is gone, but only a planning round may bring the domain back.
    assert capacities == [1, 0.0]
    assert meter.left_out[frozenset({1})] is out and (out.retry_at, out.trial_until) == before
    capacities, t = measure(meter, backend, {0: 1.0, 1: 0.0}, [1.0, 0.0], rounds=1,
                            start=t, loads=BUSY)
    assert capacities == [1, 1] and not meter.left_out


def test_tumblers_own_cpu_time_is_no_other_work():
    """What tumbler itself uses between two readings is booked to the CPU
    it measures on and taken out of that CPU's busy time: its own rounds
    never weigh a domain down.  Where the platform cannot say the CPU, it
    stays in (other work)."""
    class OnCpu1(Times):
        def __init__(self, cpus, cpu):
            super().__init__(cpus)
            self.cpu = cpu

        def current_cpu(self):
            return self.cpu

    for cpu, expected in ((1, [1, 1]), (None, [1, pytest.approx(0.7)])):
        backend = OnCpu1([0, 1], cpu)
        own = [0]
        meter = CapacityMeter(backend, WINDOW, own_ns=lambda: own[0])
        meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
        t = 0
        for _ in range(8):
            backend.run({0: 0.0, 1: 0.3}, 100 * MS)     # all of it tumbler's own
            own[0] += 30 * MS
            t += 100 * MS
            capacities = meter.update(DOMAINS, [0.0, 0.0], t, LOADS)
        assert capacities == expected, cpu


def test_the_services_other_programs_are_no_other_work():
    """In the service, the CPU its other programs received on a domain
    (``managed_elsewhere``) comes off the busy time with the program's own:
    they are balanced themselves.  What is left is other work proper."""
    received = {frozenset({0}): 0.0, frozenset({1}): 0.55}
    backend = Times([0, 1])
    meter = CapacityMeter(backend, WINDOW, managed_elsewhere=received.__getitem__)
    meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
    # CPU 1 busy all the time: 0.42 this program's, 0.55 another managed one's.
    capacities, t = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.42], rounds=8)
    assert capacities == [1, 1] and meter.elsewhere == received
    # Work no managed program did still counts, in the same steps as ever.
    received[frozenset({1})] = 0.25
    capacities, _ = measure(meter, backend, {0: 1.0, 1: 1.0}, [1.0, 0.42], start=t, rounds=8)
    assert capacities[0] == 1 and capacities[1] == pytest.approx(1 - 0.3)


def test_bursty_other_work_is_smoothed_over_several_windows():
    """Neighbours bursting 0.8 CPU for one load window in two: counted over
    one window the capacity follows every burst; averaged over four it
    settles at one value and stays there."""
    def capacities_seen(smooth_windows):
        backend = Times([0, 1])
        meter = CapacityMeter(backend, WINDOW, smooth_windows=smooth_windows)
        meter.update(DOMAINS, [0.0, 0.0], 0, LOADS)
        seen = []
        for step in range(300):             # 100 ms rounds, 30 s
            burst = 0.8 if (step // 5) % 2 else 0.0
            backend.run({0: 1.0, 1: 0.2 + burst}, 100 * MS)
            seen.append(meter.update(DOMAINS, [1.0, 0.2], (step + 1) * 100 * MS, LOADS)[1])
        return seen[150:]
    assert len(set(capacities_seen(1))) > 2
    settled = set(capacities_seen(4))
    assert len(settled) == 1 and 0.5 <= settled.pop() <= 0.7


def test_one_domain_is_never_left_out():
    backend = Times([0])
    meter = CapacityMeter(backend, WINDOW)
    one = [Domain(0, {0})]
    meter.update(one, [0.0], 0, BUSY)
    for step in range(1, 8):
        backend.run({0: 1.0}, 100 * MS)
        capacities = meter.update(one, [0.0], step * 100 * MS, BUSY)
    assert capacities == [pytest.approx(0.1)]


# -- real processes ---------------------------------------------------------------


def measured(procs, state, two_cpus, log, target, *options):
    """``tumbler --capacity measured`` on ``target`` over one domain per CPU."""
    return procs.start(tumbler_cmd("--capacity", "measured", "--domains", "%d/%d" % two_cpus,
                                   "--log", str(log), *options, "-p", str(target.pid)),
                       env=env_for(state), cwd=REPO, stderr=subprocess.PIPE, text=True)


def stopped_and_restored(tumbler, target, cpus):
    """SIGTERM ``tumbler``: it says the capacities it ended with, and every
    thread of ``target`` has ``cpus`` again."""
    status, stderr = finish(tumbler, signal.SIGTERM)
    assert status == 0, stderr
    assert "measured capacity at the end" in stderr, stderr
    assert all(m == cpus for m in thread_masks(target.pid).values())


@linux_root
def test_a_hog_on_one_cpu_gets_fewer_threads_there(spawner, duty, procs, state, tmp_path,
                                                    two_cpus):
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)

    hogging = hog(procs, duty, cpu_b, -15, 60)     # takes its 60% whatever the program does
    target = spinners(procs, spawner, both, 6)
    log = tmp_path / "run.jsonl"
    tumbler = measured(procs, state, two_cpus, log, target)
    # 6 spinners on 1 + about 0.4 CPUs: wave grouping's slots go 4 : 2
    # (5 : 1 should the hog be measured at 0.7); counted in CPUs, 3 : 3.
    wait_until(lambda: any(r["capacity"][1] < 0.8 for r in rounds_of(log)),
               timeout=20, what="the hogged CPU's capacity to drop")
    wait_until(lambda: split(target.pid, cpu_a, cpu_b) in ((4, 2), (5, 1)), timeout=20,
               what="more threads on the free CPU than beside the hog")
    stopped_and_restored(tumbler, target, both)
    hogging.kill()


@linux_root
def test_a_cpu_a_high_priority_hog_keeps_is_left_out(spawner, duty, procs, state, tmp_path,
                                                     two_cpus):
    cpu_a, cpu_b = two_cpus
    both = frozenset(two_cpus)

    hogging = hog(procs, duty, cpu_b, -19, 100)    # leaves a spinner beside it 1.5% of the CPU
    target = spinners(procs, spawner, both, 4)
    log = tmp_path / "run.jsonl"
    tumbler = measured(procs, state, two_cpus, log, target)
    # One spinner beside the hog would get 0.015 CPU, four sharing the free
    # CPU 0.25 each: the hogged domain is left out, every spinner on cpu_a.
    wait_until(lambda: any(r["capacity"][1] == 0 for r in rounds_of(log)),
               timeout=20, what="the hogged CPU to be left out")
    wait_until(lambda: split(target.pid, cpu_a, cpu_b) == (4, 0), timeout=20,
               what="every spinner on the free CPU")
    stopped_and_restored(tumbler, target, both)
    hogging.kill()


@linux_root
def test_with_nothing_else_running_capacity_is_the_cpu_count(spawner, procs, state, tmp_path,
                                                              two_cpus):
    both = frozenset(two_cpus)
    target = spinners(procs, spawner, both, 3)
    log = tmp_path / "run.jsonl"
    tumbler = measured(procs, state, two_cpus, log, target, "--duration", "3")
    # The premise is read from tumbler's first round on, as the meter
    # reads: tumbler's own start-up is before it.
    wait_until(lambda: rounds_of(log), timeout=20, what="tumbler's first round")
    # Read as the meter reads, over load windows: a burst of other work
    # for a second moves a capacity, and an average over the run hid it.
    readings = [other_work_reading(target.pid, two_cpus)]
    while tumbler.poll() is None:
        time.sleep(0.1)
        readings.append(other_work_reading(target.pid, two_cpus))
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    other = busiest_window(readings)
    if other >= HYSTERESIS_STEPS * step_of(1):
        # The premise, checked by the test itself: the rest of the suite
        # (or anything else) used these CPUs, so the meter rightly saw it
        # (a capacity moves once the other work is that far from 0).
        pytest.skip("not an idle machine: other work took %.2f CPU of CPUs %s over a "
                    "load window" % (other, "/".join(map(str, two_cpus))))
    rounds = rounds_of(log)
    assert len(rounds) >= 5
    # Integral capacities: the engine's plans are then bit-identical to
    # --capacity cpus (tests/engine/test_engine_grouping.py checks that part).
    assert all(r["capacity"] == [1, 1] for r in rounds), \
        "%s (other work %.3f)" % ([(i, r["capacity"]) for i, r in enumerate(rounds)
                                  if r["capacity"] != [1, 1]], other)
    assert "measured capacity" not in stderr


@linux_root
def test_quiet_rounds_run_with_measured_capacity(spawner, procs, state, tmp_path, two_cpus):
    """Without --log most rounds of a steady program are quiet ones, which
    check capacity their own way (balance/quiet.py)."""
    target = spinners(procs, spawner, frozenset(two_cpus), 2)     # not crowded: no speed
    summary = tmp_path / "summary.json"
    before = other_work_reading(target.pid, two_cpus)
    tumbler = procs.start(tumbler_cmd("--capacity", "measured", "--domains", "%d/%d" % two_cpus,
                                      "--duration", "4", "--summary-json", str(summary),
                                      "-p", str(target.pid)),
                          env=env_for(state), cwd=REPO, stderr=subprocess.PIPE, text=True)
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    record = json.loads(summary.read_text())
    other = other_work_since(before, target.pid, two_cpus)
    if other > step_of(1) and not record["quiet_intervals"]:
        # Other work shows (as in the idle test): every round is rightly a full one.
        pytest.skip("not an idle machine: other work took %.2f CPU" % other)
    assert record["intervals"] > record["quiet_intervals"] > 0, record
    assert all(m == frozenset(two_cpus) for m in thread_masks(target.pid).values())


# -- the engine with measured capacities -------------------------------------------

def test_integral_capacities_plan_exactly_as_cpu_counts():
    import random
    from tumbler.engine.grouping import plan_tumbler
    from tumbler.engine.model import ThreadLoad
    from tumbler.engine.variation import VariationTable
    from tumbler.engine.wave import capacity_units
    rng = random.Random(7)
    for _ in range(50):
        threads = [ThreadLoad(tid, rng.random(), rng.choice([None, 0, 1])) for tid in range(12)]
        counted = [Domain(0, {0, 1}), Domain(1, {2, 3})]
        as_floats = [Domain(0, {0, 1}, 2.0), Domain(1, {2, 3}, 2.0)]
        assert plan_tumbler(threads, counted, VariationTable()) == \
            plan_tumbler(threads, as_floats, VariationTable())
    assert capacity_units([1.0, 0.5]) == [2, 1] and capacity_units([2.0, 2]) == [1, 1]
    assert capacity_units([1, 0.4]) == [5, 2]


def test_a_weaker_domain_gets_its_share_of_the_load():
    from tumbler.engine.grouping import plan_tumbler
    from tumbler.engine.model import ThreadLoad
    from tumbler.engine.variation import VariationTable
    threads = [ThreadLoad(tid, 1.0, None) for tid in range(6)]
    plan = plan_tumbler(threads, [Domain(0, {0}), Domain(1, {1}, 0.5)], VariationTable())
    assert sorted(plan.assignment.values()).count(1) == 2      # a third of 6 threads
    for bad in (-1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            Domain(0, {0}, bad)


def test_left_out_when_one_thread_there_gets_less_than_all_get_without_it():
    from tumbler.engine.leftout import left_out
    assert left_out([1, 0.1], [1.0] * 4) == {1}         # 0.1 < 1/4
    assert left_out([1, 0.5], [1.0] * 4) == set()       # 0.5 > 1/4
    assert left_out([1, 0.5], [1.0] * 2) == set()       # 0.5 = 1/2: no gain, stays
    assert left_out([1, 0.9], [1.0]) == {1}             # one thread: the free CPU
    assert left_out([1, 0.1], [0.05] * 4) == set()      # light threads fit in 0.1
    assert left_out([0.1, 0.2, 3], [1.0] * 8) == {0, 1}  # least first, C shrinking
    assert left_out([0.1, 0.1], [1.0] * 8) == set()     # never every domain
    assert left_out([1, 0.1], []) == set()
    import random
    rng = random.Random(3)
    for _ in range(200):        # a domain of at least one CPU never is
        capacities = [rng.choice([1, 2, 4, 1.0, 3.5]) for _ in range(rng.randint(1, 6))]
        loads = [rng.uniform(-0.1, 1.05) for _ in range(rng.randint(0, 40))]
        assert left_out(capacities, loads) == set()


def test_a_left_out_domain_gets_no_thread_but_what_only_it_may_run():
    from tumbler.engine.grouping import place_new, plan_tumbler
    from tumbler.engine.model import ThreadLoad
    from tumbler.engine.variation import VariationTable
    domains = [Domain(0, {0, 1}), Domain(1, {2}, 0.0), Domain(2, {3}, 0.6)]
    threads = [ThreadLoad(1, 1.0, 0), ThreadLoad(2, 1.0, 1), ThreadLoad(3, 1.0, 1),
               ThreadLoad(4, 0.9, 2), ThreadLoad(5, 0.5, None),
               ThreadLoad(6, 0.7, 0, {1}),          # may only run on the left-out one
               ThreadLoad(7, 0.7, 1, {1, 2})]
    plan = plan_tumbler(threads, domains, VariationTable())
    assert plan.assignment[6] == 1                  # its affinity, not ours to widen
    assert all(domain != 1 for tid, domain in plan.assignment.items() if tid != 6)
    assert plan.assignment[7] == 2
    assert {m.tid: (m.src, m.dst) for m in plan.moves}[2][0] == 1
    assert len(plan.domain_loads) == len(plan.predicted_loads) == 3
    assert plan.domain_loads[1] == pytest.approx(2.7) and plan.predicted_loads[1] == 0.7
    assert "domain 1 left out" in plan.reason and "moved 3 threads off left-out" in plan.reason
    assert "placed 1 new thread" in plan.reason
    # Every thread ends where it may run, the plan's moves make its assignment.
    where = {t.tid: t.domain for t in threads}
    for move in plan.moves:
        assert where[move.tid] == move.src
        where[move.tid] = move.dst
    assert where == plan.assignment
    new = place_new([ThreadLoad(9, 0.0, None)], threads[:1], domains)
    assert [m.dst for m in new] != [1]
    assert [m.dst for m in place_new([ThreadLoad(9, 0.0, None, {1})], [], domains)] == [1]
    with pytest.raises(ValueError, match="left out"):
        plan_tumbler(threads[:1], [Domain(0, {0}, 0.0)], VariationTable())


# -- the platforms' per-CPU times ------------------------------------------------------

def test_linux_cpu_times_from_proc_stat(tmp_path):
    from tumbler.platform.linux.backend import LinuxBackend
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text(
        "cpu  10 0 10 100 0 0 0 0 0 0\n"
        "cpu0 1 2 3 100 4 5 6 7 50 0\n"          # guest 50 is inside user already
        "cpu1 0 0 0 200 0 0 0 0\n"               # an older kernel: fewer fields
        "intr 1 2 3\nctxt 99\n")
    backend = LinuxBackend(str(tmp_path))
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    busy = 1 + 2 + 3 + 5 + 6 + 7
    assert backend.cpu_times() == {0: (busy * tick, (busy + 100 + 4) * tick),
                                   1: (0, 200 * tick)}
    backend.close()
    (tmp_path / "proc" / "stat").write_text("cpu0 x y\n")
    with pytest.raises(Unsupported, match="malformed"):
        LinuxBackend(str(tmp_path)).cpu_times()
    (tmp_path / "proc" / "stat").unlink()
    with pytest.raises(Unsupported, match="cannot read"):
        LinuxBackend(str(tmp_path)).cpu_times()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")
def test_linux_cpu_times_grow():
    from tumbler.platform.linux.backend import LinuxBackend
    backend = LinuxBackend("/")
    before = backend.cpu_times()
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        pass
    after = backend.cpu_times()
    backend.close()
    assert set(before) == set(after) >= set(os.sched_getaffinity(0))
    assert all(0 <= b <= t for b, t in after.values())
    assert sum(after[c][0] for c in after) >= sum(before[c][0] for c in before)


def test_illumos_cpu_times_from_the_sys_kstats(tmp_path):
    from tumbler.platform.illumos.backend import IllumosBackend
    (tmp_path / "kstat").write_text(
        "cpu:0:sys:cpu_nsec_idle\t700\ncpu:0:sys:cpu_nsec_user\t200\n"
        "cpu:0:sys:cpu_nsec_kernel\t100\ncpu:0:sys:cpu_nsec_intr\t90\n"
        "cpu:1:sys:cpu_nsec_idle\t1000\n")          # incomplete: left out
    backend = IllumosBackend(str(tmp_path))
    assert backend.cpu_times() == {0: (300, 1000)}
    (tmp_path / "kstat").write_text("cpu_info:0:cpu_info0:state\ton-line\n")
    with pytest.raises(Unsupported):
        IllumosBackend(str(tmp_path)).cpu_times()
