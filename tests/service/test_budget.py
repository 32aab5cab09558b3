"""The service's CPU budget (tumbler/service/budget.py, issue 47): the
programs' ticks spaced to fit ``service.cpu_budget``, bigger programs
less often, the small ones at their own pace -- on a scripted service:
the one loop (driver.py) over scripted programs whose every tick costs
CPU in proportion to their threads, and a scan that costs CPU too, all
on a clock only the test moves.  Every assertion is a count of ticks or
CPU seconds on that clock, never a time measured."""

import signal

import pytest

from tumbler.errors import UsageError
from tumbler.service import driver as driver_module
from tumbler.service.budget import PLAN_EVERY_S, ROUNDS_FLOOR, CpuBudget, Pace
from tumbler.service.config import DEFAULT_CPU_BUDGET, load_service_config
from tumbler.service.driver import Driver

#: A round's CPU per thread: 10 us, the per-thread read floor measured
#: for full rounds (BENCHMARKS.md, issue 29).
PER_THREAD_S = 10e-6
#: The interval the scripted programs' controllers ask between ticks.
OWN_PACE_S = 0.2


class Clock:
    """Wall (monotonic) and the service's CPU time, moved by the test only."""

    def __init__(self):
        self.now = 100.0
        self.cpu = 0.0

    def monotonic(self):
        return self.now

    def process_time(self):
        return self.cpu


class Program:
    """A scripted controller: each tick costs PER_THREAD_S per thread of
    the service's CPU, and asks for the next one OWN_PACE_S later."""

    def __init__(self, clock, threads):
        self.clock, self.threads = clock, threads
        self.targets = [1]
        self.ticks = 0
        self.next = None

    def start_clock(self):
        self.next = self.clock.now + OWN_PACE_S

    def due(self):
        return self.next

    def tick(self, slack):
        self.ticks += 1
        self.clock.cpu += PER_THREAD_S * self.threads
        self.next = self.clock.now + OWN_PACE_S
        return self.next


class Run:
    def __init__(self, key, controller):
        self.key, self.controller, self.parked = key, controller, None


class Waiter:
    """Sleeps move the clock; SIGTERM once it passes ``end``."""

    def __init__(self, clock, end):
        self.clock, self.end = clock, end
        self.pending = ()

    def take(self):
        return [signal.SIGTERM] if self.clock.now >= self.end else ()

    def sleep(self, seconds):
        self.clock.now += max(seconds, 1e-6)
        return ()


def serve(monkeypatch, threads, budget_cpus, seconds, scan_cpu_s=0.0, scan_every_s=2.0):
    """The loop over one scripted program per entry of ``threads`` for
    ``seconds`` on the test's clock, with a scan costing ``scan_cpu_s``
    every ``scan_every_s`` and the budget planned as the service plans it
    (loop.py, _plan_budget).  Returns the programs, the budget, the
    driver's paces, and the CPU s spent in the last half of the run."""
    clock = Clock()
    monkeypatch.setattr(driver_module, "time", clock)
    driver = Driver()
    programs = [Program(clock, count) for count in threads]
    for key, program in enumerate(programs):
        driver.add(Run(key, program))
    budget = CpuBudget(budget_cpus, scan_every_s, cpu_clock=clock.process_time)
    said = []

    def plan(now):
        said.extend(budget.plan(now, driver.paces))
        return clock.now + PLAN_EVERY_S

    def scan(now):
        clock.cpu += scan_cpu_s
        return clock.now + scan_every_s
    half = []

    def halfway(now):
        half.append(clock.cpu)
        return clock.now + 10 * seconds
    start = clock.now
    driver.at("scan", start, scan)
    driver.at("budget", start, plan)
    driver.at("half", start + seconds / 2, halfway)
    driver.run(Waiter(clock, start + seconds))
    return programs, budget, driver.paces, said, clock.cpu - half[0]


def test_rounds_that_fit_the_budget_keep_their_own_pace(monkeypatch):
    programs, _, paces, said, _ = serve(monkeypatch, [100, 100], 0.02, 100.0)
    # 100 threads every 0.2 s: 0.005 CPUs each, 0.01 in all.
    for program in programs:
        assert program.ticks >= 100.0 / OWN_PACE_S - 2
    assert said == [] and all(pace.spacing == 0.0 for pace in paces.values())


def test_rounds_are_spaced_to_the_budget_bigger_programs_less_often(monkeypatch):
    """Three programs of 10, 2,000 and 8,000 threads would cost 0.5 CPU
    at their own pace; within a budget of 0.02 the smallest keeps its
    pace, the two others share what is left equally, so the bigger has a
    quarter of the smaller's rounds; the service's CPU over the second
    half of the run is within the budget."""
    seconds = 600.0
    programs, budget, paces, said, spent = serve(monkeypatch, [10, 2000, 8000], 0.02, seconds)
    small, middle, big = programs
    assert small.ticks >= seconds / OWN_PACE_S - 2
    assert middle.ticks < seconds / OWN_PACE_S / 10
    assert 3.5 <= middle.ticks / big.ticks <= 4.5
    assert spent <= 0.02 * seconds / 2 * 1.02
    assert spent >= 0.02 * seconds / 2 * 0.9        # the budget used, not starved
    assert sorted(said) == [1, 2]                   # one line each, once
    assert paces[2].spacing > paces[1].spacing > 0 and paces[0].spacing == 0


def test_what_scans_take_is_taken_off_the_rounds_share(monkeypatch):
    """A scan of 10 ms every 2 s is 0.005 CPUs: the rounds get the other
    0.015, and the whole service stays within 0.02."""
    seconds = 600.0
    programs, budget, _, _, spent = serve(monkeypatch, [4000], 0.02, seconds,
                                          scan_cpu_s=0.010)
    assert budget.for_rounds == pytest.approx(0.015, rel=0.05)
    assert spent <= 0.02 * seconds / 2 * 1.02
    alone = 0.015 * seconds / (PER_THREAD_S * 4000)
    assert 0.9 * alone <= programs[0].ticks <= 1.1 * alone


def test_rounds_keep_a_floor_of_the_budget_whatever_else_takes(monkeypatch):
    """Scans (or looks) taking more than the budget: rounds still get
    ROUNDS_FLOOR of it, not nothing -- a program is balanced again."""
    _, budget, paces, _, _ = serve(monkeypatch, [4000], 0.02, 120.0, scan_cpu_s=0.1)
    assert budget.for_rounds == pytest.approx(ROUNDS_FLOOR * 0.02)
    assert paces[0].spacing == pytest.approx(PER_THREAD_S * 4000 / (ROUNDS_FLOOR * 0.02),
                                             rel=0.01)


def test_a_bigger_budget_slows_nothing(monkeypatch):
    programs, _, paces, said, _ = serve(monkeypatch, [10, 2000, 8000], 1.0, 60.0)
    assert all(p.ticks >= 60.0 / OWN_PACE_S - 2 for p in programs)
    assert said == []


def test_a_program_slowed_then_cheaper_gets_its_own_pace_back():
    budget = CpuBudget(0.02, 2.0, cpu_clock=lambda: 0.0)
    pace = Pace()
    for _ in range(10):
        pace.add(0.05, OWN_PACE_S, 0.0)         # 0.25 CPUs at its own pace
    assert budget.plan(1.0, {7: pace}) == [7] and pace.spacing > OWN_PACE_S
    for plan in range(2, 12):                   # its rounds turn cheap (quiet)
        pace.add(0.0001, OWN_PACE_S, float(plan))
        assert budget.plan(float(plan), {7: pace}) == []   # said once only
    assert pace.spacing == 0.0


def write(tmp_path, text):
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


def test_the_budget_is_read_from_the_service_section_with_its_default(tmp_path):
    assert load_service_config(write(tmp_path, "service: {}\n")).cpu_budget \
        == DEFAULT_CPU_BUDGET == 0.02
    assert load_service_config(write(tmp_path, "service: {cpu_budget: 0.5}\n")).cpu_budget \
        == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "x", "0.0001"])
def test_a_budget_out_of_range_is_refused_with_its_key(tmp_path, value):
    with pytest.raises(UsageError) as caught:
        load_service_config(write(tmp_path, "service: {cpu_budget: %s}\n" % value))
    assert "service.cpu_budget" in str(caught.value)


class Understated(Program):
    """Says, after each tick, that the next is due a second later than it
    comes: as a round's interval does while looks for new threads come
    every 0.1 s between rounds."""

    def tick(self, slack):
        super().tick(slack)
        return self.next + 0.3


def test_ticks_that_come_sooner_than_asked_are_counted_as_they_cost(monkeypatch):
    """A program of 500 threads that asks as if its ticks cost 0.01 CPUs
    (within the budget) but ticks every 0.2 s (0.025 CPUs), woken by a
    small one beside it: spaced to the budget all the same."""
    clock = Clock()
    monkeypatch.setattr(driver_module, "time", clock)
    driver = Driver()
    understated = Understated(clock, 500)
    driver.add(Run(0, understated))
    driver.add(Run(1, Program(clock, 10)))
    budget = CpuBudget(0.02, 2.0, cpu_clock=clock.process_time)
    driver.at("budget", clock.now, lambda now: budget.plan(now, driver.paces) and 0
              or clock.now + PLAN_EVERY_S)
    marks = []
    driver.at("half", clock.now + 300.0, lambda now: marks.append(clock.cpu) or now + 1e6)
    driver.run(Waiter(clock, clock.now + 600.0))
    assert clock.cpu - marks[0] <= 0.02 * 300.0 * 1.03
    assert driver.paces[0].spacing > 0 and driver.paces[1].spacing == 0


def test_scans_and_the_rounds_floor_leave_room_for_the_looks_at_parked_programs():
    """budget.py: the looks at 64 parked programs (1.5 a second, 25 us
    each at most for 100 threads) fit in what SCAN_SHARE and ROUNDS_FLOOR
    leave of the default budget, and each keeps a real share."""
    from tumbler.service.budget import SCAN_SHARE
    from tumbler.service.config import DEFAULT_MAX_PROGRAMS
    left = (1.0 - SCAN_SHARE - ROUNDS_FLOOR) * DEFAULT_CPU_BUDGET
    assert DEFAULT_MAX_PROGRAMS * 1.5 * 25e-6 <= left
    assert SCAN_SHARE >= 0.25 and ROUNDS_FLOOR >= 0.1


def _engaged_crowd(policy):
    """3 threads yielding at barriers on 2 cores: ``policy`` engages speed
    balancing and pins them; returns the views as the next round sees them."""
    from tumbler.engine import Domain
    from tumbler.engine.policy import ThreadView
    wall = 100_000_000

    def busy(tid, cpu=None):
        speed = 0.4 if tid == 3 else 0.8       # uneven: the one sharing a core
        return ThreadView(tid=tid, load=speed, domain=0, pinned_cpu=cpu,
                          exec_ns=int(speed * wall), wall_ns=wall, runnable=1.0,
                          sleeps_per_s=0.0, switches_per_cpu_s=1300.0)
    domains = [Domain(0, frozenset({0, 1}))]
    first = policy.decide([busy(t) for t in (1, 2, 3)], domains)
    assert first.engaged == [0] and sorted(first.pins) == [1, 2, 3]
    return [busy(t, first.pins[t]) for t in (1, 2, 3)], domains


@pytest.mark.parametrize("name", ["auto", "speed"])
def test_a_held_policy_engages_nothing_and_hands_every_pin_back(name):
    """Speed balancing whose steps the budget would space seconds apart
    leaves threads two to a core in a rotation that no longer turns:
    held (``speed_held``), the policy releases every pin of an engaged
    crowd at its next round; let go, it engages again."""
    from tumbler.engine.policy import make_policy
    from tumbler.engine.speed import SpeedParams
    policy = make_policy(name, speed=SpeedParams(jitter=False), seed=1)
    crowd, domains = _engaged_crowd(policy)
    policy.speed_held = True
    held = policy.decide(crowd, domains)
    assert held.pins == {1: None, 2: None, 3: None}
    if name == "auto":
        assert held.engaged == []
    policy.speed_held = False
    again = policy.decide([t._replace(pinned_cpu=None) for t in crowd], domains)
    assert again.engaged == [0] and sorted(again.pins) == [1, 2, 3]


def test_the_budget_holds_speed_balancing_of_a_slowed_program_and_lets_it_go():
    """hold_speed: a program whose ticks the budget spaces gets its policy
    held and, if it was engaged, a round at once (its pins handed back
    whatever the spacing); once not spaced, let go; nothing is redone
    while nothing changes."""
    from tumbler.engine.policy import make_policy
    from tumbler.service.budget import hold_speed

    class Controller:
        def __init__(self):
            self.policy = make_policy("auto")
            self.last_decision = type("Decision", (), {"engaged": [0]})()
            self.resumed = 0

        def resume(self):
            self.resumed += 1

    controller, pace = Controller(), Pace()
    pace.ticked_at = 5.0
    hold_speed(controller, pace)
    assert not controller.policy.speed_held and controller.resumed == 0
    pace.spacing = 4.0
    hold_speed(controller, pace)
    assert controller.policy.speed_held and controller.resumed == 1
    assert pace.ticked_at is None and pace.due(7.0) == 7.0      # ticks at once
    pace.ticked_at = 9.0
    hold_speed(controller, pace)
    assert controller.resumed == 1 and pace.ticked_at == 9.0
    pace.spacing = 0.0
    hold_speed(controller, pace)
    assert not controller.policy.speed_held and controller.resumed == 1


def slowed_program(pid=7):
    """A program whose pace the budget spaces: 0.25 CPUs at its own pace."""
    from types import SimpleNamespace
    policy = SimpleNamespace(speed_held=False)
    controller = SimpleNamespace(policy=policy, last_decision=None, threads={1: 1, 2: 2})
    program = SimpleNamespace(parked=None, name="app", rule=SimpleNamespace(name="users"),
                              controller=controller, pid=pid,
                              park_below=lambda default: (0.1, "why"),
                              weigh=lambda *args: True)
    pace = Pace()
    for _ in range(10):
        pace.add(0.05, OWN_PACE_S, 0.0)
    return program, pace


def test_the_slowed_line_goes_through_the_rate_limited_log_of_users_processes():
    """A rule any user can opt into may bring many programs slowed at
    once: their lines are held to the rate of lines about processes
    (service/log.py), under the rule's name."""
    program, pace = slowed_program()
    said = []
    CpuBudget(0.02, 2.0, cpu_clock=lambda: 0.0).pace_programs(
        1.0, {7: pace}, {7: program}, lambda *line: said.append(line))
    assert [line[:2] for line in said] == [("users", "programs slowed by service.cpu_budget")]
    assert said[0][3].startswith("PID 7 (app): rounds every ")
    assert program.controller.policy.speed_held is True


def test_a_program_woken_from_parking_keeps_its_measured_pace():
    """Woken, a program's round comes at once, but its spacing stays: one
    that parks and wakes in turn would otherwise tick unspaced until the
    next plan measured it again."""
    from types import SimpleNamespace
    from tumbler.service.loop import Service
    program, pace = slowed_program()
    CpuBudget(0.02, 2.0, cpu_clock=lambda: 0.0).plan(1.0, {7: pace})
    spacing = pace.spacing
    assert spacing > OWN_PACE_S
    driver = Driver()
    driver.paces[7] = pace
    loop = SimpleNamespace(config=SimpleNamespace(scan_interval=2.0, park_below=0.1),
                           driver=driver)
    Service._weigh(loop, program)
    assert driver.paces[7] is pace and pace.spacing == spacing
    assert pace.due(5.0) == 5.0                     # its round: when its controller asks


def test_threads_not_handed_back_are_said_past_any_rate_limit():
    """Which programs left threads for ``tumbler restore`` is never held
    back: a count alone would not say which."""
    from types import SimpleNamespace
    from tumbler.service.loop import Service
    logged, held = [], []
    loop = SimpleNamespace(programs={9: None}, driver=Driver(), capped={1: 2}, sharing=None,
                           log=lambda priority, line: logged.append(line),
                           events=lambda *line: held.append(line))
    program = SimpleNamespace(pid=9, name="x", rule=SimpleNamespace(name="users"),
                              hand_back=lambda: 2)
    assert Service._drop(loop, program, "exited") == 2
    assert logged == ["PID 9 (x): 2 threads could not be restored; `tumbler restore` retries"]
    assert held == [] and loop.programs == {} and loop.capped == {}


def test_a_slowed_program_grown_past_its_cap_is_handed_back_by_its_count_now():
    """Between two spaced rounds a program may grow past its thread cap:
    the parked programs' looks count its threads (one fstat) and hand it
    back before a round would bind them all."""
    from types import SimpleNamespace
    from tumbler.service.loop import Service
    from tumbler.service.program import Program
    dropped = []
    backend = SimpleNamespace(thread_count=lambda pid: 5000)
    program = Program.__new__(Program)
    program.key, program.name = 9, "x"
    program.rule = SimpleNamespace(name="users", max_threads=None)
    program.controller = SimpleNamespace(backend=backend, threads={1: 1})
    assert program.threads_now() == 5000
    loop = SimpleNamespace(config=SimpleNamespace(max_threads=1000), programs={9: program},
                           events=lambda *line: None,
                           _drop=lambda program, why: dropped.append(why))
    loop._thread_cap = lambda rule, exclude=None: Service._thread_cap(loop, rule, exclude)
    Service._check_cap(loop, program)                   # by what it tracks: 1 thread
    assert dropped == []
    Service._check_cap(loop, program, program.threads_now())
    assert dropped == ["too many threads"]
