"""``tumbler service``: find the programs the rules select and balance each
as ``tumbler -p`` would, in one loop.

The loop is the driver's (driver.py), as for ``tumbler -p``: SIGHUP
reloads the configuration (a bad one is refused and the running one
kept), any other stop signal ends the service; every ``scan_interval`` a
look at every process (``scan``) -- a new one that a rule selects, with
enough threads and, over one scan interval, enough CPU, becomes a managed
*program*; every program not parked gets whatever its controller has
due, and one whose process exited, or whose balancing failed, is handed
back and dropped; control socket requests (``status``), the metrics file.

Each program is a run of its own (assembly.py: controller, backend,
binder, journal), so it gets every restore guarantee ``tumbler -p`` has,
and one program's failure or exit never touches another's threads.

Parked programs (issue 29): too idle to be imbalanced, not sampled at all
(program.py).  The whole service's CPU: ``service.cpu_budget`` (budget.py).

What a program must be to be managed (checked once, at the scan that first
sees it; a process refused is not looked at again until its PID names
another process):

* not tumbler itself or its children, not PID 1, not a kernel thread;
* selected by a rule (first match wins), with ``min_threads`` threads or
  more and, between two scans, ``min_cpu`` CPUs or more of CPU time;
* its threads' masks together allow what it may use (``Backend.may_use``:
  on-line, not isolated, within its cgroup's cpuset): narrower, someone
  else placed it (taskset, numactl, a container runtime), and it is left
  alone -- logged once -- unless its rule says ``override: true``;
* not managed by another tumbler (its state file's lock);
* within the caps: ``service.max_programs`` programs and
  ``service.max_threads`` threads in all, a rule's own ``max_programs``
  and ``max_threads`` (per program).  A process over a cap waits (one
  line says how many do, once the scans have looked at every process and
  found more waiting) and is looked at again when a managed program
  leaves; a managed program that grows past a thread cap is handed back.

Everything a process's owner controls is treated as hostile: rules match
in linear time (service/pattern.py), the command line is read against a
deadline (service/deadline.py), names are printable before they reach a
log line, and a scan stops early for a stop signal, so every step of the
loop is bounded and a stop signal hands every program back within a
second.  A scan also stops once it has used SCAN_CPU_SHARE of its
interval in CPU time, or its share of the CPU budget (budget.py; users
can make scans long with thousands of processes, or long command lines
renamed to be matched again), and the next goes on from the PID it
stopped at: every process is still looked at in turn.

CPUs listed in ``isolcpus=`` or ``nohz_full=`` are never in a program's domains,
and domains are cut down to what the program may use: no mask is ever widened.

Logging: log.py (a line per event that matters; about processes, rate-limited).
"""

import bisect
import os
import signal
import time

from .. import __version__
from ..balance.domains import choose_domains
from ..balance.llc import LlcMeter
from ..balance.machine import MachineWatch
from ..balance.otherwork import OtherWorkCounting
from ..balance.sharing import SpaceSharing
from ..cpulist import format_cpulist
from ..errors import TumblerError
from ..platform import open_backend
from ..platform.base import NoSuchProcess, PlatformError, allowed_union
from ..platform.priority import note as priority_note, settle_priority
from .budget import PLAN_EVERY_S, CpuBudget, slowed
from .assembly import binder_for, discard, journal_for, observers_for, policy_for, unrestored
from .config import load_service_config
from .deadline import DeadlineReader, Refused, Stalled
from .driver import Driver
from .log import ERROR, INFO, WARNING, Events
from .program import Program

#: Share of one CPU a scan may use, of its scan interval (the module doc).
SCAN_CPU_SHARE = 0.25
#: Processes looked at between two checks of the stop signal and the budget.
SCAN_CHECK_EVERY = 8
#: A process no rule selected is matched again only when its name or user
#: changes (an exec, a setuid) or after this many scans (a cgroup move, a
#: new command line under the same name): a scan then costs one /proc/PID/stat
#: and status read per process that stays unselected.
REMATCH_SCANS = 15
#: A scan lists the processes again when a PID was made since the last
#: listing (Backend.newest_pid: /proc/loadavg on Linux) and at least every
#: this many scans (the PID space could wrap round to the same newest PID):
#: listing /proc walks every thread ID, 1-4 ms at 20,000 threads.
RELIST_SCANS = 15
#: With measured capacity, a program's other work (what neither it nor the
#: service's other programs used of a domain) is averaged over this many load
#: windows (balance/capacity.py): bursty neighbours moved threads for noise.
CAPACITY_SMOOTH_WINDOWS = 4
#: Looks at parked programs' CPU per scan interval (the module doc), one
#: read per parked program each (6-25 us for 100 threads: the kernel walks
#: them; BENCHMARKS.md): a rise is seen within two looks, two thirds of an
#: interval, with a third for the loop to be late.
PARKED_LOOKS = 3


class Service:
    def __init__(self, config, config_path, log, verbose=False, log_path=None):
        self.config = config
        self.config_path = config_path
        self.log = log              # the service's own lines
        self.events = Events(log)   # lines about processes: rate-limited (log.py)
        self.verbose = verbose
        self.log_path = log_path    # --log: one JSON line per round of each program
        self.driver = Driver()      # the one loop: it ticks every program beside the scans
        self.programs = self.driver.runs    # pid -> Program
        self.declined = {}          # pid -> its start token: refused, not looked at again
        self.candidates = {}        # pid -> (monotonic s, CPU ns) at the scan that saw it
        self.unselected = {}        # pid -> ((start, name, uid), scans since) no rule selected
        self.capped = {}            # pid -> its start token: over a cap, until a program leaves
        self.scan_from = 0          # the PID the next scan starts at (the last ran out of time)
        self.listed = None          # [newest PID then, scans since, PIDs]: the last listing
        self.waiting = 0            # len(capped) when the look at every process began
        self.reader = DeadlineReader()  # command lines: a process can stall their read
        self.refusing = False       # the reader refuses reads (too many stuck): said once
        self.started = time.monotonic()
        self.me = os.getpid()
        self.backend = open_backend(None, "/")      # for scans; programs have their own
        self.machine = MachineWatch(self.backend)  # CPUs, cpusets changed: _look_at_machine
        self.sharing = self._sharing(config)        # None: time sharing
        self.budget = CpuBudget(config.cpu_budget, config.scan_interval)

    # -- the loop ------------------------------------------------------------

    def run(self, waiter, control=None, metrics=None):
        """Serve until a stop signal; returns its description.  The turns
        (the module doc) are the driver's: a scan every scan_interval, the
        parked programs' looks, a look at the machine every scan_interval,
        space sharing's checks, the metrics file, then every program not
        parked."""
        settle_priority()           # nice 0 unless its waits say otherwise
        driver = self.driver
        driver.on_signal = self._signal
        driver.on_error = self._failed
        driver.on_tick = self._ticked
        driver.on_exit = lambda program: self._drop(program, "exited")

        def scan(now):
            self.scan(stop=lambda: bool(waiter.pending))
            self.events.flush()         # counts of lines held back, when due
            return time.monotonic() + self.config.scan_interval
        driver.at("scan", time.monotonic(), scan)

        def look_at_parked(now):
            look = self.config.scan_interval / PARKED_LOOKS
            for program in list(self.programs.values()):
                if program.parked:
                    self._weigh(program)
                elif self._paced(program) and not program.alive():
                    driver.tick_soon(program.pid)       # gone: its tick drops it
                elif self._paced(program):              # grown past its cap: not bound first
                    self._check_cap(program, program.threads_now())
            return time.monotonic() + look
        driver.at("parked", time.monotonic(), look_at_parked)
        driver.at("machine", time.monotonic(), self._look_at_machine)
        driver.at("budget", time.monotonic(), self._plan_budget)
        if self.sharing is not None:
            driver.at("sharing", time.monotonic(), self.sharing.tick)
        if metrics is not None:
            driver.at("metrics", 0.0, lambda now: metrics(self))
        if control is not None:
            waiter.watch(control.fileno())
            driver.on_ready = lambda: control.serve(
                self.answer, warn=lambda message: self.log(WARNING, message))
        return driver.run(waiter)

    def _signal(self, signum):
        """SIGHUP reloads the configuration; any other signal ends the service."""
        if signum == signal.SIGHUP:
            self.reload()
            return None
        return "signal %d" % signum

    def _look_at_machine(self, now):
        """Say once for all programs what changed of the CPUs on-line and their
        cpusets, every scan_interval: each controller follows at its own pace
        (balance/machine.py); this look, a cpuset read per program, only tells."""
        for change, pids in self.machine.look(
                self.programs, lambda pid: self.programs[pid].controller.backend):
            count = len(self.programs if pids is None else pids)
            self.log(WARNING, "%s: %d program%s re-planned"
                     % (change, count, "" if count == 1 else "s"))
        return time.monotonic() + self.config.scan_interval

    def _plan_budget(self, now):
        """Space the programs' ticks to fit service.cpu_budget (budget.py)."""
        self.budget.pace_programs(now, self.driver.paces, self.programs, self.events)
        return time.monotonic() + PLAN_EVERY_S

    def _paced(self, program):
        return None if program.parked else slowed(self.driver.paces.get(program.pid))

    def _failed(self, program, exc):
        self.events(program.rule.name, "programs whose balancing failed", ERROR, "PID %d (%s): "
                    "balancing failed: %s; handed back" % (program.pid, program.name, exc))
        self._drop(program, "failed")

    def _ticked(self, program):
        """After a program's tick: its domains' changes of state (-v says them itself)."""
        for line in () if self.verbose else program.changes():
            self.events(program.rule.name, "changes of a domain's state", INFO,
                        "PID %d (%s): %s" % (program.pid, program.name, line))
        self._check_cap(program)

    def _check_cap(self, program, threads=None):
        """A program past its thread cap (``threads``, else those tracked) is handed back."""
        threads = threads or len(program.controller.threads)
        cap = self._thread_cap(program.rule, exclude=program)
        if threads > cap:
            self.events(program.rule.name, "programs handed back past a thread cap", WARNING,
                        "PID %d (%s): %d threads, past the cap of %d (max_threads); "
                        "handed back" % (program.pid, program.name, threads, cap))
            self._drop(program, "too many threads")

    def stop(self):
        """Hand back every program's threads; returns how many failed."""
        failed = 0
        for program in list(self.programs.values()):
            failed += self._drop(program, "service stopping", quiet=True)
        if self.sharing is not None:
            self.sharing.close()
        self.events.flush(everything=True)
        return failed

    def _drop(self, program, why, quiet=False):
        self.programs.pop(program.pid, None)
        self.driver.paces.pop(program.pid, None)
        self.capped.clear()         # room now: those waiting are looked at again
        failed = program.hand_back()
        if self.sharing is not None:
            self.sharing.leave(program.pid)     # after: its CPUs are free now
        if failed:          # never held back: restore needs to know which
            self.log(ERROR, "PID %d (%s): %s" % (program.pid, program.name, unrestored(failed)))
        elif not quiet:
            self.events(program.rule.name, "programs dropped", INFO, "PID %d (%s): dropped (%s), "
                        "rule %s" % (program.pid, program.name, why, program.rule.name))
        return failed

    # -- finding programs ------------------------------------------------------

    def scan(self, stop=None, cpu_budget=None):
        """Look at every process once: pick up what the rules select.
        ``stop()`` true ends the scan early (a stop signal is waiting:
        thousands of processes must not delay it).  A scan spends at most
        ``cpu_budget`` seconds of the service's CPU time (default
        SCAN_CPU_SHARE of the scan interval, and at most the scans' share
        of service.cpu_budget: budget.py) looking at processes; past
        it, it stops, and the next scan starts at the PID it stopped at,
        so every process is looked at in turn however many a user starts
        or renames."""
        now = time.monotonic()
        pids = self._listing()
        if pids is None:
            return
        if cpu_budget is None:
            cpu_budget = min(SCAN_CPU_SHARE * self.config.scan_interval,
                             self.budget.scan_cpu_s(self.config.scan_interval))
        for program in list(self.programs.values()):
            if not program.parked:      # parked ones: look_at_parked (run)
                self._weigh(program)
        if self.scan_from == 0:     # a look at every process begins
            self.waiting = len(self.capped)
        first = bisect.bisect_left(pids, self.scan_from)
        self.scan_from = 0
        spent_from = time.process_time()
        for index, pid in enumerate(pids[first:] + pids[:first]):
            if index % SCAN_CHECK_EVERY == 0:
                if stop is not None and stop():
                    return
                if index and time.process_time() - spent_from > cpu_budget:
                    self.scan_from = pid
                    break
            if pid in self.programs or pid == self.me or pid == 1:
                continue
            try:
                self._consider(pid, now)
            except NoSuchProcess:
                self.candidates.pop(pid, None)
            except PlatformError as exc:
                self._decline(pid, None, "unreadable processes", WARNING, "PID %d: %s" % (pid, exc))
        if self.scan_from == 0 and len(self.capped) > self.waiting:   # one line per look
            self.log(WARNING, "%d process(es) a rule selects wait: the caps are reached "
                     "(service.max_programs %d, max_threads %d, or a rule's own; "
                     "`tumbler status` shows what is managed)"
                     % (len(self.capped), self.config.max_programs, self.config.max_threads))

    def _listing(self):
        """The PIDs of every process, sorted (None: cannot be listed); listed
        again only when a PID was made since (Backend.newest_pid) or after
        RELIST_SCANS scans.  The tables lose the PIDs that left."""
        newest = self.backend.newest_pid()
        last = self.listed
        if newest is not None and last is not None and newest == last[0] \
                and last[1] < RELIST_SCANS:
            last[1] += 1
            return last[2]
        try:
            pids = sorted(self.backend.process_ids())
        except PlatformError as exc:
            self.log(ERROR, str(exc))
            return None
        self.listed = [newest, 0, pids]
        alive = set(pids)
        for table in (self.declined, self.candidates, self.unselected, self.capped):
            for pid in [p for p in table if p not in alive]:
                del table[pid]
        return pids

    def _consider(self, pid, now):
        if pid in self.declined or pid in self.capped:
            # Refused or waiting: still that process while its start time
            # is (one stat read; kernel threads are most of a scan).
            start = self.backend.process_start(pid)
            if self.declined.get(pid) == start or self.capped.get(pid) == start:
                return
        info = self.backend.process(pid)
        start = info.start
        self.declined.pop(pid, None)
        if info.is_kernel:
            self.declined[pid] = start
            return
        key = (start, info.name, info.uid)
        seen = self.unselected.get(pid)
        if seen is not None and seen[0] == key and seen[1] < REMATCH_SCANS:
            self.unselected[pid] = (key, seen[1] + 1)
            return
        facts = self.backend.process_facts(pid)
        if self.backend.parent_of(pid) == self.me:
            self.declined[pid] = start
            return
        read = []

        def cmdline():          # read once, and only if a rule gets that far
            if not read:
                read.append(self.reader(self.backend.cmdline, pid))
                if self.refusing:
                    self.refusing = False
                    self.log(INFO, "command lines are read again")
            return read[0]
        try:
            rule = next((r for r in self.config.rules if r.matches(facts, cmdline)), None)
        except Refused as exc:
            # Not this process's doing: it is looked at again next scan.
            if not self.refusing:
                self.refusing = True
                self.log(WARNING, "command lines are not read while %s; processes a rule "
                         "selects by command line wait" % str(exc).replace(" already", ""))
            return
        except Stalled as exc:
            self._decline(pid, None, "command lines not read", WARNING,
                          "PID %d (%s): its command line could not be read (%s); "
                          "not looked at again" % (pid, facts.comm, exc), start)
            return
        if rule is None:
            self.unselected[pid] = (key, 0)
            self.candidates.pop(pid, None)
            return
        self.unselected.pop(pid, None)
        if facts.threads < rule.min_threads:
            self.candidates.pop(pid, None)
            return
        if rule.min_cpu > 0:
            seen = self.candidates.get(pid)
            self.candidates[pid] = (now, facts.cpu_ns)
            if seen is None or now <= seen[0]:
                return
            if (facts.cpu_ns - seen[1]) / 1e9 / (now - seen[0]) < rule.min_cpu:
                return
        self.candidates.pop(pid, None)
        if self._over_cap(rule, facts):
            self.capped[pid] = start
            return
        self._manage(pid, start, facts, rule)

    def _weigh(self, program):
        """Park or wake ``program`` by its CPU use since the last look
        (Program.weigh), at most every half a parked look's interval."""
        if program.weigh(self.config.scan_interval / PARKED_LOOKS / 2,
                         *program.park_below(self.config.park_below)):
            self.driver.tick_soon(program.pid)      # woken: a round now

    def _thread_cap(self, rule, exclude=None):
        """Threads a program of ``rule`` may have: its rule's cap, and what
        the service's cap leaves beside the other programs."""
        others = sum(len(p.controller.threads) for p in self.programs.values()
                     if p is not exclude)
        room = self.config.max_threads - others
        return room if rule.max_threads is None else min(room, rule.max_threads)

    def _over_cap(self, rule, facts):
        """Whether managing a process of ``rule`` with ``facts.threads``
        threads would pass a cap (the module doc)."""
        return (len(self.programs) >= self.config.max_programs
                or (rule.max_programs is not None and rule.max_programs <= sum(
                    1 for p in self.programs.values() if p.rule.name == rule.name))
                or facts.threads > self._thread_cap(rule))

    def _decline(self, pid, rule, kind, priority, message, start=None):
        if start is None:
            try:
                start = self.backend.process(pid).start
            except PlatformError:
                return
        self.declined[pid] = start
        self.events(rule, kind, priority, message)

    def _manage(self, pid, start, facts, rule):
        backend = open_backend(None, "/")
        allowed = allowed_union(backend, [pid])
        may_use = backend.may_use(pid)
        if allowed < may_use and not rule.override:
            self._decline(pid, rule.name, "programs left alone", INFO, "PID %d (%s), rule %s: "
                          "left alone: its threads may run on CPUs %s of the %s it may use, "
                          "a placement someone else made (override: true manages it)"
                          % (pid, facts.comm, rule.name, format_cpulist(allowed),
                             format_cpulist(may_use)), start)
            return
        isolated, nohz_full = backend.reserved_cpus()
        usable = allowed - isolated - nohz_full
        try:
            if not usable:
                raise TumblerError("every CPU it may use is isolated or nohz_full")
            choice = choose_domains(backend.topology(), usable, rule.level, rule.domains)
        except TumblerError as exc:
            self._decline(pid, rule.name, "programs not managed", WARNING, "PID %d (%s), rule %s: "
                          "not managed: %s" % (pid, facts.comm, rule.name, exc), start)
            return
        balancing = self.config.balancing
        policy = policy_for(rule.policy, balancing)
        warn = lambda message: self.events(rule.name, "warnings", WARNING, message)  # noqa: E731
        journal = program = None
        observers = ()
        try:
            binder = binder_for(backend, policy.moves_threads)     # the backend's default
            journal = journal_for(backend, policy.moves_threads, warn)
            if journal is not None:
                refused = journal.try_claim(pid, allowed)
                if refused is not None:
                    journal.close()
                    self._decline(pid, rule.name, "programs not managed", INFO,
                                  "PID %d (%s), rule %s: not managed: %s"
                                  % (pid, facts.comm, rule.name, refused), start)
                    return
            observers = self._observers(pid, facts.comm, rule, warn)
            program = Program(pid, facts.comm, rule, backend, policy, choice, binder, balancing,
                              counting=self._counting(pid, balancing.capacity),
                              journal=journal, observers=observers, warn=warn)
            program.controller.tell_machine = lambda note: None     # said once for all
            program.controller.add_target(pid, allowed)
            self.machine.add(pid, backend)      # its cpuset now: a change is told
        except (TumblerError, PlatformError) as exc:
            if program is not None:
                program.hand_back()         # whatever add_target placed goes back
            else:
                discard(journal, observers)
            if not isinstance(exc, NoSuchProcess):
                self._decline(pid, rule.name, "programs not managed", WARNING, "PID %d (%s), "
                              "rule %s: not managed: %s" % (pid, facts.comm, rule.name, exc), start)
            return
        self.driver.add(program)
        self.events(rule.name, "programs managed", INFO, "PID %d (%s): managed by rule %s, policy "
                    "%s, %s" % (pid, facts.comm, rule.name, policy.name, choice.note))
        if self.sharing is not None and policy.moves_threads:
            # Sets new domains only: the binding is done by the rounds
            # (driver.py), where a failure drops this program alone.
            self.sharing.join(pid, program.controller, rule.weight,
                              "PID %d (%s)" % (pid, facts.comm))

    def _counting(self, pid, capacity):
        """How program ``pid`` counts other work (balance/otherwork.py): by
        ``capacity``, less the CPU the service's other programs received on
        those CPUs (balance/capacity.py), smoothed (CAPACITY_SMOOTH_WINDOWS)."""
        def elsewhere(cpus):
            return sum(p.received_on(cpus) for p in self.programs.values() if p.pid != pid)
        return OtherWorkCounting(capacity, elsewhere, CAPACITY_SMOOTH_WINDOWS)

    def _sharing(self, config):
        """Space sharing's coordinator, or None with ``sharing: {mode: time}``."""
        sharing = config.sharing
        if sharing["mode"] != "space":
            return None
        say = lambda message: self.log(INFO, message)  # noqa: E731
        return SpaceSharing(sharing["policy"], sharing["tolerance"], log=say,
                            counters=LlcMeter(self.backend, say))

    def _observers(self, pid, name, rule, warn):
        """-v and --log (both make every round a full one, as with -p): one
        log for all programs, a line per round of each; ``warn(message)``."""
        try:
            return observers_for(log_path=self.log_path, verbose=self.verbose,
                                 log_fields=lambda controller: {
                                     "pid": pid, "rule": rule.name,
                                     # its name now (Program.weigh: renamed by exec)
                                     "name": getattr(self.programs.get(pid), "name", name)},
                                 append=True, started=self.started,
                                 warn=warn)
        except TumblerError as exc:
            warn(str(exc))
            return observers_for(verbose=self.verbose)

    # -- reload and status -------------------------------------------------------

    def reload(self):
        """SIGHUP: read the configuration again; keep the running one if the
        new one is bad.  Programs already managed stay as they are; the new
        rules apply from the next scan on, to processes not yet looked at
        and to those no rule selected before."""
        try:
            config = load_service_config(self.config_path)
        except TumblerError as exc:
            self.log(ERROR, "reload refused, the running configuration stays: %s" % exc)
            return
        if config.sharing["mode"] != self.config.sharing["mode"]:
            self.log(WARNING, "sharing.mode %s stays until the service restarts"
                     % self.config.sharing["mode"])
            config.sharing["mode"] = self.config.sharing["mode"]
        if self.sharing is not None:
            self.sharing.policy = config.sharing["policy"]
            self.sharing.tolerance = config.sharing["tolerance"]
        self.config = config
        self.budget.cpus, self.budget.window_s = config.cpu_budget, config.scan_interval
        self.declined.clear()
        self.candidates.clear()
        self.unselected.clear()
        self.log(INFO, "configuration reloaded: %d rule(s) from %s"
                 % (len(config.rules), ", ".join(config.files) or self.config_path))

    def answer(self, request):
        if request.get("cmd") == "status":
            return self.status()
        return {"error": "unknown request %r (known: status)" % (request.get("cmd"),)}

    def status(self):
        usage = os.times()
        return {"version": __version__, "pid": self.me,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "own_cpu_s": round(usage.user + usage.system, 3), "priority": priority_note(),
                "cpu_budget": self.config.cpu_budget,
                "config": self.config_path,
                "rules": [r.name for r in self.config.rules],
                "programs": [dict(p.status(), paced=self._paced(p))
                             for p in sorted(self.programs.values(), key=lambda p: p.pid)]}
