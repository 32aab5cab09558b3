"""The one loop (tumbler/service/driver.py), driven directly: runs of
stand-in controllers, a waiter that never sleeps but records what it was
asked, so every assertion is about what the loop did, in which order,
never about how long it took."""

import signal
import time

import pytest

from tumbler.platform.base import PlatformError
from tumbler.service.driver import Driver

#: Far enough ahead that nothing the test does reaches it.
LATER_S = 1000.0


class Controller:
    """What the driver asks of a controller: targets, due(), tick(slack),
    start_clock().  ``ticks_left``: ticks before its targets are gone;
    ``due_in``: seconds from now it says it is due (<= 0: due now)."""

    def __init__(self, log, name, ticks_left=None, due_in=0.0, fails=False):
        self.log, self.name = log, name
        self.targets = [1]
        self.ticks_left = ticks_left
        self.due_at = time.monotonic() + due_in
        self.fails = fails
        self.slacks = []

    def start_clock(self):
        self.log.append(("start", self.name))

    def due(self):
        return self.due_at

    def tick(self, slack):
        self.log.append(("tick", self.name))
        self.slacks.append(slack)
        if self.fails:
            raise PlatformError("%s: refused" % self.name)
        if self.ticks_left is not None:
            self.ticks_left -= 1
            if self.ticks_left == 0:
                self.targets = []
        return self.due()


class Run:
    def __init__(self, key, controller):
        self.key, self.controller, self.parked = key, controller, None


#: Turns after which the waiter sends SIGTERM: a loop that should have
#: ended fails its test instead of spinning.
MAX_TURNS = 20


class Waiter:
    """Signals scripted per turn (``script``: a list of lists, one taken
    per turn; SIGTERM at MAX_TURNS); sleeps recorded, none made."""

    def __init__(self, script=()):
        self.script = list(script)
        self.turns = 0
        self.slept = []

    def take(self):
        self.turns += 1
        if self.turns >= MAX_TURNS:
            return [signal.SIGTERM]
        return self.script.pop(0) if self.script else ()

    def sleep(self, seconds):
        self.slept.append(seconds)
        return ()


def driver_with(log, *controllers, **options):
    driver = Driver(**options)
    for key, controller in enumerate(controllers):
        driver.add(Run(key, controller))
    return driver


def test_runs_are_ticked_until_their_targets_are_gone_then_the_loop_ends():
    log, left = [], []
    first = Controller(log, "a", ticks_left=2)
    second = Controller(log, "b", ticks_left=3)
    driver = driver_with(log, first, second, ends_when_empty="targets exited")
    driver.on_exit = lambda run: left.append(run.key)
    waiter = Waiter()
    assert driver.run(waiter) == "targets exited"
    assert log == [("start", "a"), ("start", "b"), ("tick", "a"), ("tick", "b"),
                   ("tick", "a"), ("tick", "b"), ("tick", "b")]
    assert left == [0, 1] and driver.runs == {}
    # It slept after the first two turns, not once the last run had left.
    assert len(waiter.slept) == 2


def test_the_end_deadline_ends_the_loop_before_any_tick():
    log = []
    driver = driver_with(log, Controller(log, "a"), ends_when_empty="target exited")
    driver.end_at(time.monotonic() - 1.0, "duration reached")
    assert driver.run(Waiter()) == "duration reached"
    assert ("tick", "a") not in log


def test_deadlines_come_in_order_and_the_loop_sleeps_until_the_first_due():
    log = []
    driver = driver_with(log, Controller(log, "a", due_in=LATER_S / 2),
                         ends_when_empty="target exited")
    now = time.monotonic()
    driver.at("scan", now, lambda t: log.append("scan") or t + LATER_S)
    driver.at("metrics", now, lambda t: log.append("metrics") or t + 2 * LATER_S)
    waiter = Waiter([(), (), [signal.SIGTERM]])
    assert driver.run(waiter) == "signal %d" % signal.SIGTERM
    # Each due deadline once, in the order set; the run not due, so not
    # ticked.
    assert log == [("start", "a"), "scan", "metrics"]
    # The run is due first (LATER_S / 2): the later deadlines do not hold
    # the loop back.
    assert all(0.0 < slept <= LATER_S / 2 for slept in waiter.slept), waiter.slept


def test_a_parked_run_is_neither_ticked_nor_wakes_the_loop():
    log = []
    driver = driver_with(log, Controller(log, "parked"), Controller(log, "a", due_in=LATER_S))
    driver.runs[0].parked = "0.001 CPUs used"
    waiter = Waiter([(), [signal.SIGINT]])
    assert driver.run(waiter) == "signal %d" % signal.SIGINT
    assert ("tick", "parked") not in log and ("tick", "a") not in log
    assert waiter.slept and waiter.slept[0] > LATER_S / 2


def test_a_run_due_within_the_slack_is_ticked_with_it():
    log = []
    controller = Controller(log, "a", due_in=LATER_S / 2, ticks_left=1)
    driver = driver_with(log, controller, slack=LATER_S, ends_when_empty="target exited")
    assert driver.run(Waiter()) == "target exited"
    assert controller.slacks == [LATER_S]


def test_a_failed_tick_is_on_errors_and_the_other_runs_go_on():
    log, failed = [], []
    driver = driver_with(log, Controller(log, "bad", fails=True),
                         Controller(log, "good", ticks_left=2), ends_when_empty="ended")

    def on_error(run, exc):
        failed.append((run.key, str(exc)))
        del driver.runs[run.key]        # the service drops that program alone
    driver.on_error = on_error
    assert driver.run(Waiter()) == "ended"
    assert failed == [(0, "bad: refused")]
    assert log.count(("tick", "good")) == 2 and log.count(("tick", "bad")) == 1


def test_without_on_error_a_failed_tick_ends_the_loop_with_the_error():
    log = []
    driver = driver_with(log, Controller(log, "bad", fails=True), ends_when_empty="ended")
    with pytest.raises(PlatformError, match="bad: refused"):
        driver.run(Waiter())


def test_on_signal_may_go_on_and_a_check_ends_the_loop():
    """exec's way: every signal forwarded, the loop goes on; its command
    exiting ends it (a check), before the run is ticked again."""
    log, seen = [], []
    driver = driver_with(log, Controller(log, "a"), ends_when_empty="target exited")
    driver.on_signal = lambda signum: seen.append(signum)
    turns = []
    driver.checks.append(lambda: "command exited" if len(turns) == 2 else turns.append(1))
    waiter = Waiter([[signal.SIGCHLD], [signal.SIGUSR1]])
    assert driver.run(waiter) == "command exited"
    assert seen == [signal.SIGCHLD, signal.SIGUSR1]
    assert log.count(("tick", "a")) == 2


def test_on_tick_sees_each_run_that_goes_on_and_may_drop_it():
    """The service's thread cap: a run dropped by on_tick no longer
    counts for the loop's wake-up."""
    log, seen = [], []
    driver = driver_with(log, Controller(log, "capped"), Controller(log, "a", due_in=LATER_S))

    def on_tick(run):
        seen.append(run.key)
        driver.runs.pop(run.key)
    driver.on_tick = on_tick
    waiter = Waiter([(), [signal.SIGTERM]])
    driver.run(waiter)
    assert seen == [0] and list(driver.runs) == [1]
    assert waiter.slept[0] > LATER_S / 2


def test_a_run_whose_targets_are_gone_leaves_untouched():
    """-p whose every target exited before it was added: not ticked (a
    round of no threads), it leaves at the first turn."""
    log, left = [], []
    controller = Controller(log, "a")
    controller.targets = []
    driver = driver_with(log, controller, ends_when_empty="target exited")
    driver.on_exit = lambda run: left.append(run.key)
    assert driver.run(Waiter()) == "target exited"
    assert ("tick", "a") not in log and left == [0]


def test_the_loop_runs_with_the_cyclic_gc_on_and_what_came_before_frozen():
    """``exec`` pauses the cyclic GC for its set-up (commands/quick.py): the loop
    turns it on, after moving what was made before out of its way."""
    import gc

    class Looking(Controller):
        def tick(self, slack):
            self.log.append((gc.isenabled(), gc.get_freeze_count()))
            return super().tick(slack)

    log = []
    driver = driver_with(log, Looking(log, "a", ticks_left=1), ends_when_empty="target exited")
    gc.disable()
    try:
        assert driver.run(Waiter()) == "target exited"
        enabled, frozen = log[1]
        assert enabled and frozen > 0, log
    finally:
        gc.unfreeze()
        gc.enable()
