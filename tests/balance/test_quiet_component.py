"""Quiet rounds (balance/quiet.py) on their own: the rosters they read,
a round decided from two columns, what leaving them gives the threads,
and the paced watch -- over a scripted column backend and a real thread
tracker (test_quiet_rounds.py compares them with full rounds through the
controller)."""

from types import SimpleNamespace

from support.scripted import MS, PID, ColumnBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.otherwork import OtherWork
from tumbler.balance.quiet import ColumnSample, QuietRound, QuietRounds
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker
from tumbler.engine.policy import WATCH_INTERVAL_MS, make_policy
from tumbler.platform.base import NullBinder

BOTH = frozenset({0, 1})
TWO = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")
ONE = DomainChoice("explicit", (BOTH,), "test")


def quiet_over(policy="tumbler", choice=TWO):
    backend = ColumnBackend()
    policy = make_policy(policy)
    layout, stats = Layout(choice), RunStats(0.0)
    tracker = ThreadTracker(backend, NullBinder(), policy, layout, MachineWatch(backend),
                            stats, lambda line: None, bound_masks=set(),
                            load_window_ns=300 * MS)
    other = OtherWork(backend, layout, 300 * MS, None, merges=False)
    quiet = QuietRounds(backend, policy, layout, tracker, stats, other, lambda: False)
    return quiet, backend, tracker


def full_rounds(backend, tracker, count, shares):
    samples = None
    for _ in range(count):
        backend.now += 100 * MS
        for tid, share in shares.items():
            backend.run(tid, int(share * 100))
        samples = tracker.sample_all()
        tracker.update_loads(samples)
    return samples


def two_halves():
    """Threads 101 and 102, half a CPU each, bound one per domain."""
    quiet, backend, tracker = quiet_over()
    backend.run(101, 0)
    backend.run(102, 0)
    tracker.add_target(PID)
    samples = full_rounds(backend, tracker, 3, {101: 0.5, 102: 0.5})
    tracker.threads[(PID, 101)].domain, tracker.threads[(PID, 102)].domain = 0, 1
    decision = SimpleNamespace(plan=SimpleNamespace(assignment={101: 0, 102: 1}))
    return quiet, backend, tracker, samples, decision


def test_a_roster_per_target_once_a_full_round_changed_nothing():
    quiet, _, tracker, samples, decision = two_halves()
    rosters = quiet.rosters_for(samples, decision, [])
    assert [(r.pid, r.tids, list(r.domain_of)) for r in rosters] == [(PID, [101, 102], [0, 1])]
    assert rosters[0].assignment == {101: 0, 102: 1}
    assert quiet.rosters_for(samples, decision, ["a placement not logged yet"]) is None
    tracker.threads[(PID, 102)].pinned_cpu = 1          # speed balancing's: full rounds
    assert quiet.rosters_for(samples, decision, []) is None


def test_a_quiet_round_decides_from_the_columns_and_leaving_measures_the_threads():
    quiet, backend, tracker, samples, decision = two_halves()
    quiet.rosters = quiet.rosters_for(samples, decision, [])
    backend.now += 100 * MS
    backend.run(101, 50)
    backend.run(102, 50)
    reads = backend.column_reads
    returned = quiet.round(None, [])
    assert type(returned) is QuietRound and backend.column_reads == reads + 1
    assert list(returned.summary.domain_loads) == [0.5, 0.5]
    assert returned.assignment == {101: 0, 102: 1}
    assert returned.interval_ms == quiet.policy.table.interval_for(
        returned.summary.thread_cv)[0]
    assert (quiet.stats.intervals, quiet.stats.quiet) == (1, 1)
    history = tracker.loads.histories[PID]
    assert type(history[-1]) is ColumnSample and history[-1].wall_ns == backend.now
    # The threads' numbers are still the last full round's until quiet
    # rounds end; then they are what a full round would have left.
    thread = tracker.threads[(PID, 101)]
    assert thread.prev_wall == backend.now - 100 * MS
    quiet.leave()
    assert quiet.rosters is None
    assert (thread.prev_wall, thread.exec_ns, thread.wall_ns, thread.load) == (
        backend.now, 50 * MS, 100 * MS, 0.5)


def test_a_thread_born_ends_quiet_rounds_and_nothing_is_counted():
    quiet, backend, tracker, samples, decision = two_halves()
    quiet.rosters = quiet.rosters_for(samples, decision, [])
    backend.now += 100 * MS
    backend.run(103, 0)
    assert quiet.round(None, []) is None
    assert quiet.stats.intervals == 0 and len(tracker.loads.histories[PID]) == 3


def test_a_watch_finding_the_same_threads_is_paced_up_to_the_idle_interval():
    quiet, _, _ = quiet_over("auto", ONE)
    idle = quiet.policy.table.idle_interval_ms
    paced = [quiet.paced_ms(WATCH_INTERVAL_MS) for _ in range(6)]
    assert paced[:2] == [WATCH_INTERVAL_MS, 2 * WATCH_INTERVAL_MS] and paced[-1] == idle
    assert quiet.calm == (0, idle)
    # Acting, or speed balancing sampling between rounds: the decision's
    # own interval, and the pace starts again.
    assert quiet.paced_ms(WATCH_INTERVAL_MS, speeding=True) == WATCH_INTERVAL_MS
    assert quiet.calm is None
    assert quiet.paced_ms(WATCH_INTERVAL_MS) == WATCH_INTERVAL_MS
    assert quiet.paced_ms(WATCH_INTERVAL_MS, acting=True) == WATCH_INTERVAL_MS
    assert quiet.calm is None
    # Over two domains auto is not only watching: never paced.
    two, _, _ = quiet_over("auto", TWO)
    assert [two.paced_ms(WATCH_INTERVAL_MS) for _ in range(3)] == [WATCH_INTERVAL_MS] * 3


def test_a_base_sample_read_as_columns_gives_its_columns_as_they_are():
    """A full round's sample read as columns (platform/columns.py) is a
    roster's base without its mapping built: its own two columns, the
    numbers the mapping holds; another set of threads is looked up."""
    from array import array
    from tumbler.balance.quiet import Roster
    from tumbler.platform.base import Sample
    from tumbler.platform.columns import ThreadColumns
    quiet, backend, tracker, samples, _ = two_halves()
    threads = [tracker.threads[(PID, 101)], tracker.threads[(PID, 102)]]
    roster = Roster(PID, threads, None, {101: 0, 102: 1}, None)
    tids = (101, 102)
    columns = ThreadColumns(tids, frozenset(tids), tuple(t.start for t in threads),
                            ("a", "b"), array("q", [7 * MS, 9 * MS]), array("q", [1, 2]))
    sample = Sample(PID, backend.now, columns)
    run, lat = roster.base_columns(sample)
    assert run is columns.run and lat is columns.lat
    assert columns._mapping is None                     # not built
    # The same threads as a mapping: the same numbers, looked up.
    looked_up = Roster(PID, threads, None, {}, None).base_columns(Sample(PID, backend.now,
                                                                   columns.as_dict()))
    assert looked_up == (run, lat)
    # Other threads (one replaced: another start): not the roster's base.
    other = ThreadColumns(tids, frozenset(tids), (threads[0].start, 999), ("a", "b"),
                          columns.run, columns.lat)
    assert Roster(PID, threads, None, {}, None).base_columns(Sample(PID, backend.now, other)) is None


def test_a_roster_read_as_a_full_rounds_sample_shares_that_rounds_columns():
    """The sample a failed quiet round lends the full round after it
    (Roster.sample): read as columns, it shares the full round's TIDs,
    starts and names (loads.py pairs same_threads samples by position)
    with the new times; read as a mapping, each thread's entry with its
    new times."""
    from array import array
    from tumbler.balance.quiet import Roster
    from tumbler.platform.base import ThreadTimes
    from tumbler.platform.columns import ThreadColumns
    _, _, tracker, _, _ = two_halves()
    threads = [tracker.threads[(PID, 101)], tracker.threads[(PID, 102)]]
    tids, starts = (101, 102), tuple(t.start for t in threads)
    full = ThreadColumns(tids, frozenset(tids), starts, ("a", "b"),
                         array("q", [1, 2]), array("q", [3, 4]))
    run, lat = array("q", [10, 20]), array("q", [30, 40])
    lent = Roster(PID, threads, None, {}, full).sample(run, lat, 77)
    assert (lent.pid, lent.wall_ns) == (PID, 77)
    assert type(lent.threads) is ThreadColumns and lent.threads.same_threads(full)
    assert lent.threads.names is full.names and lent.threads.run is run
    assert dict(lent.threads) == {
        101: ThreadTimes(101, starts[0], "a", 10, lat_ns=30, state="?"),
        102: ThreadTimes(102, starts[1], "b", 20, lat_ns=40, state="?")}
    mapping = Roster(PID, threads, None, {}, full.as_dict()).sample(run, lat, 78)
    assert mapping.threads == dict(lent.threads) and type(mapping.threads) is dict
