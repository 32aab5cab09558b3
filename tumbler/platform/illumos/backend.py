"""illumos backend: /proc for LWPs and microstates, kstat for topology,
processor sets for binding.

Sampling reads two files per sample, each with one ``os.pread`` into a
buffer sized from the previous read:

* ``/proc/PID/lusage``  -- ``prusage_t`` of every live LWP: microstate times
  in nanoseconds (entry 0, the sum over exited LWPs, is skipped);
* ``/proc/PID/lpsinfo`` -- ``lwpsinfo_t`` of every LWP: state letter, last
  CPU.

Thread names are in ``/proc/PID/lwp/LWPID/lwpname`` (illumos RFD 96) only:
``lwpsinfo_t.pr_name`` is always empty (``prgetlwpsinfo`` in
usr/src/uts/common/fs/proc/prsubr.c zeroes the struct and never fills it);
that file is read once per new LWP (again after a second while still
unnamed), not per sample.  On the real /proc (``root == "/"``) the two table
files stay open and are re-read: an fd of a procfs file is tied to its
process, so a reused PID can never be read through it.  Fixture trees are
re-opened on every read.  Layouts: ``structs``.

``ThreadTimes`` fields: ``run_ns = pr_utime + pr_stime``, ``usr_ns``,
``sys_ns``, ``lat_ns = pr_wtime`` (waiting for a CPU), ``micro`` = lck
(pr_ltime), slp, trp, tfl, dfl and rtime (elapsed time of the LWP, the
denominator of prstat -m); ``start`` is ``pr_create`` (hrtime of creation);
``state`` is ``pr_sname`` with 'O' (on a CPU) reported as 'R'.

Topology comes from the kstats (``kstat``), grouped in ``topology``;
``prstat`` turns microstates into prstat -mL percentages.

OSErrors of /proc reads are mapped in ``oserror``, those of the processor
set calls in ``pset`` (and pset_info(2)'s here); everything leaves as the
exceptions of ``tumbler.platform.base``.
"""

import errno
import os
import struct
import sys
import time

from ...errors import UsageError
from ...escape import printable
from ..files import read_file
from . import kstat as kstat
from . import pset as pset
from . import psetlibc
from . import zone as zones
from .oserror import read_error
from .topology import RUNNING_STATES, topology_from_cpu_info
from .structs import (PBIND_NONE, PRHEADER, PRUSAGE, PS_NONE, SSYS, Truncated, lspan,
                      parse_lpsinfo, parse_lusage, parse_lwpsinfo, parse_psinfo, LWPSINFO,
                      PSINFO_SIZE)
from ..base import (AccessDenied, Backend, NoSuchProcess, PlatformError, ProcessFacts,
                    ProcessInfo, Sample, ThreadTimes, Unsupported)

_LWPNAME_SIZE = 32              # THREAD_NAME_MAX
_NAME_RECHECK_NS = 1_000_000_000
_FIRST_READ_SIZE = PRHEADER.size + 32 * lspan(PRUSAGE.size)    # 32 LWPs
#: System calls whose sleeps are in the LMS_USER_LOCK microstate, the LCK
#: column (usr/src/uts/common/sys/syscall.h): each switches the LWP to it
#: before it blocks -- lwp_park() in usr/src/uts/common/syscall/lwpsys.c,
#: lwp_cond_wait(), lwp_mutex_timedlock() and lwp_rwlock_lock() (of
#: lwp_rwlock_sys) in lwp_sobj.c.  lwp_sema_timedwait (211) does not: SLP.
SYS_LWP_PARK, SYS_LWP_COND_WAIT, SYS_LWP_MUTEX_TIMEDLOCK, SYS_LWP_RWLOCK_SYS = 77, 170, 210, 212
USER_LOCK_SYSCALLS = frozenset((SYS_LWP_PARK, SYS_LWP_COND_WAIT, SYS_LWP_MUTEX_TIMEDLOCK,
                                SYS_LWP_RWLOCK_SYS))
#: The objects those calls sleep on (usr/src/uts/common/sys/sobject.h):
#: lwp_park() a condition variable (cv_waituntil_sig() on t_delay_cv),
#: the others lwp_block()'s lwp_sobj_ops (SOBJ_USER) or, for a
#: priority-inheritance mutex, the turnstile of lwp_sobj_pi_ops (SOBJ_USER_PI).
SOBJ_CV, SOBJ_USER, SOBJ_USER_PI = 3, 5, 6
USER_LOCK_SOBJS = frozenset((SOBJ_CV, SOBJ_USER, SOBJ_USER_PI))
#: Index of pr_vctx among PRUSAGE's fields (2 ints, 40 timestruc halves,
#: then pr_minf majf nswap inblk oublk msnd mrcv sigs vctx ictx ...).
_PR_VCTX = 2 + 40 + 8


class IllumosBackend(Backend):
    name = "illumos"
    default_binder = "pset"

    def __init__(self, root="/", libc=None, kstat_reader=None, pg_reader=None):
        super().__init__(root)
        self.proc = os.path.join(root, "proc")
        self._live = root == "/"
        if self._live and sys.platform.startswith("sunos") and struct.calcsize("P") != 8:
            raise Unsupported("tumbler needs a 64-bit Python on illumos: /proc gives "
                              "32-bit readers other structure layouts")
        self._libc = libc
        self._libc_loaded = libc is not None or not self._live
        self._kstat_reader = kstat_reader or (
            kstat.read_system_cpu_info if self._live else self._read_kstat_file)
        self._pg_reader = pg_reader or (
            kstat.read_system_pg if self._live else lambda: self._read_kstat_file("pg_hw_perf"))
        self._fds = {}          # (pid, file name) -> fd, live /proc only
        self._sizes = {}        # (pid, file name) -> read size that fitted
        self._names = {}        # (pid, lwpid) -> [create_ns, name, checked_ns]
        self._online = None
        self._binder = None

    # -- processes and LWPs --------------------------------------------------

    def process(self, pid):
        try:
            info = parse_psinfo(self._read_small(pid, "psinfo", PSINFO_SIZE))
        except ValueError as exc:
            raise PlatformError("/proc/%d/psinfo: %s" % (pid, exc)) from None
        if info.nlwp == 0:
            raise NoSuchProcess(pid)        # a zombie: nothing left to balance
        return ProcessInfo(pid=pid, name=info.fname, uid=info.uid, start=info.start_ns,
                           is_kernel=bool(info.flag & SSYS), tgid=pid)

    def process_ids(self):
        try:
            names = os.listdir(self.proc)
        except OSError as exc:
            raise PlatformError("cannot list the processes in %s: %s"
                                % (self.proc, exc.strerror or exc)) from None
        return [int(name) for name in names if name.isdigit()]

    def process_facts(self, pid):
        """From ``psinfo_t``: pr_fname, pr_psargs (the first 80 bytes of
        the arguments), pr_uid, pr_nlwp, pr_time, pr_projid, pr_zoneid."""
        try:
            info = parse_psinfo(self._read_small(pid, "psinfo", PSINFO_SIZE))
        except ValueError:
            raise NoSuchProcess(pid) from None
        if info.nlwp == 0:
            raise NoSuchProcess(pid)
        return ProcessFacts(pid=pid, comm=info.fname, cmdline=info.psargs, uid=info.uid,
                            threads=info.nlwp, cpu_ns=info.time_ns, zone=info.zoneid,
                            project=info.projid, is_kernel=bool(info.flag & SSYS))

    def parent_of(self, pid):
        """``psinfo_t.pr_ppid``."""
        try:
            return parse_psinfo(self._read_small(pid, "psinfo", PSINFO_SIZE)).ppid
        except ValueError:
            raise NoSuchProcess(pid) from None

    def thread_ids(self, pid):
        return sorted(lwp.lwpid for lwp in self._read_table(pid, "lpsinfo", parse_lpsinfo)
                      if lwp.sname != "Z")

    def sample(self, pid, detail=False):
        """Times of every live LWP of ``pid`` (``detail`` is accepted for
        symmetry with Linux: illumos always has the full detail)."""
        usages = self._read_table(pid, "lusage", parse_lusage)
        wall_ns = time.monotonic_ns()
        infos = {lwp.lwpid: lwp for lwp in self._read_table(pid, "lpsinfo", parse_lpsinfo)}
        threads = {}
        for usage in usages:
            info = infos.get(usage.lwpid)
            threads[usage.lwpid] = ThreadTimes(
                tid=usage.lwpid, start=usage.create_ns,
                name=self._lwp_name(pid, usage, wall_ns),
                run_ns=usage.utime_ns + usage.stime_ns,
                usr_ns=usage.utime_ns, sys_ns=usage.stime_ns, lat_ns=usage.wtime_ns,
                cpu=info.onpro if info else None,
                state=_state_letter(info.sname) if info else "?",
                micro={"lck": usage.ltime_ns, "slp": usage.slptime_ns,
                       "trp": usage.ttime_ns, "tfl": usage.tftime_ns,
                       "dfl": usage.dftime_ns, "rtime": usage.rtime_ns})
        for key in [k for k in self._names if k[0] == pid and k[1] not in threads]:
            del self._names[key]
        return Sample(pid=pid, wall_ns=wall_ns, threads=threads)

    def forget(self, pid, tid):
        self._names.pop((pid, tid), None)

    def close(self):
        for key in list(self._fds):
            self._close_fd(key)
        self._names.clear()

    # -- CPUs ----------------------------------------------------------------

    def topology(self):
        try:
            cpu_info = self._kstat_reader()
        except OSError as exc:
            raise Unsupported("cannot read the cpu_info kstats: %s" % exc) from None
        try:
            groups = self._pg_reader()
        except OSError:
            groups = {}         # cpu_info alone still gives a topology
        topology = topology_from_cpu_info(cpu_info, groups)
        self._online = topology.online
        return topology

    def online_cpus(self):
        """The CPUs whose ``cpu_info`` kstat ``state`` is on-line or no-intr:
        the cpu_info kstats alone, not the processor groups (a round asks
        every 0.5 s; balance/machine.py).  An off-line CPU (psradm -f,
        p_online) keeps its processor set and rejoins it on-line, unless
        the set was destroyed meanwhile: then it comes back in the default
        set (cpu_offline in usr/src/uts/common/os/cpu.c, cpupart_destroy
        in usr/src/uts/common/disp/cpupart.c)."""
        try:
            cpu_info = self._kstat_reader()
        except OSError as exc:
            raise Unsupported("cannot read the cpu_info kstats: %s" % exc) from None
        online = frozenset(cpu for cpu, fields in cpu_info.items()
                           if fields.get("state") in RUNNING_STATES)
        if not online:
            raise Unsupported("the cpu_info kstats show no on-line CPU")
        self._online = online
        return online

    def cpuset_cpus(self, pid):
        """(the processor set ``pid``'s LWPs came from, the on-line CPUs they
        may be given): an administrator's set, its CPUs; the default set,
        its CPUs and those of the sets tumbler's binder created, but those
        someone took out of them (``PsetBinder.taken``).  pset_info(2)
        lists a set's on-line CPUs only (cpupart_get_cpus).  None without
        libc's processor set calls."""
        libc = self._pset_libc()
        if libc is None:
            return None
        binder = self._binder
        if binder is not None and pid in binder.origins:
            origin = pset.origin_of(binder.origins[pid])
        else:
            tids = self.thread_ids(pid)
            if not tids:
                raise NoSuchProcess(pid)
            origin = self.lwp_info(pid, tids[0]).bindpset
            if binder is not None and origin in binder.sets:
                origin = PS_NONE
        online = self._online if self._online is not None else self.online_cpus()
        try:
            if origin != PS_NONE:
                return "processor set %d" % origin, libc.pset_info(origin) & online
            cpus = libc.pset_info(PS_NONE)
        except OSError as exc:
            if exc.errno == errno.EINVAL:   # the set was destroyed: read again next time
                return None
            raise PlatformError("pset_info: %s" % (exc.strerror or exc)) from None
        if binder is not None:
            current = binder.current_cpus()
            cpus = cpus.union(*current) - binder.taken(online, current)
        return "the default processor set", cpus & online

    def allowed_cpus(self, pid, tid):
        """CPUs the LWP may use: its bound processor, else its processor set's
        CPUs, else the default set's.  Sets made by this backend's binder count
        as the default set they were carved from (the answer is what the LWP
        had before tumbler).  Without libc psets: all on-line CPUs."""
        info = self.lwp_info(pid, tid)
        online = self._online if self._online is not None else self.topology().online
        if info.bindpro != PBIND_NONE:
            return frozenset([info.bindpro])
        libc = self._pset_libc()
        if libc is None:
            return online
        ours = self._binder.sets if self._binder is not None else []
        try:
            if info.bindpset != PS_NONE and info.bindpset not in ours:
                cpus = libc.pset_info(info.bindpset)
            else:
                cpus = libc.pset_info(PS_NONE).union(*(self._binder.domains if ours else []))
        except OSError as exc:
            if exc.errno == errno.EINVAL:   # the set vanished between the reads
                return online
            raise PlatformError("pset_info: %s" % (exc.strerror or exc)) from None
        return (cpus & online) or online

    def check_can_bind(self, info, binder_kind=None):
        """Fail early, before anything changes, if binding will be refused."""
        libc = self._binder_libc(binder_kind)
        psetlibc.require_bind_lwp(libc)
        zone = zones.nonglobal_zone()
        if zone is not None:
            raise AccessDenied(zones.prohibited(
                "sys_res_config", zone, "--binder pset (it creates processor sets)"),
                pset.CONFIG_PRIVILEGE)
        has_privilege = getattr(libc, "has_privilege", None)
        if has_privilege is None:
            return
        if not has_privilege("sys_res_config"):
            raise AccessDenied("--binder pset creates processor sets, which needs %s"
                               % pset.CONFIG_PRIVILEGE, pset.CONFIG_PRIVILEGE)
        if info.uid != os.geteuid() and not has_privilege("proc_owner"):
            raise AccessDenied("process %d belongs to uid %d, tumbler runs as uid %d"
                               % (info.pid, info.uid, os.geteuid()), "PRIV_PROC_OWNER")

    def binder(self, kind=None):
        self._binder = pset.PsetBinder(self._binder_libc(kind), self._lwp_binding,
                                       self.bound_lwps, self.pset_created,
                                       check_thread=self.check_thread)
        return self._binder

    def check_thread(self, pid, tid):
        """NoSuchProcess unless ``pid`` is still the process this backend
        read: a descriptor kept open on one of its /proc files (the round's
        lpsinfo or lusage) fails with ENOENT once it has exited
        (prlock() in prsubr.c finds no proc behind the prnode; a process
        that takes the PID has a prnode of its own), so binders call this
        right before each pset_bind: a reused PID is never bound for the
        process tumbler followed.  One pread of a table's 16-byte header.
        LWP IDs count up within a process, so the PID is what can be
        reused.  Nothing to tell it from before a round read the process
        (verified against illumos-gate only)."""
        for name in ("lpsinfo", "lusage"):
            key = (pid, name)
            fd = self._fds.get(key)
            if fd is None:
                continue
            try:
                alive = bool(os.pread(fd, 16, 0))
            except OSError:
                alive = False
            if not alive:
                self._close_fd(key)
                raise NoSuchProcess(pid, tid)
            return

    def _binder_libc(self, kind):
        kind = kind or self.default_binder
        if kind in ("affinity", "cpuset"):
            raise Unsupported("--binder %s is a Linux binder; on illumos use --binder pset"
                              % kind)
        if kind != "pset":
            raise UsageError("--binder %s is not available on illumos (use pset)" % kind)
        libc = self._pset_libc()
        if libc is None:
            raise Unsupported("--binder pset needs processor sets (pset_create(2) in "
                              "illumos libc.so.1), which this system does not have")
        return libc

    # -- one LWP -------------------------------------------------------------

    def lwp_info(self, pid, tid):
        """LwpInfo of one LWP from /proc/PID/lwp/LWPID/lwpsinfo."""
        return parse_lwpsinfo(self._read_lwp(pid, tid, "lwpsinfo", LWPSINFO.size))

    def _read_lwp(self, pid, tid, name, size):
        """The ``size`` bytes of /proc/PID/lwp/LWPID/NAME; NoSuchProcess if
        the LWP is gone (or the file is short)."""
        path = "%s/%d/lwp/%d/%s" % (self.proc, pid, tid, name)
        try:
            data = read_file(path, size)
        except OSError as exc:
            raise read_error(exc, path, pid, tid) from None
        if len(data) < size:
            raise NoSuchProcess(pid, tid)
        return data

    def bound_lwps(self):
        """(pid, lwpid, pr_bindpset, pr_bindpro) of every live LWP of every
        process that is bound to a processor set or to a processor.  A walk
        of /proc (lpsinfo is readable by everyone), made only when processor
        sets are destroyed; processes that vanish or cannot be parsed
        meanwhile are skipped."""
        found = []
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            path = "%s/%s/lpsinfo" % (self.proc, name)
            size = _FIRST_READ_SIZE
            lwps = ()
            for _ in range(3):
                try:
                    lwps = parse_lpsinfo(read_file(path, size))
                    break
                except Truncated as exc:
                    size = exc.needed + exc.needed // 4
                except (OSError, ValueError, struct.error):
                    break
            found += [(int(name), lwp.lwpid, lwp.bindpset, lwp.bindpro) for lwp in lwps
                      if (lwp.bindpset != PS_NONE or lwp.bindpro != PBIND_NONE)
                      and lwp.sname != "Z"]
        return sorted(found)

    def pset_created(self):
        """``{processor set id: creation time (hrtime ns)}``, from the sets'
        ``unix:<id>:pset`` kstats (``kstat.read_system_pset_created``);
        OSError if they cannot be read."""
        if self._live:
            return kstat.read_system_pset_created()
        with open(os.path.join(self.root, "kstat")) as f:
            return kstat.pset_created_from_text(
                kstat.read_kstat_text(f.read(), module="unix", name="pset"))

    counts_context_switches = True

    def context_switches(self, pid, tid):
        """``pr_vctx`` and ``pr_ictx`` of the LWP's ``lwpusage`` (prusage_t,
        offsets 392 and 400: structs.py; ``pr_ictx`` counts preemptions and
        yields alike, as Linux's nonvoluntary switches)."""
        fields = PRUSAGE.unpack_from(self._read_lwp(pid, tid, "lwpusage", PRUSAGE.size))
        return fields[_PR_VCTX], fields[_PR_VCTX + 1]

    def lock_waiters(self, pid, tids):
        """See Backend.lock_waiters: the LWPs of ``tids`` that ``lpsinfo``
        shows asleep (pr_sname 'S') in one of ``USER_LOCK_SYSCALLS``
        (pr_syscall) on one of ``USER_LOCK_SOBJS`` (pr_stype): the sleep
        those calls make after switching to LMS_USER_LOCK, which the
        kernel charges to pr_ltime as it goes.  The microstate itself
        (t_mstate, lwp_mstate.ms_prev) is in no /proc file.  One read of
        ``lpsinfo`` for all of them."""
        wanted = set(tids)
        lwps = self._read_table(pid, "lpsinfo", parse_lpsinfo)
        checked_ns = time.monotonic_ns()
        return {lwp.lwpid: checked_ns for lwp in lwps
                if lwp.lwpid in wanted and lwp.sname == "S"
                and lwp.syscall in USER_LOCK_SYSCALLS and lwp.stype in USER_LOCK_SOBJS}

    def _lwp_binding(self, pid, tid):
        info = self.lwp_info(pid, tid)
        return info.bindpset, info.bindpro

    def _lwp_name(self, pid, usage, now_ns):
        entry = self._names.get((pid, usage.lwpid))
        if entry is None or entry[0] != usage.create_ns:
            entry = self._names[(pid, usage.lwpid)] = [usage.create_ns, None, 0]
        if entry[1] is None or (not entry[1] and now_ns - entry[2] > _NAME_RECHECK_NS):
            entry[1], entry[2] = self._read_lwpname(pid, usage.lwpid), now_ns
        return entry[1]

    def _read_lwpname(self, pid, lwpid):
        try:
            data = read_file("%s/%d/lwp/%d/lwpname" % (self.proc, pid, lwpid),
                              _LWPNAME_SIZE)
        except OSError:
            return ""               # no such file before RFD 96, or the LWP exited
        return printable(data.split(b"\0", 1)[0].decode("utf-8", "replace"))

    # -- reading /proc -------------------------------------------------------

    def _read_small(self, pid, name, size):
        path = "%s/%d/%s" % (self.proc, pid, name)
        try:
            data = read_file(path, size)
        except OSError as exc:
            raise read_error(exc, path, pid) from None
        if not data:
            raise NoSuchProcess(pid)
        return data

    def _read_table(self, pid, name, parse):
        """Parse a prheader_t table file, re-reading once if it outgrew the buffer."""
        key = (pid, name)
        size = self._sizes.get(key, _FIRST_READ_SIZE)
        for _ in range(3):
            data = self._pread(key, size)
            if not data:
                self._close_fd(key)
                raise NoSuchProcess(pid)
            try:
                result = parse(data)
            except Truncated as exc:
                if len(data) < size:
                    raise PlatformError("/proc/%d/%s is shorter than its header says"
                                        % (pid, name)) from None
                size = exc.needed + exc.needed // 4
                continue
            except (ValueError, struct.error) as exc:
                raise PlatformError("/proc/%d/%s: %s" % (pid, name, exc)) from None
            self._sizes[key] = max(size, len(data) + len(data) // 4)
            return result
        raise PlatformError("/proc/%d/%s keeps growing while read" % (pid, name))

    def _pread(self, key, size):
        pid, name = key
        path = "%s/%d/%s" % (self.proc, pid, name)
        try:
            if not self._live:
                return read_file(path, size)
            fd = self._fds.get(key)
            if fd is None:
                fd = self._fds[key] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, size, 0)
        except OSError as exc:
            self._close_fd(key)
            raise read_error(exc, path, pid) from None

    def _close_fd(self, key):
        fd = self._fds.pop(key, None)
        self._sizes.pop(key, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def program_counters(self, pid):
        """Always Unsupported: libcpc counts another process's LWPs only
        by stopping it (counters.py)."""
        from .counters import ProgramCounters
        return ProgramCounters(pid)

    def cpu_times(self):
        """The ``cpu:<id>:sys`` kstats' user, kernel and idle nanoseconds
        (kstat.cpu_times_from_sys).  illumos has no steal time of its own;
        a guest's lost time shows nowhere here.  Verified against the
        illumos-gate sources only (cpu.c), and on fixture trees."""
        times = kstat.cpu_times_from_sys(self._cpu_sys())
        if not times:
            raise Unsupported("no cpu:*:sys kstats with cpu_nsec_user/kernel/idle")
        return times

    counts_cpu_switches = True

    def cpu_switches(self, cpus):
        """The ``cpu:<id>:sys`` kstats' ``pswitch``, summed over ``cpus``
        (kstat.switches_from_sys); verified against the illumos-gate
        sources only (cpu.c, disp.c), and on fixture trees."""
        count = kstat.switches_from_sys(self._cpu_sys(), cpus)
        if count is None:
            raise Unsupported("no pswitch in the cpu:*:sys kstats of CPUs %s"
                              % ",".join(map(str, sorted(cpus))))
        return count

    def _cpu_sys(self):
        try:
            if self._live:
                return kstat.read_system_cpu_sys()
            return self._read_kstat_file("cpu")
        except OSError as exc:
            raise Unsupported("cannot read the cpu:*:sys kstats: %s"
                              % (exc.strerror or exc)) from None

    # -- kstat and libc ------------------------------------------------------

    def _read_kstat_file(self, module="cpu_info"):
        path = os.path.join(self.root, "kstat")
        with open(path) as f:
            return kstat.read_kstat_text(f.read(), module=module)

    def _pset_libc(self):
        if not self._libc_loaded:
            self._libc = psetlibc.load_libc()
            self._libc_loaded = True
        return self._libc


# -- helpers ---------------------------------------------------------------------

def _state_letter(sname):
    return "R" if sname == "O" else sname
