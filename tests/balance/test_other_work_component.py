"""Other work as one run measures it (balance/otherwork.py) on its own:
which meters it keeps, when other work is read, and what it gives the
round -- other work per domain, and with --capacity measured the domains
weighed by it -- over a scripted backend whose CPUs' busy time the test
sets (a hog on CPU 1) and a real thread tracker."""

from support.scripted import MS, PID, ColumnBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.otherwork import OtherWork, OtherWorkCounting
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker
from tumbler.engine.policy import make_policy
from tumbler.platform.base import NullBinder

WINDOW_NS = 300 * MS


def beside_a_hog(capacity="cpus", merges=True):
    """Thread 101 bound to CPU 0 (domain 0) at half a CPU, a hog taking
    all of CPU 1 (domain 1); returns (other work, backend, tracker, a
    round: 100 ms more of that, then the tracker's loads)."""
    backend = ColumnBackend()
    layout = Layout(DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"))
    other = OtherWork(backend, layout, WINDOW_NS, None, merges=merges,
                      counting=OtherWorkCounting(capacity))
    tracker = ThreadTracker(backend, NullBinder(), make_policy("auto"), layout,
                            MachineWatch(backend), RunStats(0.0), lambda line: None,
                            bound_masks=set(), load_window_ns=WINDOW_NS, other_meter=other.meter)
    backend.run(101, 0)
    tracker.add_target(PID)                 # other work's first reading
    tracker.threads[(PID, 101)].domain = 0

    def a_round():
        backend.now += 100 * MS
        backend.run(101, 50)
        backend.busy[0] += 50 * MS          # only the program's thread
        backend.busy[1] += 100 * MS         # the hog
        tracker.update_loads(tracker.sample_all())
        return other.measure(backend.now, tracker)
    return other, backend, tracker, a_round


def test_nothing_is_measured_for_a_policy_that_never_merges_with_cpus_counted():
    other, _, _, a_round = beside_a_hog(merges=False)
    assert other.meter is None and other.capacity_meter is None
    assert a_round() is None and other.held() is None and not other.unread()


def test_other_work_is_read_once_the_readings_span_half_a_window():
    other, _, _, a_round = beside_a_hog()
    assert other.capacity_meter is None and other.meter is not None
    assert other.unread()
    assert a_round() == [0.0, 0.0]          # 100 ms: not half a window yet
    assert other.unread()
    assert a_round() == [0.0, 1.0]          # the hog's CPU, none beside the thread
    assert not other.unread() and other.held() == [0.0, 1.0]


def test_measured_capacity_weighs_the_domains_by_what_other_work_leaves():
    other, _, _, a_round = beside_a_hog(capacity="measured", merges=False)
    assert other.meter is other.capacity_meter is not None
    a_round()
    assert [d.capacity for d in other.layout.domains] == [1, 1]
    assert a_round() == [0.0, 1.0]
    # Nothing left of CPU 1 for a thread of the program: left out.
    assert [d.capacity for d in other.layout.domains] == [1, 0.0]


def test_merged_domains_hold_what_the_split_ones_had_until_read():
    other, _, _, a_round = beside_a_hog()
    a_round()
    a_round()
    assert not other.weighs_domains
    other.hold(frozenset({0, 1}), 1.0)
    other.layout.set(DomainChoice("explicit", (frozenset({0, 1}),), "merged"))
    assert other.held() == [1.0]
    assert not beside_a_hog(merges=False)[0].weighs_domains
    assert beside_a_hog(capacity="measured")[0].weighs_domains


class ProcessTimes(ColumnBackend):
    """ColumnBackend with the process's CPU time (/proc/PID/stat's utime +
    stime), the sum of what its threads ran, counting its reads."""

    def __init__(self):
        super().__init__()
        self.process_ns = 0
        self.process_reads = 0

    def run(self, tid, run_ms, lat_ms=0, start=None):
        super().run(tid, run_ms, lat_ms, start)
        self.process_ns += run_ms * MS

    def process_cpu_and_name(self, pid):
        self.process_reads += 1
        return self.process_ns, "scenario"


def test_a_quiet_round_counts_the_threads_use_as_it_read_it_not_the_last_full_rounds():
    """A quiet round reads the threads' CPU but leaves each thread's
    ``cpu`` as the last full round set it.  The program's own thread
    that went from half a CPU to a whole one is no thread gone: none of
    its CPU is untracked (it would be taken off other work).  The
    process's CPU time is read once per sample time."""
    backend = ProcessTimes()
    layout = Layout(DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"))
    other = OtherWork(backend, layout, WINDOW_NS, None, merges=True)
    tracker = ThreadTracker(backend, NullBinder(), make_policy("auto"), layout,
                            MachineWatch(backend), RunStats(0.0), lambda line: None,
                            bound_masks=set(), load_window_ns=WINDOW_NS, other_meter=other.meter)
    backend.run(101, 0)
    tracker.add_target(PID)
    tracker.threads[(PID, 101)].domain = 0
    for _ in range(4):                      # full rounds: half a CPU
        backend.now += 100 * MS
        backend.run(101, 50)
        tracker.update_loads(tracker.sample_all())
        assert other.untracked_cpu(backend.now, tracker) == 0.0
    assert tracker.threads[(PID, 101)].cpu == 0.5
    for _ in range(3):                      # quiet rounds: a whole CPU
        backend.now += 100 * MS
        backend.run(101, 100)
    reads = backend.process_reads
    # As the quiet round read it over the window: the thread got 1.0.
    assert other.untracked_cpu(backend.now, tracker, placed_cpu=1.0) == 0.0
    # The stale share would leave half the rise as untracked CPU.
    assert other.untracked_cpu(backend.now, tracker) == 0.5
    assert backend.process_reads == reads + 1
