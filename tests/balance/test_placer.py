"""The placer (balance/placer.py) on its own: every change of a thread's
placement -- the masks it sets, what it saves first, what it counts, and
the threads it hands over to someone else -- on a scripted backend whose
masks a binder sets."""

from support.scripted import PID, MaskBinder, MaskedBackend
from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.machine import MachineWatch
from tumbler.balance.placer import Placer
from tumbler.balance.spreads import RunStats
from tumbler.balance.threads import TrackedThread
from tumbler.platform.base import Unmovable

BOTH = frozenset({0, 1})
TWO = DomainChoice("explicit", (frozenset({0}), frozenset({1})), "test")


def placer_over(choice=TWO, dry_run=False, binder=None):
    backend = MaskedBackend()
    binder = binder or MaskBinder(backend)
    warnings = []
    placer = Placer(backend, binder, Layout(choice), MachineWatch(backend), RunStats(0.0),
                    warnings.append, dry_run=dry_run)
    return placer, backend, binder, warnings


def thread(tid, domain=None):
    return TrackedThread(PID, tid, tid, "t%d" % tid, BOTH, frozenset({0, 1}), (0, 0, 0),
                         domain=domain)


def test_new_threads_are_placed_one_per_domain_and_saved_first():
    placer, backend, binder, _ = placer_over()
    new = [thread(101), thread(102)]
    placer.place_new(new, new)
    assert sorted((t.tid, t.domain) for t in new) in ([(101, 0), (102, 1)],
                                                      [(101, 1), (102, 0)])
    assert {backend.masks[t.tid] for t in new} == {frozenset({0}), frozenset({1})}
    assert placer.bound_masks == {frozenset({0}), frozenset({1})}
    assert all(t.saved == {"cpus": [0, 1]} and t.touched for t in new)
    assert sorted((t.tid, src, dst) for t, src, dst in placer.placed_between_rounds) == \
        sorted((t.tid, None, t.domain) for t in new)
    assert placer.stats.migrations == 0         # placements are no migrations


def test_a_move_between_domains_counts_as_a_migration():
    placer, backend, binder, _ = placer_over()
    moving = thread(101)
    placer.apply([(moving, 0)])
    made = placer.apply([(moving, 1)])
    assert [(t.tid, src, dst) for t, src, dst in made] == [(101, 0, 1)]
    assert backend.masks[101] == {1} and moving.migrations == 1
    assert placer.stats.migrations == 1
    assert placer.apply([(moving, 1)]) == []    # already there: nothing done
    assert [call[0] for call in binder.calls] == ["bind", "bind"]


def test_a_mask_someone_else_set_is_theirs_from_then_on():
    placer, backend, binder, warnings = placer_over()
    taken = thread(101)
    placer.apply([(taken, 0)])
    backend.masks[101] = BOTH                   # an admin's taskset
    assert not placer.still_ours(taken)
    assert taken.unmovable and taken.saved is None and taken.allowed == BOTH
    assert warnings == ["thread 101 (t101): its affinity was changed to 0-1 by someone "
                        "else; tumbler leaves it alone from now on"]
    assert placer.bind_all([(taken, 1, None)]) == []
    assert backend.masks[101] == BOTH


def test_a_thread_handed_back_goes_back_to_its_mask_and_remembers_it():
    placer, backend, binder, _ = placer_over()
    handed = thread(101)
    placer.apply([(handed, 1)])
    assert placer.hand_back(handed)
    assert backend.masks[101] == BOTH and binder.calls[-1] == ("restore", PID, 101, BOTH)
    assert (handed.saved, handed.bound_mask, handed.handed) == (None, None, BOTH)
    # Bound again while its mask is still the one it was handed back with.
    assert [t.tid for t, _, _ in placer.apply([(handed, 0)])] == [101]
    assert handed.handed is None and backend.masks[101] == {0}


def test_a_pin_is_one_cpu_of_the_threads_domain():
    placer, backend, _, _ = placer_over(DomainChoice("explicit", (BOTH,), "test", True))
    pinned = thread(101, domain=0)
    assert [(t.tid, cpu) for t, _, cpu in placer.bind_all([(pinned, 0, 1)])] == [(101, 1)]
    assert (pinned.pinned_cpu, pinned.bound_mask, backend.masks[101]) == (1, {1}, {1})


def test_a_dry_run_binds_nothing_but_keeps_the_books():
    placer, backend, binder, _ = placer_over(dry_run=True)
    dry = thread(101)
    assert [(t.tid, src, dst) for t, src, dst in placer.apply([(dry, 1)])] == [(101, None, 1)]
    assert dry.domain == 1 and dry.saved is None
    assert binder.calls == [] and backend.masks == {}


def test_a_thread_the_os_refuses_to_move_is_left_where_it_is():
    class Refusing(MaskBinder):
        def bind(self, pid, tid, domain_index, cpus):
            raise Unmovable(tid, "a kernel thread")
    placer, backend, _, warnings = placer_over()
    placer.binder = Refusing(backend)
    stuck = thread(101)
    assert placer.apply([(stuck, 1)]) == []
    assert stuck.unmovable and stuck.domain is None
    assert placer.stats.warnings == 1
    assert warnings == ["thread 101 cannot be moved: a kernel thread; leaving it where it is"]


def test_with_one_domain_a_thread_born_of_a_bound_one_is_handed_back_at_once():
    placer, backend, binder, _ = placer_over(DomainChoice("explicit", (BOTH,), "test"))
    born = thread(102, domain=0)
    backend.masks[102] = frozenset({1})         # its creator's pin
    placer.adopt_inherited([(born, frozenset({1}))])
    assert binder.calls == [("restore", PID, 102, BOTH)]
    assert backend.masks[102] == BOTH and born.saved is None and born.handed == BOTH
