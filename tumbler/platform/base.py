"""The small interface every OS backend implements.

A backend answers five questions and does two things:

* ``topology()``      -- which CPUs are on-line and how they group into
                         packages, NUMA nodes, LLCs and cores;
* ``process(pid)``    -- does the process exist, who owns it, is it a kernel
                         thread;
* ``thread_ids(pid)`` -- the threads (LWPs) of a process;
* ``sample(pid)``     -- per-thread CPU times, all in nanoseconds;
* ``allowed_cpus(pid, tid)`` -- the CPUs a thread may run on now;
* ``binder(kind)``    -- an object that binds a thread to a set of CPUs and
                         puts back what it found.

Backends take a ``root`` directory so tests read fixture trees instead of
``/proc`` and ``/sys``.  They raise only the exceptions below: OS errors are
mapped once, at the backend edge (as psutil does), so nothing above this
layer looks at errno.  Written once against the interface, for every
backend: ``sweep`` (sweep.py: the exit's repeated look for what bound
threads created) and ``allowed_union`` (the CPUs any thread of some processes may
use).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType

from ..config import LEVELS  # noqa: F401 (a topology's levels; named here for its users)
from ..records import record
from .sweep import SWEEP_PASSES, SWEEP_SETTLE_S, sweep  # noqa: F401 (their home was here)

#: The per-thread percentage columns ``tumbler stat`` shows for each
#: platform: Linux's schedstat and stat times; illumos' prstat -mL
#: microstates (``illumos.prstat.PRSTAT_COLUMNS``).
STAT_COLUMNS = {"linux": ("usr", "sys", "lat"),
                "illumos": ("usr", "sys", "trp", "tfl", "dfl", "lck", "slp", "lat")}

#: Bytes of a command line read for service rules: what a rule's
#: ``cmdline`` pattern sees (tumbler.yaml(5)); the rest is never read.
MAX_CMDLINE = 4096

#: The shared, read-only empty microstate mapping of Linux samples.
NO_MICROSTATES = MappingProxyType({})


# -- exceptions --------------------------------------------------------------

class PlatformError(Exception):
    """Something the OS refused that is not covered below."""


class NoSuchProcess(PlatformError):
    """The process or thread does not exist (any more)."""

    def __init__(self, pid, tid=None):
        self.pid, self.tid = pid, tid
        what = "process %d" % pid if tid is None else "thread %d of process %d" % (tid, pid)
        super().__init__("no such %s" % what)


class AccessDenied(PlatformError):
    """Missing privilege.  ``privilege`` names what is needed, for the user."""

    def __init__(self, message, privilege):
        self.privilege = privilege
        super().__init__(message)


class Unmovable(PlatformError):
    """The thread exists but cannot be bound (kernel thread, PF_NO_SETAFFINITY)."""

    def __init__(self, tid, reason):
        self.tid, self.reason = tid, reason
        super().__init__("thread %d cannot be moved: %s" % (tid, reason))


class Unsupported(PlatformError):
    """The platform or a feature of it is not supported (e.g. pools enabled)."""


# -- data --------------------------------------------------------------------
#
# Named tuples (``@record``, tumbler/records.py), not dataclasses, here and
# in the engine, the loop and the state: importing dataclasses (with
# inspect, ast, re) costs ~20 ms of CPU on a small VM, and typing ~8 ms,
# paid by every ``tumbler exec`` while its command runs (BENCHMARKS.md,
# issue 15).

@record
class ProcessInfo:
    pid: int
    name: str
    uid: int
    start: int              # start-time token; guards PID reuse
    is_kernel: bool         # kernel thread (never managed unless forced)
    tgid: int               # == pid for a process; differs for a thread id
    zombie: bool = False    # exited, not yet reaped by its parent


@record
class ThreadTimes:
    """Cumulative times of one thread, nanoseconds since the thread started.

    ``run_ns`` (user + system CPU time) is the load numerator of the paper's
    Eq. 1.  ``usr_ns``/``sys_ns`` split it where the OS says so (Linux: from
    clock ticks, so coarser than ``run_ns``).  ``lat_ns`` is time spent
    runnable but waiting for a CPU.  ``micro`` holds further microstates the
    OS offers (illumos: lck, slp, trp, tfl, dfl, and rtime = elapsed time of
    the LWP), empty on Linux.

    A named tuple, not a dataclass: one is built per thread per sample, and
    sampling cost is what tumbler spends most of its own CPU on.
    """

    tid: int
    start: int                      # start-time token; guards TID reuse
    name: str
    run_ns: int
    usr_ns: int | None = None
    sys_ns: int | None = None
    lat_ns: int | None = None
    cpu: int | None = None          # CPU the thread last ran on
    state: str = "?"                # one letter: R running/runnable, S sleeping, ...
    micro: Mapping[str, int] = NO_MICROSTATES


@record
class Sample:
    """One snapshot of all threads of one process."""

    pid: int
    wall_ns: int                    # time.monotonic_ns() when taken
    threads: dict[int, ThreadTimes]


@record
class ProcessFacts:
    """What service rules match a process on (``tumbler service``); None
    where the OS cannot tell (zone and project on Linux, cgroup on illumos)."""

    pid: int
    comm: str                       # the program's name, as ps -o comm shows it
    cmdline: str | None             # arguments joined by spaces (MAX_CMDLINE bytes at
                                    # most); None: not read yet (Backend.cmdline)
    uid: int                        # real user ID
    threads: int
    cpu_ns: int                     # CPU time so far, all threads (user + system)
    cgroup: str | None = None       # Linux: the cgroup path (v2, else the cpuset one)
    zone: int | None = None         # illumos: zone ID
    project: int | None = None      # illumos: project ID
    is_kernel: bool = False


@record
class Topology:
    """On-line CPUs and their grouping at each level of ``LEVELS``.

    ``levels[name]`` is a tuple of disjoint CPU sets ordered by lowest CPU;
    a level the platform cannot see is absent.
    """

    online: frozenset[int]
    levels: Mapping[str, tuple[frozenset[int], ...]]


# -- interfaces --------------------------------------------------------------

def allowed_union(backend, pids):
    """CPUs any thread of ``pids`` may run on (what domains are cut down to,
    and what a state file records as a target's own).  A thread that exits
    meanwhile is left out; NoSuchProcess if a process is gone."""
    allowed = set()
    for pid in pids:
        for tid in backend.thread_ids(pid):
            try:
                allowed |= backend.allowed_cpus(pid, tid)
            except NoSuchProcess:
                continue
    return frozenset(allowed)


class Binder:
    """Binds threads to CPU sets and restores them.

    Call order: ``setup(domains)`` once (and again after a topology rescan),
    ``save`` before the first ``bind`` of a thread, ``restore`` for every
    thread saved, ``close`` last.  ``save`` returns a JSON-serialisable dict
    (it is also written to the crash-safe state file).
    """

    kind = "?"
    #: True where a binding is the thread's own CPU mask (sched_setaffinity):
    #: new threads and child processes inherit it from their creator, and
    #: anyone may change it later.  The loop then records threads born with
    #: a mask tumbler set, and leaves alone a mask someone else changed.
    #: False where the binder can tell its own placements (a cgroup, a
    #: processor set of its own).
    binds_masks = False

    def setup(self, domains):
        """Prepare one binding target per domain (a list of CPU frozensets)."""

    def save(self, pid, tid):
        raise NotImplementedError

    def bind(self, pid, tid, domain_index, cpus):
        """Bind the thread to domain ``domain_index`` restricted to ``cpus``."""
        raise NotImplementedError

    def restore(self, pid, tid, saved):
        raise NotImplementedError

    def close(self):
        """Remove whatever setup() created (cgroups, processor sets).
        Returns lines worth telling the user (what it had to change to get
        there), or None."""

    def resources(self):
        """What ``setup`` created, for the state file (JSON-serialisable):
        ``tumbler restore`` removes it when this tumbler is gone."""
        return {}

    # -- after a crash: ``tumbler restore`` asks the binder of the kind
    # -- the state file names.  ``state`` is that file's data; with the
    # -- masks log, ``state["masks"]`` is every mask tumbler set.

    def placed_by_tumbler(self, pid, tid, record, state, last_masks):
        """Could this recorded thread's placement now be the dead tumbler's
        doing?  False leaves it alone (someone placed it since).
        ``last_masks``: the masks the log says tumbler may have left on it.
        Default: assume so."""
        return True

    def leftover_placement(self, pid, tid, state):
        """Where a thread the state does not list belongs (a ``saved``
        dict for ``restore``), if it carries a placement of the dead
        tumbler's (it was born of a bound thread); else None (default)."""
        return None

    def remove_leftovers(self, resources, owner):
        """Remove what the tumbler ``owner`` created (``resources`` from its
        state files, plus any found); return what was removed.  Default:
        nothing to remove."""
        return []


class NullBinder(Binder):
    """For --dry-run and --policy observe: binds nothing, needs nothing."""

    kind = "none"

    def save(self, pid, tid):
        return {}

    def bind(self, pid, tid, domain_index, cpus):
        pass

    def restore(self, pid, tid, saved):
        pass


class Backend:
    name = "?"
    #: The binder kind used where none is named: ``binder(None)``, as
    #: ``binder: None`` in the configuration means the platform's default
    #: (tumbler/config.py).
    default_binder = None

    def __init__(self, root="/"):
        self.root = root

    def topology(self):
        raise NotImplementedError

    def process(self, pid):
        raise NotImplementedError

    def thread_ids(self, pid):
        raise NotImplementedError

    def process_state(self, pid, fresh=False):
        """(zombie, image): ``image`` is a token that changes when the process
        execs another program, None where the OS cannot tell.  A backend may
        answer from a recent reading unless ``fresh`` is asked."""
        return self.process(pid).zombie, None

    def sample(self, pid):
        raise NotImplementedError

    def thread_run_ns(self, pid, tids):
        """({tid: CPU time in ns}, monotonic ns when read) for some threads
        of ``pid``, the same clock as ``sample``'s run_ns; threads that are
        gone are left out.  Speed balancing's steps read only the threads it
        pinned; a backend can do that for less than a whole ``sample``."""
        sample = self.sample(pid)
        return ({tid: sample.threads[tid].run_ns for tid in tids if tid in sample.threads},
                sample.wall_ns)

    def sample_threads(self, pid, tids):
        """The Sample of only ``tids`` of ``pid`` (those alive): what a look for new
        threads reads, for less than a whole ``sample`` where a backend can."""
        sample = self.sample(pid)
        return sample._replace(threads={t: sample.threads[t] for t in tids if t in sample.threads})

    def columns_reader(self, pid, tids):
        """A reader of the CPU time and run-queue wait of exactly ``tids``,
        for the controller's quiet rounds, or None if this backend (or this
        process now) has none.

        ``reader(run, lat)`` fills two ``array('q')`` as long as ``tids``
        (in that order, the clock and units of ``sample``) and returns the
        monotonic ns when read -- or None as soon as the threads of ``pid``
        may no longer be exactly ``tids`` (one exited, one was born) or a
        read fails: the caller then takes a full ``sample``.  No Python
        object is made per thread.
        """
        return None

    def allowed_cpus(self, pid, tid):
        raise NotImplementedError

    def mask_as_set(self, pid, tid):
        """The thread's mask as last set, where ``allowed_cpus`` (a fast
        read) can show less: Linux's sched_getaffinity(2) gives the mask
        within the CPUs *active* now, and a CPU leaves them before it goes
        off-line and joins them after it comes on-line -- so for a moment
        of each hotplug a thread bound to it seems to have lost it.
        Asked only when a mask differs from the one expected.  Default:
        ``allowed_cpus`` (no such moment)."""
        return self.allowed_cpus(pid, tid)

    def inactive_cpus(self):
        """The CPUs going off-line or coming on-line at this moment (not
        active, see ``mask_as_set``) as far as tumbler's own thread's mask
        shows; asked only when the kernel refuses a bind.  Default: none."""
        return frozenset()

    #: Whether ``context_switches`` answers.  Speed balancing then tells
    #: threads that sleep at barriers (voluntary switches) from those that
    #: yield at them (involuntary ones, many per CPU-second) and from
    #: threads that only compute or spin (few); without it, ``auto`` never
    #: engages speed balancing -- it has no evidence it would help.
    counts_context_switches = False

    def context_switches(self, pid, tid):
        """(voluntary, involuntary) context switches of the thread since it
        started: how often it blocked, and how often it left a CPU still
        runnable (preempted, or sched_yield with another thread waiting);
        see ``counts_context_switches``."""
        raise Unsupported("context switches are not counted on %s" % self.name)

    #: Whether ``cpu_switches`` answers: auto then discounts the switches
    #: other tasks' wake-ups explain (engine/policy.py, 2.).
    counts_cpu_switches = False

    def cpu_switches(self, cpus):
        """Context switches on ``cpus`` so far, of every task: a count that
        only grows for the same ``cpus`` (its differences mean something).
        Where the OS or tumbler's privilege counts none per CPU, the whole
        machine's."""
        raise Unsupported("context switches per CPU are not counted on %s" % self.name)

    def lock_waiters(self, pid, tids):
        """Which of ``tids`` are asleep in a user-lock wait now (a thread
        blocked in it since before tracing began shows no event to the
        probes until it wakes): ``{tid: time.monotonic_ns() after reading
        it}``.  Default: none found (the OS cannot tell)."""
        return {}

    def thread_name(self, pid, tid):
        """The thread's current name (threads often rename themselves after
        they start), or None where only the name of the last ``sample`` is
        known (the default)."""
        return None

    def own_allowed(self):
        """The CPUs this process (tumbler) may run on."""
        return self.allowed_cpus(os.getpid(), os.getpid())

    #: ``children`` reads them where kept, not each process's parent.
    lists_children = False

    def children(self, pid, tids=None):
        """The PIDs of the child processes of ``pid`` (made by its threads
        ``tids`` only, if given).  A child starts with the placement of the
        thread that forked it, so the children of bound threads are
        tumbler's to put back.  Default: none (the OS cannot tell)."""
        return set()

    def forget_process(self, pid):
        """``pid`` is to be read as a new process from now on: what was kept
        of an earlier one of that PID (files bound to it, its identity) is
        dropped.  Until this is called, a process that took the PID of one
        the backend read must not answer for it (``process_state`` raises
        NoSuchProcess).  Default: nothing kept."""

    def keep_orphans(self):
        """Make the calling process the parent of every orphan among its
        descendants (a process whose parent exits is re-parented to it, not
        to init), for as long as it runs; True if done.  ``exec`` asks for
        this so that a process forked by a bound thread whose parent exits
        before tumbler saw it is still found, and handed back (its mask is
        tumbler's).  Default: False (the OS cannot)."""
        return False

    def process_facts(self, pid):
        """ProcessFacts of ``pid`` (service rules); NoSuchProcess if gone.
        ``cmdline`` is None where reading it may stall (``cmdline``)."""
        raise Unsupported("this platform cannot describe processes for rules")

    def process_start(self, pid):
        """The start token of ``pid`` alone (ProcessInfo.start): all a
        scan needs of a process it has looked at before to know it is
        still the same one.  NoSuchProcess if gone.  A backend may read
        less for it than ``process``; default: from ``process``."""
        return self.process(pid).start

    def process_cpu_and_name(self, pid):
        """(CPU ns of the whole process so far, its name now as ``comm``)
        from one read: the service's look at each program (after an exec,
        the new name).  NoSuchProcess if gone.  Default: ``process_facts``."""
        facts = self.process_facts(pid)
        return facts.cpu_ns, facts.comm

    def cmdline(self, pid):
        """The command line of ``pid``, arguments joined by spaces,
        ``MAX_CMDLINE`` bytes at most, ``printable``.  On Linux the read
        can be stalled by the process itself (service/deadline.py): the
        service reads it through a deadline.  Default: from
        ``process_facts``."""
        return self.process_facts(pid).cmdline

    def reserved_cpus(self):
        """(isolated, nohz_full): CPUs the admin kept from the scheduler or
        from its tick, which the service never binds threads to.  Default:
        none."""
        return frozenset(), frozenset()

    def cpu_times(self):
        """Each on-line CPU's cumulative (busy_ns, total_ns) since boot:
        busy is every state but idle (and I/O wait), steal included; what
        ``--capacity measured`` subtracts the program's own time from
        (balance/capacity.py).  Default: the OS cannot tell."""
        raise Unsupported("this platform cannot read per-CPU busy time")

    #: Whether a mask set while some of its CPUs are off-line comes back
    #: whole when they return (Linux 6.2 and later keep the mask asked
    #: for); False: the kernel cut them out of it for good (Linux before
    #: 6.2: sched_setaffinity intersects with the CPUs on-line then).
    keeps_asked_mask = True

    def online_cpus(self):
        """The CPUs on-line now, cheaply: the controller asks every round,
        to follow CPUs taken off-line and back (balance/machine.py).
        Default: the topology's (a full topology read); Unsupported where
        the backend has none."""
        try:
            return self.topology().online
        except NotImplementedError:
            raise Unsupported("this platform cannot list its on-line CPUs") from None

    def cpuset_cpus(self, pid):
        """(where, CPUs): what confines ``pid`` -- its cgroup's cpuset
        ("cgroup /app"), its processor set -- and the on-line CPUs that
        lets it use now, cheaply: a round asks at most every 0.5 s, to
        follow cpusets narrowed and widened while it balances (balance/
        machine.py).  None where nothing the OS lets tumbler read confines
        it.  NoSuchProcess once it is gone.  Default: None."""
        return None

    def uptime_ns(self):
        """Nanoseconds since boot, where the OS counts a thread's start time
        from it (``tumbler stat``'s first report shows each thread over its
        life: its age is uptime minus its start).  Default None: illumos
        measures an LWP's life itself (``pr_rtime``)."""
        return None

    def current_cpu(self):
        """The CPU the calling thread runs on now, or None if the OS cannot
        say: where measured capacity books tumbler's own CPU time
        (balance/capacity.py).  Default: None."""
        return None

    def program_counters(self, pid):
        """Hardware counters of one program's threads: an object with
        ``add(tid)`` (False if the thread is gone), ``forget(tid)``,
        ``read()`` -> cumulative (LLC misses, cycles) and ``close()``;
        what space sharing's memory model reads (balance/llc.py).
        Unsupported where the OS or the machine cannot count one
        program's threads, AccessDenied without the privilege (both may
        come from the first ``add`` instead).  Default: unsupported."""
        raise Unsupported("no hardware counters: this platform cannot count one program")

    def may_use(self, pid):
        """The CPUs ``pid`` may be given by default: on-line, not isolated,
        within its cgroup's cpuset where the OS has one.  A process whose
        threads all have narrower masks was placed by someone else."""
        return self.topology().online - self.reserved_cpus()[0]

    def thread_count(self, pid):
        """How many threads ``pid`` has, cheaply (discovery skips listing a
        process whose count has not changed), or None if the OS cannot
        tell that way (default)."""
        return None

    def process_ids(self):
        """The PIDs of every process now (process trees: ``--children``).
        Default: none (the OS cannot list them)."""
        return ()

    def parent_of(self, pid):
        """The PID of ``pid``'s parent process; NoSuchProcess if gone."""
        raise NoSuchProcess(pid)

    def newest_pid(self):
        """A token that changes whenever a process (or thread) is created,
        or None if the OS offers none: while it stays the same there is no
        new process to look for."""
        return None

    def binder(self, kind=None):
        """A Binder of ``kind``; None: ``default_binder``."""
        raise NotImplementedError

    def remove_orphans(self, known_pids):
        """Remove what tumblers that are gone created and no state file
        names (a tumbler killed before it wrote one), except what belongs
        to ``known_pids``.  Yields (tumbler pid, [(what, path), ...]
        removed, an error message or None).  Default: nothing to remove
        (the platform's binders leave nothing a state file does not list)."""
        return iter(())

    def check_can_bind(self, info, binder_kind=None):
        """Raise AccessDenied now if binding ``info``'s threads with a binder
        of ``binder_kind`` (None: ``default_binder``) will be refused."""

    def check_thread(self, pid, tid):
        """Raise NoSuchProcess unless ``tid`` still names the thread of
        ``pid`` this backend first read: binders call it right before each
        change, so a thread that exited and whose TID was reused is never
        moved.  What remains is the microseconds between this check and
        the change (tumbler(8), SECURITY).  Default: no way to tell."""

    def forget(self, pid, tid):
        """Drop anything cached for a thread that is gone."""

    def close(self):
        """Release cached file descriptors."""
