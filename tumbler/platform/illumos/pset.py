"""``--binder pset``: one illumos processor set per domain.

illumos has no per-thread mask of several CPUs: an LWP is either unbound,
bound to one processor (processor_bind(2), ``pbind``) or bound to a
processor set (pset_bind(2), ``psrset``).  So tumbler creates one set per
domain, moves the domain's CPUs into it, and binds LWPs of the target with
``pset_bind_lwp(psetid, lwpid, pid, &opset)`` -- the only call that binds an
LWP of *another* process (usr/src/uts/common/syscall/pset.c,
``pset_bind_lwp``).  It is a private libc interface (version
SUNWprivate_1.1, not in the public ABI), so it is looked up on its own: a
libc without it still gives tumbler the other pset calls, and the binder
then refuses with ``NO_BIND_LWP_MESSAGE``.  There is no fallback that could
serve: ``processor_bind(P_LWPID)`` and ``pset_bind(P_LWPID)`` look the LWP
up in the *calling* process only (``pp = curproc`` in
usr/src/uts/common/syscall/processor_bind.c and pset.c).

Processor sets are exclusive: a CPU in a set runs only LWPs bound to that
set, so every CPU tumbler takes leaves the default set that runs the rest of
the system.  ``setup`` therefore takes CPUs from the default set only
(never from an administrator's set) and refuses, before changing anything,
if the default set would be left with no CPU -- the kernel would refuse the
last one anyway (``cpupart_move_cpu`` returns EBUSY when the last CPU of a
partition with threads in it would leave; usr/src/uts/common/disp/cpupart.c).

Processor bindings are left alone: processor_bind(2) resolves ``P_LWPID``
in the *calling* process (usr/src/uts/common/syscall/processor_bind.c), so
another process's LWP cannot be unbound or rebound from outside.  The kernel
refuses to move an LWP bound to a CPU outside the target set (EBUSY from
``cpupart_movable_thread``); such an LWP is reported Unmovable.  ``save``
records ``pr_bindpro`` for the state file only.

Errors, as the kernel returns them (pset.c, cpupart.c, policy.c):

* EPERM   -- pset_create/assign/destroy need PRIV_SYS_RES_CONFIG
             (``secpolicy_pset``), which a non-global zone can never have;
             pset_bind_lwp (``pset_bind_thread``): another user's LWP
             without PRIV_PROC_OWNER, or an LWP whose current set has
             PSET_NOESCAPE -- the default set always has it
             (``cpupart_initialize_default``) -- without PRIV_SYS_RES_BIND
             or PRIV_SYS_RES_CONFIG (``secpolicy_pbind``,
             usr/src/uts/common/os/policy.c);
* ENOTSUP -- pset_create/assign/destroy, and pset_bind (which counters.py
             uses), while resource pools are enabled (sets belong to
             poolcfg/pooladm): ``POOLS_MESSAGE``; never from pset_bind_lwp,
             which does not look at the pool state;
* EBUSY   -- pset_assign: last CPU of its set, or CPUs with bound threads;
             pset_bind_lwp: the LWP is bound to a CPU outside the set;
* ESRCH   -- the process or LWP is gone;
* EINVAL  -- no such set / CPU off-line; pset_bind_lwp: no such set, a set
             with no CPUs (``cpupart_move_thread``), or a SYSDC thread.

``close`` destroys every set it created.  pset_destroy unbinds every LWP
still bound to the set (``cpupart_unbind_threads``) to the *default* set,
so first ``close`` sends the LWPs of managed processes still there -- born
into a set by inheriting their creator's binding -- to their process's
original set (``origin_of``); pset_destroy then only unbinds what is left.

pset_destroy fails with EBUSY while an LWP is *processor*-bound to one of
the set's CPUs: ``cpupart_destroy`` moves the CPUs out with
``cpupart_move_cpu(cp, &cp_default, 0)``, which unbinds only soft-bound
threads (``cpu_unbind(cpu, B_FALSE)``; processor_bind(2) binds hard) and
gives up with EBUSY after five looks at a CPU that still has bound threads
(usr/src/uts/common/disp/cpupart.c).  Such an LWP is one of the set's own
(a CPU binding needs the CPU's set: ``cpu_bind_thread``): a managed program
that bound an LWP to a CPU itself, or tumbler's own counting LWPs
(``cpc_bind_cpu`` processor-binds its caller; counters.py), which is why
whoever holds counters closes them before the binder.  An EBUSY is retried
after removing the processor bindings on the set's remaining CPUs
(``processor_bind(P_CPUID, cpu, PBIND_NONE)``, pbind -U: ``cpu_unbind(cpu,
B_TRUE)`` in usr/src/uts/common/syscall/processor_bind.c); ``close``
returns one line naming the LWPs whose binding went.  A set that still
cannot be destroyed is kept in ``sets`` (and the state file), and the error
names it with the ``psrset -d`` to run: never left without a word.
"""

import errno

from ...cpulist import format_cpulist
from . import zone as zones
from ..base import AccessDenied, Binder, NoSuchProcess, PlatformError, Unmovable, Unsupported
from .psetlibc import NO_BIND_LWP_MESSAGE, require_bind_lwp
from .structs import PS_NONE

CONFIG_PRIVILEGE = "PRIV_SYS_RES_CONFIG"
#: pset_destroy tries per set: after an EBUSY the CPUs' processor bindings
#: are removed; a set busy still after that holds a binding tumbler cannot
#: lift (a kernel thread's), or one made again at once.
DESTROY_ATTEMPTS = 3

#: ENOTSUP from the pset calls that change sets or bind to them while
#: resource pools are enabled (pset.c: ``pool_state == POOL_ENABLED``).
POOLS_MESSAGE = ("resource pools are enabled: use poolbind or disable pools (`pooladm -d`, "
                 "or `svcadm disable pools`)")
LAST_CPU_MESSAGE = ("the default processor set must keep at least one CPU for the rest "
                    "of the system; %s")


class PsetBinder(Binder):
    """Binder of kind ``pset``.  ``lwp_binding(pid, tid)`` returns the LWP's
    (pr_bindpset, pr_bindpro) and raises NoSuchProcess if it is gone;
    ``bound_lwps()`` lists (pid, lwpid, pr_bindpset, pr_bindpro) of every
    LWP bound to a set or a processor; ``pset_created()`` gives each set's
    creation time, ``{id: hrtime ns}`` (OSError if it cannot)."""

    kind = "pset"

    def __init__(self, libc, lwp_binding, bound_lwps, pset_created, check_thread=None):
        self.libc = libc
        # Backend.check_thread: NoSuchProcess if the PID names another
        # process now (called right before each bind and restore).
        self.check_thread = check_thread or (lambda pid, tid: None)
        self.lwp_binding = lwp_binding
        self.bound_lwps = bound_lwps
        self.pset_created = pset_created
        self.sets = []          # processor set ids created, index = domain
        self.domains = []
        self.created = {}       # set id -> its creation time, where it could be read
        self.pids = set()       # processes whose LWPs were saved
        self.origins = {}       # pid -> processor sets its LWPs had before tumbler
        self.taken_cpus = frozenset()   # CPUs someone took out of the sets (taken)
        self.gone = set()       # set ids someone destroyed (or reused): never destroyed, bound

    # -- Binder interface ----------------------------------------------------

    def setup(self, domains):
        domains = [frozenset(d) for d in domains]
        if self.sets and domains == self.domains:
            return
        require_bind_lwp(self.libc)
        self._destroy_all()     # a rescan changed the domains: start over
        self._check_domains(domains)
        try:
            for domain in domains:
                pset = self._configure(self.libc.pset_create)
                self.sets.append(pset)
                for cpu in sorted(domain):
                    self._configure(self.libc.pset_assign, pset, cpu, cpu=cpu)
        except PlatformError:
            self._destroy_all(quiet=True)
            raise
        self.domains = domains
        self.created = {s: t for s, t in self._creation_times().items() if s in self.sets}

    def save(self, pid, tid):
        """The LWP's binding before tumbler.  An LWP already in one of our
        sets was created by an LWP we had bound and inherited its set
        (``t->t_bind_pset = curthread->t_bind_pset`` in lwp_create,
        usr/src/uts/common/os/lwp.c): it belongs where its creator came
        from, which is taken to be its process's origin (``origin_of``)."""
        self.pids.add(pid)
        bindpset, bindpro = self.lwp_binding(pid, tid)
        if bindpset in self.sets:
            bindpset = origin_of(self.origins.get(pid, ()))
        else:
            self.origins.setdefault(pid, set()).add(bindpset)
        return {"bindpset": bindpset, "bindpro": bindpro}

    def bind(self, pid, tid, domain_index, cpus):
        """Bind to the set of ``domain_index``; a set is the unit, so ``cpus``
        (the domain's CPUs) needs no further restriction."""
        self._bind(pid, tid, self.sets[domain_index])

    def restore(self, pid, tid, saved):
        target = saved.get("bindpset", PS_NONE)
        if target in self.sets:
            target = PS_NONE
        self.check_thread(pid, tid)
        try:
            self.libc.pset_bind_lwp(target, tid, pid)
        except OSError as exc:
            if exc.errno != errno.EINVAL or target == PS_NONE:
                raise _bind_error(exc, pid, tid, target) from None
            self._bind(pid, tid, PS_NONE)   # the saved set was destroyed meanwhile

    def current_cpus(self):
        """The on-line CPUs of each set now (pset_info: a set's off-line
        CPUs are not listed).  A set someone destroyed has none, and is
        ``gone``: also when its id names a new set with CPUs but none of
        the domain's (ids are reused; the kernel lets no set lose its last
        CPU while LWPs are bound to it, nor take its last on-line CPU
        off-line).  A gone set is never bound to or destroyed again."""
        found = []
        for pset, domain in zip(self.sets, self.domains):
            try:
                cpus = self.libc.pset_info(pset)
            except OSError:
                cpus = None
            if cpus is None or (cpus and not cpus & domain):
                self.gone.add(pset)
            found.append(frozenset() if pset in self.gone else cpus)
        return found

    def taken(self, online, current):
        """The CPUs of the domains that are on-line but no longer in their
        set (``current``: current_cpus) -- an administrator moved them
        out (psrset -r, or -a to another set) or destroyed the set.  Kept
        for the run: re-planned without them (balance/machine.py), the
        sets made again leave them where the administrator put them.  A
        CPU someone adds to one of the sets is left there, and goes to the
        default set with the set at the end (cpupart_destroy)."""
        for domain, cpus in zip(self.domains, current):
            self.taken_cpus |= (domain - cpus) & online
        return self.taken_cpus

    def close(self):
        """Destroy the sets; returns what is worth telling: the processor
        bindings removed so that a set could go (module doc)."""
        self._return_inherited()
        return self._destroy_all()

    def leftover_placement(self, pid, tid, state):
        """For ``tumbler restore``: where an LWP the state does not list
        belongs, or None to leave it.  One bound to a set the dead tumbler
        made (still with the recorded CPUs) was created after the last
        write and inherited the set: it goes to its process's origin, from
        the recorded LWPs' saved sets -- not to the default set, where
        pset_destroy would send it."""
        resources = state.get("resources") or {}
        bindpset, bindpro = self.lwp_binding(pid, tid)
        if bindpset == PS_NONE or bindpset not in (resources.get("psets") or ()):
            return None
        if not self._same_set(bindpset, resources):
            return None             # the id was reused: someone else's set
        origins = {r["saved"].get("bindpset", PS_NONE) for r in state.get("threads", ())
                   if isinstance(r.get("saved"), dict)}
        return {"bindpset": origin_of(origins), "bindpro": bindpro}

    # -- crash safety (tumbler.state) ----------------------------------------

    def resources(self):
        """What this binder created, for the state file: the set ids, each
        set's creation time and CPUs and the processes whose LWPs it saved
        (and may have bound), so that a later ``remove_leftovers`` can tell
        its sets from sets that got the same ids after it died."""
        return {"psets": list(self.sets),
                "pset_created": {str(s): t for s, t in self.created.items()},
                "pset_cpus": {str(s): sorted(d) for s, d in zip(self.sets, self.domains)},
                "pids": sorted(self.pids)}

    def current(self, pid, tid):
        """The LWP's binding now: (processor set, processor)."""
        return self.lwp_binding(pid, tid)

    def remove_leftovers(self, resources, owner):
        """Destroy the processor sets a killed tumbler created (its state
        file lists them); return what was destroyed.

        Set ids are reused: ``cpupart_create`` takes the lowest free id
        (``cpupart_destroy`` lowers ``cp_id_next``; usr/src/uts/common/disp/
        cpupart.c), so after the crash an administrator's new set may carry
        the dead tumbler's id.  A set is destroyed only if it is the one the
        dead tumbler made (``_same_set``: its creation time, else its CPUs)
        and no LWP of a process the dead tumbler did not manage is bound to
        it; anything else is left alone.  pset_destroy unbinds the LWPs
        still bound to a set (to the default set).

        What remains: between that check and pset_destroy (one system call
        later) a privileged process could destroy the set and create
        another that gets the same id; no call destroys a set only if it is
        a given one, nor holds sets steady for a caller (``pool_lock`` is
        the kernel's own), so that window cannot be closed here."""
        destroyed, left, first_error = [], [], None
        resources = resources or {}
        managed = set(resources.get("pids") or ())
        for pset in resources.get("psets", []):
            if not isinstance(pset, int) or pset == PS_NONE or pset in self.sets:
                continue
            try:
                if not self._still_ours(pset, resources, managed):
                    continue
                self.libc.pset_destroy(pset)
                destroyed.append("processor set %d" % pset)
            except OSError as exc:
                if exc.errno == errno.EINVAL:      # already destroyed by someone
                    continue
                left.append(pset)
                first_error = first_error or exc
        if first_error is not None:
            raise _destroy_error(first_error, left)
        return destroyed

    # -- helpers -------------------------------------------------------------

    def _cpus_of(self, pset):
        """CPUs of ``pset``; None if it no longer exists."""
        try:
            return self.libc.pset_info(pset)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return None
            raise _configure_error(exc, self.libc.pset_info, None) from None

    def _return_inherited(self):
        """Before our sets go: LWPs of managed processes still bound to
        them (created after their creator was bound and never saved, or
        not restored) go to their process's origin; pset_destroy would
        send them all to the default set.  Failures are left to it."""
        for pset in self.sets:
            for pid, tid in self._lwps_in(pset):
                target = origin_of(self.origins.get(pid, ()))
                if pid not in self.pids or target == PS_NONE:
                    continue        # pset_destroy puts it in the default set
                try:
                    self.libc.pset_bind_lwp(target, tid, pid)
                except OSError:
                    continue

    def _still_ours(self, pset, resources, managed):
        """Is set ``pset`` still the one a dead tumbler made, with only its
        processes' LWPs in it (see ``remove_leftovers``)?"""
        return (self._same_set(pset, resources)
                and all(pid in managed for pid, _ in self._lwps_in(pset)))

    def _same_set(self, pset, resources):
        """Is set ``pset`` the one the state's ``resources`` recorded, not a
        new set that got its id?  By its creation time where the state
        recorded one and the kstats answer -- a new set has another -- else
        by its CPUs (state files from before either record pass)."""
        created = (resources.get("pset_created") or {}).get(str(pset))
        if created is not None:
            now = self._creation_times().get(pset)
            if now is not None:
                return now == created
        recorded = (resources.get("pset_cpus") or {}).get(str(pset))
        return recorded is None or self._cpus_of(pset) == frozenset(recorded)

    def _creation_times(self):
        """``pset_created()``, {} where the kstats cannot be read."""
        try:
            return self.pset_created()
        except OSError:
            return {}

    def _lwps_in(self, pset):
        return [(pid, tid) for pid, tid, bindpset, _ in self.bound_lwps() if bindpset == pset]

    def _check_domains(self, domains):
        if not domains or not all(domains):
            raise Unsupported("--binder pset needs at least one non-empty domain")
        wanted = frozenset().union(*domains)
        if sum(len(d) for d in domains) != len(wanted):
            raise Unsupported("processor sets cannot share CPUs: the domains overlap")
        default = self._configure(self.libc.pset_info, PS_NONE)
        foreign = wanted - default
        if foreign:
            raise Unsupported(
                "CPUs %s are not in the default processor set (another processor set "
                "holds them, see `psrset -i`); tumbler only takes CPUs from the default set"
                % format_cpulist(foreign))
        if not default - wanted:
            raise Unsupported(LAST_CPU_MESSAGE % (
                "the domains (%s) take all of its CPUs; leave at least one CPU out "
                "(e.g. with --cpus)" % format_cpulist(wanted)))

    def _configure(self, call, *args, cpu=None):
        """Run a pset configuration call, mapping errno to exceptions."""
        try:
            return call(*args)
        except OSError as exc:
            raise _configure_error(exc, call, cpu) from None

    def _bind(self, pid, tid, pset):
        if pset in self.gone:
            raise Unmovable(tid, "processor set %d is no longer tumbler's" % pset)
        self.check_thread(pid, tid)
        try:
            self.libc.pset_bind_lwp(pset, tid, pid)
        except OSError as exc:
            raise _bind_error(exc, pid, tid, pset) from None

    def _destroy_all(self, quiet=False):
        """Destroy every set; the notices of ``_destroy``."""
        left, first_error, notices = [], None, []
        for pset in self.sets:
            if pset in self.gone:
                continue                # someone else's now, or no more
            try:
                self._destroy(pset, notices)
            except OSError as exc:
                if exc.errno == errno.EINVAL:      # already destroyed by someone
                    continue
                left.append(pset)
                first_error = first_error or exc
        self.sets, self.domains = left, []
        self.gone.clear()
        if first_error is not None and not quiet:
            raise _destroy_error(first_error, left)
        return notices

    def _destroy(self, pset, notices):
        """pset_destroy, retried after an EBUSY once the processor bindings
        on the set's CPUs are removed (module doc); OSError if it fails."""
        for attempt in range(DESTROY_ATTEMPTS):
            try:
                self.libc.pset_destroy(pset)
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == DESTROY_ATTEMPTS - 1:
                    raise
            # pset_destroy unbound the set's LWPs before it gave up: what
            # holds it now is a processor binding on a CPU still in it
            cpus = self.libc.pset_info(pset)
            bound = sorted((pid, tid, cpu) for pid, tid, _, cpu in self.bound_lwps()
                           if cpu in cpus)
            for cpu in sorted(cpus):
                try:
                    self.libc.unbind_cpu(cpu)
                except OSError:
                    continue            # the retry says whether it mattered
            if bound:
                notices.append(
                    "processor set %d could not be destroyed while LWPs were bound to its "
                    "CPUs: removed the processor binding of %s" % (pset, ", ".join(
                        "LWP %d/%d (CPU %d)" % lwp for lwp in bound)))


def origin_of(bindpsets):
    """The processor set a process's LWPs came from, given the sets they had
    before tumbler: the one set if they all agreed, else the default set
    (PS_NONE) -- which of several an unrecorded LWP's creator had is not
    known."""
    bindpsets = set(bindpsets)
    return bindpsets.pop() if len(bindpsets) == 1 else PS_NONE


def _configure_error(exc, call, cpu):
    code = exc.errno
    name = getattr(call, "__name__", "pset call")
    if code == errno.EPERM:
        return _config_denied("creating processor sets")
    if code == errno.ENOTSUP:
        return Unsupported(POOLS_MESSAGE)
    if code == errno.EBUSY:
        return Unsupported(LAST_CPU_MESSAGE % (
            "CPU %s cannot leave it: it is the set's last CPU, or threads are bound "
            "to it (see `pbind -q`)" % ("?" if cpu is None else cpu)))
    if code == errno.EINVAL and cpu is not None:
        return Unsupported("CPU %d cannot join a processor set: it is off-line or does "
                           "not exist (see `psrinfo`)" % cpu)
    if code == errno.ENOMEM:
        return Unsupported("the system limit on processor sets is reached (see `psrset -i`)")
    return PlatformError("%s: %s" % (name, exc.strerror or exc))


def _bind_error(exc, pid, tid, pset):
    code = exc.errno
    if code == errno.ESRCH:
        return NoSuchProcess(pid, tid)
    if code == errno.EPERM:
        zone = zones.nonglobal_zone()
        if zone is not None:
            return _config_denied("moving LWPs between processor sets", zone)
        return AccessDenied(
            "binding LWP %d of process %d to a processor set needs PRIV_SYS_RES_BIND or %s "
            "to move it out of the default set (which never lets LWPs escape without "
            "one), and PRIV_PROC_OWNER for another user's process"
            % (tid, pid, CONFIG_PRIVILEGE), CONFIG_PRIVILEGE)
    if code == errno.EBUSY:
        return Unmovable(tid, "it is bound to a processor outside processor set %d "
                         "(unbind it with `pbind -u %d/%d`)" % (pset, pid, tid))
    if code == errno.EINVAL:
        return Unmovable(tid, "the kernel refused to bind it to processor set %d "
                         "(the set is gone or has no CPUs, or it is a system-class "
                         "thread)" % pset)
    if code == errno.ENOSYS:
        return Unsupported(NO_BIND_LWP_MESSAGE)
    # No ENOTSUP: pset_bind_lwp does not look at the pool state (pset.c).
    return PlatformError("pset_bind_lwp(%d, %d, %d): %s" % (pset, tid, pid,
                                                          exc.strerror or exc))


def _config_denied(what, zone=None):
    """EPERM from a pset configuration call: the privilege, or the zone that
    can never have it (then "run as root" would be wrong advice)."""
    zone = zone or zones.nonglobal_zone()
    if zone is not None:
        return AccessDenied(zones.prohibited("sys_res_config", zone,
                                                     "%s (--binder pset)" % what),
                            CONFIG_PRIVILEGE)
    return AccessDenied("%s needs privilege %s (run as root)" % (what, CONFIG_PRIVILEGE),
                        CONFIG_PRIVILEGE)


def _destroy_error(exc, left):
    hint = "processor sets %s were left behind; remove them with `psrset -d %s`" % (
        ", ".join(map(str, left)), " ".join(map(str, left)))
    if exc.errno == errno.EPERM:
        denied = _config_denied("destroying processor sets")
        return AccessDenied("%s: %s" % (denied, hint), CONFIG_PRIVILEGE)
    if exc.errno == errno.ENOTSUP:
        return Unsupported("%s; %s" % (POOLS_MESSAGE, hint))
    if exc.errno == errno.EBUSY:
        return PlatformError("pset_destroy: processor set %d still has a thread bound to a CPU "
                             "of it after %d tries (see `pbind -Q`); %s"
                             % (left[0], DESTROY_ATTEMPTS, hint))
    return PlatformError("pset_destroy: %s; %s" % (exc.strerror or exc, hint))
