"""Speed steps (balance/speedstep.py) on their own: the policy's view of
each thread, which domains are crowded, the switching rates read there,
pins, and the steps between rounds -- over a scripted backend, a real
thread tracker and placer."""

from types import SimpleNamespace

from support.scripted import MS, PID, MaskBinder, MaskedBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.placer import Placer
from tumbler.balance.speedstep import SpeedSteps
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker, TrackedThread
from tumbler.engine.policy import make_policy
from tumbler.platform.base import Unsupported

BOTH = frozenset({0, 1})
TWO = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
ONE = DomainChoice("explicit", (BOTH,), "test", True)       # confined: threads bound


class Switching(MaskedBackend):
    """MaskedBackend that counts context switches and reads run times alone."""

    counts_context_switches = True

    def __init__(self):
        super().__init__()
        self.switches = {}              # tid -> (voluntary, involuntary)
        self.switch_reads = 0

    def context_switches(self, pid, tid):
        self.switch_reads += 1
        return self.switches[tid]

    def thread_run_ns(self, pid, tids):
        return {tid: self.threads[tid][1] for tid in tids if tid in self.threads}, self.now


class SwitchingCpus(Switching):
    """Switching, and the CPUs' own switch counts (``cpu_count`` by CPU set,
    None: not counted there)."""

    counts_cpu_switches = True

    def __init__(self):
        super().__init__()
        self.cpu_count = {}             # frozenset of CPUs -> switches on them so far
        self.cpu_reads = []

    def cpu_switches(self, cpus):
        self.cpu_reads.append(cpus)
        if self.cpu_count.get(cpus) is None:
            raise Unsupported("not counted in this test")
        return self.cpu_count[cpus]


def speed_over(choice=TWO, policy=None, may_merge=False, backend=None):
    backend = backend or Switching()
    layout, stats = Layout(choice), RunStats(0.0)
    machine = MachineWatch(backend)
    placer = Placer(backend, MaskBinder(backend), layout, machine, stats, lambda line: None)
    tracker = ThreadTracker(backend, placer.binder, make_policy("tumbler"), layout, machine,
                            stats, lambda line: None, bound_masks=placer.bound_masks,
                            load_window_ns=300 * MS)
    speed = SpeedSteps(backend, policy or make_policy("auto"), layout, tracker, placer, stats,
                       lambda: may_merge)
    return speed, backend


def runnable(tid, domain, share=1.0):
    thread = TrackedThread(PID, tid, tid, "t%d" % tid, BOTH, frozenset({0, 1}), (0, 0, 0),
                           domain=domain)
    thread.load = thread.cpu = thread.runnable = share
    return thread


def test_the_views_are_the_measured_threads_as_the_policy_sees_them():
    speed, backend = speed_over(policy=make_policy("tumbler"))
    for tid in (101, 102):
        backend.run(tid, 0)
    speed.tracker.add_target(PID)
    backend.now += 100 * MS
    backend.run(101, 50)
    backend.run(102, 100)
    speed.tracker.update_loads(speed.tracker.sample_all())
    measured, views = speed.measured_views(None)
    assert sorted(t.tid for t in measured) == [101, 102]
    assert sorted((v.tid, v.load, v.domain, v.exec_ns, v.wall_ns, v.sleeps_per_s)
                  for v in views) == [(101, 0.5, None, 50 * MS, 100 * MS, None),
                                      (102, 1.0, None, 100 * MS, 100 * MS, None)]
    assert backend.switch_reads == 0            # nothing crowded: no switches read


def test_a_domain_with_more_runnable_threads_than_cpus_is_crowded():
    speed, _ = speed_over()
    threads = [runnable(101, 0), runnable(102, 0), runnable(103, 1, share=0.2)]
    assert speed.crowded_domains(threads) == {0}
    assert speed_over(policy=make_policy("tumbler"))[0].crowded_domains(threads) == set()
    # Domains that may merge: judged together once the program's runnable
    # threads outnumber all their CPUs (None: threads not placed yet).
    merging, _ = speed_over(may_merge=True)
    assert merging.crowded_domains(threads + [runnable(104, 1)]) == {0, 1, None}
    # ... or other work crowds one of them.
    assert merging.crowded_domains([runnable(101, 0)], [0.0, 0.0]) == set()
    assert merging.crowded_domains([runnable(101, 0)], [1.0, 0.0]) == {0, 1, None}


def test_switching_is_read_for_runnable_threads_of_crowded_domains_over_time():
    speed, backend = speed_over()
    busy, idle = runnable(101, 0), runnable(102, 0, share=0.1)
    backend.switches = {101: (0, 0), 102: (0, 0)}
    views = speed.views([busy, idle], crowded={0})
    assert [(v.sleeps_per_s, v.switches_per_cpu_s) for v in views] == [(None, None)] * 2
    assert backend.switch_reads == 1            # the busy thread only, too soon to tell
    busy.prev_wall, busy.prev_run = 400 * MS, 200 * MS
    backend.switches[101] = (40, 10)
    (view, _) = speed.views([busy, idle], crowded={0})
    # 40 voluntary switches in 0.4 s; 50 switches in 0.2 s of CPU.
    assert (view.sleeps_per_s, view.switches_per_cpu_s) == (100.0, 250.0)
    busy.prev_wall += 50 * MS                   # read again only after SWITCH_READ_NS
    assert speed.views([busy], crowded={0})[0].sleeps_per_s == 100.0
    assert backend.switch_reads == 2


def switching_beside(foreign):
    """The views of a crowded domain's busy thread that switched 600 times
    in 0.4 s, all of it on CPU, while its CPU counted 600 + ``foreign``
    switches: first (too soon to tell), then 0.4 s later."""
    backend = SwitchingCpus()
    speed, _ = speed_over(backend=backend)
    busy = runnable(101, 0)
    backend.switches = {101: (0, 0)}
    backend.cpu_count[frozenset({0})] = 1000
    first = speed.views([busy], crowded={0})[0]
    busy.prev_wall, busy.prev_run = 400 * MS, 400 * MS
    backend.switches[101] = (0, 600)
    backend.cpu_count[frozenset({0})] = 1000 + 600 + foreign
    return first, speed.views([busy], crowded={0})[0], backend


def test_switches_other_tasks_made_on_the_cpus_are_taken_off_the_threads():
    # Every switch of the thread's answered by one of another task's: a
    # neighbour preempting it 1,500 times a second -- no sign of barriers.
    first, view, backend = switching_beside(foreign=600)
    assert first.switches_per_cpu_s is None
    assert view.switches_per_cpu_s == 0.0
    # The CPU read from the first crowded round on, at the threads' reads.
    assert backend.cpu_reads == [frozenset({0})] * 2
    # Threads that switch among themselves: only the few others' are taken off.
    assert switching_beside(foreign=40)[1].switches_per_cpu_s == 1500.0 - 100.0
    assert switching_beside(foreign=0)[1].switches_per_cpu_s == 1500.0


def test_without_the_cpus_counted_over_the_span_the_threads_are_not_judged():
    backend = SwitchingCpus()
    speed, _ = speed_over(backend=backend)
    busy = runnable(101, 0)
    backend.switches = {101: (0, 0)}
    speed.views([busy], crowded={0})            # the thread counted from here...
    busy.prev_wall, busy.prev_run = 400 * MS, 400 * MS
    backend.switches[101] = (0, 600)
    backend.cpu_count[frozenset({0})] = 1000    # ... its CPU only from here
    assert speed.views([busy], crowded={0})[0].switches_per_cpu_s is None
    # Where the CPUs are not counted at all, the thread's own count stands.
    backend.cpu_count[frozenset({0})] = None
    busy.prev_wall, busy.prev_run = 800 * MS, 800 * MS
    backend.switches[101] = (0, 1200)
    assert speed.views([busy], crowded={0})[0].switches_per_cpu_s == 1500.0


def test_pins_are_counted_as_steps_and_reported_with_the_rounds():
    speed, backend = speed_over(ONE)
    thread = runnable(101, 0)
    made = speed.pin({101: thread}, {101: 1})
    assert made == [(thread, 1, 1)] and speed.steps == 1 and speed.stats.pins == 1
    assert backend.masks[101] == {1} and thread.pinned_cpu == 1
    speed.pins_between = made
    speed.round_pins({101: thread}, {101: 0})
    assert speed.pins_made == [(thread, 1, 1), (thread, 0, 2)] and speed.pins_between == []


def test_a_step_reads_the_pinned_threads_and_applies_the_policys_pins():
    asked = []

    class Stepping:
        needs_sleep_data = False

        def speed_step(self, views, domains):
            asked.append(([(v.tid, v.exec_ns, v.wall_ns) for v in views],
                          [d.index for d in domains]))
            return {101: 0}, 20
    speed, backend = speed_over(ONE, policy=Stepping())
    pinned = runnable(101, 0)
    speed.pin({101: pinned}, {101: 1})
    backend.run(101, 0)
    speed.follow(SimpleNamespace(engaged=[0], speed_interval_ms=20), [pinned])
    assert speed.speeding == [pinned] and [d.index for d in speed.speed_domains] == [0]
    backend.now += 20 * MS
    backend.run(101, 10)
    assert speed.step() == 20
    assert asked == [([(101, 10 * MS, 20 * MS)], [0])]
    assert speed.pins_between == [(pinned, 0, 2)] and backend.masks[101] == {0}
    speed.follow(SimpleNamespace(engaged=[0], speed_interval_ms=None), [pinned])
    assert speed.speeding == [] and speed.step() is None
    speed.pins_between = [(pinned, 0, 2)]
    speed.reset()
    assert (speed.speeding, speed.speed_domains, speed.pins_between) == ([], [], [])
