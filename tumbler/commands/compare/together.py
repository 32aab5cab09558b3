"""``compare --together``: every program of a run started at once, held
at gates until everything is ready (for a tumbler run: tumbler has
attached to every one), released at the same instant, each timed from its
release to its reaping; and the ``alone`` runs, each program by itself."""

import os
import subprocess
import tempfile
import threading
import time

from ...config import moves_threads
from ...errors import TumblerError, exit_status
from ..gate import Gate
from .runs import (CHILD_WAIT_S, RunResult, cannot_run, own_cpu_of, parse_elapsed,
                   read_summary, replay, scratch_dir, stop, tumbler_head)
from .variants import ALONE, OWN_POLICIES, base_policy

#: How long compare waits for tumbler to exit once all its programs have.
TUMBLER_EXIT_WAIT_S = 30.0
#: How often compare looks whether tumbler has attached to the held programs.
ATTACH_POLL_S = 0.005


class _Outcome:
    """What ``_run_programs`` measured."""

    def __init__(self, status=0):
        self.status = status
        self.wall_s = 0.0
        self.programs = []
        self.agent_cpu_s = None
        self.failure = None


def run_together(setup, policy, run):
    """One run of every program (CMD, then the --together ones) under
    ``policy``: ``alone`` runs each by itself, one after the other, plainly;
    ``default`` all at once, plainly; a tumbler-run policy all at once with
    tumbler attached to them (``tumbler [options] -p PID -p PID ...``; it
    exits by itself when they have).  See ``_run_programs`` for how they
    are started and timed.  The run's wall time runs from the release of
    the programs to the reaping of the last (``alone``: the sum of theirs).
    """
    if policy != ALONE:
        outcome = _run_programs(setup, None if policy in OWN_POLICIES else policy,
                                setup.programs)
        return RunResult(run, policy, outcome.status, outcome.wall_s,
                         agent_cpu_s=outcome.agent_cpu_s, programs=outcome.programs,
                         failure=outcome.failure)
    programs, wall = [], 0.0
    for command in setup.programs:
        outcome = _run_programs(setup, None, [command])
        programs += outcome.programs
        wall += outcome.wall_s
        if outcome.status != 0 or outcome.failure is not None:
            break
    return RunResult(run, policy, outcome.status, wall, programs=programs,
                     failure=outcome.failure)


def _run_programs(setup, policy, commands):
    """Run ``commands`` at once; with tumbler running ``policy`` attached to
    them unless ``policy`` is None.

    Every program is started held at a gate (gate.Gate: a shell waiting on
    a FIFO that then execs the program in the same process), and all are
    released at the same instant once everything is ready: for a tumbler
    run, once tumbler has attached to every one (``_wait_attached``).  So
    tumbler balances them from their first instruction, its start-up is
    not counted, and a program shorter than that start-up cannot end
    before tumbler has seen it.  A program's wall time runs from its
    release to its reaping.
    """
    for command in commands:
        status = cannot_run(command)
        if status is not None:
            return _Outcome(status)
    outcome = _Outcome()
    gates, outs, processes, tumbler = [], [], [], None
    with tempfile.TemporaryFile() as err, scratch_dir() as scratch:
        summary_path = os.path.join(scratch, "summary.json")
        try:
            for command in commands:
                gates.append(Gate())
                outs.append(tempfile.TemporaryFile())
                processes.append(subprocess.Popen(gates[-1].argv(command), stdout=outs[-1]))
            if policy is not None:
                log_path = os.path.join(scratch, "log.jsonl")
                tumbler = subprocess.Popen(
                    _attach_argv(setup, policy, summary_path, log_path,
                                 [p.pid for p in processes]),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
                outcome.failure = _wait_attached(setup, policy, tumbler, processes, log_path)
            released = None
            if outcome.failure is None:
                released = _release(gates, processes)
                if released is None:
                    outcome.failure = "a program ended before it was released"
            if released is not None:
                ended = _wait_all(processes)
                outcome.wall_s = max(ended) - min(released)
                for process, out, start, end in zip(processes, outs, released, ended):
                    out.seek(0)
                    outcome.programs.append({
                        "status": exit_status(process.returncode), "wall_s": end - start,
                        "elapsed_s": parse_elapsed(out.read().decode(errors="replace"))})
                if tumbler is not None:
                    try:
                        tumbler.wait(timeout=TUMBLER_EXIT_WAIT_S)
                    except subprocess.TimeoutExpired:
                        outcome.failure = ("tumbler did not exit within %.0f s of its programs"
                                           % TUMBLER_EXIT_WAIT_S)
        finally:
            for process in processes:
                stop(process)
            if tumbler is not None:
                stop(tumbler)
            for gate in gates:
                gate.close()
            for out in outs:
                out.close()
        outcome.status = next((p["status"] for p in outcome.programs if p["status"]), 0)
        if tumbler is not None:
            if outcome.status == 0 and tumbler.returncode != 0:
                outcome.status = exit_status(tumbler.returncode)
                if outcome.failure is None:
                    outcome.failure = "tumbler exited with status %d" % outcome.status
            outcome.agent_cpu_s = own_cpu_of(read_summary(summary_path))
            replay(err)
    return outcome


def _journaled(setup, policy):
    """Whether the tumbler run of ``policy`` keeps crash-safe state: it may
    move threads (compare refuses --root: the state is kept whenever they move)."""
    return moves_threads(base_policy(policy), setup.dry_run)


def _attach_argv(setup, policy, summary_path, log_path, pids):
    """tumbler attached to ``pids``.  A run that keeps no state (observe,
    --dry-run) also logs to ``log_path``: its first line says it has
    attached (``_attached``)."""
    argv = tumbler_head(setup, policy, summary_path)
    if not _journaled(setup, policy):
        argv += ["--log", log_path]
    for pid in pids:
        argv += ["-p", str(pid)]
    return argv


def _wait_attached(setup, policy, tumbler, processes, log_path):
    """Wait, the programs held at their gates, until tumbler has attached
    to all of them; None, or why the run fails."""
    pids = [p.pid for p in processes]
    journaled = _journaled(setup, policy)
    deadline = time.monotonic() + CHILD_WAIT_S
    while not _attached(tumbler.pid, pids, journaled, log_path):
        status = tumbler.poll()
        if status == 0:
            return None         # it attached and is done already (--duration)
        if status is not None:
            return ("tumbler exited with status %d before it attached to the programs"
                    % exit_status(status))
        if time.monotonic() > deadline:
            return "tumbler did not attach to the programs within %.0f s" % CHILD_WAIT_S
        time.sleep(ATTACH_POLL_S)
    return None


def _attached(tumbler_pid, pids, journaled, log_path):
    """Whether tumbler ``tumbler_pid`` has attached to every one of ``pids``.

    A run that moves threads claims each target before it looks at it: the
    target's state file (``tumbler.state``), naming that tumbler, exists
    from then on -- after tumbler's checks of the target, so a target that
    ends now is no failure.  A run that keeps no state is attached once it
    has logged its first round."""
    if not journaled:
        try:
            return os.path.getsize(log_path) > 0
        except OSError:
            return False
    from ...state.paths import state_dir
    from ...state.store import list_states, owner_of
    try:
        directory = state_dir()
        return all(any((owner_of(state) or {}).get("pid") == tumbler_pid
                       for state in list_states(directory, pid)) for pid in pids)
    except TumblerError:
        return False


def _release(gates, processes):
    """Release every held program at (nearly) the same instant: connect to
    each gate once its shell waits on it, then release each, one right
    after the other.  Returns the release times, or None if a program ended
    first (the others are killed then, still held: a gate closed unwritten
    would let its program run)."""
    for gate, process in zip(gates, processes):
        if not gate.connect(lambda: process.poll() is None):
            for other in processes:
                if other.poll() is None:
                    other.kill()
                    other.wait()
            return None
    return [gate.release() for gate in gates]


def _wait_all(processes):
    """Reap every process; the monotonic time each was reaped at."""
    ended = [None] * len(processes)

    def wait(index):
        processes[index].wait()
        ended[index] = time.monotonic()

    waiters = [threading.Thread(target=wait, args=(i,), name="compare-wait", daemon=True)
               for i in range(len(processes))]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    return ended
