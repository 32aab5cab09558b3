"""A managed program weighed by its one per-process CPU figure
(tumbler/service/program.py, Program.weigh): parked below the threshold,
woken at or above it with the time recorded, and no look over a window
too short for the kernel's tick-counted process CPU; a program near the
threshold does not flap (hysteresis, issue 47).  A stand-in
controller and backend: what is asserted is what weigh decided from the
figures it was given."""

import random
import time

import pytest

from tumbler.platform.base import NoSuchProcess
from tumbler.service import program as program_module
from tumbler.service.loop import PARKED_LOOKS
from tumbler.service.program import Program

PID = 4242


class Backend:
    def __init__(self):
        self.cpu_ns = 0
        self.reads = 0
        self.gone = False

    def process_cpu_and_name(self, pid):
        assert pid == PID
        if self.gone:
            raise NoSuchProcess(pid)
        self.reads += 1
        return self.cpu_ns, "app"


class Controller:
    def __init__(self):
        self.backend = Backend()
        self.resumed = 0

    def resume(self):
        self.resumed += 1


def program():
    """A Program with only what weigh uses (its run's controller is a
    stand-in: weigh reads one figure and asks for a full round)."""
    made = Program.__new__(Program)
    made.key, made.controller, made.parked = PID, Controller(), None
    made.cpu_mark, made.used, made.unparked_at = None, 0.0, None
    return made


def test_idle_is_parked_and_a_rise_wakes_it_for_a_full_round_with_the_time_recorded():
    p = program()
    p.weigh(0.0, 0.1, "why")                    # the first figure: a mark only
    assert p.parked is None and p.cpu_mark is not None
    p.cpu_mark = (p.cpu_mark[0] - 1.0, p.cpu_mark[1])   # a second ago, nothing used since
    p.weigh(0.0, 0.1, "why")
    assert p.parked.startswith("0.000 CPUs used, below 0.100 (why)"), p.parked
    assert p.controller.resumed == 0 and p.unparked_at is None
    p.cpu_mark = (p.cpu_mark[0] - 1.0, p.cpu_mark[1])
    p.controller.backend.cpu_ns += 500_000_000      # half a CPU over that second
    before = time.monotonic()
    assert p.weigh(0.0, 0.1, "why") is True         # its tick due now, whatever its pace
    assert p.parked is None and p.controller.resumed == 1
    assert before <= p.unparked_at <= time.monotonic()
    assert 0.45 < p.used <= 0.5


def test_a_look_sooner_than_the_shortest_window_reads_nothing_and_keeps_the_mark():
    p = program()
    p.weigh(0.0, 0.1, "why")
    mark = p.cpu_mark
    p.controller.backend.cpu_ns += 10_000_000       # one tick: over a short window, a rate
    p.weigh(1000.0, 0.1, "why")
    assert p.controller.backend.reads == 1 and p.cpu_mark == mark and p.parked is None


def test_a_parked_program_gone_is_left_to_its_tick():
    p = program()
    p.parked = "idle"
    p.controller.backend.gone = True
    assert p.weigh(0.0, 0.1, "why") is True         # its tick, now, finds it gone
    assert p.parked is None and p.controller.resumed == 0


# -- hysteresis (issue 47) ------------------------------------------------------

#: The service's cadence at the default scan interval: a parked program is
#: looked at PARKED_LOOKS times per scan, one not parked at each scan.
SCAN_S = 2.0
LOOK_S = SCAN_S / PARKED_LOOKS
#: /proc/PID/stat counts process CPU in USER_HZ ticks of 10 ms.
TICK_NS = 10_000_000


class Clock:
    """program.py's clock: only the test moves it."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def cadence(monkeypatch, p, ticks_per_look):
    """Drive ``p`` as the service would (a look every LOOK_S while parked,
    a weighing every SCAN_S while not), its process using
    ``ticks_per_look[i]`` ticks in look i; returns the state after each
    look (True: parked)."""
    clock = Clock()
    monkeypatch.setattr(program_module, "time", clock)
    p.weigh(0.0, 0.1, "why")
    states = []
    for index, ticks in enumerate(ticks_per_look):
        clock.now += LOOK_S
        p.controller.backend.cpu_ns += ticks * TICK_NS
        if p.parked or (index + 1) % PARKED_LOOKS == 0:
            p.weigh(LOOK_S / 2, 0.1, "why")
        states.append(bool(p.parked))
    return states


def noisy(seed, looks, low=3, high=9):
    """Ticks per look of a program using 0.045-0.135 CPU, around 0.1 (6.7
    ticks a look): 20 programs x 100 sleeping threads of issue 47."""
    pick = random.Random(seed)
    return [pick.randint(low, high) for _ in range(looks)]


@pytest.mark.parametrize("seed", range(5))
def test_a_program_noisy_around_the_threshold_is_parked_once_and_stays_parked(
        monkeypatch, seed):
    """Issue 47: such programs were woken on a noisy look and parked at the
    next scan, every second or two, each time for a full round."""
    p = program()
    states = cadence(monkeypatch, p, noisy(seed, 300))
    first = states.index(True)
    assert all(states[first:]), "woken %d times" % states[first:].count(False)
    assert p.controller.resumed == 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("busy_ticks", [11, 20, 100])
def test_a_parked_program_turning_busy_is_woken_within_one_scan_intervals_looks(
        monkeypatch, seed, busy_ticks):
    """From the noisy use above to over 1.5 x park_below (11 ticks a look) or
    more: woken at the second look after the rise at the latest (the first
    whose whole window is busy), within one scan interval."""
    p = program()
    quiet = noisy(seed, 30)
    states = cadence(monkeypatch, p, quiet + [busy_ticks] * PARKED_LOOKS)
    assert states[len(quiet) - 1], "parked before the rise"
    woken = states[len(quiet):]
    assert False in woken[:2] and p.controller.resumed == 1
