"""Merged domains (engine/policy.py, 5.; engine/merging.py says when):
the judgement, each full round, of whether to merge a run's domains into
one or split them again (``DomainMerger``).  The merge or split itself is
the controller's reshape, which the merger is given to call."""

import time

from ..cpulist import format_cpulist
from ..engine.merging import OTHER_WORK, OVERSUBSCRIBED, merge_wanted, stay_merged
from .domains import DomainChoice, mergeable

#: Domains merge once every round for this many load windows asked for it,
#: and split after this many (engine/policy.py, 5.; DomainMerger.judge).
#: Merging hands threads back to the OS, the safe way, so it comes sooner:
#: every second 3 busy threads stay 2 + 1 on two 1-CPU domains costs the
#: pair a third of their speed.  MERGE_HOLD_WINDOWS measured: BENCHMARKS.md,
#: issue 27, "Oversubscribed across one-CPU domains" (1 against 2).
#: SPLIT_HOLD_WINDOWS derived: the loads a judgement reads reach back a
#: load window, so a thread idle for a moment shows as not runnable for a
#: window after it; a split must outlast that window and then see one of
#: its own.  Supported: exactly 2 (1 splits on a moment's idleness).
MERGE_HOLD_WINDOWS = 1
SPLIT_HOLD_WINDOWS = 2


class DomainMerger:
    """Whether a run's domains are merged now, and the judgement of merging
    them or splitting them again.

    Owns: ``split_choice`` (the domains as they were before the merge, None
    while not merged), ``wanted_ns`` (since when every judgement asked for
    the change) and ``pending`` (a judgement waits for readings or its
    hold).  Reads the run's Layout; changes it only through ``reshape``
    (the controller's: a DomainChoice -> balance over it); ``other``: the
    run's OtherWork (balance/otherwork.py)."""

    def __init__(self, policy, layout, load_window_ns, other, *, moves_threads, reshape,
                 may_use):
        self.policy = policy
        self.layout = layout
        self.load_window_ns = load_window_ns
        self.moves_threads = moves_threads
        self.other = other
        self.reshape = reshape
        self.may_use = may_use          # () -> every CPU the program may use
        self.split_choice = None        # the domains merged now (engine/policy.py, 5.)
        self.wanted_ns = None           # since when every judgement asked to merge (split)
        self.pending = False            # a judgement waits for readings or its hold
        self.due_ns = None              # when a judgement waiting for its hold ends

    def unmerged(self):
        """The domains as planned: before the merge, if merged now."""
        return self.split_choice or self.layout.choice

    def forget(self):
        """The domains were replaced from outside (space sharing, the
        machine): nothing merged any more, every judgement starts anew."""
        self.split_choice = self.wanted_ns = None

    def may_merge(self):
        """Whether this run's domains may merge: auto moving threads, domains
        of a level that may (balance/domains.py), and capacity counted in
        CPUs -- measured capacity weighs the domains instead (and may leave
        one out): merging would hand threads back to CPUs it found taken."""
        return (self.policy.merges_domains and self.moves_threads
                and not self.other.weighs_domains
                and mergeable(self.unmerged()))

    def judge(self, views, samples, other):
        """Merge the domains into one when the program is oversubscribed
        across them unevenly, or other work crowds one (engine/merging.py;
        ``other``: other work per domain, None if not measured), split them
        again once neither holds -- once every judgement over
        MERGE_HOLD_WINDOWS (SPLIT_HOLD_WINDOWS) load windows asked for it,
        so never on a passing change: the loads that decide it reach back
        a window, so a thread idle for a moment counts as not runnable for
        a window after.
        Returns a note for the round's reason when it did either; sets
        ``pending`` while a judgement waits for readings or its hold
        (rounds come at WATCH_INTERVAL_MS at most then, never paced
        further, none quiet), and ``due_ns`` (the samples' clock) to when
        the hold ends, None when it waits for readings or nothing."""
        self.pending = False
        self.due_ns = None
        if not self.may_merge():
            return None
        split = self.unmerged()
        now = samples[0].wall_ns if samples else time.monotonic_ns()
        cores = [len(d) for d in split.domains]
        if self.split_choice is None:
            merged = merge_wanted(views, cores, other)
        else:
            merged = stay_merged(views, cores, other[0] if other else None)
        if merged is None:
            self.pending = True
            return None                 # not judged yet: nothing changes
        if bool(merged) == (self.split_choice is not None):
            self.wanted_ns = None
            return None
        if self.wanted_ns is None:
            self.wanted_ns = now
        # Other work is measured over a load window already (the capacity
        # meter): a merge for it comes at once.
        hold = (0 if merged == OTHER_WORK else MERGE_HOLD_WINDOWS) if merged \
            else SPLIT_HOLD_WINDOWS
        if now - self.wanted_ns < hold * self.load_window_ns:
            self.pending = True
            self.due_ns = self.wanted_ns + hold * self.load_window_ns
            return None
        self.wanted_ns = None
        names = " / ".join(format_cpulist(d) for d in split.domains)
        if not merged:
            self.reshape(split)
            self.split_choice = None
            return "domains split again into %s: the grouping can be even, no other work" % names
        union = frozenset().union(*split.domains)
        may_use = self.may_use()
        confined = split.confined or not may_use <= union
        if merged == OVERSUBSCRIBED:
            note = ("domains %s merged: more runnable threads than their %d CPUs, "
                    "and no grouping even" % (names, len(union)))
        else:
            note = ("domains %s merged: other work (%s CPU) competes with the program's threads"
                    % (names, " / ".join("%.1f" % o for o in other)))
        self.reshape(DomainChoice(split.level, (union,), note, confined))
        if other:
            # What the split domains held until the meter reads the union:
            # speed balancing must not engage in it for a round meanwhile.
            self.other.hold(union, sum(other))
        self.split_choice = split
        return note
