"""One run of CMD by itself under one policy, and what every run shares:
the run's set-up and result, the tumbler command line of a tumbler-run
policy, what is read from a run's output (``elapsed_s=``, tumbler's JSON
summary), and stopping a process an interruption left running."""

from __future__ import annotations      # @record: annotations stay strings

import math
import os
import re
import subprocess
import sys
import tempfile
import time

import click

from ...balance.static import StaticPlacer, pinned_targets, psets_targets
from ...errors import exit_status
from ...records import record
from ...jsonlimits import BadJSON, loads_object
from ...safefile import UnsafePath, checked_tempdir, read_trusted
from ..gate import Gate, check_command
from .variants import OWN_POLICIES, base_policy, variant_flags

_ELAPSED = re.compile(r"(?:^|\s)elapsed_s=(\S+)")

#: How long compare waits for a tumbler run to reach CMD: to start it
#: (--probe traces it then) or to attach to the programs (--together).
CHILD_WAIT_S = 30.0


class RunSetup:
    """Everything every run needs, decided once before the first run."""

    def __init__(self, command, domains, domain_note, tumbler_args, echo_tumbler_summary,
                 probe_kinds=(), together=None, background=None, dry_run=False, backend=None):
        self.command = command
        self.domains = domains
        self.domain_note = domain_note
        self.tumbler_args = tumbler_args                # balancing options for tumbler runs
        self.echo_tumbler_summary = echo_tumbler_summary   # -v: show tumbler's whole stderr
        self.probe_kinds = probe_kinds                  # --probe: the kinds to trace, else ()
        self.together = together if together is not None else []      # --together commands
        self.background = background if background is not None else []  # --background ones
        self.dry_run = dry_run          # -n: tumbler runs move nothing (and keep no state)
        # The platform's backend, for what a run asks of it and keeps nothing
        # of (--probe: the child tumbler started); None: opened where needed.
        # A placer opens its own each run: a backend keeps what it read of a
        # PID, and a later run's CMD may be given the same PID.
        self.backend = backend

    @property
    def programs(self):
        """Every program of a run: the command, then the --together ones."""
        return [list(self.command)] + [list(c) for c in self.together]


@record
class RunResult:
    """What one run measured; ``_asdict()`` is its object in the JSON's
    ``run_results``."""

    run: int
    policy: str
    status: int
    wall_s: float
    elapsed_s: float | None = None
    agent_cpu_s: float | None = None
    threads_placed: int | None = None
    probe: dict | None = None           # --probe: see tracer.RunTracer.result
    # --together: one {status, wall_s, elapsed_s} per program, in order
    # (fewer when the run failed before starting them all).
    programs: list | None = None
    # Why the run failed when its status does not say (a background command
    # ended early, tumbler did not attach, ...), else None.
    failure: str | None = None

    @property
    def ok(self):
        return self.status == 0 and self.failure is None


def parse_elapsed(stdout_text):
    """The last ``elapsed_s=`` value printed by the command, if any."""
    found = _ELAPSED.findall(stdout_text)
    if not found:
        return None
    try:
        value = float(found[-1])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


#: The largest summary read: one is ~400 bytes (``tumbler --summary-json
#: /dev/stdout exec -- true``), a few hundred bytes more per program.
MAX_SUMMARY = 1 << 20


def read_summary(path):
    """tumbler's run summary, as ``--summary-json`` wrote it; None if it
    wrote none (it failed before the end of balancing)."""
    try:
        return loads_object(read_trusted(path, MAX_SUMMARY))
    except (OSError, UnsafePath, BadJSON):
        return None


def own_cpu_of(summary):
    """tumbler's own CPU seconds from its JSON summary, or None."""
    value = (summary or {}).get("own_cpu_s")
    return float(value) if isinstance(value, (int, float)) else None


def tumbler_head(setup, policy, summary_path):
    """``tumbler`` with the balancing options, the variant's options and
    ``--summary-json``: what comes before ``exec`` or the ``-p`` list."""
    return [sys.executable, "-m", "tumbler", "--policy", base_policy(policy),
            *setup.tumbler_args, *variant_flags(policy), "--summary-json", summary_path,
            *([] if setup.echo_tumbler_summary else ["--quiet"])]


def scratch_dir():
    """A private directory for one run's files (tumbler's summary, its log),
    removed with them at the end of the run."""
    return tempfile.TemporaryDirectory(prefix="tumbler-compare-", dir=checked_tempdir())


def replay(file):
    """Show on stderr, line by line, what a process wrote to ``file``."""
    file.seek(0)
    for line in file.read().decode(errors="replace").splitlines():
        click.echo(line, err=True)


def cannot_run(command):
    """None if ``command`` can be started, else the status of a run that
    cannot start it (127/126, as a shell), said on stderr."""
    missing = check_command(command[0])
    if missing is None:
        return None
    click.echo("tumbler: compare: %s: %s" % (command[0], missing[1]), err=True)
    return missing[0]


def stop(process):
    """After an interruption: let CMD (or tumbler, which restores) end cleanly."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _argv(setup, policy, summary_path, gate=None):
    """The run's argv: CMD (behind ``gate``, if any), or tumbler running it
    and writing its summary as JSON to ``summary_path``."""
    command = gate.argv(setup.command) if gate is not None else list(setup.command)
    if policy in OWN_POLICIES:
        return command
    return [*tumbler_head(setup, policy, summary_path), "exec", "--", *command]


def _placer(setup, policy):
    if policy == "pinned":
        return StaticPlacer(pinned_targets(setup.domains))
    if policy == "psets":
        return StaticPlacer(psets_targets(setup.domains))
    return None


def _trace(setup, process, own):
    """Trace this run's CMD, held at its gate (--probe): returns once the
    probes are attached (or tracing failed, see RunTracer.result).  ``own``:
    compare started CMD itself (``process`` is the gate); else ``process``
    is tumbler, and CMD the child it starts."""
    from .tracer import RunTracer, child_of
    tracer = RunTracer(setup.probe_kinds, {cpu: index for index, cpus in
                                           enumerate(setup.domains) for cpu in cpus})
    if own:
        tracer.start(process.pid)
    else:
        backend = setup.backend
        if backend is None:
            from ...platform import open_backend
            backend = open_backend()
        tracer.start(child_of(backend, process.pid, process, CHILD_WAIT_S))
    return tracer


def run_once(setup, policy, run):
    """Run CMD once under ``policy``; stderr of tumbler runs is replayed.

    The wall time runs from the start of CMD (without --probe: of the
    process compare starts, CMD or tumbler; with --probe: the opening of
    the gate, once the probes are attached) to the reaping of that process.
    """
    captures_stderr = policy not in OWN_POLICIES
    if setup.probe_kinds:
        status = cannot_run(setup.command)
        if status is not None:
            return RunResult(run, policy, status, 0.0)
    placer = _placer(setup, policy)
    gate = Gate() if setup.probe_kinds else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            scratch_dir() as scratch:
        summary_path = os.path.join(scratch, "summary.json")
        started = time.monotonic()
        try:
            process = subprocess.Popen(_argv(setup, policy, summary_path, gate), stdout=out,
                                       stderr=err if captures_stderr else None)
        except OSError as exc:
            if gate is not None:
                gate.close()
            status = 127 if isinstance(exc, FileNotFoundError) else 126
            click.echo("tumbler: compare: %s: %s" % (setup.command[0], exc.strerror), err=True)
            return RunResult(run, policy, status, time.monotonic() - started)
        tracer = ended = None
        try:
            if gate is not None:
                # CMD waits at the gate until the probes are attached.
                tracer = _trace(setup, process, policy in OWN_POLICIES)
                if placer is not None:
                    placer.place_new(process.pid)       # the gate's thread is CMD's main
                if gate.open(lambda: process.poll() is None):
                    started = gate.released
            # The placing loop runs in this thread; --probe's readings in others.
            cpu_before = time.thread_time()
            if placer is not None:
                placer.follow(process)
            process.wait()
            ended = time.monotonic()
            agent_cpu = time.thread_time() - cpu_before if placer is not None else None
        finally:
            if gate is not None:
                gate.open(lambda: process.poll() is None)   # never leave CMD waiting
                gate.close()
            stop(process)
            if tracer is not None:
                tracer.stop()
        wall = (ended or time.monotonic()) - started
        out.seek(0)
        stdout_text = out.read().decode(errors="replace")
        if captures_stderr:
            # tumbler printed its human summary only with -v (else --quiet); its
            # figures come from the JSON one.
            agent_cpu = own_cpu_of(read_summary(summary_path))
            replay(err)
    return RunResult(run, policy, exit_status(process.returncode), wall,
                     elapsed_s=parse_elapsed(stdout_text), agent_cpu_s=agent_cpu,
                     threads_placed=len(placer.placed) if placer is not None else None,
                     probe=tracer.result() if tracer is not None else None)
