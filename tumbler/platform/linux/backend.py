"""Linux backend: /proc for threads and times, /sys for topology.

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
  (tumbler also raises its soft limit to the hard one at start).

``root`` replaces ``/`` so tests can run on fixture trees.  OSErrors end
here and in the other modules of this folder: everything leaves as the
exceptions of ``tumbler.platform.base``.
"""

import errno
import os
import time
from array import array
from itertools import repeat
from operator import attrgetter

from ...cpulist import parse_cpulist
from ...errors import UsageError
from ...escape import printable
from ..files import read_file
from ..base import (MAX_CMDLINE, NO_MICROSTATES, AccessDenied, Backend, NoSuchProcess,
                    PlatformError, ProcessFacts, ProcessInfo, Sample, ThreadTimes,
                    Unsupported)
from .affinity import AffinityBinder
from .oserror import SETAFFINITY_PRIVILEGE, mapped, os_error, thread_phrase
from .topology import read_topology

try:
    from ._steady import read_columns as _c_read_columns
    from ._steady import steady_times as _c_steady_times
except ImportError:         # not built (optional): the same steps in Python
    _c_read_columns = _c_steady_times = None

PF_KTHREAD = 0x00200000
CAP_SYS_NICE = 23
PR_SET_CHILD_SUBREAPER = 36     # include/uapi/linux/prctl.h

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_NS_PER_TICK = 1_000_000_000 // _CLK_TCK

# Fields of /proc/.../stat counted from the one after "(comm)": field 3 of
# proc(5) is index 0 here.
_STAT_STATE, _STAT_FLAGS, _STAT_UTIME, _STAT_STIME = 0, 6, 11, 12
_STAT_NUM_THREADS, _STAT_STARTTIME, _STAT_PROCESSOR = 17, 19, 36
_STAT_STARTCODE, _STAT_ENDCODE, _STAT_STARTSTACK = 23, 24, 25

#: futex(2)'s number in /proc/PID/task/TID/syscall, by machine (the kernel's
#: syscall tables: arch/x86/entry/syscalls, include/uapi/asm-generic/unistd.h
#: and the others); futex_waitv(2) has one number everywhere (kernel >= 5.16).
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "loongarch64": 98,
                 "ppc64le": 221, "ppc64": 221, "s390x": 238, "i686": 240, "i386": 240,
                 "armv7l": 240, "armv6l": 240}
FUTEX_WAITV_SYSCALL = 449
#: The futex ops (op & 0x7f) that sleep until woken: FUTEX_WAIT, LOCK_PI,
#: WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2 -- what probes/linux/locktime.bt
#: counts as lock waits.
FUTEX_WAIT_OPS = frozenset((0, 6, 9, 11, 13))

#: process_state re-reads the main thread's stat at least this often while
#: the threads stay the same (see process_state).
STATE_READ_NS = 1_000_000_000


def parse_stat(text):
    """Split a /proc stat line into (comm, fields after the comm).

    The comm may itself contain ')' and spaces, so cut at the LAST ')'; it
    is any user's to choose, so it comes back ``printable`` (escape.py).
    """
    open_paren = text.index("(")
    close_paren = text.rindex(")")
    return printable(text[open_paren + 1:close_paren]), text[close_paren + 2:].split()


class _ThreadFiles:
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


def _exited(fields):
    """Whether stat ``fields`` of a main thread say its process has exited.

    A zombie main thread alone is not enough: a main thread that called
    pthread_exit(3) stays a zombie while the other threads run on, and
    num_threads still counts them (and it).  An exited process waiting to
    be reaped has just its zombie main thread.
    """
    if fields[_STAT_STATE] not in ("Z", "X"):
        return False
    try:
        return int(fields[_STAT_NUM_THREADS]) <= 1
    except (IndexError, ValueError):
        return True


def _cgroup_path(text):
    """The cgroup of a /proc/PID/cgroup text: the v2 one ("0::/path"), else
    the v1 cpuset hierarchy's, else None."""
    found = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if "cpuset" in parts[1].split(","):
            found = parts[2]
    return found


_NO_TIDS = frozenset()
_SCHEDSTAT_FD = attrgetter("schedstat_fd")
_START = attrgetter("start")
_NAME = attrgetter("name")
_sched_getcpu = None         # libc's sched_getcpu, loaded on first use


class LinuxBackend(Backend):
    name = "linux"
    default_binder = "affinity"
    counts_context_switches = True

    def __init__(self, root="/"):
        super().__init__(root)
        self.proc = os.path.join(root, "proc")
        self.sys = os.path.join(root, "sys")
        self._files = {}            # (pid, tid) -> _ThreadFiles
        self._sampled_tids = {}     # pid -> TIDs of its last sample
        self._stat_fds = {}         # pid -> open fd of /proc/PID/task/PID/stat (process_state)
        self._cpu_stat_fd = None    # /proc/stat, for cpu_times
        self._online_fd = None      # /sys/devices/system/cpu/online, for online_cpus
        self._cpusets = None        # cpuset.CgroupCpus, for cpuset_cpus
        self._task_fds = {}         # pid -> open fd of /proc/PID/task (thread count)
        self._proc_stat_fds = {}    # pid -> open fd of /proc/PID/stat (process_cpu_ns)
        self._states = {}           # pid -> (monotonic ns, process_state's answer)
        self._gone = set()          # pids whose process was seen gone (forget_process)
        self._relist = set()        # pids whose next sample must list their threads
        self._loadavg_fd = None     # /proc/loadavg, for newest_pid
        self._schedstat_ok = None   # None: not yet known
        self._c_steady_times = _c_steady_times     # None: not built (tests set it)
        self._c_read_columns = _c_read_columns     # None: not built (tests set it)

    # -- processes and threads -----------------------------------------------

    def process(self, pid):
        path = "%s/%d" % (self.proc, pid)
        with mapped(pid, attempted="read " + path):
            with open(path + "/stat") as f:
                comm, fields = parse_stat(f.read())
            status = _read_status(path + "/status")
        flags = int(fields[_STAT_FLAGS])
        return ProcessInfo(
            pid=pid, name=comm, uid=int(status["Uid"].split()[0]),
            start=int(fields[_STAT_STARTTIME]),
            is_kernel=bool(flags & PF_KTHREAD),
            tgid=int(status["Tgid"]), zombie=_exited(fields))

    def process_state(self, pid, fresh=False):
        """(zombie, image) of ``pid``.  Called once per round, after ``sample``.

        The image token is the program's text and stack addresses, which an
        execve(2) replaces (ASLR moves them even for the same file).  The
        kernel shows them only to a reader allowed to ptrace the process:
        zeros otherwise, and then None -- an exec cannot be told.

        Both come from the main thread's stat, which costs as much as
        sampling a dozen threads, so it is read only when ``sample`` found
        threads gone or new since the sample before, when ``fresh`` is
        asked, and at least every ``STATE_READ_NS``; in between the last
        answer stands.  An exec ends every other thread, and so does the
        exit of a multithreaded process: both are seen in the round they
        happen.  A single-threaded process's exit (or exec) is seen within
        ``STATE_READ_NS``.
        """
        now = time.monotonic_ns()
        last = self._states.get(pid)
        if not fresh and last is not None and now - last[0] < STATE_READ_NS:
            return last[1]
        state = self._read_state(pid)
        if state[0]:
            self._states.pop(pid, None)
        else:
            self._states[pid] = (now, state)
        return state

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

    def _read_state(self, pid):
        """(zombie, image) from the main thread's stat."""
        # The main thread's stat, not the process's: the same state and
        # image, without the kernel summing times over every
        # thread (which costs as much as the rest of a round on a process
        # with many threads).  The fd is kept open across rounds; it stays
        # bound to this process, so a reused PID reads as an error, not as
        # another process.
        if pid in self._gone:
            # Seen gone: whatever has the PID now is another process, and
            # may not answer for it (forget_process says when ``pid`` is a
            # new process to read).  Its start time could not tell: it
            # counts in clock ticks, and two processes can share one.
            raise NoSuchProcess(pid)
        fd = self._stat_fds.get(pid)
        try:
            if fd is None:
                fd = self._stat_fds[pid] = os.open("%s/%d/task/%d/stat" % (self.proc, pid, pid),
                                                   os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        if not data:
            self._seen_gone(pid)
            raise NoSuchProcess(pid)
        fields = parse_stat(data.decode(errors="replace"))[1]
        try:
            image = tuple(int(fields[i]) for i in (_STAT_STARTCODE, _STAT_ENDCODE,
                                                   _STAT_STARTSTACK))
        except (IndexError, ValueError):
            image = None
        return _exited(fields), (image if image and any(image) else None)

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
        files = _ThreadFiles(schedstat_fd, base, int(fields[_STAT_STARTTIME]),
                             int(fields[_STAT_FLAGS]), comm)
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
        if int(fields[_STAT_STARTTIME]) != files.start:
            raise NoSuchProcess(0, tid)         # the TID now names another thread
        files.name = comm
        return comm, fields

    def forget(self, pid, tid):
        files = self._files.pop((pid, tid), None)
        if files is not None:
            files.close()

    def close(self):
        for key in list(self._files):
            self.forget(*key)
        self._sampled_tids.clear()
        self._relist.clear()
        self._gone.clear()
        for pid in set(self._stat_fds) | set(self._task_fds) | set(self._proc_stat_fds):
            self._close_process_files(pid)
        if self._loadavg_fd is not None:
            os.close(self._loadavg_fd)
            self._loadavg_fd = None
        for name in ("_cpu_stat_fd", "_online_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
        if self._cpusets is not None:
            self._cpusets.close()

    def _close_process_files(self, pid):
        """Close the per-process fds (stat, task directory); forget its state."""
        for fds in (self._stat_fds, self._task_fds, self._proc_stat_fds):
            fd = fds.pop(pid, None)
            if fd is not None:
                os.close(fd)
        self._states.pop(pid, None)
        if self._cpusets is not None:
            self._cpusets.forget(pid)

    def _seen_gone(self, pid):
        """A read found ``pid``'s process gone: drop what is kept of it, and
        read nothing under its PID until forget_process."""
        self._close_process_files(pid)
        self._gone.add(pid)

    def forget_process(self, pid):
        """See Backend.forget_process."""
        self._close_process_files(pid)
        self._gone.discard(pid)
        for key in [k for k in self._files if k[0] == pid]:
            self.forget(*key)
        self._sampled_tids.pop(pid, None)
        self._relist.discard(pid)

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
            self._states.pop(pid, None)     # threads came or went: an exec? (process_state)
        return Sample(pid=pid, wall_ns=wall_ns, threads=threads)

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
            now = read(task_fd, fds, run, lat)
            if now is None or (0 in run and not self._schedstat_ok):
                return None
            return now
        return reader

    def thread_run_ns(self, pid, tids):
        """CPU time of a few known threads: one pread of each one's kept-open
        schedstat (speed balancing's steps).  A thread without one, or whose
        read fails (it exited), is left out until the next ``sample``."""
        if self._schedstat_ok is False:     # clock ticks: the whole sample
            return super().thread_run_ns(pid, tids)
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
        usr_ns = int(fields[_STAT_UTIME]) * _NS_PER_TICK
        sys_ns = int(fields[_STAT_STIME]) * _NS_PER_TICK
        if run_ns is not None and self._schedstat_ok is None and usr_ns + sys_ns:
            # A thread with CPU ticks but a zero schedstat: this kernel does
            # not account schedstat; use ticks from now on.
            self._schedstat_ok = run_ns > 0
        if run_ns is None or self._schedstat_ok is False:
            run_ns, lat_ns = usr_ns + sys_ns, None
        return ThreadTimes(tid=tid, start=files.start, name=comm, run_ns=run_ns,
                           usr_ns=usr_ns, sys_ns=sys_ns, lat_ns=lat_ns,
                           cpu=int(fields[_STAT_PROCESSOR]), state=fields[_STAT_STATE])

    def thread_name(self, pid, tid):
        """The thread's current name (threads often rename after starting)."""
        files = self._files.get((pid, tid)) or self._open_thread(pid, tid)
        try:
            return self._read_stat(files, tid)[0]
        except NoSuchProcess:
            raise NoSuchProcess(pid, tid) from None

    def lock_waiters(self, pid, tids):
        """See Backend.lock_waiters: a thread asleep (state S or D) whose
        ``syscall`` file names futex with a waiting op (its 2nd number) or
        futex_waitv.  The kernel fills that file only for a thread that is
        not running; ``wchan`` would add nothing (it names the futex wait
        while the thread sleeps in one).  A futex call of a 32-bit program
        on a 64-bit kernel carries the 32-bit number and is not found."""
        futex = FUTEX_SYSCALL.get(os.uname().machine)
        found = {}
        for tid in tids:
            base = "%s/%d/task/%d/" % (self.proc, pid, tid)
            try:
                call = read_file(base + "syscall", 512).split()
                state = parse_stat(read_file(base + "stat").decode(errors="replace"))[1][
                    _STAT_STATE]
            except (OSError, IndexError):
                continue                    # gone, or not ours to read
            try:
                nr = int(call[0])
                waits = ((nr == futex and int(call[2], 16) & 0x7f in FUTEX_WAIT_OPS)
                         or nr == FUTEX_WAITV_SYSCALL)
            except (IndexError, ValueError):
                continue                    # "running", or no system call
            if waits and state in ("S", "D"):
                found[tid] = time.monotonic_ns()
        return found

    def context_switches(self, pid, tid):
        """voluntary_ctxt_switches and nonvoluntary_ctxt_switches of a
        thread's status (sched_yield counts as nonvoluntary when it hands
        the CPU to another thread: the task stays runnable)."""
        path = "%s/%d/task/%d/status" % (self.proc, pid, tid)
        try:                        # not ``mapped``: per thread per round (speed policy)
            status = _read_status(path)
        except OSError as exc:
            raise os_error(exc, pid, tid, "read " + path) from None
        return (int(status.get("voluntary_ctxt_switches", 0)),
                int(status.get("nonvoluntary_ctxt_switches", 0)))

    def children(self, pid, tids=None):
        """See Backend.children: ``/proc/PID/task/TID/children`` (kernels
        with CONFIG_PROC_CHILDREN), else a scan of /proc by parent PID."""
        if tids is None:
            tids = self.thread_ids(pid)
        found = set()
        for tid in tids:
            try:
                data = read_file("%s/%d/task/%d/children" % (self.proc, pid, tid), 1 << 20)
            except FileNotFoundError:
                if not os.path.exists("%s/%d/task/%d" % (self.proc, pid, tid)):
                    continue                # the thread exited
                return self._children_by_scan(pid)
            except (ProcessLookupError, PermissionError):
                continue
            found.update(map(int, data.split()))
        return found

    def process_ids(self):
        with mapped(None, attempted="list the processes in " + self.proc):
            names = os.listdir(self.proc)
        return [int(name) for name in names if name.isdigit()]

    def keep_orphans(self):
        """See Backend.keep_orphans: prctl(PR_SET_CHILD_SUBREAPER)."""
        return set_child_subreaper(True)

    def process_facts(self, pid):
        """/proc/PID/stat (name, threads, CPU time, kernel flag), status
        (real UID) and cgroup; not the command line (``cmdline``: its read
        takes the process's memory map lock, which it can hold)."""
        path = "%s/%d" % (self.proc, pid)
        try:
            with mapped(pid, attempted="read " + path):
                comm, fields = parse_stat(read_file(path + "/stat").decode(errors="replace"))
                uid = int(_read_status(path + "/status")["Uid"].split()[0])
                cgroups = read_file(path + "/cgroup", 1 << 16).decode(errors="replace")
        except (KeyError, ValueError, IndexError):
            raise NoSuchProcess(pid) from None      # cut short: the process exited mid-read
        ticks = int(fields[_STAT_UTIME]) + int(fields[_STAT_STIME])
        return ProcessFacts(
            pid=pid, comm=comm, uid=uid, cmdline=None,
            threads=int(fields[_STAT_NUM_THREADS]), cpu_ns=ticks * _NS_PER_TICK,
            cgroup=_cgroup_path(cgroups),
            is_kernel=bool(int(fields[_STAT_FLAGS]) & PF_KTHREAD))

    def process_cpu_ns(self, pid):
        """utime + stime of /proc/PID/stat (the kernel sums the threads),
        through an fd kept open on it: bound to the process, so a reused
        PID reads as gone."""
        if pid in self._gone:
            raise NoSuchProcess(pid)
        fd = self._proc_stat_fds.get(pid)
        try:
            if fd is None:
                fd = self._proc_stat_fds[pid] = os.open("%s/%d/stat" % (self.proc, pid),
                                                        os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        if not data:
            self._seen_gone(pid)
            raise NoSuchProcess(pid)
        fields = parse_stat(data.decode(errors="replace"))[1]
        return (int(fields[_STAT_UTIME]) + int(fields[_STAT_STIME])) * _NS_PER_TICK

    def cmdline(self, pid):
        """/proc/PID/cmdline, its first MAX_CMDLINE bytes."""
        path = "%s/%d/cmdline" % (self.proc, pid)
        with mapped(pid, attempted="read " + path):
            data = read_file(path, MAX_CMDLINE)
        return printable(data.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))

    def online_cpus(self):
        """/sys/devices/system/cpu/online: one pread of a kept fd (sysfs
        files give their current content at offset 0 each time)."""
        path = "%s/devices/system/cpu/online" % self.sys
        try:
            if self._online_fd is None:
                self._online_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(self._online_fd, 4096, 0).decode("ascii").strip()
            return parse_cpulist(text)
        except (OSError, UnicodeDecodeError, UsageError):
            return super().online_cpus()

    def uptime_ns(self):
        """The first field of /proc/uptime (seconds since boot, two decimals)."""
        path = os.path.join(self.proc, "uptime")
        with mapped(None, attempted="read " + path):
            with open(path) as f:
                fields = f.read().split()
        if not fields:
            raise PlatformError("cannot read %s: empty file" % path)
        seconds = fields[0]
        whole, _, frac = seconds.partition(".")
        try:
            return int(whole) * 1_000_000_000 + int((frac + "000000000")[:9])
        except ValueError:
            raise PlatformError("%s: not a number of seconds: %r" % (path, seconds)) from None

    def cpu_times(self):
        """``cpuN`` lines of /proc/stat (proc(5)): user nice system idle
        iowait irq softirq steal [guest guest_nice], in USER_HZ ticks.
        busy = user + nice + system + irq + softirq + steal (guest time is
        already inside user); total = busy + idle + iowait.  One pread of
        a kept fd: this runs every round with two or more domains."""
        fd = self._cpu_stat_fd
        try:
            if fd is None:
                fd = self._cpu_stat_fd = os.open(os.path.join(self.proc, "stat"),
                                                 os.O_RDONLY | os.O_CLOEXEC)
            chunks, offset = [], 0
            while True:
                chunk = os.pread(fd, 1 << 16, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
        except OSError as exc:
            raise Unsupported("cannot read %s/stat: %s" % (self.proc, exc.strerror)) from None
        times = {}
        for line in b"".join(chunks).split(b"\n"):
            if not line.startswith(b"cpu") or line.startswith(b"cpu "):
                continue
            fields = line.split()
            try:
                cpu = int(fields[0][3:])
                ticks = [int(x) for x in fields[1:9]]
            except ValueError:
                raise Unsupported("cannot read %s/stat: malformed line %r"
                                  % (self.proc, line[:60].decode(errors="replace"))) from None
            if len(ticks) < 8:
                ticks += [0] * (8 - len(ticks))
            user, nice, system, idle, iowait, irq, softirq, steal = ticks
            busy = user + nice + system + irq + softirq + steal
            times[cpu] = (busy * _NS_PER_TICK, (busy + idle + iowait) * _NS_PER_TICK)
        if not times:
            raise Unsupported("cannot read %s/stat: no cpuN lines" % self.proc)
        return times

    def current_cpu(self):
        """sched_getcpu(3): a vDSO call, no system call on x86_64."""
        global _sched_getcpu
        if _sched_getcpu is None:
            import ctypes
            _sched_getcpu = ctypes.CDLL(None).sched_getcpu
        cpu = _sched_getcpu()
        return cpu if cpu >= 0 else None

    def program_counters(self, pid):
        """perf_event_open groups of cycles and LLC misses per thread
        (counters.py); the first ``add`` says whether the PMU has them."""
        from .counters import ProgramCounters
        return ProgramCounters(pid)

    def reserved_cpus(self):
        """/sys/devices/system/cpu/isolated (isolcpus=) and nohz_full."""
        found = []
        for name in ("isolated", "nohz_full"):
            try:
                text = read_file("%s/devices/system/cpu/%s" % (self.sys, name)).decode()
                found.append(frozenset(parse_cpulist(text.strip())) if text.strip()
                             else frozenset())
            except (OSError, UsageError):
                found.append(frozenset())
        return found[0], found[1]

    def may_use(self, pid):
        """On-line, not isolated, and within the effective cpuset of the
        process's cgroup (``cpuset_cpus``)."""
        usable = super().may_use(pid)
        try:
            found = self.cpuset_cpus(pid)
        except NoSuchProcess:
            return usable
        return usable if found is None else usable & found[1]

    def cpuset_cpus(self, pid):
        """("cgroup PATH", the effective CPUs of its cpuset): the cgroup of
        ``pid``, v1 or v2 (cpuset.py, ``CgroupCpus``)."""
        if self._cpusets is None:
            from .cpuset import CgroupCpus
            self._cpusets = CgroupCpus(self.proc, self.root)
        found = self._cpusets.of(pid)
        return None if found is None else ("cgroup " + found[0], found[1])

    def parent_of(self, pid):
        try:
            data = read_file("%s/%d/stat" % (self.proc, pid))
            return int(parse_stat(data.decode(errors="replace"))[1][1])
        except (OSError, ValueError, IndexError):
            raise NoSuchProcess(pid) from None

    def newest_pid(self):
        """/proc/loadavg's last field: the PID (or TID) most recently made
        (a pread of a kept-open fd: this is read at every look for new
        threads)."""
        try:
            if self._loadavg_fd is None:
                self._loadavg_fd = os.open("%s/loadavg" % self.proc, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._loadavg_fd, 256, 0).rsplit(None, 1)[-1]
        except (OSError, IndexError):
            return None

    def _children_by_scan(self, pid):
        found = set()
        for child in self.process_ids():
            try:
                fields = parse_stat(read_file("%s/%d/stat" % (self.proc, child))
                                    .decode(errors="replace"))[1]
            except (OSError, ValueError):
                continue
            if fields[1] == str(pid):
                found.add(child)
        return found

    # -- CPUs ----------------------------------------------------------------

    def allowed_cpus(self, pid, tid):
        if self.root == "/":
            try:                    # not ``mapped``: once per thread per save
                return frozenset(os.sched_getaffinity(tid))
            except OSError as exc:
                raise os_error(exc, pid, tid,
                               "read the CPU mask of " + thread_phrase(pid, tid)) from None
        path = "%s/%d/task/%d/status" % (self.proc, pid, tid)
        with mapped(pid, tid, "read " + path):
            status = _read_status(path)
        return parse_cpulist(status["Cpus_allowed_list"])

    def topology(self):
        return read_topology(self.sys)

    def check_can_bind(self, info, binder_kind=None):
        """Fail early, before anything changes, if binding will be refused."""
        if os.geteuid() == 0:
            return
        if binder_kind == "cpuset":
            raise AccessDenied("--binder cpuset creates cgroups", "root")
        if info.uid != os.geteuid() and not has_capability(CAP_SYS_NICE, self.proc):
            raise AccessDenied("process %d belongs to uid %d, tumbler runs as uid %d"
                               % (info.pid, info.uid, os.geteuid()), SETAFFINITY_PRIVILEGE)

    def remove_orphans(self, known_pids):
        """See Backend.remove_orphans: the ``tumbler.<pid>`` cpuset cgroups
        of tumblers that are gone (root only; none without a cpuset
        hierarchy)."""
        if os.geteuid() != 0:
            return
        from . import cpuset
        try:
            mount = cpuset.find_cpuset_mount(self.proc, self.root)[1]
        except PlatformError:
            return                  # no cpuset hierarchy: nothing to look for
        for owner, dirs in sorted(cpuset.leftover_dirs(mount).items()):
            if owner in known_pids or cpuset.tumbler_running(self.proc, owner):
                continue
            removed, error = [], None
            try:
                for top in dirs:
                    removed += cpuset.remove_tree(top)
            except PlatformError as exc:
                error = str(exc)
            yield owner, [("cgroups", path) for path in removed], error

    def binder(self, kind=None):
        kind = kind or self.default_binder
        if kind == "affinity":
            return AffinityBinder(self)
        if kind == "cpuset":
            from .cpuset import CpusetBinder
            return CpusetBinder(self)
        raise UsageError("--binder %s is not available on Linux (use affinity or cpuset)" % kind)


# -- the C module's fallback ----------------------------------------------------

def _py_read_columns(task_fd, fds, run, lat):
    """The C module's ``read_columns`` in Python: None unless the process
    has ``len(fds)`` threads; else fill ``run`` and ``lat`` from each
    schedstat fd and return the monotonic ns, or None if a read failed or
    was odd."""
    try:
        if os.fstat(task_fd).st_nlink - 2 != len(fds):
            return None
        now = time.monotonic_ns()
        pread = os.pread
        for i, fd in enumerate(fds):
            run[i], lat[i] = map(int, pread(fd, 128, 0).split()[:2])
    except (OSError, ValueError, OverflowError):
        return None
    return now


# -- helpers -------------------------------------------------------------------

def set_child_subreaper(on):
    """prctl(PR_SET_CHILD_SUBREAPER) for the calling process (Linux 3.4 and
    later): while ``on``, orphans among its descendants are re-parented to
    it.  True if the kernel took it."""
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0,
                                                       0) == 0
    except (OSError, AttributeError):
        return False


def has_capability(bit, proc="/proc"):
    """True if the calling process holds capability number ``bit`` (its
    CapEff in /proc/self/status); False where that cannot be read."""
    try:
        status = _read_status(proc + "/self/status")
        return bool(int(status["CapEff"], 16) >> bit & 1)
    except (OSError, KeyError, ValueError):
        return False


def _read_status(path):
    fields = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields
