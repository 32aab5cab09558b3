"""Merged domains (engine/policy.py, 5.; engine/merging.py says when):
the controller's judgement, each full round, of whether to merge its
domains into one or split them again, and the merge or split itself
through ``Controller._reshape``."""

import time

from ..cpulist import format_cpulist
from ..engine.merging import OTHER_WORK, OVERSUBSCRIBED, merge_wanted, stay_merged
from .domains import DomainChoice, mergeable

#: Domains merge once every round for this many load windows asked for it,
#: and split after this many (engine/policy.py, 5.; _merge_or_split).
#: Merging hands threads back to the OS, the safe way, so it comes sooner:
#: every second 3 busy threads stay 2 + 1 on two 1-CPU domains costs the
#: pair a third of their speed.
MERGE_HOLD_WINDOWS = 1
SPLIT_HOLD_WINDOWS = 2


class MergedDomains:
    """Controller's job: merging its domains and splitting them again."""

    def _may_merge(self):
        """Whether this run's domains may merge: auto moving threads, domains
        of a level that may (balance/domains.py), and capacity counted in
        CPUs -- measured capacity weighs the domains instead (and may leave
        one out): merging would hand threads back to CPUs it found taken."""
        return (self.policy.merges_domains and self.moves_threads
                and self.capacity_meter is None
                and mergeable(self._split_choice or self.choice))

    def _merge_or_split(self, views, samples, other):
        """Merge the domains into one when the program is oversubscribed
        across them unevenly, or other work crowds one (engine/merging.py;
        ``other``: other work per domain, None if not measured), split them
        again once neither holds -- once every judgement over
        MERGE_HOLD_WINDOWS (SPLIT_HOLD_WINDOWS) load windows asked for it,
        so never on a passing change: the loads that decide it reach back
        a window, so a thread idle for a moment counts as not runnable for
        a window after.
        Returns a note for the round's reason when it did either; sets
        ``_merge_pending`` while a judgement waits for readings or its
        hold (rounds come at auto's judging pace then, none quiet)."""
        self._merge_pending = False
        if not self._may_merge():
            return None
        split = self._split_choice or self.choice
        now = samples[0].wall_ns if samples else time.monotonic_ns()
        cores = [len(d) for d in split.domains]
        if self._split_choice is None:
            merged = merge_wanted(views, cores, other)
        else:
            merged = stay_merged(views, cores, other[0] if other else None)
        if merged is None:
            self._merge_pending = True
            return None                 # not judged yet: nothing changes
        if bool(merged) == (self._split_choice is not None):
            self._merge_wanted_ns = None
            return None
        if self._merge_wanted_ns is None:
            self._merge_wanted_ns = now
        # Other work is measured over a load window already (the capacity
        # meter): a merge for it comes at once.
        hold = (0 if merged == OTHER_WORK else MERGE_HOLD_WINDOWS) if merged \
            else SPLIT_HOLD_WINDOWS
        if now - self._merge_wanted_ns < hold * self.load_window_ns:
            self._merge_pending = True
            return None
        self._merge_wanted_ns = None
        if not merged:
            self._reshape(split)
            self._split_choice = None
            return "domains split again: the grouping can be even, no other work"
        union = frozenset().union(*split.domains)
        may_use = self._may_use()
        confined = split.confined or not may_use <= union
        names = " / ".join(format_cpulist(d) for d in split.domains)
        if merged == OVERSUBSCRIBED:
            note = ("domains %s merged: more runnable threads than their %d CPUs, "
                    "and no grouping even" % (names, len(union)))
        else:
            note = ("domains %s merged: other work (%s CPU) competes with the program's threads"
                    % (names, " / ".join("%.1f" % o for o in other)))
        self._reshape(DomainChoice(split.level, (union,), note, confined))
        if other and self.other_meter is not None:
            # What the split domains held until the meter reads the union:
            # speed balancing must not engage in it for a round meanwhile.
            self.other_meter.other[union] = sum(other)
        self._split_choice = split
        return note
