"""Following the machine while balancing: CPUs taken off-line and back,
cgroup cpusets narrowed and widened, the topology and isolated CPUs.

Cloud VMs hot-add and remove vCPUs, admins take CPUs off-line, container
runtimes and systemd (``AllowedCPUs=``) rewrite cpusets.  The controller
asks ``MachineWatch.replan`` at every round; at most every
CHECK_INTERVAL_S it looks (``look``): the on-line CPUs (one pread of
/sys/devices/system/cpu/online on Linux) and the cpuset of each target's
cgroup (Backend.cpuset_cpus: preads of /proc/PID/cgroup and the cpuset's
effective CPUs), about 20 us a look (BENCHMARKS.md).  When either changed
it balances over the planned domains cut down to the CPUs usable now --
on-line and within the
cpusets: a domain that lost every CPU is dropped until its CPUs return;
explicit ``--domains`` keep their definition and use what is usable; the
domains of a topology level are derived again from the topology and the
isolated CPUs read at that change of the on-line CPUs (a CPU back on-line
may come back elsewhere).  No thread is ever bound to an off-line or
no-longer-allowed CPU: the domains no longer hold one, and a bind the
kernel refuses because the machine changed under it is dropped, not taken
for a refusal of the thread (``outside``).

The kernel's own resets.  A thread bound to CPUs that all went off-line is
moved by the kernel, which widens its mask to its cpuset's CPUs
(select_fallback_rq); a cpuset change sets the mask of every thread in it
to the new CPUs (Linux before 6.2), or to the CPUs it asked for within
them, else the new CPUs (6.2 and later: the kernel keeps the requested
mask).  Found at the next look, such a change is not an admin's:
``reset_by_kernel`` says so when some CPU of the mask tumbler set went
off-line during the run, or the process's cpuset changed at that moment
(the look before it, or one made on the spot), and the new mask is what
the kernel makes of tumbler's (``_kernel_made``).  The thread stays
tumbler's -- placed again (the controller re-checks every bound thread at
a change: Controller._follow_machine), and restored at the end as usual.
An admin's change is still left alone, also to a thread tumbler handed
back meanwhile (one domain left) before it is bound again
(``kernel_masks``; Placer).  What cannot be told apart: an admin who gives
such a thread exactly that mask during the same change.
"""

import time

from ..cpulist import format_cpulist
from ..escape import printable
from ..errors import TumblerError
from ..platform.base import LEVELS, PlatformError
from .domains import DomainChoice, choose_domains


#: The on-line CPUs and the cpusets are read at most this often (every
#: round asks; on illumos the on-line CPUs are the cpu_info kstats).  A
#: kernel reset found at a bind reads them at once (reset_by_kernel).
CHECK_INTERVAL_S = 0.5


def _cpus(cpus):
    return format_cpulist(cpus) if cpus else "none"


class MachineWatch:
    """The on-line CPUs and cpusets a run has seen, and the domains it
    follows (``planned``; None where only changes are asked for: the
    service)."""

    __slots__ = ("backend", "_planned", "derives", "shape", "reserved", "online",
                 "went_offline", "plugged", "next_check", "cpusets", "settling", "over",
                 "said")

    def __init__(self, backend, planned=None):
        self.backend = backend
        self._planned = planned         # the DomainChoice to follow, all CPUs on-line
        # Domains of a topology level are derived again at a change of the
        # on-line CPUs (_derived); explicit ones, and space sharing's, not.
        self.derives = planned is not None and planned.level in LEVELS + ("auto",)
        self.shape = planned            # planned, or as derived at the last such change
        self.reserved = self._reserved() if self.derives else frozenset()
        self.online = self._read()
        self.went_offline = frozenset()     # CPUs seen off-line at some point of the run
        self.plugged = frozenset()      # CPUs off-line or on-line since the last look
        self.next_check = 0.0           # monotonic s of the next read
        self.cpusets = {}               # pid -> (cgroup, CPUs) at the last look, or None
        self.settling = frozenset()     # PIDs whose cpuset changed at the last look
        self.over = None                # the usable CPUs the domains were last cut to
        self.said = None                # the last change, as told

    @property
    def planned(self):
        return self._planned

    @planned.setter
    def planned(self, choice):
        """Space sharing gave the program other domains (Controller.
        reshape): followed as they are defined."""
        self._planned = self.shape = choice
        self.derives = False

    def _reserved(self):
        try:
            isolated, nohz_full = self.backend.reserved_cpus()
        except PlatformError:
            return frozenset()
        return isolated | nohz_full

    def _read(self):
        try:
            return self.backend.online_cpus()
        except PlatformError:
            return None                 # the platform cannot tell: nothing followed

    def _cpuset(self, pid, backend=None):
        try:
            return (backend or self.backend).cpuset_cpus(pid)
        except PlatformError:
            return None                 # gone, or unreadable: nothing followed

    def add(self, pid, backend=None):
        """A new target: its cpuset noted now, so that a change before the
        first look is one (Controller.add_target; the service, through
        the program's ``backend``)."""
        self.cpusets[pid] = self._cpuset(pid, backend)

    def look(self, pids=(), backend_of=None):
        """What changed since the last look, at most every CHECK_INTERVAL_S:
        [(text, PIDs)] -- ("CPU 1 off-line", None: every program),
        ("cgroup /app: CPUs 0 (was 0-1)", the PIDs of ``pids`` in that
        cpuset, or processor set); [] when nothing did, or it is not time
        yet.  ``backend_of(pid)``: the backend that knows a PID's binder
        (the service's programs each have theirs).  A PID neither seen nor
        added before has its cpuset noted, not taken for a change; nor is a cpuset
        changed only by CPUs going off-line or on-line now or at the look
        before (the kernel updates cpusets on hotplug, at once or soon
        after): the hotplug is the change."""
        now = time.monotonic()
        if now < self.next_check:
            return []
        self.next_check = now + CHECK_INTERVAL_S
        changes = []
        online = self._read()
        plugged = frozenset()
        if online is not None and self.online is not None and online != self.online:
            gone, back = self.online - online, online - self.online
            self.went_offline |= gone
            plugged = gone | back
            changes.append((", ".join(part for part in (
                "CPU %s off-line" % format_cpulist(gone) if gone else "",
                "CPU %s on-line" % format_cpulist(back) if back else "") if part), None))
        if online is not None:
            self.online = online
        recent, self.plugged = plugged | self.plugged, plugged     # this look's, the last's
        cpusets, moved, settling = {}, {}, []
        for pid in pids:
            found = self._cpuset(pid, None if backend_of is None else backend_of(pid))
            before = self.cpusets.get(pid, found)
            # A read that failed keeps what was known: stored as None, the
            # change a later read shows would be taken for the first sight.
            cpusets[pid] = before if found is None else found
            if found is None or before is None or found[1] == before[1]:
                continue
            settling.append(pid)
            if not found[1] ^ before[1] <= recent:
                moved.setdefault((found[0], found[1], before[1]), []).append(pid)
        self.cpusets = cpusets
        self.settling = frozenset(settling)
        for (where, cpus, was), group in sorted(moved.items(), key=str):
            changes.append(("%s: CPUs %s (was %s)" % (printable(where), _cpus(cpus), _cpus(was)),
                            frozenset(group)))
        return changes

    def usable(self):
        """The CPUs on-line and within the targets' cpusets at the last
        look (None: the platform tells neither)."""
        cpus = self.online
        sets = [found[1] for found in self.cpusets.values() if found is not None]
        if sets:
            allowed = frozenset().union(*sets)
            cpus = allowed if cpus is None else cpus & allowed
        return cpus

    def replan(self, pids, may_use):
        """(DomainChoice, message) when the on-line CPUs or the cpusets of
        ``pids`` changed since the last look, else None.  ``may_use()``:
        every CPU the program may use (asked only on a change: every
        round calls this)."""
        changes = self.look(pids)
        usable = self.usable()
        if not usable:
            return None
        if changes:
            change = self.said = ", ".join(text for text, _ in changes)
            if self.derives and any(group is None for _, group in changes):
                self.shape = self._derived()
        elif self.over is None or usable == self.over:
            self.over = self.over or usable
            return None
        else:
            # A cpuset caught up with the last hotplug since (or a target
            # in another cpuset came or went): cut again.
            change = self.said or "the targets' CPUs %s" % format_cpulist(usable)
        self.over = usable
        planned = self.shape
        domains = tuple(d & usable for d in planned.domains if d & usable)
        mine = may_use() & usable
        if not domains:
            # None of the domains' CPUs usable: nothing to balance over,
            # the threads go back to the OS until some return.
            note = "%s: no CPU of the domains left, all %s" % (change, _cpus(mine or usable))
            return DomainChoice(planned.level, (mine or usable,), note), note
        union = frozenset().union(*domains)
        confined = planned.confined or not mine <= union
        note = "%s: domains %s" % (change, " / ".join(format_cpulist(d) for d in domains))
        return DomainChoice(planned.level, domains, note, confined), note

    def _derived(self):
        """The planned domains of a topology level derived again from the
        topology read now, over the CPUs they hold but those isolated
        (isolcpus, nohz_full) since the run began; planned as they are if
        the platform cannot tell, or none of them is on-line."""
        planned = self._planned
        try:
            topology = self.backend.topology()
            cpus = frozenset().union(*planned.domains) - (self._reserved() - self.reserved)
            return choose_domains(topology, cpus, planned.level)
        except (PlatformError, TumblerError, NotImplementedError):
            return planned

    def outside(self, pid, cpus):
        """Whether ``cpus`` (a bind the kernel refused) are not all usable
        now -- off-line, not active (going off-line or coming on-line:
        Backend.inactive_cpus), or outside ``pid``'s cpuset, read now: the
        machine changed under the bind, the next look re-plans."""
        online = self._read()
        found = self._cpuset(pid)
        return bool((online is not None and cpus - online) or cpus & self._inactive()
                    or (found is not None and cpus - found[1]))

    def _inactive(self):
        try:
            return self.backend.inactive_cpus()
        except PlatformError:
            return frozenset()

    def kernel_masks(self, pid, asked):
        """The masks a thread of ``pid`` that asked for ``asked`` may show
        now, whatever the machine did since (``_kernel_made``; a cpuset
        the kernel has not updated yet leaves ``asked``).  Read now.  Where
        the kernel does not keep the mask asked for (Linux before 6.2,
        ``Backend.keeps_asked_mask``), also ``asked`` less the CPUs that
        went off-line during the run: cut while they were off-line, for
        good (found by a 6.1 guest test).  An admin who gives the thread
        exactly that mask then cannot be told from the kernel."""
        online = self._online_now()
        found = self._cpuset(pid)
        if found is None:
            masks = {asked, asked & online} if online is not None else {asked}
            return _cut(masks, self._cut_for_good(asked))
        return _kernel_made(asked, found[1], online, self._cut_for_good(asked))

    def _online_now(self):
        """The CPUs on-line and active now (None: not told), noting those
        gone since the last look, and those on-line but not active, in
        ``went_offline``.  A CPU going off-line leaves the scheduler's
        active CPUs before the on-line ones (the kernel may already have
        moved its threads), one coming on-line joins them after: either
        way a mask set then is cut by it (Backend.inactive_cpus: two reads
        of tumbler's own thread, at each call -- a thread's mask that is
        not as tumbler left it, or one handed back being bound again)."""
        online = self._read()
        if online is None:
            return None
        inactive = self._inactive() & online
        self.went_offline |= inactive
        if self.online is not None:
            self.went_offline |= self.online - online
        return online - inactive

    def _cut_for_good(self, mask):
        """The CPUs of ``mask`` a kernel that does not keep the mask asked
        for (Linux before 6.2) took out of it for good: those that went
        off-line during the run (found by a 6.1 guest test); none if no CPU
        of ``mask`` went."""
        if self.backend.keeps_asked_mask or not mask & self.went_offline:
            return frozenset()
        return self.went_offline

    def reset_by_kernel(self, pid, bound_mask, current):
        """Whether a thread of ``pid`` whose mask is ``current``, no longer
        ``bound_mask`` (the one tumbler set), was moved by the kernel:
        some CPU of that mask went off-line during the run (now, or since
        it was bound), or the process's cpuset changes at this moment --
        and ``current`` is what the kernel makes of ``bound_mask``: within
        the cpuset read now, else the cpuset's CPUs (any mask, where the
        platform tells no cpuset)."""
        online = self._online_now()
        found = self._cpuset(pid)
        cut = self._cut_for_good(bound_mask)
        if bound_mask & self.went_offline or (online is not None and bound_mask - online):
            # select_fallback_rq: the cpuset's CPUs, else every CPU.
            return found is None or current == online or \
                current in _kernel_made(bound_mask, found[1], online, cut)
        known = self.cpusets.get(pid)
        if found is None or known is None or (
                pid not in self.settling and known[1] == found[1]):
            return False                # no cpuset change now: someone else's
        return current in _kernel_made(bound_mask, found[1], online, cut)


def _kernel_made(asked, cpuset, online, cut=frozenset()):
    """The masks the kernel may give a thread that asked for ``asked``
    under ``cpuset`` (a hotplug's fallback, a cpuset change: Linux before
    and since 6.2), as read with or without the CPUs off-line, and less
    ``cut`` (MachineWatch._cut_for_good)."""
    made = {asked & cpuset or cpuset, cpuset, asked}
    if online is not None:
        made |= {mask & online for mask in made}
    return _cut(made, cut)


def _cut(masks, cut):
    """``masks`` and each of them less the CPUs ``cut`` (none left: not)."""
    return masks | {mask - cut for mask in masks if mask - cut} if cut else masks
