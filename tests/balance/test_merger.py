"""The domain merger (balance/merged.py) on its own, and the Layout it
reads (balance/domains.py): when a run's domains merge into one, when
they split again, and what each judgement leaves pending."""

from types import SimpleNamespace

from tumbler.balance.domains import DomainChoice, Layout
from tumbler.balance.merged import MERGE_HOLD_WINDOWS, SPLIT_HOLD_WINDOWS, DomainMerger
from tumbler.balance.otherwork import OtherWork, OtherWorkCounting
from tumbler.engine.model import ThreadView
from tumbler.engine.policy import make_policy
from tumbler.platform.base import Unsupported

WINDOW_NS = 500_000_000
ZERO, ONE = frozenset({0}), frozenset({1})
SPLIT = DomainChoice("llc", (ZERO, ONE), "test")


class Scripted:
    """No busy time to read: other work measured, never read."""

    def cpu_times(self):
        raise Unsupported("scripted")


def merger_over(choice=SPLIT, policy="auto", capacity="cpus"):
    layout = Layout(choice)
    reshaped = []

    def reshape(choice):
        reshaped.append(choice)
        layout.set(choice)
    other = OtherWork(Scripted(), layout, WINDOW_NS, None, merges=True,
                      counting=OtherWorkCounting(capacity))
    merger = DomainMerger(make_policy(policy), layout, WINDOW_NS, other, moves_threads=True,
                          reshape=reshape, may_use=lambda: ZERO | ONE)
    return merger, layout, reshaped


def busy(count, sleeps=0.0):
    """``count`` always-runnable threads over the two domains."""
    return [ThreadView(100 + i, 1.0, i % 2, frozenset({0, 1}), None, 10**8, 10**8, 1.0,
                       sleeps, None) for i in range(count)]


def at(ns):
    return [SimpleNamespace(wall_ns=ns)]


def test_the_layout_is_the_choices_domains_and_their_cpus():
    layout = Layout(DomainChoice("explicit", (frozenset({0, 1}), frozenset({2})), "test"))
    assert [(d.index, d.cpus, d.capacity) for d in layout.domains] == [
        (0, {0, 1}, 2), (1, {2}, 1)]
    assert list(layout.capacities) == [2, 1]
    layout.set(SPLIT)
    assert list(layout.capacities) == [1, 1] and layout.choice is SPLIT


def test_three_busy_threads_on_two_cpus_merge_the_domains_after_the_hold():
    merger, layout, reshaped = merger_over()
    assert merger.may_merge()
    assert merger.judge(busy(3), at(0), None) is None
    assert merger.pending and merger.wanted_ns == 0 and reshaped == []
    held = MERGE_HOLD_WINDOWS * WINDOW_NS
    assert merger.judge(busy(3), at(held - 1), None) is None and merger.pending
    note = merger.judge(busy(3), at(held), None)
    assert note == ("domains 0 / 1 merged: more runnable threads than their 2 CPUs, "
                    "and no grouping even")
    assert [c.domains for c in reshaped] == [(ZERO | ONE,)]
    assert merger.split_choice is SPLIT and merger.unmerged() is SPLIT
    assert layout.choice.domains == (ZERO | ONE,) and not merger.pending
    # Merged, the same load keeps them merged: nothing to do.
    assert merger.judge(busy(3), at(held + 1), None) is None and not merger.pending


def test_merged_domains_split_again_once_the_grouping_can_be_even():
    merger, layout, reshaped = merger_over()
    merger.judge(busy(3), at(0), None)
    merger.judge(busy(3), at(MERGE_HOLD_WINDOWS * WINDOW_NS), None)
    start = 10 * WINDOW_NS
    assert merger.judge(busy(2), at(start), None) is None and merger.pending
    assert merger.judge(busy(2), at(start + SPLIT_HOLD_WINDOWS * WINDOW_NS - 1), None) is None
    note = merger.judge(busy(2), at(start + SPLIT_HOLD_WINDOWS * WINDOW_NS), None)
    assert note == "domains split again into 0 / 1: the grouping can be even, no other work"
    assert reshaped[-1] is SPLIT and merger.split_choice is None
    assert layout.choice is SPLIT


def test_not_judged_until_the_threads_sleeping_is_known():
    merger, _, reshaped = merger_over()
    assert merger.judge(busy(3, sleeps=None), at(0), None) is None
    assert merger.pending and merger.wanted_ns is None and reshaped == []
    # An even load: no merge wanted, nothing pending.
    assert merger.judge(busy(2), at(1), None) is None and not merger.pending


def test_which_runs_may_merge_their_domains():
    assert not merger_over(policy="tumbler")[0].may_merge()      # only auto merges
    assert not merger_over(capacity="measured")[0].may_merge()   # measured capacity
    assert not merger_over(DomainChoice("numa", (ZERO, ONE), "test"))[0].may_merge()
    merger, _, _ = merger_over()
    merger.forget()
    assert merger.may_merge() and merger.split_choice is None
