"""Static placement: every thread bound once, in order of appearance, and
never moved again -- the baselines ``tumbler compare`` measures balancing
against (``pinned``, PBind in the Tumbler paper: one CPU per thread, round
robin; ``psets``, PSets: whole domains, round robin, never regrouped).

Only the threads of one process are placed, as ``tumbler exec`` balances
them; new threads are looked for every millisecond while they keep
appearing, backing off to 64 ms while none do, so a program that starts
its threads at once has them placed at once without a busy watcher.
"""

import time

from ..platform import open_backend
from ..platform.base import NoSuchProcess, Unmovable

#: How often ``follow`` looks for new threads: from the first value while
#: threads keep appearing, doubling up to the last while none do.
FIRST_POLL_S = 0.001
LAST_POLL_S = 0.064


class StaticPlacer:
    """Binds every thread of a process, in order of appearance, once,
    through the platform's binder (``backend.binder("affinity")``).

    Thread i (counting from the main thread, 0) gets ``targets[i % len]``.
    ``placed`` records what was done: tid -> CPUs, in placement order.
    """

    def __init__(self, targets, backend=None):
        if not targets:
            raise ValueError("need at least one CPU set")
        self.targets = [frozenset(t) for t in targets]
        self.placed = {}
        self.skipped = set()            # threads that exited or refused the CPUs
        self.backend = backend if backend is not None else open_backend()
        self.binder = self.backend.binder("affinity")
        self.binder.setup(self.targets)

    def place_new(self, pid):
        """Bind the threads of ``pid`` not seen before; return how many."""
        try:
            tids = self.backend.thread_ids(pid)
        except NoSuchProcess:
            return 0
        count = 0
        for tid in tids:
            if tid in self.placed or tid in self.skipped:
                continue
            index = (len(self.placed) + len(self.skipped)) % len(self.targets)
            try:
                self.binder.bind(pid, tid, index, self.targets[index])
            except (NoSuchProcess, Unmovable):      # gone, or may not use the CPUs
                self.skipped.add(tid)
            else:
                self.placed[tid] = self.targets[index]
                count += 1
        return count

    def follow(self, process):
        """Place threads of ``process`` (a Popen) as they appear, until it exits."""
        pause = FIRST_POLL_S
        while process.poll() is None:
            pause = FIRST_POLL_S if self.place_new(process.pid) else min(pause * 2, LAST_POLL_S)
            time.sleep(pause)


def pinned_targets(domains):
    """PBind: one CPU at a time, over the domains' CPUs in ascending order."""
    return [frozenset([cpu]) for cpu in sorted(frozenset().union(*domains))]


def psets_targets(domains):
    """PSets: whole domains, in domain order."""
    return [frozenset(d) for d in domains]
