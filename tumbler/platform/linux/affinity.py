"""Binding by sched_setaffinity(2): a thread's CPU mask is its placement.

The mask is the thread's own: a thread or process it creates starts with
it, and anyone with the privilege may change it later (see
``Binder.binds_masks``).
"""

import os

from ..base import Binder, Unmovable
from .oserror import mapped, thread_phrase

PF_NO_SETAFFINITY = 0x04000000


class AffinityBinder(Binder):
    """Binds with sched_setaffinity(2); the OS balances inside the domain."""

    kind = "affinity"
    binds_masks = True

    def __init__(self, backend):
        self.backend = backend

    def setup(self, domains):
        pass

    def save(self, pid, tid):
        return {"cpus": sorted(self.backend.allowed_cpus(pid, tid))}

    def bind(self, pid, tid, domain_index, cpus):
        if self.backend.thread_flags(pid, tid) & PF_NO_SETAFFINITY:
            raise Unmovable(tid, "the kernel forbids changing its affinity (PF_NO_SETAFFINITY)")
        self.backend.check_thread(pid, tid)
        set_affinity(pid, tid, cpus)

    def restore(self, pid, tid, saved):
        self.backend.check_thread(pid, tid)
        set_affinity(pid, tid, saved["cpus"])

    def placed_by_tumbler(self, pid, tid, record, state, last_masks):
        """With the masks log (``state["masks"]``): the thread's mask is one
        of the last ones tumbler set on it, or its original (putting it
        back then changes nothing).  Older state files: tumbler only ever
        bound a thread to a domain cut to its original CPUs, or (speed
        balancing) to one CPU of those."""
        original = frozenset(record["saved"].get("cpus") or
                             state.get("target", {}).get("allowed") or ())
        current = self.backend.allowed_cpus(pid, tid)
        if not original or current == original:
            return True
        if "masks" in state:
            return current in last_masks
        domains = state.get("domains")
        if not domains:
            return True
        union = frozenset().union(*(frozenset(d) for d in domains)) & original
        ours = {frozenset(d) & original for d in domains} | {frozenset([c]) for c in union}
        return current in ours

    def leftover_placement(self, pid, tid, state):
        """A thread whose mask is one the dead tumbler set (any it logged;
        without a log, a domain cut to the process's CPUs) belongs on the
        process's CPUs, as the running tumbler would have judged."""
        allowed = state.get("target", {}).get("allowed")
        if not allowed:
            return None
        allowed = frozenset(allowed)
        if "masks" in state:
            ours = {frozenset(m) for m in state["masks"]}
        elif state.get("domains"):
            ours = {frozenset(d) & allowed for d in state["domains"]}
        else:
            return None
        current = self.backend.allowed_cpus(pid, tid)
        if current == allowed or current not in ours:
            return None
        return {"cpus": sorted(allowed)}


def set_affinity(pid, tid, cpus):
    with mapped(pid, tid, "change " + thread_phrase(pid, tid), change=True):
        os.sched_setaffinity(tid, cpus)
