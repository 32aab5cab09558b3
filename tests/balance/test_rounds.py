"""A full round's per-thread passes in C (balance/_rounds.c, and the
engine's pass over the views' columns, engine/_columns.c) against their
Python versions: the same scripted program run twice, once each way,
gives every thread the same numbers (bit for bit), the policy the same
views and the plans the same moves and figures, round after round -- threads born,
exiting, reused TIDs, run-queue waits, counters going backwards, a
thread allowed no domain, a policy that reads switching rates.  And the
same with samples read as columns (platform/columns.py), as the Linux
backend gives them while a process's threads stay the same: the column
pass against the Python pass over their mappings."""

import random
from array import array

import pytest

from support.scripted import MS, PID, ScriptedBackend
from tumbler.balance import loads, speedstep
from tumbler.balance.controller import Controller
from tumbler.balance.domains import DomainChoice
from tumbler.balance.timings import Timings
from tumbler.engine import columns as engine_columns, merging
from tumbler.engine.policy import make_policy
from tumbler.platform.base import NullBinder
from tumbler.platform.columns import ThreadColumns

pytestmark = pytest.mark.skipif(loads._c_measure_threads is None,
                                reason="balance/_rounds.c not built")

FIELDS = ("start", "prev_wall", "prev_run", "exec_ns", "wall_ns", "load", "cpu", "runnable",
          "domain", "eligible", "unmovable", "pinned_cpu")


class Scripted(ScriptedBackend):
    """ScriptedBackend whose thread 199 may use no domain's CPUs."""

    def allowed_cpus(self, pid, tid):
        return frozenset({7}) if tid == 199 else frozenset({0, 1})

    def context_switches(self, pid, tid):
        return tid * 3, tid


class ScriptedColumns(Scripted):
    """Scripted whose samples are columns while the threads (TIDs and
    starts) are those of the sample before, sharing their TIDs and starts
    as the Linux backend's do (linux/threads.py, _column_sample); a dict
    when they changed."""

    def __init__(self):
        super().__init__()
        self.kept = None

    def sample(self, pid):
        sample = super().sample(pid)
        threads = sample.threads
        tids, starts = tuple(threads), tuple(t.start for t in threads.values())
        kept = self.kept
        if kept is None or kept[0] != tids or kept[1] != starts:
            self.kept = (tids, starts, frozenset(tids), tuple(t.name for t in threads.values()))
            return sample
        return sample._replace(threads=ThreadColumns(
            kept[0], kept[2], kept[1], kept[3], array("q", (t.run_ns for t in threads.values())),
            array("q", (t.lat_ns for t in threads.values()))))


def scripted_run(seed, policy, with_c, monkeypatch, columns=False):
    """Every round's per-thread numbers, views and moves of one scripted run
    (``columns``: samples as columns where the threads stay the same)."""
    with monkeypatch.context() as patch:
        if not with_c:
            patch.setattr(loads, "_c_measure_threads", None)
            patch.setattr(loads, "_c_measure_columns", None)
            patch.setattr(loads, "_c_received", None)
            patch.setattr(speedstep, "_c_thread_views", None)
            patch.setattr(merging, "_c_domain_figures", None)
            patch.setattr(engine_columns, "_c_column_figures", None)
        rng = random.Random(seed)
        backend = ScriptedColumns() if columns else Scripted()
        for tid in range(100, 140):
            backend.run(tid, 0)
        backend.run(199, 0)
        choice = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
        controller = Controller(backend, NullBinder(), make_policy(policy), choice,
                                dry_run=True,
                                timings=Timings(load_window_ms=300, quiet_rounds=False))
        controller.add_target(PID)
        decide = controller.policy.decide
        seen = []

        def recording(views, domains, other=None):
            seen.append([tuple(v) for v in views])
            return decide(views, domains, other)
        controller.policy.decide = recording
        python_passes = []
        window = controller.tracker.loads
        py_measure = window._py_measure_threads
        window._py_measure_threads = lambda *args: python_passes.append(1) or py_measure(*args)
        history = []
        for step in range(40):
            backend.now += rng.choice((50, 100, 130)) * MS
            for tid in list(backend.threads):
                share = rng.choice((0.0, 0.02, 0.3, 0.95, 1.0))
                backend.run(tid, int(share * 100), lat_ms=rng.choice((0, 0, 5, 60)))
            if step % 7 == 3:               # one exits, one is born
                del backend.threads[rng.choice(sorted(set(backend.threads) - {199}))]
                backend.run(200 + step, 0)
            if step % 11 == 5:              # a TID now names another thread
                backend.threads[120] = [5000 + step, 0, 0]
            if step == 20:                  # a counter going backwards
                backend.threads[101][1] -= 3 * MS
            if columns and step == 30:      # past what the C pass takes: from here Python
                backend.threads[min(set(backend.threads) - {199})][1] += 2 ** 62
            decision = controller.round()
            history.append((
                {key: tuple(getattr(t, name) for name in FIELDS)
                 for key, t in controller.threads.items()},
                [(m.tid, m.src, m.dst) for m in decision.plan.moves],
                window.received_all(),
                # The plan's figures and the notes, bit for bit.
                repr((decision.plan, decision.notes, decision.interval_ms))))
        # Plain int counters: all in C (but from the counter past 2**62).
        assert bool(python_passes) == (not with_c or columns)
        return history, seen


@pytest.mark.parametrize("policy", ["tumbler", "auto"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_and_python_passes_agree(seed, policy, monkeypatch):
    python = scripted_run(seed, policy, False, monkeypatch)
    c = scripted_run(seed, policy, True, monkeypatch)
    assert c == python


@pytest.mark.parametrize("policy", ["tumbler", "auto"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_column_pass_agrees_with_the_python_pass(seed, policy, monkeypatch):
    """Samples as columns: the C column pass (and, from a counter past
    2**62, the Python pass going on from that thread) gives every thread
    the numbers the Python pass gives from the samples' mappings."""
    columns_pass = []
    original = loads._c_measure_columns
    monkeypatch.setattr(loads, "_c_measure_columns",
                        lambda *args: columns_pass.append(1) or original(*args))
    python = scripted_run(seed, policy, False, monkeypatch, columns=True)
    assert not columns_pass
    c = scripted_run(seed, policy, True, monkeypatch, columns=True)
    assert columns_pass         # rounds whose window holds the same threads
    assert c == python
    # Against the dict samples' run: the same numbers too.
    assert scripted_run(seed, policy, True, monkeypatch)[0][:30] == c[0][:30]
    history, views = c
    assert any(moves for _, moves, _, _ in history)     # the plans moved threads
    assert any(t[5] is not None and t[5] >= 0.9 for round_, _, _, _ in history
               for t in round_.values())               # some thread always runnable
    assert all(all(v[0] != 199 for v in round_views) for round_views in views)


def test_unusual_threads_take_the_python_pass():
    """An object that is not a TrackedThread, or a value of another kind,
    makes the view and sum passes answer None (nothing changed): the
    Python passes then run."""
    from tumbler.balance._rounds import received, thread_views
    from tumbler.balance.threads import TrackedThread
    from tumbler.engine.model import ThreadView

    def tracked(load, cpu, domain=0):
        thread = TrackedThread(PID, 1, 1, "t", frozenset({0}), frozenset({0}), (0, 0, 0),
                               domain=domain)
        thread.load, thread.cpu, thread.runnable = load, cpu, 0.95
        return thread
    good = [tracked(0.5, 0.5), tracked(0.2, 0.2, 1)]
    measured, views, runnable, fields = thread_views(good, ThreadView, 0.9)
    assert measured == good and [v.load for v in views] == [0.5, 0.2]
    assert runnable == {0: 1, 1: 1}
    # The views' fields as columns (tid, load, domain, eligible, runnable,
    # pinned_cpu), for the engine (engine/model.py, ThreadViews).
    assert fields == tuple([getattr(v, name) for v in views] for name in (
        "tid", "load", "domain", "eligible", "runnable", "pinned_cpu"))
    # Threads left out (not measured, no domain they may use) are in no column.
    idle = tracked(None, None)
    assert thread_views([idle] + good, ThreadView, 0.9)[3] == fields
    # No reference cycle can pass through a view: left to reference
    # counting, not walked by every collection (issue 29).
    import gc
    assert not any(map(gc.is_tracked, views))
    assert received(good, 2) == [0.5, 0.2, 0.0]
    # A thread in no domain yet: its CPU comes last; an outsider's (no
    # domain it may use) and someone else's placement (unmovable) do not.
    outsider, foreign = tracked(0.4, 0.4, None), tracked(0.1, 0.1, None)
    outsider.eligible, foreign.unmovable = frozenset(), True
    threads = good + [tracked(0.3, 0.3, None), outsider, foreign]
    assert received(threads, 2) == [0.5, 0.2, 0.3]
    from tumbler.balance.domains import Layout
    from tumbler.balance.loads import LoadWindow
    layout = Layout(DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"))
    window = LoadWindow({i: t for i, t in enumerate(threads)}, TrackedThread, layout, 1)
    original, loads._c_received = loads._c_received, None
    try:
        assert window.received_all() == [0.5, 0.2, 0.3]
    finally:
        loads._c_received = original
    odd = good + [tracked(1, 1)]                # ints, not floats
    assert received(odd, 2) is None
    assert received(good, 1) is None            # a domain out of range
    assert thread_views(good + [object()], ThreadView, 0.9) is None


def test_counters_that_are_not_plain_ints_go_on_in_python(monkeypatch):
    """From the first thread whose counters the C pass does not take (a
    float here), the Python pass measures the rest, as it would all."""
    def measured(with_c):
        with monkeypatch.context() as patch:
            if not with_c:
                patch.setattr(loads, "_c_measure_threads", None)
            backend = Scripted()
            for tid in range(100, 110):
                backend.run(tid, 0)
            controller = Controller(backend, NullBinder(), make_policy("tumbler"),
                                    DomainChoice("explicit", (frozenset({0}), frozenset({1})),
                                                 "test"), dry_run=True)
            controller.add_target(PID)
            backend.now += 100 * MS
            for tid in range(100, 110):
                backend.run(tid, 30 if tid < 105 else 30.5)
            controller.round()
            return {tid: (t.load, t.exec_ns, t.cpu) for (_, tid), t in controller.threads.items()}
    assert measured(True) == measured(False)
    assert measured(True)[107][0] == pytest.approx(0.305)


def test_the_cyclic_gc_waits_until_the_round_is_over():
    """A round runs with the cyclic GC paused (its per-thread views would
    trigger collections), and leaves it as it found it -- on, off, or
    after the round raised."""
    import gc

    seen = []

    class Watched(Scripted):
        def sample(self, pid):
            seen.append(gc.isenabled())
            if getattr(self, "fail", False):
                raise RuntimeError("sample failed")
            return super().sample(pid)
    backend = Watched()
    for tid in range(100, 104):
        backend.run(tid, 0)
    controller = Controller(backend, NullBinder(), make_policy("auto"),
                            DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test"),
                            dry_run=True, timings=Timings(quiet_rounds=False))
    controller.add_target(PID)
    assert gc.isenabled()
    backend.now += 100 * MS
    controller.round()
    assert seen[-1] is False and gc.isenabled()
    backend.fail = True
    with pytest.raises(RuntimeError):
        controller.round()
    assert seen[-1] is False and gc.isenabled()
    backend.fail = False
    gc.disable()
    try:
        controller.round()
        assert not gc.isenabled()
    finally:
        gc.enable()
