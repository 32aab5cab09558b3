"""Following the machine while balancing: CPUs taken off-line and back.

Cloud VMs hot-add and remove vCPUs, admins take CPUs off-line.  The
controller asks ``MachineWatch.replan`` at every round (one pread of
/sys/devices/system/cpu/online on Linux, a few microseconds) and, when
the on-line CPUs changed, balances over the planned domains cut down to
the CPUs on-line now: a domain that lost every CPU is dropped until its
CPUs return; explicit ``--domains`` keep their definition and use what is
on-line.  No thread is ever bound to an off-line CPU.

The kernel's own resets.  A thread bound to CPUs that all went off-line
is moved by the kernel, which widens its mask to its cpuset's CPUs
(select_fallback_rq); found at the next look, that change is not an
admin's: ``reset_by_kernel`` says so when some CPU of the mask tumbler set
went off-line during the run, and the thread stays tumbler's -- placed
again, and restored at the end as usual.  An admin's change to a mask of
CPUs that stayed on-line is still left alone.  What cannot be told apart:
an admin who changes such a thread's mask during the same hotplug.
"""

import time

from ..cpulist import format_cpulist
from ..platform.base import PlatformError
from .domains import DomainChoice


#: The on-line CPUs are read at most this often (every round asks; on
#: illumos the read is a topology's kstats).  A kernel reset found at a
#: bind reads them at once (reset_by_kernel).
CHECK_INTERVAL_S = 0.5


class MachineWatch:
    """The on-line CPUs a run has seen, and the domains it follows
    (``planned``; None where only changes are asked for: the service)."""

    __slots__ = ("backend", "planned", "online", "went_offline", "next_check")

    def __init__(self, backend, planned=None):
        self.backend = backend
        self.planned = planned          # the DomainChoice to follow, all CPUs on-line
        self.online = self._read()
        self.went_offline = frozenset()     # CPUs seen off-line at some point of the run
        self.next_check = 0.0           # monotonic s of the next read

    def _read(self):
        try:
            return self.backend.online_cpus()
        except PlatformError:
            return None                 # the platform cannot tell: nothing followed

    def changed(self):
        """What changed since the last look -- "CPU 1 off-line", "CPU 1
        on-line" -- or None; at most every CHECK_INTERVAL_S (a read of the
        platform's on-line CPUs: a pread on Linux, a topology on illumos)."""
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + CHECK_INTERVAL_S
        online = self._read()
        if online is None or self.online is None or online == self.online:
            return None
        gone, back = self.online - online, online - self.online
        self.went_offline |= gone
        self.online = online
        return ", ".join(part for part in (
            "CPU %s off-line" % format_cpulist(gone) if gone else "",
            "CPU %s on-line" % format_cpulist(back) if back else "") if part)

    def replan(self, may_use):
        """(DomainChoice, message) when the on-line CPUs changed since the
        last look, else None.  ``may_use()``: every CPU the program may
        use (asked only on a change: every round calls this)."""
        change = self.changed()
        if change is None:
            return None
        online, planned = self.online, self.planned
        domains = tuple(d & online for d in planned.domains if d & online)
        if not domains:
            return None                 # none of its CPUs on-line: nothing to balance over
        union = frozenset().union(*domains)
        confined = planned.confined or not (may_use() & online) <= union
        note = "%s: domains %s" % (change, " / ".join(format_cpulist(d) for d in domains))
        return DomainChoice(planned.level, domains, note, confined), note

    def reset_by_kernel(self, bound_mask):
        """Whether a thread whose mask is no longer ``bound_mask`` (the one
        tumbler set) was moved by the kernel: some CPU of that mask went
        off-line during the run (now, or since it was bound)."""
        online = self._read()
        if online is not None and self.online is not None:
            self.went_offline |= self.online - online
        return bool(bound_mask & self.went_offline
                    or (online is not None and bound_mask - online))
