"""Binding threads (``Placer``): initial placement, a round's moves and
pins, and the journal entries that come before each change
(``tumbler.state``); a thread someone else placed since is handed over,
never bound again."""

from ..cpulist import format_cpulist
from ..engine.model import ThreadLoad
from ..platform.base import NoSuchProcess, PlatformError, Unmovable


class _NoBatch:
    """``with`` that does nothing: what batches a dry run's journal writes
    (contextlib.nullcontext, without contextlib's import at start)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_BATCH = _NoBatch()


class Placer:
    """Every change of a thread's placement.

    Owns: ``bound_masks`` (every CPU set tumbler bound a thread to: a mask
    found among them is tumbler's doing, wherever it turns up -- the tracker
    and the hand-back read it) and ``placed_between_rounds`` (initial
    placements, logged at the next round).  Reads the Layout's domains;
    ``machine`` (MachineWatch) says whether the machine changed under a
    bind; ``stats`` counts migrations and warnings."""

    def __init__(self, backend, binder, layout, machine, stats, warn, *, journal=None,
                 dry_run=False):
        self.backend = backend
        self.binder = binder
        self.layout = layout
        self.machine = machine
        self.stats = stats
        self.warn = warn
        self.journal = journal          # crash-safe record of original placements
        self.dry_run = dry_run
        self.bound_masks = set()        # CPU sets tumbler bound threads to
        self.placed_between_rounds = []     # initial placements, logged next round

    def place_new(self, new, tracked):
        """Place the threads ``new`` (just found) beside the ``tracked``
        ones (every thread the run tracks)."""
        from ..engine.grouping import place_new
        # A placed thread not measured yet counts as busy (1 CPU): threads
        # created one by one then alternate between domains.  Keyed by TID:
        # a thread of a process that exited since the last round is still
        # tracked, and its TID may already name a new thread (one of
        # ``new``, or another's: the engine takes each TID once).
        movable = [t for t in new if t.eligible]
        placed = {t.tid: ThreadLoad(t.tid, 1.0 if t.load is None else t.load, t.domain,
                                    t.eligible)
                  for t in tracked if t.domain is not None}
        for thread in new:
            placed.pop(thread.tid, None)
        placed = list(placed.values())
        moves = place_new([ThreadLoad(t.tid, 0.0, None, t.eligible) for t in movable],
                          placed, self.layout.domains)
        by_tid = {t.tid: t for t in movable}
        self.placed_between_rounds += self.apply([(by_tid[m.tid], m.dst) for m in moves])

    def apply(self, moves):
        """Bind each (thread, domain); return the moves actually made."""
        sources = {id(thread): thread.domain for thread, _ in moves}
        made = []
        for thread, dst, _ in self.bind_all([(t, dst, None) for t, dst in moves
                                              if t.domain != dst]):
            src = sources[id(thread)]
            if src is not None:
                thread.migrations += 1
                self.stats.migrations += 1
                self.stats.threads_moved += thread.migrations == 1
            made.append((thread, src, dst))
        return made

    def bind_all(self, wanted):
        """Bind each (thread, domain, cpu or None for the whole domain);
        return those done.

        The journal has each thread's original placement and the mask about
        to be set on disk before any is set (``tumbler.state``), in one
        write each, whatever the number of threads."""
        todo = []
        for thread, dst, cpu in wanted:
            cpus = self.layout.domains[dst].cpus & thread.allowed
            if cpu is not None:
                cpus = cpus & {cpu}
            if cpus:
                todo.append((thread, dst, cpu, frozenset(cpus)))
        if self.dry_run:
            for thread, dst, cpu, cpus in todo:
                self._bound(thread, dst, cpu, cpus)
            return [(thread, dst, cpu) for thread, dst, cpu, _ in todo]
        todo = [item for item in todo if item[0].handed is None or self.still_as_handed(item[0])]
        self._save_first([thread for thread, _, _, _ in todo])
        todo = [item for item in todo if item[0].saved is not None and self.still_ours(item[0])]
        if not todo:
            return []
        journal = self.journal
        if journal is not None:
            journal.set_masks([(t.pid, t.tid, t.start, cpus, None) for t, _, _, cpus in todo])
        done = []
        try:
            for thread, dst, cpu, cpus in todo:
                self.bound_masks.add(cpus)
                try:
                    self.binder.bind(thread.pid, thread.tid, dst, cpus)
                except NoSuchProcess:
                    continue
                except Unmovable as exc:
                    # Refused for CPUs the machine no longer gives: the next
                    # look re-plans (balance/machine.py); else the thread's.
                    if not self.machine.outside(thread.pid, cpus):
                        self._unmovable(thread, exc)
                    continue
                self._bound(thread, dst, cpu, cpus)
                done.append((thread, dst, cpu))
        finally:
            if journal is not None:
                journal.masks_set()
        return done

    def _bound(self, thread, dst, cpu, cpus):
        rotating = cpu is not None and thread.pinned_cpu is not None
        thread.domain, thread.pinned_cpu, thread.bound_mask = dst, cpu, cpus
        thread.handed = None
        thread.touched = True
        if not rotating:
            # Speed balancing moves a pinned thread between cores every few
            # rounds; its name was read when it was first pinned.
            self.refresh_name(thread)

    def refresh_name(self, thread):
        """Threads often name themselves after they start; moves are logged by name."""
        try:
            name = self.backend.thread_name(thread.pid, thread.tid)
        except NoSuchProcess:
            return
        if name is not None:
            thread.name = name

    def _save_first(self, threads):
        """Save the original placement of threads about to be changed for
        the first time: with a journal, all in one write, on disk before any
        of them is changed."""
        todo = [t for t in threads if t.saved is None]
        if self.dry_run or not todo:
            return
        with self._journal_batch():
            for thread in todo:
                try:
                    self._save(thread)
                except NoSuchProcess:
                    continue
                except Unmovable as exc:
                    self._unmovable(thread, exc)

    def _unmovable(self, thread, exc):
        """The OS refuses to move the thread: say so once, leave it be."""
        thread.unmovable = True
        self.stats.warnings += 1
        self.warn("%s; leaving it where it is" % exc)

    def _save(self, thread):
        saved = self.binder.save(thread.pid, thread.tid)
        if "cpus" in saved:
            saved["cpus"] = sorted(thread.allowed)
        if self.journal is not None:
            # On disk before the first change, so a tumbler killed by
            # SIGKILL can still be undone with `tumbler restore`.
            self.journal.record(thread.pid, thread.tid, thread.start, self.binder.kind, saved)
        thread.saved = saved

    def still_ours(self, thread):
        """False if the thread is gone or someone else placed it since."""
        try:
            return not self.changed_by_someone_else(thread)
        except NoSuchProcess:
            return False

    def changed_by_someone_else(self, thread):
        """True (and hands the thread over) if its mask is no longer ours.

        An admin or the program itself changed the affinity of a thread
        tumbler had bound: its new mask is now its allowed set, tumbler
        stops managing it and will not "restore" over that choice.  Not
        so when the kernel moved it off CPUs taken off-line, or for a
        cpuset change (balance/machine.py): the thread stays tumbler's, to
        place again.  Where the mask differs it is read again as set
        (Backend.mask_as_set): the fast read leaves out CPUs going off-line
        or coming on-line at this moment, which the on-line CPUs and the
        cpusets show only later (a 6.1 guest test found threads handed
        over so; MachineWatch takes such CPUs for off-line).
        """
        if not self.binder.binds_masks or thread.bound_mask is None:
            return False
        current = self.backend.allowed_cpus(thread.pid, thread.tid)
        if current == thread.bound_mask:
            return False
        exact = self.backend.mask_as_set(thread.pid, thread.tid)
        if exact == thread.bound_mask:
            return False            # seen through a CPU being hot-plugged, unchanged
        if self.machine.reset_by_kernel(thread.pid, thread.bound_mask, current):
            thread.bound_mask = thread.pinned_cpu = None
            return False
        self._someone_elses(thread, current)
        return True

    def still_as_handed(self, thread):
        """Before binding a thread tumbler handed back (one domain, merged
        domains, the machine changed): False (and hands it over) if its
        mask is no longer the one it was handed back with, as the kernel
        keeps it under the CPUs on-line and the cpuset now -- an admin, or
        the program, placed it meanwhile."""
        try:
            current = self.backend.allowed_cpus(thread.pid, thread.tid)
            masks = self.machine.kernel_masks(thread.pid, thread.handed)
            if current not in masks and \
                    self.backend.mask_as_set(thread.pid, thread.tid) not in masks:
                self._someone_elses(thread, current)
                return False
        except NoSuchProcess:
            return False
        thread.handed = None
        return True

    def _someone_elses(self, thread, current):
        """Hand the thread over: its mask ``current`` is someone else's
        choice, never changed or restored over again."""
        thread.unmovable = True
        thread.allowed = current
        thread.saved = None
        if self.journal is not None:
            self.journal.drop(thread.pid, thread.tid)
        self.warn("thread %d (%s): its affinity was changed to %s by someone else; "
                  "tumbler leaves it alone from now on"
                  % (thread.tid, thread.name, format_cpulist(current)))

    def adopt_inherited(self, inherited):
        """Threads born of a bound thread carry its mask (Linux and illumos
        alike): tumbler's doing, so tumbler's to put back.  Each is recorded
        as if tumbler had bound it, before anything else can happen to it;
        with one domain, where only speed balancing pins threads, the
        newcomer is handed back to the OS at once (its creator's pin is no
        place for it); with several, it is placed like any new thread."""
        with self._journal_batch():
            for thread, mask in inherited:
                thread.saved = {"cpus": sorted(thread.allowed)}
                thread.bound_mask = mask
                if self.journal is not None:
                    self.journal.record(thread.pid, thread.tid, thread.start,
                                        self.binder.kind, thread.saved)
        if self.journal is not None:
            self.journal.set_masks([(t.pid, t.tid, t.start, mask, None)
                                    for t, mask in inherited])
            self.journal.masks_set()
        if self.layout.choice.single:
            for thread, _ in inherited:
                self.hand_back(thread)

    def hand_back(self, thread):
        """Put one thread back where it was found, now; True if done (if
        not, restore_all tries again at the end)."""
        try:
            if self.changed_by_someone_else(thread):
                return False
            self.binder.restore(thread.pid, thread.tid, thread.saved)
        except NoSuchProcess:
            return False
        except PlatformError as exc:
            self.stats.warnings += 1
            self.warn("could not hand back thread %d: %s" % (thread.tid, exc))
            return False
        cpus = thread.saved.get("cpus") if self.binder.binds_masks else None
        thread.handed = frozenset(cpus) if cpus else None
        thread.saved = thread.bound_mask = thread.pinned_cpu = None
        if self.journal is not None:
            self.journal.drop(thread.pid, thread.tid)
        return True

    def _journal_batch(self):
        return self.journal.batch() if self.journal is not None else _NO_BATCH
