"""The Linux backend's threads: listing them, their kept-open files, and
sampling their times (the hot path of every round).

Sampling cost matters (the paper measured 410 us for 64 threads), so:

* per-thread times come from ``/proc/PID/task/TID/schedstat``
  (``sum_exec_runtime run_delay timeslices``, nanoseconds), which is small and
  cheap for the kernel to format; ``stat`` (clock ticks, 10 ms resolution) is
  read only when a thread is first seen (start time, flags, name), when the
  caller asks for details (``tumbler stat``), or as the fallback on kernels
  whose schedstat prints zeros;
* schedstat is opened once per thread and re-read with ``os.pread``; an fd
  pins the task it was opened for, so a TID reused by a new thread can never
  be read through an old fd -- reads on it fail and the entry is reopened.
  The start time read at open (stat field 22) is the thread's identity, and
  ``stat`` read later by path is checked against it.  One fd per thread
  keeps a process with thousands of threads within the open-files limit
  (tumbler also raises its soft limit to the hard one at start);
* past FD_FENCE of that limit no more schedstat fds are kept (the thread's
  file is read by path instead, checked the same way): the service's
  programs together could otherwise take every fd, and then the reads
  that must open a file -- a new thread's stat, a scan, the control
  socket -- failed (200 programs of 100 threads under a limit of 20,000:
  20 were refused, "Too many open files").

``ThreadSampler`` is one component of ``LinuxBackend`` (backend.py), which
hands the ``Backend`` calls about threads to it.
"""

import errno
import os
import resource
import time
from array import array
from itertools import repeat

from ..base import NO_MICROSTATES, NoSuchProcess, Sample, ThreadTimes
from ..columns import ThreadColumns
from ..files import read_file
from .oserror import mapped, os_error
from .procfs import (NS_PER_TICK, STAT_FLAGS, STAT_PROCESSOR, STAT_STATE, STAT_STARTTIME,
                     STAT_STIME, STAT_UTIME, parse_stat)
from .rotation import (NAME as _NAME, SCHEDSTAT_FD as _SCHEDSTAT_FD, START as _START, ColumnSet,
                       Rotation, read_columns as _py_read_columns)

try:
    from ._steady import read_columns as _c_read_columns
    from ._steady import steady_times as _c_steady_times
except ImportError:         # not built (optional): the same steps in Python
    _c_read_columns = _c_steady_times = None


class ThreadFiles:
    """The open schedstat fd of one thread, and what never changes for it.

    One fd per thread: a process with thousands of threads must not exhaust
    the open-files limit.  ``stat`` is opened by path when needed and its
    start time checked, which guards against TID reuse just as well.
    ``schedstat_fd`` is -1 without CONFIG_SCHED_INFO, None when fds ran out
    (then schedstat is read by path too).
    """

    __slots__ = ("schedstat_fd", "base", "start", "flags", "name")

    def __init__(self, schedstat_fd, base, start, flags, name):
        self.schedstat_fd = schedstat_fd
        self.base = base
        self.start = start
        self.flags = flags
        self.name = name

    def close(self):
        if self.schedstat_fd is not None and self.schedstat_fd >= 0:
            try:
                os.close(self.schedstat_fd)
            except OSError:
                pass


#: The share of the open-files limit (RLIMIT_NOFILE, soft) below which
#: schedstat fds are kept: the rest stays free for the reads that open a
#: file each time (the module doc).
FD_FENCE = 0.875


def fd_fence():
    """The lowest fd number not kept as a schedstat fd: fds are numbered
    from the lowest free one, so an open that returns one at or above it
    means fewer than the rest of the limit are free.  None: no limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft * FD_FENCE)


_NO_TIDS = frozenset()


class ThreadSampler:
    """The threads of the processes a ``LinuxBackend`` reads: their listing,
    count, kept files and times.

    ``gone`` is the backend's set of PIDs seen gone (shared: nothing is read
    under them); ``threads_changed(pid)`` is called when a sample finds
    threads gone or new since the one before (the backend reads the
    process's state again then: an exec?).
    """

    def __init__(self, proc, gone, threads_changed, process_cpu=None):
        self.proc = proc
        self._gone = gone
        self._threads_changed = threads_changed
        self._process_cpu = process_cpu     # pid -> (utime + stime ns, name); None: unknown
        self._rotations = {}        # pid -> Rotation: its threads read in rotation
        self._files = {}            # (pid, tid) -> ThreadFiles
        self._sampled_tids = {}     # pid -> TIDs of its last sample
        self._relist = set()        # pids whose next sample must list their threads
        self._read_alone = {}       # pid -> TIDs sample_threads opened since its last sample
        self._task_fds = {}         # pid -> open fd of /proc/PID/task (thread count)
        self._column_sets = {}      # pid -> ColumnSet: its next sample reads columns
        self._schedstat_ok = None   # None: not yet known
        self._fd_fence = fd_fence()     # the soft limit is raised before backends open
        self._c_steady_times = _c_steady_times     # None: not built (tests set it)
        self._c_read_columns = _c_read_columns     # None: not built (tests set it)

    def thread_count(self, pid):
        """The number of threads of ``pid`` from the link count of its task
        directory (one fstat of a kept-open fd, bound to this process: a
        reused PID cannot answer for it); None if it cannot be told."""
        fd = self._task_fds.get(pid)
        if pid in self._gone:
            return None
        try:
            if fd is None:
                fd = self._task_fds[pid] = os.open("%s/%d/task" % (self.proc, pid),
                                                   os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            links = os.fstat(fd).st_nlink
        except OSError:
            return None
        # procfs counts 2 + the threads.  Some file systems (btrfs, under a
        # fixture tree) count directory links differently; a live process
        # has at least one thread.
        return links - 2 if links >= 3 else None

    def thread_ids(self, pid):
        # try/except, not ``mapped``: this runs every round it relists, and a
        # context manager costs a tenth of the listing.
        try:
            tids = sorted(map(int, os.listdir("%s/%d/task" % (self.proc, pid))))
        except OSError as exc:
            raise os_error(exc, pid, None, "list threads of %d" % pid) from None
        last = self._sampled_tids.get(pid)
        if last is not None and last != set(tids):
            # Threads came and went in equal numbers: the count cannot tell
            # the next sample, this listing can.
            self._relist.add(pid)
        return tids

    def _open_thread(self, pid, tid):
        base = "%s/%d/task/%d/" % (self.proc, pid, tid)
        with mapped(pid, tid, "read %sstat" % base):
            comm, fields = parse_stat(read_file(base + "stat").decode(errors="replace"))
        try:
            schedstat_fd = os.open(base + "schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            schedstat_fd = -1       # kernel without CONFIG_SCHED_INFO
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise os_error(exc, pid, tid, "open %sschedstat" % base) from None
            schedstat_fd = None     # out of fds: read by path each time
        if self._fd_fence is not None and schedstat_fd is not None \
                and schedstat_fd >= self._fd_fence:
            os.close(schedstat_fd)
            schedstat_fd = None     # past the fence (the module doc): read by path
        files = ThreadFiles(schedstat_fd, base, int(fields[STAT_STARTTIME]),
                            int(fields[STAT_FLAGS]), comm)
        self._files[(pid, tid)] = files
        return files

    def _read_stat(self, files, tid):
        """Fields of the thread's stat, checked to be the same thread."""
        try:
            text = read_file(files.base + "stat").decode(errors="replace")
        except OSError:
            raise NoSuchProcess(0, tid) from None
        if not text:
            raise NoSuchProcess(0, tid)
        comm, fields = parse_stat(text)
        if int(fields[STAT_STARTTIME]) != files.start:
            raise NoSuchProcess(0, tid)         # the TID now names another thread
        if comm != files.name:
            self._column_sets.clear()   # their names are the samples' (rare: read them anew)
        files.name = comm
        return comm, fields

    def forget(self, pid, tid):
        self._column_sets.pop(pid, None)
        self._rotations.pop(pid, None)
        files = self._files.pop((pid, tid), None)
        if files is not None:
            files.close()

    def close_task_fd(self, pid):
        fd = self._task_fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def forget_process(self, pid):
        """Drop every thread of ``pid`` and what its samples left."""
        for key in [k for k in self._files if k[0] == pid]:
            self.forget(*key)
        self._sampled_tids.pop(pid, None)
        self._relist.discard(pid)
        self._column_sets.pop(pid, None)
        self._rotations.pop(pid, None)
        self._read_alone.pop(pid, None)

    def close(self):
        for key in list(self._files):
            self.forget(*key)
        self._sampled_tids.clear()
        self._column_sets.clear()
        self._rotations.clear()
        self._relist.clear()
        self._read_alone.clear()
        for pid in list(self._task_fds):
            self.close_task_fd(pid)

    def thread_flags(self, pid, tid):
        files = self._files.get((pid, tid)) or self._open_thread(pid, tid)
        return files.flags

    def check_thread(self, pid, tid):
        """NoSuchProcess unless ``tid`` still names the thread first read
        as (pid, tid): its kept schedstat fd is bound to that thread (the
        kernel's struct pid; a reused TID gets a new one), so a read that
        fails or returns nothing means it exited.  One pread, ~2 us."""
        files = self._files.get((pid, tid))
        if files is None:
            return              # never read: nothing to tell it from
        fd = files.schedstat_fd
        if fd is None or fd < 0:
            self._read_stat(files, tid)     # compares the start time
            return
        try:
            alive = bool(os.pread(fd, 64, 0))
        except OSError:
            alive = False
        if not alive:
            raise NoSuchProcess(pid, tid)

    # -- sampling ------------------------------------------------------------

    def sample(self, pid, detail=False):
        """Times of every thread of ``pid``; ``detail`` adds usr/sys/cpu/state.

        Threads that vanish while being read are left out; a process that is
        gone raises NoSuchProcess, and so does a PID seen gone (its process
        exited; forget_process).
        """
        if pid in self._gone:
            raise NoSuchProcess(pid)
        if not detail and pid in self._column_sets:
            sample = self._column_sample(pid)
            if sample is not None:
                return sample
            del self._column_sets[pid]  # (rebuilt below when the threads are read again)
        last = self._sampled_tids.get(pid)
        if not detail and last and pid not in self._relist \
                and self.thread_count(pid) == len(last):
            # As many threads as last time: the same threads, most likely,
            # without listing them.  A thread that exited fails its read
            # below; one that replaced it shows up in the next round's count
            # (or the next discover).
            tids = last
        else:
            tids = self.thread_ids(pid)
            self._relist.discard(pid)
        wall_ns = time.monotonic_ns()
        threads = None
        if not detail and self._schedstat_ok is not False:
            threads = self._steady_sample(pid, tids)
            every_fd_open = threads is not None
            if threads is None and tids is not last:
                threads = self._known_and_new(pid, tids)
                every_fd_open = threads is not None and \
                    self._kept_open(pid, threads)[1] is not None
            if every_fd_open and self._c_steady_times is not None \
                    and self._c_read_columns is not None:
                self._column_sets[pid] = ColumnSet(threads, list(map(self._files.get,
                                                              zip(repeat(pid), threads))))
        if threads is None:
            threads = {}
            for tid in tids:
                try:
                    files = self._files.get((pid, tid)) or self._open_thread(pid, tid)
                    threads[tid] = self._read_times(tid, files, detail)
                except NoSuchProcess:
                    self.forget(pid, tid)
        if not threads and tids is last:
            return self.sample(pid, detail)     # all gone? list them (or raise)
        # Every thread of the last sample read again: the same keys, no
        # comparison needed (it costs a pass over them all).
        if last is None or (tids is not last or len(threads) != len(last)) \
                and threads.keys() != last:
            for tid in (last or _NO_TIDS) - threads.keys():
                self.forget(pid, tid)
            self._sampled_tids[pid] = threads.keys()
            self._threads_changed(pid)
        self._drop_read_alone(pid, threads.keys())
        return Sample(pid=pid, wall_ns=wall_ns, threads=threads)

    def _drop_read_alone(self, pid, present):
        """Forget the threads a look opened (``sample_threads``) that are
        gone before this sample found them -- whether or not the sample
        saw other changes (their files stayed open, their TIDs piled up)."""
        opened = self._read_alone.pop(pid, None)
        for tid in opened - present if opened else ():
            self.forget(pid, tid)

    def sample_threads(self, pid, tids):
        """See Backend.sample_threads: each of ``tids`` opened (if new) and
        read by itself, its files kept for the next ``sample``, which finds
        it known and reads it in the batch; the record of what the last
        whole sample found is left as it is."""
        if pid in self._gone:
            raise NoSuchProcess(pid)
        wall_ns = time.monotonic_ns()
        threads = {}
        opened = self._read_alone.setdefault(pid, set())
        for tid in tids:
            try:
                files = self._files.get((pid, tid))
                if files is None:
                    files = self._open_thread(pid, tid)
                    opened.add(tid)
                threads[tid] = self._read_times(tid, files, False)
            except NoSuchProcess:
                self.forget(pid, tid)
        return Sample(pid=pid, wall_ns=wall_ns, threads=threads)

    def _known_and_new(self, pid, tids):
        """A sample of threads just listed, some new since the last one:
        the known ones read in one batch as usual (``_steady_sample``),
        only the new ones opened and read one by one -- a thread born to a
        process of 8,000 costs one thread's reads, not 8,000 in Python
        (issue 47).  None when there is no new thread or the batch fails
        (a known thread exited since the listing, an odd read): ``sample``
        then reads every thread one by one and says why."""
        files = self._files
        known = [tid for tid in tids if (pid, tid) in files]
        if len(known) == len(tids):
            return None
        threads = self._steady_sample(pid, known)
        if threads is None:
            return None
        for tid in tids:
            if tid in threads:
                continue
            try:
                threads[tid] = self._read_times(tid, self._open_thread(pid, tid), False)
            except NoSuchProcess:
                self.forget(pid, tid)
        # In the listing's order, as the per-thread path gives them.
        return {tid: threads[tid] for tid in tids if tid in threads}

    def _column_sample(self, pid):
        """The sample of a process whose threads are those of the sample
        before (``_column_sets``), as columns (platform/columns.py): one C call
        checks the thread count (as ``sample`` does) and preads every
        kept-open schedstat fd, no object built per thread.  None when
        anything is unusual (a thread exited, came, or was replaced; a
        pending relisting; a run time of 0 while schedstat is not known to
        be accounted): ``sample`` then reads them thread by thread."""
        task_fd = self._task_fds.get(pid)
        if task_fd is None or pid in self._relist:
            return None
        kept = self._column_sets[pid]
        read = self._rotated_read(pid, task_fd, kept.fds, self._c_read_columns)
        if read is None:
            return None
        self._drop_read_alone(pid, kept.tid_set)
        return Sample(pid=pid, wall_ns=read[0], threads=ThreadColumns(
            kept.tids, kept.tid_set, kept.starts, kept.names, read[1], read[2]))

    def _rotated_read(self, pid, task_fd, fds, read_columns):
        """(monotonic ns, run, lat) of the threads of ``fds``, the sleepers
        read in rotation (linux/rotation.py), or None (``read_columns``'s)."""
        rotation = self._rotations.get(pid)
        if rotation is None or (rotation.fds is not fds and rotation.fds != fds):
            rotation = self._rotations[pid] = Rotation(fds)
        process_cpu = self._process_cpu
        return rotation.read(read_columns, task_fd, self._schedstat_ok is True,
                             lambda: None if process_cpu is None else process_cpu(pid)[0])

    def _steady_sample(self, pid, tids):
        """The usual round, batched: every thread known, its schedstat fd
        open; one pread per thread, two numbers parsed, one ThreadTimes
        built.  None when anything is unusual (a new or vanished thread, a
        thread with no CPU time yet while schedstat is not known to be
        accounted, an odd read): the per-thread path then handles each
        thread and says why.

        This is most of what tumbler spends each round on a big process.
        The C module ``_steady`` does these steps when it was built
        (cheaper: BENCHMARKS.md); ``_py_steady_sample`` is the same in
        Python.
        """
        steady = self._c_steady_times
        if steady is None:
            return self._py_steady_sample(pid, tids)
        return steady(self._files, pid, tids, self._schedstat_ok is True, ThreadTimes,
                      NO_MICROSTATES)

    def _kept_open(self, pid, tids):
        """(files, schedstat fds) of ``tids``, or (None, None) unless every
        one is known and has its schedstat fd open."""
        files = list(map(self._files.get, zip(repeat(pid), tids)))
        if None in files:
            return None, None
        fds = list(map(_SCHEDSTAT_FD, files))
        if None in fds or (fds and min(fds) < 0):
            return None, None
        return files, fds

    def _py_steady_sample(self, pid, tids):
        """``_steady_sample`` without the C module: one pread per thread,
        then C-level passes to split, convert and build the ThreadTimes."""
        files, fds = self._kept_open(pid, tids)
        if fds is None:
            return None
        pread = os.pread
        try:
            reads = [pread(fd, 128, 0) for fd in fds]
        except OSError:
            return None
        # Each read is "run_ns wait_ns timeslices\n".
        numbers = b" ".join(reads).split()
        if len(numbers) != 3 * len(reads):
            return None
        try:
            run_ns = list(map(int, numbers[0::3]))
            lat_ns = list(map(int, numbers[1::3]))
        except ValueError:
            return None
        if self._schedstat_ok is not True and 0 in run_ns:
            return None         # is schedstat accounted at all? (see _read_times)
        times = map(tuple.__new__, repeat(ThreadTimes), zip(
            tids, map(_START, files), map(_NAME, files), run_ns, repeat(None),
            repeat(None), lat_ns, repeat(None), repeat("?"), repeat(NO_MICROSTATES)))
        return dict(zip(tids, times))

    def columns_reader(self, pid, tids):
        """See Backend.columns_reader.  The reader checks the thread count
        (one fstat, as ``sample`` does) and a pending relisting, then preads
        every kept-open schedstat fd in one C call (``read_columns``; in
        Python without the module).  None when some thread has no open fd
        or schedstat is known not to be accounted.  While that is not known
        either way, a run time of 0 makes a read fail: ``sample`` looks at
        ``stat`` then to find out (see _read_times)."""
        tids = tuple(tids)
        if self._schedstat_ok is False or set(tids) != self._sampled_tids.get(pid):
            return None
        fds = self._kept_open(pid, tids)[1]
        if fds is None or self.thread_count(pid) != len(tids):
            return None         # (thread_count also opens the task directory's fd)
        fds = array("i", fds)
        read = self._c_read_columns or _py_read_columns
        task_fd, relist = self._task_fds[pid], self._relist

        def reader(run, lat):
            if pid in relist:
                return None
            got = self._rotated_read(pid, task_fd, fds, read)
            if got is None:
                return None
            run[:], lat[:] = got[1], got[2]
            return got[0]
        return reader

    def thread_run_ns(self, pid, tids):
        """CPU time of a few known threads: one pread of each one's kept-open
        schedstat (speed balancing's steps).  A thread without one, or whose
        read fails (it exited), is left out until the next ``sample``.  None
        where schedstat is not accounted: the caller samples the process."""
        if self._schedstat_ok is False:     # clock ticks: the whole sample
            return None
        found = {}
        for tid in tids:
            files = self._files.get((pid, tid))
            if files is None or files.schedstat_fd is None or files.schedstat_fd < 0:
                continue
            try:
                run_ns = int(os.pread(files.schedstat_fd, 128, 0).split(None, 1)[0])
            except (OSError, ValueError, IndexError):
                continue
            if run_ns or self._schedstat_ok:     # a zero may mean "not accounted" (sample)
                found[tid] = run_ns
        return found, time.monotonic_ns()

    def _read_times(self, tid, files, detail):
        run_ns = lat_ns = None
        if files.schedstat_fd != -1 and self._schedstat_ok is not False:
            try:
                if files.schedstat_fd is None:
                    data = read_file(files.base + "schedstat", 128)
                else:
                    data = os.pread(files.schedstat_fd, 128, 0)
            except OSError:
                raise NoSuchProcess(0, tid) from None
            if not data:
                raise NoSuchProcess(0, tid)
            exec_text, delay_text = data.split()[:2]
            run_ns, lat_ns = int(exec_text), int(delay_text)
        if not detail and run_ns is not None and (run_ns or self._schedstat_ok):
            return ThreadTimes(tid=tid, start=files.start, name=files.name,
                               run_ns=run_ns, lat_ns=lat_ns)
        comm, fields = self._read_stat(files, tid)
        usr_ns = int(fields[STAT_UTIME]) * NS_PER_TICK
        sys_ns = int(fields[STAT_STIME]) * NS_PER_TICK
        if run_ns is not None and self._schedstat_ok is None and usr_ns + sys_ns:
            # A thread with CPU ticks but a zero schedstat: this kernel does
            # not account schedstat; use ticks from now on.
            self._schedstat_ok = run_ns > 0
        if run_ns is None or self._schedstat_ok is False:
            run_ns, lat_ns = usr_ns + sys_ns, None
        return ThreadTimes(tid=tid, start=files.start, name=comm, run_ns=run_ns,
                           usr_ns=usr_ns, sys_ns=sys_ns, lat_ns=lat_ns,
                           cpu=int(fields[STAT_PROCESSOR]), state=fields[STAT_STATE])

    def thread_name(self, pid, tid):
        """The thread's current name (threads often rename after starting)."""
        files = self._files.get((pid, tid)) or self._open_thread(pid, tid)
        try:
            return self._read_stat(files, tid)[0]
        except NoSuchProcess:
            raise NoSuchProcess(pid, tid) from None
