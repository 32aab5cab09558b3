"""A managed program weighed by its one per-process CPU figure
(tumbler/service/program.py, Program.weigh): parked below the threshold,
woken at or above it with the time recorded, and no look over a window
too short for the kernel's tick-counted process CPU.  A stand-in
controller and backend: what is asserted is what weigh decided from the
figures it was given."""

import time

from tumbler.platform.base import NoSuchProcess
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
    p.weigh(0.0, 0.1, "why")
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
    p.weigh(0.0, 0.1, "why")
    assert p.parked is None and p.controller.resumed == 0
