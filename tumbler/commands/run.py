"""Balancing runs: ``tumbler -p PID ...`` and ``tumbler exec -- CMD``.

Everything that can be wrong with the input is checked before anything is
changed or any command is started, so a usage error leaves the system as it
was.  Once threads are moved, every exit path (the targets exit, the
duration passes, a signal, an error) goes through ``restore_all``.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import time

from ..balance.controller import Controller
from ..balance.domains import choose_domains
from ..engine.policy import make_policy
from ..engine.speed import SpeedParams
from ..engine.variation import VariationTable
from ..errors import EXIT_FAILURE, TumblerError, UsageError
from ..platform import open_backend
from ..platform.base import NoSuchProcess, NullBinder
from ..observers.runlog import RunLog
from ..observers.verbose import VerboseReport
from ..state import Journal
from ..observers.summary import summary_lines, summary_record
from ..balance.targets import allowed_union, check_process
from ..balance.waiting import SignalWaiter
from ..platform.priority import for_children as priority_for_children
from ..platform.priority import note as priority_note, raise_priority
from .gate import Gate, check_command

DEFAULT_BINDER = {"linux": "affinity", "illumos": "pset"}

#: When this module was loaded: the summary's start if the process's own
#: start time cannot be read.
_LOADED = time.monotonic()


def _launched():
    """time.monotonic() when this process started: the summary's "ran N s"
    is the wall time the user waited, start-up included (on an overloaded
    machine that can be most of it).  Linux: /proc/self/stat's start time
    against CLOCK_BOOTTIME; elsewhere when this module was loaded."""
    try:
        with open("/proc/self/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
        return min(time.monotonic() - max(age, 0.0), _LOADED)
    except (OSError, ValueError, IndexError, AttributeError):
        return _LOADED


def check_target(backend, pid, force):
    """Validate a -p PID for balancing; return its ProcessInfo."""
    return check_process(backend, pid, manage=True, force=force)


def _raise_file_limit():
    """One fd per target thread: allow as many as the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _prepare(settings):
    _raise_file_limit()
    backend = open_backend(settings["platform"], settings["root"])
    config = settings["config"]
    # The file's values where it has any; the engine's defaults elsewhere.
    table = VariationTable(**{key: value for key, value in (
        ("rows", config.variation_table), ("idle_interval_ms", config.idle_interval_ms))
        if value is not None})
    tolerance = {} if config.tolerance is None else {"tolerance": config.tolerance}
    policy = make_policy(settings["policy"], table, fixed_interval_ms=settings["interval_ms"],
                         speed=SpeedParams(**config.speed), **tolerance)
    return backend, policy


def _choose(backend, allowed, settings):
    """Domains for this run; ``speed`` never crosses NUMA nodes by default."""
    topology = backend.topology()
    level = settings["level"]
    if settings["policy"] == "speed" and level == "auto" and settings["domains"] is None:
        level = "numa" if "numa" in topology.levels else "package"
    return choose_domains(topology, allowed, level, settings["domains"])


def _binder(backend, settings, policy):
    if settings["dry_run"] or not policy.moves_threads:
        return NullBinder()
    kind = settings["binder"] or DEFAULT_BINDER[backend.name]
    return backend.binder(kind)


def _journal(backend, settings, policy):
    """Crash-safe state (tumbler.state) for a run that may move threads."""
    if not policy.moves_threads or settings["dry_run"] or settings["root"] != "/":
        return None
    return Journal(backend)


def _observers(settings):
    observers, tracer = [], None
    if settings["probe"]:
        from ..observers.probes import ProbeObserver
        tracer = ProbeObserver()
        tracer.check()                  # before any change: a missing bpftrace is exit 1
        observers.append(tracer)
    if settings["log_path"]:
        try:
            log = RunLog(settings["log_path"])
        except OSError as exc:
            raise UsageError("cannot write log %s: %s" % (settings["log_path"], exc.strerror))
        if tracer is not None:
            log.extra.append(tracer.log_fields)
        observers.append(log)
    if settings["verbose"]:
        observers.append(VerboseReport())
    return observers


def _summary_file(settings):
    """``--summary-json FILE``, opened now: a path that cannot be written
    is a usage error before anything changes."""
    path = settings["summary_json"]
    if path is None:
        return None
    try:
        return open(path, "w")
    except OSError as exc:
        raise UsageError("cannot write summary %s: %s" % (path, exc.strerror))


def _write_summary(out, record):
    """Write the JSON summary; a failed write is one warning, not a failure."""
    try:
        with out:
            json.dump(record, out)
            out.write("\n")
    except OSError as exc:
        print("tumbler: cannot write summary %s: %s" % (out.name, exc.strerror),
              file=sys.stderr)


def _begin(controller, settings):
    """Balancing begins: (when tumbler started -- "ran N s" is the wall
    time the user waited --, tumbler's CPU time now, the --duration
    deadline or None, counted from now)."""
    controller.stats.priority = priority_note
    balancing, cpu_before = time.monotonic(), controller.own_cpu_seconds()
    started = _launched()
    controller.stats.startup_s = balancing - started
    deadline = balancing + settings["duration"] if settings["duration"] else None
    return started, cpu_before, deadline


def _start_observers(observers, controller):
    for observer in observers:
        observer.start(controller)


def _finish(controller, observers, waiter, settings, started, cpu_before, reason,
            summary_out=None):
    """End balancing: restore every thread, close the observers and print
    the summary (and write it as JSON to ``summary_out``, if given, even
    with -q).  ``waiter`` is closed too unless it is None (exec mode keeps
    it to forward signals to a command that outlives balancing)."""
    failed = controller.restore_all()
    if failed and controller.journal is not None:
        print("tumbler: %d thread%s could not be restored; `tumbler restore` retries"
              % (failed, "" if failed == 1 else "s"), file=sys.stderr)
    if waiter is not None:
        waiter.close()
    for observer in observers:
        observer.close()
    wall = time.monotonic() - started
    cpu = controller.own_cpu_seconds() - cpu_before
    if summary_out is not None:
        record = summary_record(controller, wall, cpu, reason)
        record["unrestored"] = failed
        for observer in observers:
            record.update(observer.summary_fields())
        _write_summary(summary_out, record)
    if not settings["quiet"]:
        for line in summary_lines(controller, wall, cpu, reason):
            print("tumbler: " + line, file=sys.stderr)
        for observer in observers:
            for line in observer.summary_lines():
                print("tumbler: " + line, file=sys.stderr)
    return failed


def run_attach(settings, pids):
    raise_priority()        # already done by the tumbler command; other ways in too
    backend, policy = _prepare(settings)
    for pid in pids:
        info = check_target(backend, pid, settings["force"])
        if policy.moves_threads and not settings["dry_run"]:
            backend.check_can_bind(info, settings["binder"] or DEFAULT_BINDER[backend.name])
    journal = _journal(backend, settings, policy)
    summary_out = _summary_file(settings)
    waiter = SignalWaiter()         # from here on a stop signal ends the run cleanly
    try:
        if journal is not None:
            # Before anything is read or changed: a second tumbler is refused
            # here, and what a killed one left is put back first.
            for pid in pids:
                journal.claim(pid)
        choice = _choose(backend, allowed_union(backend, pids), settings)
        binder = _binder(backend, settings, policy)
        observers = _observers(settings)
        controller = Controller(backend, binder, policy, choice, dry_run=settings["dry_run"],
                                **settings["config"].loop_options(),
                                observers=observers, journal=journal,
                                )
        if journal is not None:
            journal.attach(binder, choice.domains)
    except BaseException:
        waiter.close()
        if journal is not None:
            journal.close()
        if summary_out is not None:
            summary_out.close()
        raise
    started, cpu_before, deadline = _begin(controller, settings)
    reason = "error"
    try:
        for pid in pids:
            try:
                controller.add_target(pid)
            except NoSuchProcess:
                pass
        _start_observers(observers, controller)
        reason = controller.run(waiter, deadline=deadline)
    finally:
        failed = _finish(controller, observers, waiter, settings, started, cpu_before, reason,
                         summary_out)
    return EXIT_FAILURE if failed else 0


def run_exec(settings, command):
    backend, policy = _prepare(settings)
    allowed = backend.own_allowed() if settings["root"] == "/" else \
        backend.topology().online
    choice = _choose(backend, allowed, settings)
    binder = _binder(backend, settings, policy)
    observers = _observers(settings)
    journal = _journal(backend, settings, policy)
    if settings["probe"]:
        missing = check_command(command[0])
        if missing is not None:
            status, why = missing
            raise TumblerError("%s: %s" % (command[0], why if status == 127 else
                                           "cannot execute: " + why), status)
    summary_out = _summary_file(settings)
    # --probe: the command waits at a gate until the probes are attached,
    # so that they see it from its first instruction (gate.py).
    gate = Gate() if settings["probe"] else None
    waiter = SignalWaiter(watch_children=True)
    try:
        child = subprocess.Popen(gate.argv(command) if gate is not None else command,
                                 preexec_fn=priority_for_children())
    except OSError as exc:
        waiter.close()
        if gate is not None:
            gate.close()
        if summary_out is not None:
            summary_out.close()
        if isinstance(exc, FileNotFoundError):
            raise TumblerError("%s: command not found" % command[0], 127) from None
        raise TumblerError("%s: cannot execute: %s" % (command[0], exc.strerror), 126) from None

    raise_priority()        # the command does not inherit it (SCHED_RESET_ON_FORK)

    def forward(signum):
        if signum != signal.SIGCHLD and child.poll() is None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass
        return False

    controller = Controller(backend, binder, policy, choice, dry_run=settings["dry_run"],
                            observers=observers, first_interval_ms=50,
                            **settings["config"].loop_options(),
                            journal=journal)
    started, cpu_before, deadline = _begin(controller, settings)
    reason = "error"
    stopped = None
    try:
        try:
            if journal is not None:
                journal.claim(child.pid, allowed)
                journal.attach(binder, choice.domains)
            controller.add_target(child.pid, allowed)
            _start_observers(observers, controller)     # --probe: attached on return
            if gate is not None:
                gate.open(lambda: child.poll() is None)
            reason = controller.run(waiter, deadline=deadline, child=child, on_signal=forward)
        except NoSuchProcess:
            pass
        except TumblerError as exc:
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
        _finish(controller, observers, None, settings, started, cpu_before, reason,
                summary_out)
        if stopped is not None:
            print("tumbler: %s; balancing stopped, the command runs on" % stopped,
                  file=sys.stderr)
        try:
            while child.poll() is None:     # --duration ended balancing, not the command
                for signum in waiter.take():
                    forward(signum)
                waiter.sleep(0.2)
        finally:
            waiter.close()
            if child.poll() is None:
                child.wait()
    status = child.returncode
    return 128 - status if status < 0 else status
