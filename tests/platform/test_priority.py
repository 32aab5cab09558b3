"""platform/priority.py: tumbler starts raised, balances at nice 0, rises
again after LATE_WAKES waits for a CPU of LATE_S or more in a row, and
comes back to nice 0 once its wake-ups have been on time for a calm
period (issue 47: a service kept at -20 by a program that has gone)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tumbler.platform import priority
from tumbler.service.config import DEFAULT_SCAN_INTERVAL_S
from tumbler.service.loop import PARKED_LOOKS


@pytest.fixture
def fresh(monkeypatch):
    """A priority state of its own, setpriority recorded, waits scripted,
    the clock a number the test moves (``clock[0]``)."""
    calls, waits, clock = [], [], [1000.0]
    monkeypatch.setattr(priority, "_state", ["nice -20"])
    monkeypatch.setattr(priority, "_run", [None])
    monkeypatch.setattr(priority, "_clock", lambda: clock[0])
    monkeypatch.setattr(priority.os, "setpriority", lambda which, who, nice: calls.append(nice))
    monkeypatch.setattr(priority, "_run_queue_wait_s", lambda: waits.pop(0))
    return calls, waits, clock


def wake(fresh, wait, every=0.5):
    _, waits, clock = fresh
    clock[0] += every
    waits.append(wait)
    priority.woke(0.0)


def test_balancing_at_nice_0_rises_after_three_late_waits_in_a_row(fresh):
    calls, waits, _ = fresh
    priority.woke(1.0)                  # not settled yet: nothing
    priority.settle_priority()
    assert calls == [0] and priority.note().startswith("nice 0 (it starts at -20")
    for wait in (0.08, 0.08, 0.01, 0.06, 0.07):   # a short wait breaks the run
        wake(fresh, wait)
    assert calls == [0]
    wake(fresh, 0.09)
    assert calls == [0, priority.NICE]
    assert priority.note() == ("nice -20 for the last 0 s (its balancing waited 90 ms for a CPU "
                               "at nice 0; back to 0 after 10 s on schedule)")
    priority.settle_priority()          # once only: settling never lowers a raised tumbler
    assert calls == [0, priority.NICE]


def test_raised_it_returns_to_nice_0_once_on_time_for_the_calm_period(fresh):
    calls, _, clock = fresh
    priority.settle_priority()
    for _ in range(3):
        wake(fresh, 0.2)
    assert calls == [0, priority.NICE]
    raised_at = clock[0]
    for _ in range(10):                 # on time, but not for CALM_S yet
        wake(fresh, 0.001, every=priority.CALM_S / 20)
    wake(fresh, 0.06, every=priority.CALM_S / 20)     # late even at -20: the calm restarts
    for _ in range(19):
        wake(fresh, 0.001, every=priority.CALM_S / 20)
    assert calls == [0, priority.NICE]
    assert priority.note().startswith("nice -20 for the last 15 s (its balancing waited 200 ms")
    wake(fresh, 0.001, every=priority.CALM_S / 20)
    assert calls == [0, priority.NICE, 0]
    assert priority.note() == ("nice 0 (raised to -20 for %.0f s while its balancing fell "
                               "behind schedule)" % (clock[0] - raised_at))
    for _ in range(100):                # on time at nice 0: it stays there
        wake(fresh, 0.01)
    assert calls == [0, priority.NICE, 0]


def test_on_time_for_the_calm_period_but_one_wake_up_is_not_enough(fresh):
    calls, _, _ = fresh
    priority.settle_priority()
    for _ in range(3):
        wake(fresh, 0.2)
    wake(fresh, 0.0, every=priority.CALM_MAX_S * 2)   # one long sleep: no evidence yet
    assert calls == [0, priority.NICE]
    wake(fresh, 0.0)
    wake(fresh, 0.0)
    assert calls == [0, priority.NICE, 0]


def test_a_failed_trial_doubles_the_next_calm_up_to_its_cap_a_new_overload_starts_short(fresh):
    calls, _, clock = fresh
    priority.settle_priority()
    calms = []
    for _ in range(6):
        for _ in range(3):
            wake(fresh, 0.2, every=0.1)         # late at nice 0: raised
        raised_at = clock[0]
        while calls[-1] != 0:
            wake(fresh, 0.0, every=0.1)         # on time at -20 (it is raised)
        calms.append(round(clock[0] - raised_at))
    assert calms == [10, 20, 40, 80, 80, 80]
    assert priority.note() == "nice 0 (raised to -20 for 310 s in 6 spells while " \
        "its balancing fell behind schedule)"
    for _ in range(int(priority.CALM_MAX_S / 0.1)):
        wake(fresh, 0.0, every=0.1)             # a whole calm on time at nice 0
    for _ in range(3):
        wake(fresh, 0.2, every=0.1)
    assert priority.note().endswith("back to 0 after 10 s on schedule; 310 s in 6 spells earlier)")


def test_under_a_lasting_overload_few_wake_ups_run_late_and_after_it_it_returns(fresh):
    """The evidence for CALM_S and CALM_MAX_S: at the service's fewest
    wake-ups (a look at parked programs, PARKED_LOOKS per default scan
    interval), 30 minutes of an overload that makes every wake-up at nice
    0 late leave 3% of them late or fewer; once it ends, tumbler is at nice
    0 again within CALM_MAX_S (80 s, a little over a minute at -20)."""
    calls, _, clock = fresh
    every = DEFAULT_SCAN_INTERVAL_S / PARKED_LOOKS
    priority.settle_priority()
    wakes = late = 0
    end = clock[0] + 1800
    while clock[0] < end:
        raised = calls[-1] == priority.NICE
        wake(fresh, 0.001 if raised else 0.3, every=every)    # raised, it is on time
        wakes += 1
        late += not raised
    assert late / wakes <= 0.03
    assert calls.count(priority.NICE) <= 1800 / 60
    overload_ended = clock[0]
    while calls[-1] != 0:
        wake(fresh, 0.001, every=every)
    assert clock[0] - overload_ended <= 90
    assert 5 * DEFAULT_SCAN_INTERVAL_S <= priority.CALM_S <= priority.CALM_MAX_S / 4


def test_without_a_run_queue_reading_how_late_it_woke_counts(fresh):
    calls, waits, _ = fresh
    priority.settle_priority()
    waits += [None, None, None]
    for late in (0.06, 0.2, 0.05):
        priority.woke(late)
    assert calls == [0, priority.NICE]


def test_not_raised_at_start_up_nothing_settles(fresh, monkeypatch):
    calls, _, _ = fresh
    monkeypatch.setattr(priority, "_state", ["unchanged (not root: ...)"])
    priority.settle_priority()
    priority.woke(9.0)
    assert calls == []


# The real nice value of a process, in a child of its own: raising it
# would leave pytest's own process at -20 with SCHED_RESET_ON_FORK.
NICE_SCRIPT = textwrap.dedent("""
    import os, sys
    from tumbler.platform import priority
    waits, clock = [], [0.0]
    priority._run_queue_wait_s = lambda: waits.pop(0)
    priority._clock = lambda: clock[0]
    def wake(wait, times):
        for _ in range(times):
            clock[0] += 0.5
            waits.append(wait)
            priority.woke(0.0)
    def say(what):
        print(what, os.getpriority(os.PRIO_PROCESS, 0), flush=True)
    priority.raise_priority()
    say("start-up")
    priority.settle_priority()
    say("balancing")
    if sys.argv[1] == "late":
        wake(0.2, 3)
        say("late")
    wake(0.001, 200)        # 100 s on schedule
    say("on-time")
    print(priority.note())
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root")
@pytest.mark.parametrize("run", ["late", "never-late"])
def test_the_real_nice_value_returns_to_0_once_wake_ups_are_on_time(run):
    assert priority.CALM_MAX_S < 100    # the script's 100 s on schedule is a calm period
    result = subprocess.run([sys.executable, "-c", NICE_SCRIPT, run],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    *niceness, note = result.stdout.splitlines()
    expected = ["start-up -20", "balancing 0"] + (["late -20"] if run == "late" else [])
    assert niceness == expected + ["on-time 0"]
    if run == "late":
        assert note == "nice 0 (raised to -20 for 10 s while its balancing fell behind schedule)"
    else:
        assert note.startswith("nice 0 (it starts at -20")
