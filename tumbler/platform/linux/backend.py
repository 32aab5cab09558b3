"""Linux backend: /proc for processes and the machine's counters, /sys for
CPUs and topology; threads and their sampling in threads.py (``ThreadSampler``,
a component), /proc formats in procfs.py, binders in affinity.py and cpuset_binder.py.

``root`` replaces ``/`` so tests can run on fixture trees.  OSErrors end
here and in the other modules of this folder: everything leaves as the
exceptions of ``tumbler.platform.base``.
"""

import os
import time

from ...cpulist import parse_cpulist
from ...errors import UsageError
from ...escape import printable
from ..files import read_file
from ..base import (MAX_CMDLINE, AccessDenied, Backend, NoSuchProcess, PlatformError,
                    ProcessFacts, ProcessInfo, Unsupported)
from .affinity import AffinityBinder
from .oserror import SETAFFINITY_PRIVILEGE, mapped, os_error, thread_phrase
from .procfs import (FUTEX_SYSCALL, NS_PER_TICK, PF_KTHREAD, STAT_ENDCODE, STAT_FLAGS,
                     STAT_NUM_THREADS, STAT_STARTCODE, STAT_STARTSTACK, STAT_STARTTIME,
                     STAT_STATE, STAT_STIME, STAT_UTIME, ProcStat, cgroup_path,
                     cpu_times_from_stat, current_cpu, exited, has_capability, in_futex_wait,
                     parse_stat, read_status, release_at_least, set_child_subreaper,
                     stat_fields, status_value, switch_counts)
from .threads import ThreadSampler
from .topology import read_topology

CAP_SYS_NICE = 23

#: process_state re-reads the main thread's stat at least this often while
#: the threads stay the same (see process_state).
STATE_READ_NS = 1_000_000_000
#: A thread's status file is read in this many bytes first: all of it, but
#: where the Cpus_allowed lines of many CPUs push the switch counts, last,
#: out of it.
STATUS_FIRST_READ = 4096


class LinuxBackend(Backend):
    name = "linux"
    default_binder = "affinity"
    counts_context_switches = True
    counts_cpu_switches = True

    def __init__(self, root="/"):
        super().__init__(root)
        self.proc = os.path.join(root, "proc")
        self.sys = os.path.join(root, "sys")
        self._stat_fds = {}         # pid -> open fd of /proc/PID/task/PID/stat (process_state)
        self._proc_stat = ProcStat(self.proc)   # for cpu_times and cpu_switches
        self._online_fd = None      # /sys/devices/system/cpu/online, for online_cpus
        self._cpusets = None        # cpuset.CgroupCpus, for cpuset_cpus
        self._proc_stat_fds = {}    # pid -> open fd of /proc/PID/stat (process_cpu_and_name)
        self._states = {}           # pid -> (monotonic ns, process_state's answer)
        self._gone = set()          # pids whose process was seen gone (forget_process)
        self._loadavg_fd = None     # /proc/loadavg, for newest_pid
        self._switches = None       # switches.CpuSwitches, for cpu_switches
        self.keeps_asked_mask = release_at_least(self.proc, (6, 2))
        self._lists_children = None     # see lists_children
        self.sampler = ThreadSampler(self.proc, self._gone, self._threads_changed,
                                     self.process_cpu_and_name)

    # -- processes ------------------------------------------------------------

    def process(self, pid):
        """One read of stat and status each, status searched, not parsed."""
        path = "%s/%d" % (self.proc, pid)
        try:
            with mapped(pid, attempted="read " + path):
                comm, fields = parse_stat(read_file(path + "/stat").decode(errors="replace"))
                status = read_file(path + "/status")
            return ProcessInfo(
                pid=pid, name=comm, uid=int(status_value(status, b"Uid").split()[0]),
                start=int(fields[STAT_STARTTIME]), tgid=int(status_value(status, b"Tgid")),
                is_kernel=bool(int(fields[STAT_FLAGS]) & PF_KTHREAD), zombie=exited(fields))
        except (KeyError, ValueError, IndexError):
            raise NoSuchProcess(pid) from None      # cut short: the process exited mid-read

    def process_start(self, pid):
        """See Backend.process_start: one read of /proc/PID/stat, not decoded."""
        path = "%s/%d/stat" % (self.proc, pid)
        try:
            with mapped(pid, attempted="read " + path):
                data = read_file(path)
            return int(stat_fields(data, STAT_STARTTIME + 1)[STAT_STARTTIME])
        except ValueError:
            raise NoSuchProcess(pid) from None      # empty or cut short: it exited

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

    def _threads_changed(self, pid):
        """A sample found threads gone or new: an exec? (process_state)"""
        self._states.pop(pid, None)

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
        fields = self._kept_stat(self._stat_fds, pid, "%s/%d/task/%d/stat" % (self.proc, pid, pid))
        try:
            image = tuple(int(fields[i]) for i in (STAT_STARTCODE, STAT_ENDCODE,
                                                   STAT_STARTSTACK))
        except (IndexError, ValueError):
            image = None
        return exited(fields), (image if image and any(image) else None)

    def _kept_stat(self, fds, pid, path):
        """The fields of a stat file of ``pid`` read through the fd kept in
        ``fds`` (opened on first use).  An fd stays bound to its process,
        so a reused PID reads as an error, not as another process: an
        empty or failed read marks ``pid`` gone and raises NoSuchProcess."""
        return parse_stat(self._kept_read(fds, pid, path).decode(errors="replace"))[1]

    def _kept_read(self, fds, pid, path):
        """The bytes of ``_kept_stat``'s file."""
        fd = fds.get(pid)
        try:
            if fd is None:
                fd = fds[pid] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        if not data:
            self._seen_gone(pid)
            raise NoSuchProcess(pid)
        return data

    def close(self):
        self.sampler.close()
        self._gone.clear()
        for pid in set(self._stat_fds) | set(self._proc_stat_fds):
            self._close_process_files(pid)
        if self._loadavg_fd is not None:
            os.close(self._loadavg_fd)
            self._loadavg_fd = None
        self._proc_stat.close()
        if self._online_fd is not None:
            os.close(self._online_fd)
            self._online_fd = None
        if self._cpusets is not None:
            self._cpusets.close()
        if self._switches is not None:
            self._switches.close()

    def _close_process_files(self, pid):
        """Close the per-process fds (stat, task directory); forget its state."""
        for fds in (self._stat_fds, self._proc_stat_fds):
            fd = fds.pop(pid, None)
            if fd is not None:
                os.close(fd)
        self.sampler.close_task_fd(pid)
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
        self.sampler.forget_process(pid)

    # -- threads: the sampler's (threads.py) -----------------------------------

    def thread_ids(self, pid):
        return self.sampler.thread_ids(pid)

    def thread_count(self, pid):
        return self.sampler.thread_count(pid)

    def thread_flags(self, pid, tid):
        return self.sampler.thread_flags(pid, tid)

    def thread_name(self, pid, tid):
        return self.sampler.thread_name(pid, tid)

    def check_thread(self, pid, tid):
        self.sampler.check_thread(pid, tid)

    def forget(self, pid, tid):
        self.sampler.forget(pid, tid)

    def sample(self, pid, detail=False):
        return self.sampler.sample(pid, detail)

    def sample_threads(self, pid, tids):
        return self.sampler.sample_threads(pid, tids)

    def columns_reader(self, pid, tids):
        return self.sampler.columns_reader(pid, tids)

    def thread_run_ns(self, pid, tids):
        found = self.sampler.thread_run_ns(pid, tids)
        return super().thread_run_ns(pid, tids) if found is None else found

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
                    STAT_STATE]
            except (OSError, IndexError):
                continue                    # gone, or not ours to read
            if state in ("S", "D") and in_futex_wait(call, futex):
                found[tid] = time.monotonic_ns()
        return found

    def context_switches(self, pid, tid):
        """voluntary_ctxt_switches and nonvoluntary_ctxt_switches of a
        thread's status (sched_yield counts as nonvoluntary when it hands
        the CPU to another thread: the task stays runnable)."""
        path = "%s/%d/task/%d/status" % (self.proc, pid, tid)
        try:                        # not ``mapped``: per thread per round (speed policy)
            data = read_file(path, STATUS_FIRST_READ)
            if len(data) == STATUS_FIRST_READ:
                data = read_file(path, 1 << 20)
        except OSError as exc:
            raise os_error(exc, pid, tid, "read " + path) from None
        try:
            return switch_counts(data)
        except ValueError:
            raise PlatformError("cannot read %s: malformed switch counts" % path) from None

    @property
    def lists_children(self):
        """Whether this kernel keeps ``/proc/PID/task/TID/children``
        (CONFIG_PROC_CHILDREN: Debian's, RHEL's); looked at once."""
        if self._lists_children is None:
            pid = os.getpid()
            self._lists_children = os.path.exists(
                "%s/%d/task/%d/children" % (self.proc, pid, pid))
        return self._lists_children

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
                uid = int(status_value(read_file(path + "/status"), b"Uid").split()[0])
                cgroups = read_file(path + "/cgroup", 1 << 16).decode(errors="replace")
        except (KeyError, ValueError, IndexError):
            raise NoSuchProcess(pid) from None      # cut short: the process exited mid-read
        ticks = int(fields[STAT_UTIME]) + int(fields[STAT_STIME])
        return ProcessFacts(
            pid=pid, comm=comm, uid=uid, cmdline=None,
            threads=int(fields[STAT_NUM_THREADS]), cpu_ns=ticks * NS_PER_TICK,
            cgroup=cgroup_path(cgroups),
            is_kernel=bool(int(fields[STAT_FLAGS]) & PF_KTHREAD))

    def process_cpu_and_name(self, pid):
        """(utime + stime of /proc/PID/stat, its comm -- renamed by exec --
        escaped), through an fd kept open on it: bound to the process, so a
        reused PID reads as gone.  The kernel sums the threads' times."""
        if pid in self._gone:
            raise NoSuchProcess(pid)
        # Read many times a second by a service with many parked programs:
        # the two fields only, the rest of the line not decoded.
        data = self._kept_read(self._proc_stat_fds, pid, "%s/%d/stat" % (self.proc, pid))
        try:
            fields = stat_fields(data, STAT_STIME + 1)
            cpu_ns = (int(fields[STAT_UTIME]) + int(fields[STAT_STIME])) * NS_PER_TICK
        except ValueError:
            self._seen_gone(pid)
            raise NoSuchProcess(pid) from None
        name = data[data.index(b"(") + 1:data.rindex(b")")]
        return cpu_ns, printable(name.decode(errors="replace"))

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
        try:
            times = cpu_times_from_stat(self._proc_stat.read())
        except ValueError as exc:
            raise Unsupported("cannot read %s/stat: %s" % (self.proc, exc)) from None
        if not times:
            raise Unsupported("cannot read %s/stat: no cpuN lines" % self.proc)
        return times

    def cpu_switches(self, cpus):
        """Per-CPU perf counters, else /proc/stat's ``ctxt`` (switches.py,
        loaded here: only crowded domains count switches)."""
        if self._switches is None:
            from .switches import CpuSwitches, machine_switches
            self._switches = CpuSwitches(lambda: machine_switches(self._proc_stat.read()))
        return self._switches.count(cpus)

    def current_cpu(self):
        """sched_getcpu(3) (procfs.current_cpu)."""
        return current_cpu()

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
        return self.mask_as_set(pid, tid)

    def inactive_cpus(self):
        from _thread import get_native_id      # a refused bind only: not at start-up
        tid = get_native_id()
        return self.mask_as_set(os.getpid(), tid) - self.allowed_cpus(os.getpid(), tid)

    def mask_as_set(self, pid, tid):
        # The status file shows the mask itself (task->cpus_mask), not
        # within the active CPUs as sched_getaffinity(2) does.
        path = "%s/%d/task/%d/status" % (self.proc, pid, tid)
        with mapped(pid, tid, "read " + path):
            status = read_status(path)
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
            from .cpuset_binder import CpusetBinder
            return CpusetBinder(self)
        raise UsageError("--binder %s is not available on Linux (use affinity or cpuset)" % kind)
