"""The thread tracker (balance/threads.py) and its load window
(balance/loads.py) on their own, without a controller: what they track,
what they hand on, and the loads they measure, on a scripted backend."""

import pytest

from support.scripted import MS, PID, MaskBinder, MaskedBackend, ScriptedBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker
from tumbler.engine.policy import make_policy
from tumbler.platform.base import NoSuchProcess, NullBinder

BOTH = frozenset({0, 1})


def tracker_over(backend, binder=None, bound_masks=None, window_ms=300):
    """A tracker over --domains 0/1; returns it with what it handed on:
    {"found": [(new TIDs, inherited TIDs)], "changing": count, "warnings"}."""
    handed = {"found": [], "changing": 0, "warnings": []}

    def found(new, inherited):
        handed["found"].append(([t.tid for t in new], [(t.tid, mask) for t, mask in inherited]))

    def changing():
        handed["changing"] += 1
    layout = Layout(DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"))
    tracker = ThreadTracker(backend, binder or NullBinder(), make_policy("tumbler"), layout,
                            MachineWatch(backend), RunStats(0.0), handed["warnings"].append,
                            bound_masks=set() if bound_masks is None else bound_masks,
                            load_window_ns=window_ms * MS, found=found, changing=changing)
    return tracker, handed


def a_round(backend, tracker, shares, step_ms=100):
    """``step_ms`` of the threads running ``shares`` ({tid: share of the
    step}), then the tracker's sample and loads (a full round's first two
    steps)."""
    backend.now += step_ms * MS
    for tid, share in shares.items():
        backend.run(tid, int(share * step_ms))
    samples = tracker.sample_all()
    tracker.update_loads(samples)
    return samples


def test_a_target_and_its_threads_are_tracked_and_handed_on_to_be_placed():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker, handed = tracker_over(backend)
    tracker.add_target(PID)
    assert tracker.targets == [PID]
    assert tracker.base_allowed == {PID: BOTH}
    assert sorted(tracker.threads) == [(PID, 101), (PID, 102)]
    assert all(t.eligible == {0, 1} and t.allowed == BOTH and t.domain is None
               for t in tracker.threads.values())
    assert handed["found"] == [([101, 102], [])]
    assert tracker.stats.threads_seen == 2
    # A thread born since: found by the next look, after quiet rounds end.
    backend.run(103, 0)
    tracker.discover()
    assert handed["found"][-1] == ([103], []) and handed["changing"] == 1
    assert (PID, 103) in tracker.threads


def test_a_look_for_new_threads_reads_only_the_new_ones():
    """Issue 47: a thread born to a process of many reads that one thread,
    not every thread of the process; the next round reads them all as
    usual, the newcomer among them, measured from when it was found."""
    backend = ScriptedBackend()
    for tid in range(101, 301):
        backend.run(tid, 0)
    tracker, handed = tracker_over(backend)
    tracker.add_target(PID)
    a_round(backend, tracker, {101: 1.0})
    reads = backend.thread_reads
    backend.now += 50 * MS
    backend.run(301, 0)
    tracker.discover()
    assert backend.thread_reads - reads == 1
    assert handed["found"][-1] == ([301], [])
    assert tracker.threads[(PID, 301)].first == (backend.now, 0, 0)
    a_round(backend, tracker, {101: 1.0, 301: 0.5})
    assert backend.thread_reads - reads == 1 + 201
    assert tracker.threads[(PID, 301)].load == pytest.approx(0.5)     # 50 ms of 100


def test_a_thread_allowed_no_domain_is_left_alone_and_said_once():
    class Outside(ScriptedBackend):
        def allowed_cpus(self, pid, tid):
            return frozenset({7}) if tid == 102 else BOTH
    backend = Outside()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker, handed = tracker_over(backend)
    tracker.add_target(PID, allowed=BOTH)
    assert tracker.threads[(PID, 102)].eligible == frozenset()
    assert tracker.stats.outsiders == 1
    assert handed["warnings"] == ["thread 102 (t102) may only run on CPUs 7, outside the "
                                  "domains; tumbler leaves it alone"]


def test_loads_are_measured_over_the_load_window():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker, _ = tracker_over(backend, window_ms=300)
    tracker.add_target(PID)
    for _ in range(5):
        a_round(backend, tracker, {101: 0.5, 102: 1.0})
    half, busy = tracker.threads[(PID, 101)], tracker.threads[(PID, 102)]
    assert (half.cpu, half.runnable, half.load) == (0.5, 0.5, 0.5)
    assert (busy.cpu, busy.load) == (1.0, 1.0)
    assert (half.exec_ns, half.wall_ns) == (50 * MS, 100 * MS)
    # Samples at 0, 100, ..., 500 ms: the newest at least 300 ms old is
    # the window's base, the ones before it are dropped.
    history = tracker.loads.histories[PID]
    assert [s.wall_ns // MS for s in history] == [200, 300, 400, 500]
    # A change of pace shows over the window, not at once: 101 runs all
    # of the next 100 ms; over the window's 300..600 ms it ran 50 + 50 + 100.
    a_round(backend, tracker, {101: 1.0, 102: 1.0})
    assert half.cpu == pytest.approx(200 / 300)
    assert [s.wall_ns // MS for s in history] == [300, 400, 500, 600]


def test_a_thread_that_exits_is_dropped_and_forgotten():
    backend = ScriptedBackend()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker, _ = tracker_over(backend)
    tracker.add_target(PID)
    a_round(backend, tracker, {101: 0.5, 102: 0.5})
    del backend.threads[102]
    a_round(backend, tracker, {101: 0.5})
    assert sorted(tracker.threads) == [(PID, 101)]
    assert backend.forgotten == [102]


def test_a_target_that_exits_goes_with_its_threads_and_samples():
    class Exits(ScriptedBackend):
        gone = False

        def sample(self, pid):
            if self.gone:
                raise NoSuchProcess(pid)
            return super().sample(pid)
    backend = Exits()
    backend.run(101, 0)
    tracker, _ = tracker_over(backend)
    tracker.add_target(PID)
    a_round(backend, tracker, {101: 1.0})
    backend.gone = True
    assert tracker.sample_all() == []
    assert tracker.targets == [] and tracker.threads == {} and tracker.loads.histories == {}
    assert not tracker.same_process(PID + 1)


def test_a_thread_born_with_a_mask_tumbler_set_is_handed_on_as_inherited():
    """Born of a bound thread, it carries tumbler's mask: its allowed CPUs
    are the process's, and it goes on as inherited (tumbler's to put back)."""
    backend = MaskedBackend()
    backend.run(101, 0)
    tracker, handed = tracker_over(backend, MaskBinder(backend), bound_masks={frozenset({1})})
    tracker.add_target(PID)
    backend.run(102, 0)
    backend.masks[102] = frozenset({1})
    a_round(backend, tracker, {101: 0.5, 102: 0.5})
    assert handed["found"][-1] == ([102], [(102, frozenset({1}))])
    assert tracker.threads[(PID, 102)].allowed == BOTH


def test_an_exec_makes_tumblers_mask_the_threads_binding():
    backend = MaskedBackend()
    backend.run(101, 0)
    tracker, _ = tracker_over(backend, bound_masks={frozenset({1})})
    tracker.add_target(PID)
    thread = tracker.threads[(PID, 101)]
    thread.bound_mask, thread.domain = frozenset({0}), 0
    backend.masks[101] = frozenset({1})
    tracker.images[PID] = "before"
    tracker.check_exec(PID, "after")
    assert (thread.bound_mask, thread.domain) == (frozenset({1}), 1)
    assert tracker.images[PID] == "after"


def test_children_of_touched_threads_go_to_the_hand_back():
    class Forks(MaskedBackend):
        listed = [PID]
        parents = {PID: 1}

        def process_ids(self):
            return list(self.listed)

        def parent_of(self, pid):
            return self.parents[pid]

    class HandBack:
        calls = []

        def put_back_children(self, pid, threads):
            self.calls.append((pid, [t.tid for t in threads]))
    backend = Forks()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker, _ = tracker_over(backend, bound_masks={frozenset({0})})
    tracker.hand_back = HandBack()
    tracker.add_target(PID)
    tracker.look_at_new_processes()         # the processes as they are now
    tracker.threads[(PID, 101)].touched = True
    backend.listed.append(500)
    backend.parents[500] = PID
    tracker.look_at_new_processes()
    assert tracker.hand_back.calls == [(PID, [101])]
    assert tracker.targets == [PID]         # not followed: not a target


def test_cpu_received_per_domain_and_before_a_thread_was_bound():
    """received_all: per domain, then what no domain got yet; a thread
    bound 100 ms into its window of 100..300 ms counts half in its domain
    and half as not placed (the OS ran it anywhere until then)."""
    backend = ScriptedBackend()
    for tid in (101, 102, 103):
        backend.run(tid, 0)
    tracker, _ = tracker_over(backend, window_ms=500)
    tracker.add_target(PID)
    a_round(backend, tracker, {101: 1.0, 102: 0.5, 103: 0.25})
    samples = a_round(backend, tracker, {101: 1.0, 102: 0.5, 103: 0.25})
    first, second = tracker.threads[(PID, 101)], tracker.threads[(PID, 102)]
    first.domain, second.domain = 0, 1
    assert tracker.loads.received_all() == [1.0, 0.5, 0.25]
    # 101 placed now (from no domain), 102 moved (it was placed before).
    tracker.loads.note_placed([(first, None, 0), (second, 0, 1)], samples)
    assert tracker.loads.placed_at == {(PID, 101): 200 * MS}
    a_round(backend, tracker, {101: 1.0, 102: 0.5, 103: 0.25})
    assert tracker.loads.received_all() == [0.5, 0.5, 0.75]
    assert tracker.loads.received_now() == [(frozenset({0}), 0.875), (frozenset({1}), 0.875)]
