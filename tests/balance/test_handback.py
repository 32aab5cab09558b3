"""The hand-back (balance/handback.py) on its own: every thread tumbler
bound goes back at the end, threads and child processes born of bound
threads go back to what their creator was allowed, and what someone else
placed is left as it is -- over a scripted backend with masks, a real
tracker and placer."""

from support.scripted import PID, MaskBinder, MaskedBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.handback import HandBack
from tumbler.balance.machine import MachineWatch
from tumbler.balance.placer import Placer
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import ThreadTracker
from tumbler.engine.policy import make_policy
from tumbler.platform.base import PlatformError

BOTH = frozenset({0, 1})
ZERO, ONE = frozenset({0}), frozenset({1})


class Closing(MaskBinder):
    def close(self):
        self.calls.append(("close",))
        return ["removed what setup made"]


class Tracked(MaskedBackend):
    closed = False

    def close(self):
        self.closed = True


def bound_threads(backend, tids):
    """Threads ``tids`` of a target over ``backend``, bound to CPU 0 and
    CPU 1 in turn: (hand-back, binder, threads, warnings)."""
    binder = Closing(backend)
    warnings = []
    layout, stats = Layout(DomainChoice("explicit", (ZERO, ONE), "test")), RunStats(0.0)
    machine = MachineWatch(backend)
    placer = Placer(backend, binder, layout, machine, stats, warnings.append)
    tracker = ThreadTracker(backend, binder, make_policy("tumbler"), layout, machine, stats,
                            warnings.append, bound_masks=placer.bound_masks,
                            load_window_ns=500_000_000)
    tracker.hand_back = hand_back = HandBack(backend, binder, tracker, placer, warnings.append)
    for tid in tids:
        backend.run(tid, 0)
    tracker.add_target(PID)
    threads = [tracker.threads[(PID, tid)] for tid in tids]
    placer.apply([(thread, i % 2) for i, thread in enumerate(threads)])
    binder.calls.clear()
    return hand_back, binder, threads, warnings


def bound_run():
    """Threads 101 and 102 of a target, bound to CPU 0 and CPU 1."""
    backend = Tracked()
    hand_back, binder, threads, warnings = bound_threads(backend, (101, 102))
    assert (backend.masks[101], backend.masks[102]) == (ZERO, ONE)
    return hand_back, backend, binder, threads, warnings


def test_every_bound_thread_goes_back_and_the_binder_and_backend_close():
    hand_back, backend, binder, threads, warnings = bound_run()
    assert hand_back.restore_all() == 0
    assert binder.calls == [("restore", PID, 101, BOTH), ("restore", PID, 102, BOTH),
                            ("close",)]
    assert backend.masks == {101: BOTH, 102: BOTH}
    assert all(t.saved is None for t in threads)
    assert warnings == ["removed what setup made"] and backend.closed


def test_a_thread_someone_else_placed_is_not_put_back():
    hand_back, backend, binder, threads, warnings = bound_run()
    backend.masks[102] = BOTH                   # an admin's taskset, then the end
    assert hand_back.restore_all() == 0
    assert [call[:3] for call in binder.calls if call[0] == "restore"] == [
        ("restore", PID, 101)]
    assert any("thread 102 (t102): its affinity was changed" in w for w in warnings)


def test_threads_born_of_bound_ones_since_the_last_look_go_back_at_the_end():
    hand_back, backend, binder, _, _ = bound_run()
    backend.run(103, 0)                         # born of 101: its mask, never tracked
    backend.masks[103] = ZERO
    backend.run(104, 0)                         # its own mask: someone else's
    backend.masks[104] = frozenset({0, 1, 2})
    assert hand_back.restore_all() == 0
    restored = {call[2]: call[3] for call in binder.calls if call[0] == "restore"}
    assert restored == {101: BOTH, 102: BOTH, 103: BOTH}
    assert backend.masks[104] == {0, 1, 2}


def test_children_of_a_bound_thread_and_theirs_go_back_to_its_cpus():
    hand_back, backend, binder, threads, _ = bound_run()
    backend.children_of[(PID, 101)] = [500]
    backend.child_threads[500] = {500: ZERO, 501: frozenset({5})}
    backend.children_of[(500, 500)] = [600]
    backend.child_threads[600] = {600: ZERO}
    backend.children_of[(PID, 102)] = [PID]     # (a target of its own is left alone)
    assert hand_back.put_back_children(PID, threads) == (2, 0)
    assert [(call[1], call[2], call[3]) for call in binder.calls] == [
        (500, 500, BOTH), (600, 600, BOTH)]
    assert backend.child_threads[500][501] == {5}       # not tumbler's mask


def test_a_process_that_cannot_be_read_at_the_end_still_has_its_threads_put_back():
    """The look for an execve before the hand-back (check_exec) reads each
    target's state; an error there other than its exit (a platform error:
    an LSM refusing the read) is one warning, and every thread still goes
    back -- it used to end the hand-back before any was put back, and one
    in the sweep after them left the binder, journal and backend open."""
    from tumbler.platform.base import PlatformError
    hand_back, backend, binder, threads, warnings = bound_run()

    def refused(pid, fresh=False):
        raise PlatformError("cannot read /proc/%d/stat: refused" % pid)
    backend.process_state = refused
    # The look for threads born of bound ones (the sweep) cannot tell the
    # process is still the one taken on: one failure, kept in the journal
    # for `tumbler restore`; the binder and the backend are closed still.
    assert hand_back.restore_all() == 1
    assert backend.masks == {101: BOTH, 102: BOTH}
    assert all(t.saved is None for t in threads)
    refusal = "cannot read /proc/%d/stat: refused" % PID
    assert warnings == ["could not read process %d: %s" % (PID, refusal),
                        "could not look for threads born of bound ones in process %d: %s"
                        % (PID, refusal),
                        "removed what setup made"], warnings
    assert binder.calls[-1] == ("close",) and backend.closed


class Listed(Tracked):
    """A system whose processes can be listed, with their parents: the
    init process, the target, and the children the test adds."""

    def __init__(self):
        super().__init__()
        self.children_read = []         # the TIDs children() was asked about
        self.parents = {1: 0, PID: 1}

    def process_ids(self):
        return list(self.parents)

    def parent_of(self, pid):
        return self.parents[pid]

    def children(self, pid, tids=None):
        tids = tids if tids is not None else self.thread_ids(pid)
        self.children_read += list(tids)
        return super().children(pid, tids)


def test_a_target_no_process_names_as_parent_has_no_thread_s_children_read():
    """Issue 47: at the end, a program of many threads and no child
    process has its threads put back, and not one thread's children read
    (16,000 reads a pass were most of its hand-back): the processes'
    parents say it has none."""
    backend = Listed()
    hand_back, _, _, _ = bound_threads(backend, range(101, 141))
    assert hand_back.restore_all() == 0
    assert backend.children_read == []
    assert all(mask == BOTH for mask in backend.masks.values()) and len(backend.masks) == 40


def test_a_target_with_a_child_process_still_has_it_put_back_at_the_end():
    """A child forked by a bound thread (its parent: the target) goes back
    to what that thread was allowed, found by reading the threads' children."""
    backend = Listed()
    hand_back, _, _, _ = bound_threads(backend, range(101, 141))
    backend.children_of[(PID, 102)] = [500]
    backend.child_threads[500] = {500: ONE}
    backend.parents[500] = PID
    assert hand_back.restore_all() == 0
    assert backend.child_threads[500][500] == BOTH
    assert 102 in backend.children_read


def test_processes_that_cannot_be_listed_leave_the_threads_children_read():
    """A /proc that cannot be listed at the end is no reason to stop the
    sweep: the threads' children are read one by one, as before issue 47,
    and the child process goes back."""
    class Unlisted(Listed):
        def process_ids(self):
            raise PlatformError("cannot list /proc: refused")

    backend = Unlisted()
    hand_back, _, _, _ = bound_threads(backend, range(101, 141))
    backend.children_of[(PID, 102)] = [500]
    backend.child_threads[500] = {500: ONE}
    assert hand_back.restore_all() == 0
    assert backend.child_threads[500][500] == BOTH
    assert 102 in backend.children_read
