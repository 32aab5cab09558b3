"""Putting threads back (``HandBack``): every thread tumbler touched when
the run ends, and the threads and child processes born of bound threads,
which start with tumbler's masks (new threads of a target are recorded as
they are found; children are handed back when found -- threads.py,
``look_at_new_processes`` -- and at the end)."""

import os

from ..platform.base import NoSuchProcess, PlatformError, sweep


class HandBack:
    """Handing every thread back.

    Owns no state of its own: it reads the ThreadTracker's table (the
    threads, targets, their allowed CPUs, the orphans kept under ``exec``)
    and the Placer's ``bound_masks`` (a mask found among them is
    tumbler's), and asks the Placer whether someone else placed a thread
    since (then it is left as it is)."""

    def __init__(self, backend, binder, tracker, placer, warn, journal=None):
        self.backend = backend
        self.binder = binder
        self.tracker = tracker
        self.placer = placer
        self.warn = warn
        self.journal = journal

    def restore_all(self):
        """Put back every thread tumbler touched (quiet rounds ended
        first: the threads hold a full round's numbers); return how many
        failed.  The binder and the backend are closed after."""
        failed = 0
        tracker = self.tracker
        for pid in tracker.targets:
            try:
                tracker.check_exec(pid, self.backend.process_state(pid, fresh=True)[1])
            except NoSuchProcess:
                pass
            except PlatformError as exc:    # restore what can be, as below
                self.warn("could not read process %d: %s" % (pid, exc))
        for thread in tracker.threads.values():
            if thread.saved is None:
                continue
            try:
                if self.placer.changed_by_someone_else(thread):
                    continue
                self.binder.restore(thread.pid, thread.tid, thread.saved)
            except NoSuchProcess:
                pass
            except Exception as exc:      # keep restoring the others
                failed += 1
                self.warn("could not restore thread %d: %s" % (thread.tid, exc))
                continue
            thread.saved = None
            if self.journal is not None:
                self.journal.drop(thread.pid, thread.tid)
        try:
            failed += self._sweep()
        except PlatformError as exc:    # the journal is kept: `tumbler restore` retries
            failed += 1
            self.warn("could not look for threads born of bound ones: %s" % exc)
        try:
            for notice in self.binder.close() or ():
                self.warn(notice)
        except Exception as exc:
            failed += 1
            self.warn(str(exc))
        if self.journal is not None:
            # Kept when something could not be restored: `tumbler restore`
            # can retry from it.
            self.journal.close(keep=failed > 0)
        self.backend.close()
        return failed

    def _sweep(self):
        """After the tracked threads are put back: threads born of bound
        threads since the last look (tumbler never saw them) and child
        processes born of them carry tumbler's masks; put those back too,
        looking again until a pass finds none (a thread being created while
        its creator was put back may show up only in a later listing:
        platform/base.py, ``sweep``).
        Returns how many could not be put back."""
        if not (self.binder.binds_masks and self.placer.bound_masks):
            return 0
        failed = 0
        tracker = self.tracker
        unreadable = {}             # target -> the error: once, however many passes

        def one_pass():
            nonlocal failed
            found = 0
            parents = self._parents()
            for pid in list(tracker.targets):
                try:
                    done, error = self._sweep_target(pid, parents)
                except NoSuchProcess:
                    continue
                except PlatformError as exc:    # the other targets still
                    unreadable.setdefault(pid, exc)
                    continue
                found += done
                failed += error
            if tracker.orphans_of is not None:
                try:
                    orphans = tracker.orphans(self.backend.children(os.getpid()))
                except NoSuchProcess:
                    orphans = []
                done, error = self.put_back_tree([(pid, tracker.orphans_of[1])
                                                   for pid in orphans])
                found += done
                failed += error
            return found

        sweep(one_pass)
        for pid, exc in unreadable.items():
            self.warn("could not look for threads born of bound ones in process %d: %s"
                      % (pid, exc))
        return failed + len(unreadable)

    def _parents(self):
        """The parent PIDs of every process listed now (a set), or None
        where reading the children of each thread of the targets costs
        less (fewer threads than processes) or the OS cannot list
        processes.  A child process has its parent's PID whichever thread
        forked it (and whichever took it over when that one exited), so a
        target no process names as parent has no child to put back, and
        its threads' children are not read one by one: 16,000 reads of
        /proc/PID/task/TID/children per pass, two passes at least, were
        most of the hand-back of a program of 16,000 threads (issue 47;
        BENCHMARKS.md, "Cost that follows what changes")."""
        tracker = self.tracker
        try:
            listed = self.backend.process_ids()
        except PlatformError:
            return None
        if not listed or len(tracker.threads) <= len(listed):
            return None
        parents = set()
        for pid in listed:
            try:
                parents.add(self.backend.parent_of(pid))
            except PlatformError:
                continue
        return parents

    def _sweep_target(self, pid, parents=None):
        """One pass of the sweep over target ``pid``: its threads tumbler
        never saw, and the children of all its threads (none to read when
        ``parents``, the parent of every process, does not name ``pid``).
        Returns (handed back, failed)."""
        tracker = self.tracker
        if not tracker.same_process(pid):
            return 0, 0             # exited, its PID maybe another's: nothing of ours
        tids = self.backend.thread_ids(pid)
        original = tracker.base_allowed[pid]
        done = failed = 0
        for tid in tids:
            if (pid, tid) not in tracker.threads:
                put, error = self._put_back_inherited(pid, tid, original)
                done += put
                failed += error
        if parents is not None and pid not in parents:
            return done, failed
        threads = [tracker.threads.get((pid, tid)) for tid in tids]
        put, error = self.put_back_children(
            pid, [t for t in threads if t is not None],
            untracked=[tid for tid, t in zip(tids, threads) if t is None])
        return done + put, failed + error

    def put_back_children(self, pid, threads, untracked=()):
        """Hand back the threads of the child processes of ``threads`` (and
        of the ``untracked`` TIDs), and of their children, that carry a mask
        tumbler set: a child starts with the mask of the thread that forked
        it.  tumbler was not asked to manage them; they go back to the CPUs
        their parent thread was allowed.  Returns (handed back, failed)."""
        todo = []
        for thread in threads:
            try:
                children = self.backend.children(pid, [thread.tid])
            except NoSuchProcess:
                continue
            todo += [(child, thread.allowed) for child in children]
        if untracked:
            try:
                children = self.backend.children(pid, untracked)
            except NoSuchProcess:
                children = ()
            todo += [(child, self.tracker.base_allowed[pid]) for child in children]
        return self.put_back_tree(todo)

    def put_back_tree(self, todo):
        """Hand back each (process, the CPUs it goes back to) of ``todo``
        and its descendants, where they carry a mask tumbler set; targets
        are left to themselves.  Returns (handed back, failed)."""
        done = failed = 0
        seen = set()
        while todo:
            child, original = todo.pop()
            if child in seen or child in self.tracker.base_allowed:
                continue            # a target of its own
            seen.add(child)
            try:
                tids = self.backend.thread_ids(child)
                for tid in tids:
                    put, error = self._put_back_inherited(child, tid, original)
                    done += put
                    failed += error
                todo += [(grandchild, original)
                         for grandchild in self.backend.children(child, tids)]
            except NoSuchProcess:
                continue
        return done, failed

    def _put_back_inherited(self, pid, tid, original):
        """One thread tumbler never bound: if its mask is one tumbler set
        (inherited from its creator), put ``original`` back.  Returns
        (1 if put back, 1 if that failed)."""
        try:
            mask = self.backend.allowed_cpus(pid, tid)
            if mask == original or mask not in self.placer.bound_masks:
                return 0, 0
            self.binder.restore(pid, tid, {"cpus": sorted(original)})
        except NoSuchProcess:
            return 0, 0
        except Exception as exc:          # keep putting back the others
            self.warn("could not restore thread %d of process %d: %s" % (tid, pid, exc))
            return 0, 1
        return 1, 0
