"""Tracking a run's threads and measuring their loads (the loop's first
two steps: sample, then loads over the load window): ``ThreadTracker``,
the one owner of the table of tracked threads every other component
reads."""

import os

from ..cpulist import format_cpulist
from ..platform.base import NoSuchProcess, PlatformError, allowed_union
from .loads import LoadWindow


_NONE = frozenset()


class TrackedThread:
    """One thread of a target, as the loop knows it (a plain class with
    __slots__, not a dataclass: see platform/base.py)."""

    __slots__ = ("pid", "tid", "start", "name", "allowed", "eligible", "first", "prev_wall",
                 "prev_run", "exec_ns", "wall_ns", "load", "cpu", "runnable", "domain",
                 "saved", "migrations", "unmovable", "pinned_cpu", "bound_mask", "touched",
                 "handed",
                 "switches", "sleeps_per_s", "switch_rate")

    def __init__(self, pid, tid, start, name, allowed, eligible, first, prev_wall=0,
                 prev_run=0, domain=None):
        self.pid = pid
        self.tid = tid
        self.start = start
        self.name = name
        self.allowed = allowed          # CPUs it was allowed when first seen
        self.eligible = eligible        # domain indices it may use
        self.first = first              # (wall_ns, run_ns, lat_ns) when first seen
        self.prev_wall = prev_wall      # wall_ns and run_ns at the last round's sample
        self.prev_run = prev_run
        self.exec_ns = 0                # CPU time over the last round
        self.wall_ns = 0                # length of the last round
        self.load = None                # demand, CPUs; None until measured over one interval
        self.cpu = None                 # CPU received (Eq. 1), what utilisation reports
        self.runnable = None
        self.domain = domain            # domain tumbler bound it to
        self.saved = None               # original placement, once touched
        self.migrations = 0
        self.unmovable = False          # the OS refused, or someone else manages it now
        self.pinned_cpu = None          # speed balancing pinned it to this CPU
        self.bound_mask = None          # the mask tumbler last set
        self.touched = False            # tumbler has set its mask (children may carry it)
        self.handed = None              # the mask it was handed back with, until bound again
        self.switches = None            # deque of (wall_ns, voluntary, all switches, run_ns)
        self.sleeps_per_s = None        # voluntary switches per second, last reading
        self.switch_rate = None         # switches per CPU-second, last reading

    def __repr__(self):
        return "TrackedThread(pid=%d, tid=%d, name=%r, domain=%r, load=%r)" % (
            self.pid, self.tid, self.name, self.domain, self.load)


class ThreadTracker:
    """The targets, their threads, and each thread's load.

    Owns: ``targets`` (PIDs), ``followed`` (pid -> start token: targets
    whose descendants are targets too), ``base_allowed`` (pid -> CPUs the
    process may use), ``images`` (pid -> program image token: exec
    detection), ``threads`` ((pid, tid) -> TrackedThread), ``loads`` (the
    LoadWindow over that table: balance/loads.py), the processes listed at
    the last look for new ones, and the orphans tumbler keeps under
    ``exec`` (keep_orphans).

    Reads ``bound_masks`` (the Placer's: a mask tumbler set is tumbler's
    doing) and the Layout's domains.  What it finds it hands on: new
    threads to ``found(new, inherited)`` (the controller places them),
    before a change of the threads quiet rounds read it calls
    ``changing()`` (neither given: nothing placed, no quiet rounds to
    end), and children of bound threads go to ``hand_back`` (the
    HandBack component, set by the controller once built: it reads this
    tracker's table)."""

    def __init__(self, backend, binder, policy, layout, machine, stats, warn, *,
                 bound_masks, load_window_ns, journal=None, other_meter=None,
                 found=None, changing=None):
        self.backend = backend
        self.binder = binder
        self.policy = policy
        self.layout = layout
        self.machine = machine          # MachineWatch: a new target's cpuset
        self.stats = stats
        self.warn = warn
        self.bound_masks = bound_masks
        self.journal = journal
        self.other_meter = other_meter  # started at the first target
        self.found = found or (lambda new, inherited: None)
        self.changing = changing or (lambda: None)
        self.hand_back = None
        self.targets = []
        self.followed = {}                  # pid -> start token: targets whose
                                            # descendants are targets too
        self._listed_pids = set()           # every process at the last look for them
        self._newest_pid = None             # Backend.newest_pid at that look
        self.base_allowed = {}              # pid -> CPUs the process may use
        self.images = {}                    # pid -> program image token (exec detection)
        self.threads = {}           # (pid, tid) -> TrackedThread
        self._tracked = {}          # pid -> TIDs in self.threads
        self.loads = LoadWindow(self.threads, TrackedThread, layout, load_window_ns)
        self.orphans_of = None      # (root, its CPUs) while tumbler keeps orphans
        self._own_processes = frozenset     # () -> PIDs of tumbler's own children
        self._eligible_sets = {}    # each eligible set once (eligible_for)

    def eligible_for(self, allowed):
        """The indices of the domains with a CPU in ``allowed``: one frozenset
        object per distinct answer, shared by every thread given it -- the
        engine's C pass looks at a round's eligible sets once per object
        (engine/_columns.c), not once per thread."""
        eligible = frozenset(d.index for d in self.layout.domains if d.cpus & allowed)
        return self._eligible_sets.setdefault(eligible, eligible)

    def add_target(self, pid, allowed=None, children=False, start=None):
        """Start managing ``pid``.  ``allowed`` is the CPU set the process
        may use (default: the union of its threads' masks now).
        ``children``: its descendant processes are managed with it, as
        they are found (``look_at_new_processes``).  ``start``: its start
        token as the caller knew it -- NoSuchProcess, before anything is
        changed, if ``pid`` names another process now."""
        # A new process to the backend, whatever had the PID before it
        # (a target that exited, whose reuse it refuses to read otherwise).
        self.backend.forget_process(pid)
        sample = self.backend.sample(pid)
        if self.other_meter is not None and not self.other_meter.readings:
            # Other work is known half a load window from now, not from the
            # first round (controller.py, _binding_deferred).
            self.other_meter.start(sample.wall_ns)
        token = self.backend.process(pid).start if children or start is not None else None
        if start is not None and token != start:
            raise NoSuchProcess(pid)
        if allowed is None:
            allowed = allowed_union(self.backend, [pid])
        self.base_allowed[pid] = frozenset(allowed)
        self.machine.add(pid)           # its cpuset as it is now (balance/machine.py)
        try:
            self.images[pid] = self.backend.process_state(pid)[1]
        except NoSuchProcess:
            pass
        self.targets.append(pid)
        if children:
            self.followed[pid] = token
        self._track(sample)
        if children:
            self.look_at_new_processes()

    def keep_orphans(self, root, allowed, own_processes=frozenset):
        """``exec``: tumbler started ``root`` (allowed CPUs ``allowed``) and,
        before anything is bound, is made the parent of every orphan among
        its descendants (Backend.keep_orphans), so that a process forked
        by a bound thread whose parent exited before tumbler looked --
        ``sh -c 'prog &'`` -- is still found: it is handed back to the
        CPUs ``root`` was allowed, not balanced, and reaped when it exits.
        ``own_processes()``: the PIDs of tumbler's own children (the
        probes' tracers), which are neither.  False if the platform
        cannot."""
        if not self.backend.keep_orphans():
            return False
        self.orphans_of = (root, frozenset(allowed))
        self._own_processes = own_processes
        return True

    def orphans(self, pids):
        """Of ``pids`` (children of tumbler's), the orphans of the command's
        tree (keep_orphans)."""
        if self.orphans_of is None:
            return []
        own = self._own_processes()
        return [pid for pid in pids
                if pid != self.orphans_of[0] and pid not in self.base_allowed
                and pid not in own]

    def reap_orphans(self):
        """Wait for the orphans that exited (SIGCHLD; keep_orphans), which
        would otherwise stay zombies for as long as tumbler runs."""
        if self.orphans_of is None:
            return
        try:
            children = self.backend.children(os.getpid())
        except NoSuchProcess:
            return
        for pid in self.orphans(children):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def look_at_new_processes(self):
        """New processes whose parent is a target: followed ones become
        targets (``_adopt``); the others' children are handed back if born
        of bound threads (HandBack.put_back_children).

        A new process is one not listed at the last look; only those have
        their parent read (Backend.parent_of), so the cost follows the
        processes made, not the programs' threads -- and nothing at all is
        read while ``newest_pid`` has not changed, nor when there is
        nothing to do (no followed target, no mask set yet).  A process
        whose parent exited before it was seen is re-parented: to tumbler
        under ``exec`` (keep_orphans), which hands it back; otherwise to
        init or a subreaper, and then it is not found."""
        if not (self.followed or self.bound_masks):
            return
        token = self.backend.newest_pid()
        if token is not None and token == self._newest_pid:
            return
        self._newest_pid = token
        listed = set(self.backend.process_ids())
        me = os.getpid()
        parents = None if self._listed_pids else self._first_parents(listed, me)
        if parents is None:
            parents = {}
            for pid in listed - self._listed_pids:
                try:
                    parent = self.backend.parent_of(pid)
                except PlatformError:
                    continue
                parents[pid] = parent
        self._listed_pids = listed
        targets = set(self.targets)
        orphans = self.orphans([pid for pid, parent in parents.items() if parent == me])
        if orphans:
            self.hand_back.put_back_tree([(pid, self.orphans_of[1]) for pid in orphans])
        forked = set()              # targets not followed that made children
        found = True
        while found:                # a grandchild may be listed before its parent
            found = False
            for pid, parent in list(parents.items()):
                if parent in self.followed and pid != me and pid not in self.base_allowed:
                    del parents[pid]
                    if self._adopt(pid, parent, self.followed[parent]):
                        found = True
                    else:
                        forked.add(parent)
                elif parent in targets:
                    forked.add(parent)
        for parent in forked & set(self.targets):
            if self.same_process(parent):
                self.hand_back.put_back_children(parent, [t for t in self.threads.values()
                                                          if t.pid == parent and t.touched])

    def _first_parents(self, listed, me):
        """At the first look every process is new, and reading each one's
        parent costs ~25 us a process here: 25-75 ms at every exec's start
        on a machine of 1,000-3,000 processes (kernel threads count).
        Where the backend lists children, the targets' and tumbler's own
        subtrees are walked instead (one read per thread of each):
        {pid: parent} of the ``listed`` processes in them.  None where it
        cannot, or where the targets' threads outnumber the processes.
        (Only the targets' descendants and tumbler's children matter to the
        look; a process made after the listing is new at the next look.)"""
        if not self.backend.lists_children or \
                sum(len(self._tracked.get(pid, ())) for pid in self.targets) > len(listed):
            return None
        parents = {}
        todo = [*self.targets, me]
        while todo:
            parent = todo.pop()
            try:
                children = self.backend.children(parent)
            except PlatformError:
                continue
            for pid in children:
                if pid in listed and pid not in parents and pid != me:
                    parents[pid] = parent
                    todo.append(pid)
        return parents

    def same_process(self, pid):
        """Whether target ``pid`` is still the process tumbler took on: a
        fresh read of the fd the backend keeps on it (Linux: its main
        thread's stat, bound to the process, not to the number).  A target
        that exited leaves its PID to the next process made, any user's,
        whose threads may well carry a mask equal to one tumbler set (a
        one-CPU domain's): never hand those "back"."""
        try:
            self.backend.process_state(pid, fresh=True)
        except NoSuchProcess:
            return False
        return True

    def _adopt(self, pid, parent, parent_start):
        """Manage ``pid``, a child of the followed target ``parent``.  It
        may use what its threads' masks allow, except that a mask tumbler
        set (inherited from a bound thread) stands for the CPUs its parent
        was allowed.  Returns whether it is managed now.

        PID reuse: ``parent`` must still be the process followed (its
        start token ``parent_start``), ``pid`` must have started after it
        and still be its child, and ``add_target`` checks ``pid`` is the
        same process from these reads to its sample: an exited target's
        PID taken by an unrelated process, or its child's, is never
        adopted."""
        try:
            start = self.backend.process(pid).start
            if (self.backend.process(parent).start != parent_start
                    or self.backend.parent_of(pid) != parent
                    or (start is not None and parent_start is not None
                        and start < parent_start)):
                return False
        except NoSuchProcess:
            return False
        try:
            allowed = frozenset().union(*(
                self.base_allowed[parent] if mask in self.bound_masks else mask
                for mask in self._masks_of(pid)))
        except NoSuchProcess:
            return False
        if not allowed:
            return False
        if self.journal is not None:
            refused = self.journal.try_claim(pid, allowed)
            if refused is not None:
                self.warn("child process %d of %d: %s; left alone" % (pid, parent, refused))
                return False
        self.changing()
        try:
            self.add_target(pid, allowed, children=True, start=start)
        except NoSuchProcess:
            if self.journal is not None:
                self.journal.release(pid)
            return False
        return True

    def _masks_of(self, pid):
        masks = []
        for tid in self.backend.thread_ids(pid):
            try:
                masks.append(self.backend.allowed_cpus(pid, tid))
            except NoSuchProcess:
                continue
        return masks

    def _track(self, sample, tids=None):
        """Start tracking threads of ``sample`` (or those of ``tids``) not
        seen before; they go to ``found`` to be placed."""
        new = []
        threads = sample.threads
        inherited = []
        for tid, times in (threads.items() if tids is None
                           else [(tid, threads[tid]) for tid in tids]):
            key = (sample.pid, tid)
            known = self.threads.get(key)
            if known is not None and known.start == times.start:
                continue
            try:
                mask = self.backend.allowed_cpus(sample.pid, tid)
            except NoSuchProcess:
                continue
            allowed = self._original_allowed(sample.pid, mask)
            eligible = self.eligible_for(allowed)
            if not eligible:
                self._note_outsider(sample.pid, tid, times.name, allowed)
            thread = TrackedThread(domain=0 if self.layout.choice.single and eligible else None,
                                   pid=sample.pid, tid=tid, start=times.start,
                                   name=times.name, allowed=allowed, eligible=eligible,
                                   first=(sample.wall_ns, times.run_ns, times.lat_ns),
                                   prev_wall=sample.wall_ns, prev_run=times.run_ns)
            self.threads[key] = thread
            self._tracked.setdefault(sample.pid, set()).add(tid)
            self.loads.changed(sample.pid)
            self.stats.threads_seen += 1
            self.stats.processes_seen.add(sample.pid)
            new.append(thread)
            if mask != allowed and self.binder.binds_masks:
                inherited.append((thread, mask))
        if inherited or new:
            self.found(new, inherited)
        return new

    def _note_outsider(self, pid, tid, name, allowed):
        """A thread allowed only CPUs outside every domain is someone else's
        placement (an application pinning its I/O or polling thread): it is
        never moved and its load counts in no domain.  Said once per thread."""
        self.stats.outsiders += 1
        self.warn("thread %d (%s) may only run on CPUs %s, outside the domains; "
                  "tumbler leaves it alone" % (tid, name, format_cpulist(allowed)))

    def _original_allowed(self, pid, mask):
        """The CPUs a thread whose mask is ``mask`` may use, as if tumbler
        had never run.

        A new thread inherits its creator's mask; if its creator was bound
        by tumbler, that mask is tumbler's doing, and the thread's real
        allowance is the process's.
        """
        if mask in self.bound_masks:
            return self.base_allowed.get(pid, mask)
        return mask

    def sample_all(self, read=None):
        """Sample every target; drop targets that exited. Returns live samples.
        ``read``: {pid: Sample} some targets' threads were read as a moment
        ago (a quiet round that could not decide, quiet.py): taken as their
        samples, not read again."""
        samples = []
        for pid in list(self.targets):
            try:
                # Sample first: the backend may answer process_state from
                # the last round when the sample found the same threads.
                sample = (read or {}).get(pid) or self.backend.sample(pid)
                zombie, image = self.backend.process_state(pid)
                if zombie:
                    raise NoSuchProcess(pid)
                self.check_exec(pid, image)
                samples.append(sample)
            except NoSuchProcess:
                self.targets.remove(pid)
                self.followed.pop(pid, None)    # its PID may name another process soon
                self._drop_process(pid)
                if self.journal is not None:
                    self.journal.release(pid)
        return samples

    def check_exec(self, pid, image):
        """After an execve(2) by a thread other than the main one, that
        thread carries on under the process's ID (same start time) with its
        own mask.  A mask tumbler set is tumbler's doing wherever it turns
        up: take it as the thread's binding, not as someone else's change."""
        old = self.images.get(pid)
        self.images[pid] = image
        if old is None or image is None or image == old:
            return
        for thread in [t for t in self.threads.values()
                       if t.pid == pid and t.bound_mask is not None]:
            try:
                mask = self.backend.allowed_cpus(pid, thread.tid)
            except NoSuchProcess:
                continue
            if mask in self.bound_masks:
                thread.bound_mask = mask
                thread.domain = next((d.index for d in self.layout.domains if mask <= d.cpus),
                                     thread.domain)

    def _drop_process(self, pid):
        for key in [k for k in self.threads if k[0] == pid]:
            del self.threads[key]
        self.loads.forget(pid)
        self._tracked.pop(pid, None)

    def update_loads(self, samples):
        """Compute each thread's load over the last interval; drop vanished ones."""
        measured = 0
        for sample in samples:
            # New threads are placed before anyone is measured this round:
            # threads placed a moment ago then still count as busy (1 CPU,
            # see Placer.place_new) rather than at a load measured over a sliver
            # of an interval, which would make the newcomers pile up.
            tracked = self._tracked.get(sample.pid, _NONE)
            if not tracked.issuperset(sample.threads):      # (no set built when none is)
                self._track(sample, tids=sorted(sample.threads.keys() - tracked))
            count, reused = self.loads.measure(sample)
            measured += count
            if reused:          # a TID now naming another thread
                measured += len(self._track(sample, tids=reused))
        if measured != len(self.threads):
            live = {(sample.pid, tid) for sample in samples for tid in sample.threads}
            for key in [k for k in self.threads if k not in live]:
                del self.threads[key]
                self._tracked.get(key[0], set()).discard(key[1])
                self.loads.changed(key[0])
                self.backend.forget(*key)
                self.policy.forget(key[1])
                if self.journal is not None:
                    self.journal.drop(*key)

    def discover(self):
        """Look for new threads and place them, and for new child processes
        (``look_at_new_processes``).  A target whose thread count (one
        fstat, Backend.thread_count) is what tumbler tracks is not listed:
        a thread that replaced one that exited is found by the next round
        instead (a quiet round ends when a thread it reads is gone)."""
        self.look_at_new_processes()
        for pid in list(self.targets):
            count = self.backend.thread_count(pid)
            if count is not None and count == len(self._tracked.get(pid, ())):
                continue
            try:
                tids = self.backend.thread_ids(pid)
            except NoSuchProcess:
                continue
            new = [tid for tid in tids if (pid, tid) not in self.threads]
            if new:
                # New threads are placed by the loads of the others (as
                # the last round measured them); only the new ones are
                # read now (Backend.sample_threads), not every thread of
                # the process (issue 47: 20 births a second to a process
                # of 8,000 threads).
                self.changing()
                try:
                    sample = self.backend.sample_threads(pid, new)
                    # The PID may name another process now (the target
                    # exited since the last round, its PID taken): its
                    # "new threads" are not ours (same_process); the
                    # next round drops it.
                    if not self.same_process(pid):
                        continue
                    self._track(sample)
                except NoSuchProcess:
                    continue
