"""Balancing runs: ``tumbler -p PID ...`` and ``tumbler exec -- CMD``.

Everything that can be wrong with the input is checked before anything is
changed or any command is started, so a usage error leaves the system as it
was.  Each run is assembled by service/assembly.py and driven by the one
loop, service/driver.py, as the service's are; once threads are moved,
every exit path (the targets exit, the duration passes, a signal, an
error) hands the run back (``Run.hand_back``: every thread restored).
"""

import os
import sys
import time

# ``signal`` without its enums: imported before ``exec`` starts its command
# (platform/signals.py says why).
import _signal as signal

from ..platform.signals import SignalWaiter
from ..config import moves_threads
from ..errors import EXIT_FAILURE, TumblerError, UsageError, exit_status, tell

# Everything else -- the platform layer, the loop, the engine, the journal,
# the observers -- is imported where it is used: ``exec`` starts its
# command before it needs them (see run_exec).

#: When this module was loaded: the summary's start if the process's own
#: start time cannot be read.
_LOADED = time.monotonic()


def _launched():
    """time.monotonic() when this process started: the summary's "ran N s"
    is the wall time the user waited, start-up included (on an overloaded
    machine that can be most of it).  Linux: the process's start time
    against CLOCK_BOOTTIME; elsewhere when this module was loaded."""
    from ..platform import own_start_ticks
    start_ticks = own_start_ticks()
    boottime = getattr(time, "CLOCK_BOOTTIME", None)     # Linux only
    if start_ticks is None or boottime is None:
        return _LOADED
    try:
        age = time.clock_gettime(boottime) - start_ticks / os.sysconf("SC_CLK_TCK")
    except OSError:
        return _LOADED
    return min(time.monotonic() - max(age, 0.0), _LOADED)


def check_target(backend, pid, force):
    """Validate a -p PID for balancing; return its ProcessInfo."""
    from ..balance.targets import check_process
    return check_process(backend, pid, manage=True, force=force)


def _moves_threads(settings):
    """Whether this run may move threads (a policy that does, no -n)."""
    return moves_threads(settings.policy, settings.dry_run)


def _open_backend(settings):
    from ..platform import open_backend
    from ..platform.limits import raise_file_limit
    raise_file_limit()
    return open_backend(settings.platform, settings.root)


def _choose(backend, allowed, settings):
    """Domains for this run; ``speed`` never crosses NUMA nodes by default."""
    from ..balance.domains import choose_domains
    topology = backend.topology()
    level = settings.level
    if settings.policy == "speed" and level == "auto" and settings.domains is None:
        level = "numa" if "numa" in topology.levels else "package"
    return choose_domains(topology, allowed, level, settings.domains)


def _binder(backend, settings):
    from ..service.assembly import binder_for
    return binder_for(backend, _moves_threads(settings), settings.binder)


def _journals(settings):
    """Whether the run keeps crash-safe state (tumbler.state): it may move
    threads of the running system."""
    return _moves_threads(settings) and settings.root == "/"


def _journal(backend, settings):
    from ..service.assembly import journal_for
    return journal_for(backend, _journals(settings))


def _observers(settings):
    if not (settings.probe or settings.log_path or settings.verbose):
        return []               # exec: nothing more to import before the command starts
    from ..service.assembly import observers_for
    return observers_for(probe=settings.probe, log_path=settings.log_path,
                         verbose=settings.verbose)


def _summary_file(settings):
    """``--summary-json FILE``, opened now: a path that cannot be written is a usage error."""
    path = settings.summary_json
    if path is None:
        return None
    from ..safefile import UnsafePath, open_output
    try:
        return open_output(path)
    except UnsafePath as exc:
        raise UsageError("cannot write summary: %s" % exc) from None
    except OSError as exc:
        raise UsageError("cannot write summary %s: %s" % (path, exc.strerror)) from None


def _write_summary(out, path, record):
    """The JSON summary to ``out`` (opened from ``path``): one line, keys
    sorted, by the state files' writer (json's import costs ~10 ms) but for
    a NaN; a failed write is one warning."""
    from ..state.paths import dumps
    try:
        with out:
            try:
                text = dumps(record)
            except (TypeError, ValueError):
                text = __import__("json").dumps(record, sort_keys=True, separators=(",", ":"))
            out.write(text + "\n")
    except (OSError, TypeError, ValueError) as exc:
        tell("cannot write summary %s: %s" % (path, getattr(exc, "strerror", None) or exc))


def _begin(controller, settings):
    """Balancing begins: (when tumbler started -- "ran N s" is the wall
    time the user waited --, tumbler's CPU time now, the --duration
    deadline or None, counted from now)."""
    from ..platform.priority import note as priority_note
    controller.stats.priority = priority_note
    balancing, cpu_before = time.monotonic(), controller.own_cpu_seconds()
    started = _launched()
    controller.stats.startup_s = balancing - started
    deadline = balancing + settings.duration if settings.duration else None
    return started, cpu_before, deadline


def _driver(deadline, ends_when_empty, slack=0.0):
    """The loop (service/driver.py) for this command's runs: ends when they
    do, or at the --duration ``deadline`` (None: none)."""
    from ..service.driver import Driver
    driver = Driver(slack=slack, ends_when_empty=ends_when_empty)
    if deadline is not None:
        driver.end_at(deadline, "duration reached")
    return driver


def _finish(run, waiter, settings, started, cpu_before, reason, summary_out=None):
    """End balancing: hand the run back (every thread restored, observers
    closed) and print the summary (and write it as JSON to
    ``summary_out``, if given, even with -q).  ``waiter`` is closed too
    unless it is None (exec mode keeps it to forward signals to a command
    that outlives balancing)."""
    from ..service.assembly import hand_back_all
    failed = hand_back_all([run])
    if waiter is not None:
        waiter.close()
    controller, observers = run.controller, run.observers
    wall = time.monotonic() - started
    process_cpu = controller.own_cpu_seconds()
    cpu = process_cpu - cpu_before
    if summary_out is not None:
        from ..observers.summary import summary_record
        record = summary_record(controller, wall, cpu, reason, process_cpu)
        record["unrestored"] = failed
        for observer in observers:
            record.update(observer.summary_fields())
        _write_summary(summary_out, settings.summary_json, record)
    if not settings.quiet:
        from ..observers.summary import summary_lines
        for line in summary_lines(controller, wall, cpu, reason, process_cpu):
            tell(line)
        for observer in observers:
            for line in observer.summary_lines():
                tell(line)
    return failed


def run_attach(settings, pids):
    if settings.share == "space" and len(set(pids)) > 1:
        return run_space_shared(settings, list(dict.fromkeys(pids)))
    from ..platform.base import allowed_union
    from ..platform.base import NoSuchProcess
    from ..platform.priority import raise_priority
    from ..service.assembly import build_run, discard
    raise_priority()        # already done by the tumbler command; other ways in too
    backend = _open_backend(settings)
    for pid in pids:
        info = check_target(backend, pid, settings.force)
        if _moves_threads(settings):
            backend.check_can_bind(info, settings.binder)
    journal = _journal(backend, settings)
    summary_out = _summary_file(settings)
    waiter = SignalWaiter()         # from here on a stop signal ends the run cleanly
    observers = ()
    try:
        if journal is not None:
            # Before anything is read or changed: a second tumbler is refused
            # here, and what a killed one left is put back first.
            for pid in pids:
                journal.claim(pid)
        choice = _choose(backend, allowed_union(backend, pids), settings)
        observers = _observers(settings)
        run = build_run(settings, pids[0], backend, choice, journal=journal, observers=observers)
    except BaseException:
        waiter.close()
        discard(journal, observers, summary_out)
        raise
    started, cpu_before, deadline = _begin(run.controller, settings)
    reason = "error"
    try:
        for pid in pids:
            try:
                run.controller.add_target(pid, children=bool(settings.children))
            except NoSuchProcess:
                pass
        run.observe()
        driver = _driver(deadline, "target exited")
        if run.controller.targets:          # else every target exited before it was added
            driver.add(run)
        reason = driver.run(waiter)
    finally:
        failed = _finish(run, waiter, settings, started, cpu_before, reason, summary_out)
    return EXIT_FAILURE if failed else 0


def check_space_sharing(settings, backend):
    """``--share space`` with what it cannot work with is a usage error
    before anything changes."""
    if settings.probe:
        raise UsageError("--probe traces one balancing run; with --share space, trace a "
                         "program with `tumbler probe -p PID`")
    binder = settings.binder or backend.default_binder
    if binder != "affinity" and _moves_threads(settings):
        raise UsageError("--share space binds with --binder affinity only (%s sets would have "
                         "to trade CPUs between programs)%s"
                         % (binder, "; illumos has no affinity binder yet"
                            if backend.name == "illumos" else ""))


def run_space_shared(settings, pids):
    """``tumbler --share space -p A -p B ...``: each program gets CPUs of
    its own (balance/sharing.py) and is balanced inside them by a run of
    its own, as the service does; all are handed back at the end,
    whatever ends it."""
    from ..balance.llc import LlcMeter
    from ..balance.sharing import SpaceSharing
    from ..platform.base import allowed_union
    from ..platform.base import NoSuchProcess
    from ..platform.priority import raise_priority
    from ..service.assembly import build_run, discard
    from ..service.driver import SLACK_S
    raise_priority()
    first = _open_backend(settings)
    check_space_sharing(settings, first)
    for pid in pids:
        info = check_target(first, pid, settings.force)
        if _moves_threads(settings):
            first.check_can_bind(info, settings.binder)
    summary_out = _summary_file(settings)
    waiter = SignalWaiter()
    runs, journals, observers = [], [], []
    opened = time.monotonic()
    try:
        for pid in pids:
            backend = first if not runs else _open_backend(settings)
            journal = _journal(backend, settings)
            if journal is not None:
                journals.append(journal)
                journal.claim(pid)
            choice = _choose(backend, allowed_union(backend, [pid]), settings)
            mine = _program_observers(settings, pid, not runs, opened)
            observers += mine
            runs.append(build_run(settings, pid, backend, choice, journal=journal,
                                  observers=mine))
    except BaseException:
        waiter.close()
        for journal in journals:
            journal.close()
        discard(None, observers, summary_out)
        raise
    say = (lambda message: None) if settings.quiet else tell
    sharing = SpaceSharing(settings.share_policy, log=say, counters=LlcMeter(first, say))
    started, cpu_before, deadline = _begin(runs[0].controller, settings)
    reason = "error"
    try:
        driver = _driver(deadline, "targets exited", SLACK_S)
        for run in runs:
            controller = run.controller
            controller.stats.priority = runs[0].controller.stats.priority
            controller.stats.startup_s = runs[0].controller.stats.startup_s
            try:
                controller.add_target(run.key, children=bool(settings.children))
            except NoSuchProcess:
                continue
            run.observe()
            driver.add(run)
        for run in driver.runs.values():
            sharing.join(run.key, run.controller)
        # A program that exits leaves its pool at once: the others get its CPUs.
        driver.on_exit = lambda run: sharing.leave(run.key)
        driver.at("sharing", time.monotonic(), sharing.tick)
        reason = driver.run(waiter)
    finally:
        failed = _finish_shared(runs, sharing, waiter, settings, started, cpu_before,
                                reason, summary_out)
    return EXIT_FAILURE if failed else 0


def _program_observers(settings, pid, first, started):
    """-v, and --log FILE for a space-shared run: one file, a line per round
    of each program (with its ``pid``), as the service writes it."""
    from ..service.assembly import observers_for
    if settings.log_path and first:
        from ..observers.runlog import open_run_log
        # Emptied once; every program's log then appends (O_APPEND).
        open_run_log(settings.log_path).file.close()
    return observers_for(log_path=settings.log_path, verbose=settings.verbose,
                         log_fields=lambda controller: {"pid": pid}, append=True,
                         started=started)


def _finish_shared(runs, sharing, waiter, settings, started, cpu_before, reason,
                   summary_out):
    """Hand every program back and report each (``_finish`` for one)."""
    from ..service.assembly import hand_back_all
    failed = hand_back_all(runs, sharing)
    waiter.close()
    wall = time.monotonic() - started
    process_cpu = runs[0].controller.own_cpu_seconds()
    cpu = process_cpu - cpu_before
    programs = [(run.key, run.controller) for run in runs]
    from ..observers.summary import (CPU_DIGITS, WALL_DIGITS, rounded, shared_summary_lines,
                                     summary_record)
    if summary_out is not None:
        record = {"wall_s": rounded(wall, WALL_DIGITS), "end_reason": reason,
                  "unrestored": failed, "own_cpu_s": rounded(cpu, CPU_DIGITS),
                  "process_cpu_s": rounded(process_cpu, CPU_DIGITS),
                  "share": "space", "share_policy": sharing.policy,
                  "repartitions": sharing.repartitions, "llc_counters_off": sharing.counters.off,
                  "programs": [dict(summary_record(c, wall, cpu, reason, process_cpu), pid=pid,
                                    llc_per_cycle=sharing.counters.rates.get(pid))
                               for pid, c in programs]}
        _write_summary(summary_out, settings.summary_json, record)
    if not settings.quiet:
        for line in shared_summary_lines(programs, sharing, wall, cpu, reason, process_cpu):
            tell(line)
    return failed


def run_exec(settings, command):
    """Start ``command`` and balance it (and, unless --no-children, its
    descendants) until it exits.

    The command starts once all that could refuse it is checked (the state
    directory, the --log and --summary-json files, --probe's tracer, the
    domains and binder options name: ``_checks_machine_first``); tumbler's
    set-up is imported and built while it runs, and threads it made
    meanwhile are placed at the first look, as new threads are."""
    machine = None
    if _checks_machine_first(settings):
        machine = _machine(settings)
    elif settings.domains is not None:
        _check_domains(settings.domains)
    observers = _observers(settings)
    if _journals(settings):
        from ..state.paths import ensure_dir, state_dir
        ensure_dir(state_dir())     # full, read-only or foreign: refused now
    gate = None
    if settings.probe:
        from .gate import Gate, check_command
        missing = check_command(command[0])
        if missing is not None:
            status, why = missing
            raise TumblerError("%s: %s" % (command[0], why if status == 127 else
                                           "cannot execute: " + why), status)
        # The command waits at a gate until the probes are attached, so
        # that they see it from its first instruction (gate.py).
        gate = Gate()
    summary_out = _summary_file(settings)
    waiter = SignalWaiter(watch_children=True)
    try:
        from .spawn import Command
        child = Command(gate.argv(command) if gate is not None else command)
    except BaseException:
        from ..service.assembly import discard
        waiter.close()
        discard(None, observers, gate, summary_out)
        raise

    from ..platform.base import NoSuchProcess, PlatformError
    from ..platform.priority import raise_priority
    from ..service.assembly import build_run, discard
    raise_priority()        # after the start: the command keeps its own priority

    def forward(signum):
        if signum != signal.SIGCHLD and child.poll() is None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

    # The summary's code is loaded now, while the command runs: after it
    # exits, every millisecond tumbler takes is the user's.
    from ..observers import summary     # noqa: F401
    run = journal = None
    reason = "error"
    stopped = None
    try:
        try:
            backend, allowed, choice, binder = machine or _machine(settings)
            journal = _journal(backend, settings)
            run = build_run(settings, child.pid, backend, choice, binder=binder,
                            journal=journal, observers=observers, first_interval_ms=50)
            controller = run.controller
            started, cpu_before, deadline = _begin(controller, settings)
            if journal is not None:         # attached to the binder already (the run)
                journal.claim(child.pid, allowed)
            if controller.moves_threads:    # before anything is bound
                controller.keep_orphans(child.pid, allowed, lambda: {
                    pid for observer in observers for pid in observer.processes()})
            controller.add_target(child.pid, allowed,
                                  children=settings.children is not False)
            run.observe()                   # --probe: attached on return
            if gate is not None:
                gate.open(lambda: child.poll() is None)
            reason = _drive_command(run, child, waiter, deadline, forward)
        except NoSuchProcess:
            pass
        except (TumblerError, PlatformError) as exc:
            # The command runs on, unbalanced: its status is what exec
            # returns, whatever happened to the balancing.
            stopped = exc
    finally:
        if gate is not None:                # an error before the gate opened: let it run
            gate.open(lambda: child.poll() is None)
            gate.close()
        if child.poll() is None:            # an error: do not leave the command orphaned
            for signum in waiter.take():
                forward(signum)
        # Balancing is over (the command exited, --duration passed, or an
        # error): every thread is handed back now, even if the command
        # runs on, and the summary covers the balancing alone.
        if run is not None:
            _finish(run, None, settings, started, cpu_before, reason, summary_out)
        else:                               # failed before balancing began
            discard(journal, observers, summary_out)
        if stopped is not None:
            tell("%s; balancing stopped, the command runs on" % stopped)
        try:
            while child.poll() is None:     # --duration ended balancing, not the command
                for signum in waiter.take():
                    forward(signum)
                child.reap_others()
                waiter.sleep(0.2)
        finally:
            waiter.close()
            if child.poll() is None:
                child.wait()
    return exit_status(child.returncode)


def _drive_command(run, child, waiter, deadline, forward):
    """Balance exec's command until it exits (or its targets do, or the
    deadline passes); every signal is ``forward``ed to it.  SIGCHLD says
    when the command may have exited: only then is it polled (a wait4
    call each time), and orphans kept for it are reaped."""
    controller = run.controller
    polling = [True]

    def on_signal(signum):
        if signum == signal.SIGCHLD:
            polling[0] = True
            controller.reap_orphans()
        forward(signum)

    def command_exited():
        if polling[0]:
            if child.poll() is not None:
                return "command exited"
            polling[0] = not waiter.watches_children
        return None

    driver = _driver(deadline, "target exited")
    driver.on_signal = on_signal
    driver.checks.append(command_exited)
    driver.add(run)
    return driver.run(waiter)


def _checks_machine_first(settings):
    """Whether options name something only the platform layer can check
    (a level, a binder, a policy with its own level, another root or
    platform): then it is checked before the command starts.  Otherwise
    nothing there can refuse it: tumbler's own CPUs, on-line, at the auto
    level (a single domain at worst), bound with the platform's own
    binder; explicit domains are checked lightly (``_check_domains``)."""
    return (settings.level != "auto"
            or settings.binder is not None or settings.policy == "speed"
            or settings.root != "/" or settings.platform is not None
            or not sys.platform.startswith("linux"))


def _check_domains(domains):
    """Refuse --domains before the command starts with the check the
    domains are chosen with (cpulist.check_explicit) from the two facts it
    needs on Linux -- the on-line CPUs and tumbler's own -- without the
    platform layer and the engine: their imports made the command wait
    ~10 ms more than without --domains.  What cannot be read here is left
    to the full check after the start, which says why."""
    from ..cpulist import check_explicit, parse_cpulist
    from ..platform.files import read_file
    try:
        online = parse_cpulist(read_file("/sys/devices/system/cpu/online").decode("ascii"))
        allowed = frozenset(os.sched_getaffinity(0))
    except (OSError, ValueError, UsageError):
        return
    check_explicit(domains, allowed & online, online)


def _machine(settings):
    """(backend, the CPUs the command may use, the domains, the binder)."""
    backend = _open_backend(settings)
    allowed = backend.own_allowed() if settings.root == "/" else \
        backend.topology().online
    choice = _choose(backend, allowed, settings)
    return backend, allowed, choice, _binder(backend, settings)
