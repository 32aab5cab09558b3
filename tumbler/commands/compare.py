"""``tumbler compare``: run one command under several placement policies.

Whether balancing helps a program is an empirical question, and one run
under each policy answers it badly: a noisy machine makes any single
timing meaningless.  ``compare`` runs CMD ``--runs`` times under each
policy, *interleaved* (run 1 of every policy, then run 2 of every policy,
...) so that slow drift in machine noise hits every policy alike, and
reports the spread of the wall times next to their means.

Policies (``--policies``, comma-separated, in the order to run them):

``default``  CMD run plainly; the OS places its threads.
``pinned``   static one-thread-per-CPU pinning (PBind in the Tumbler
             paper): each thread of CMD, in order of appearance, is bound
             to the next CPU of the domains' CPUs, round robin.
``psets``    static equal split over the domains, never regrouped (PSets
             in the paper): thread i, in order of appearance, is bound to
             all CPUs of domain i mod K.
any policy of ``tumbler --policy`` (``auto``, ``tumbler``, ``speed``,
``observe``)  CMD run as ``tumbler --policy NAME exec -- CMD``, in a
             separate process so that tumbler's work is measured apart.

``pinned`` and ``psets`` are done by compare itself: it watches
``/proc/PID/task`` (polling every millisecond while threads keep
appearing, backing off to 64 ms when none do) and binds each new thread
through the platform's binder (``backend.binder("affinity")``:
sched_setaffinity on Linux; where it does not exist the two policies are
a usage error).  Only the threads of CMD's own process are placed,
as with ``tumbler exec``.  The balancing options (``--domains``,
``--level``, ``--interval``, ``--config``, ``--binder``, ``--dry-run``,
``--duration``) are passed to every tumbler-run policy; ``--domains`` and
``--level`` also choose the domains of ``pinned`` and ``psets``.  ``-q``
hides compare's per-run progress lines on stderr; ``-v`` also shows each
tumbler run's per-interval lines and exit summary.  The other balancing
options (``--policy``, ``--log``, ``--force``, ...) do not apply: they are
hidden from ``compare --help`` and refused.

Measured per run:

* wall time, by compare, from just before CMD (or tumbler) is started to
  just after it is reaped -- so it includes process start-up, and, for the
  tumbler policies, the start-up of Python and tumbler (0.1 to 0.4 s,
  depending on the machine).  With ``--probe``, from the opening of CMD's
  gate (once its tracer is attached, see RunTracer) to the reaping: the
  attach wait is not counted, nor, for the tumbler policies, tumbler's
  start-up;
* ``elapsed_s`` when CMD prints ``elapsed_s=SECONDS`` on stdout (the
  example workloads do): the program's own timing, without start-up;
* agent CPU: the CPU time of whatever placed the threads.  For tumbler
  policies it is ``own_cpu_s`` of tumbler's JSON summary, which each
  tumbler run writes to a file of compare's (``--summary-json``; from the
  start of balancing to the restore; the start-up, 0.1 to 0.3 s of CPU,
  is not included).  tumbler runs with ``--quiet`` unless ``-v``: its
  human summary is for people.  tumbler's rusage cannot be used: it
  includes CMD, its child.  For ``pinned`` and ``psets`` it is compare's
  own CPU time while following the run.  ``default`` has none.

With ``--probe`` (root; bpftrace or DTrace) every run's CMD is traced with
the probes, by compare itself for every policy alike (see RunTracer), from
CMD's first instruction:
lock waits, run-queue latency and (cross-domain) migrations, per run and
as means per policy.

Per policy: mean, median, min, max and CV of the wall times (CV = sample
standard deviation / mean, 0 for a single run), the same for ``elapsed_s``
when every run printed it, mean agent CPU, and the speedup vs default =
default's mean / this policy's mean: above 1 is faster than default.

``--json`` prints one object (keys stable for scripts)::

    command        CMD as a list of strings
    runs           runs requested per policy
    domains        the domains of pinned/psets, as CPU lists
    domain_note    how those domains were chosen
    results        one object per policy, in --policies order:
      policy                      its name
      runs                        runs that exited 0 (the figures below
                                  are over these)
      statuses                    exit status of every run made
      wall_s                      {mean, median, min, max, cv}
      elapsed_s                   the same for elapsed_s, or null
      agent_cpu_s                 mean agent CPU seconds, or null
      speedup_vs_default          default's mean wall / this mean wall, or null
      elapsed_speedup_vs_default  the same on elapsed_s, or null
      probe                       --probe: {runs traced, and the means of
                                  lock_s, lock_waits, runq_s, runq_waits,
                                  runq_mean_ms, migrations, cross_domain},
                                  or null
    run_results    one object per run, in the order run:
      run, policy, status, wall_s, elapsed_s, agent_cpu_s,
      threads_placed (pinned/psets: threads bound; otherwise null),
      probe (--probe: that run's figures and "failure", why tracing
      stopped early or null; otherwise null)
    failed         null, or {run, policy, status} of the run that failed

Exit status: 0 when every run exited 0; 1 when a run failed (compare then
stops, prints what it has and says which run failed; a command that cannot
be started counts as a failed run with status 127 or 126); 2 on bad input.
"""

import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence

import click

from .options import balancing_options, settings as make_settings
from .settings import OPTION_NAMES
from ..config import POLICY_CHOICES
from ..cpulist import format_cpulist
from ..balance.domains import choose_domains
from ..errors import EXIT_FAILURE, TumblerError, UsageError
from ..platform import open_backend
from ..platform.base import NoSuchProcess, PlatformError, Unmovable
from .gate import Gate, check_command

#: Policies compare runs itself; every other name is a ``tumbler --policy``.
OWN_POLICIES = ("default", "pinned", "psets")
POLICY_NAMES = OWN_POLICIES + tuple(p for p in POLICY_CHOICES if p not in OWN_POLICIES)
DEFAULT_POLICIES = ("default", "pinned", "psets", "tumbler", "auto")
DEFAULT_RUNS = 5

#: How often the pinning loop looks for new threads: from the first value
#: while threads keep appearing, doubling up to the last while none do.
FIRST_POLL_S = 0.001
LAST_POLL_S = 0.064

_ELAPSED = re.compile(r"(?:^|\s)elapsed_s=(\S+)")

#: Balancing options compare uses; the others are hidden from its --help
#: and refused (see _reject_unusable).
USED_OPTIONS = frozenset(("level", "domains_text", "interval_ms", "config_path", "binder",
                          "dry_run", "duration", "quiet", "verbose", "probe"))

#: Balancing options forwarded to tumbler-run policies: (settings key, flag).
_FORWARDED = (("level", "--level"), ("domains_text", "--domains"),
              ("interval_ms", "--interval"), ("config_path", "--config"),
              ("binder", "--binder"), ("duration", "--duration"))


# -- statistics ------------------------------------------------------------------

def summarize(values: Sequence[float]) -> Optional[dict]:
    """{mean, median, min, max, cv} of ``values``; None when there are none.

    ``cv`` is the sample standard deviation over the mean: run-to-run
    noise, 0 for a single value or a zero mean.
    """
    values = list(values)
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "median": statistics.median(values), "min": min(values),
            "max": max(values), "cv": spread / mean if mean > 0 else 0.0}


def speedup(default_mean: Optional[float], mean: Optional[float]) -> Optional[float]:
    """default_mean / mean: above 1 means faster than default."""
    if default_mean is None or mean is None or not mean > 0:
        return None
    return default_mean / mean


def run_order(policies: Sequence[str], runs: int) -> List[tuple]:
    """(run number from 1, policy) pairs: run 1 of every policy, then run 2, ..."""
    return [(run, policy) for run in range(1, runs + 1) for policy in policies]


def parse_policies(text: str) -> List[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError("--policies: empty policy name in %r" % text)
    for name in names:
        if name not in POLICY_NAMES:
            raise UsageError("--policies: unknown policy %r (choose from %s)"
                             % (name, ", ".join(POLICY_NAMES)))
    if len(set(names)) != len(names):
        raise UsageError("--policies: a policy is named twice in %r" % text)
    return names


def parse_elapsed(stdout_text: str) -> Optional[float]:
    """The last ``elapsed_s=`` value printed by the command, if any."""
    found = _ELAPSED.findall(stdout_text)
    if not found:
        return None
    try:
        value = float(found[-1])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def read_summary(path) -> Optional[dict]:
    """tumbler's run summary, as ``--summary-json`` wrote it; None if it
    wrote none (it failed before the end of balancing)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def own_cpu_of(summary: Optional[dict]) -> Optional[float]:
    """tumbler's own CPU seconds from its JSON summary, or None."""
    value = (summary or {}).get("own_cpu_s")
    return float(value) if isinstance(value, (int, float)) else None


# -- placing threads the static ways --------------------------------------------------

class StaticPlacer:
    """Binds every thread of a process, in order of appearance, once,
    through the platform's binder (``backend.binder("affinity")``).

    Thread i (counting from the main thread, 0) gets ``targets[i % len]``.
    ``placed`` records what was done: tid -> CPUs, in placement order.
    """

    def __init__(self, targets: Sequence[frozenset], backend=None):
        if not targets:
            raise ValueError("need at least one CPU set")
        self.targets = [frozenset(t) for t in targets]
        self.placed = {}
        self.skipped = set()            # threads that exited or refused the CPUs
        self.backend = backend if backend is not None else open_backend()
        self.binder = self.backend.binder("affinity")
        self.binder.setup(self.targets)

    def place_new(self, pid: int) -> int:
        """Bind the threads of ``pid`` not seen before; return how many."""
        try:
            tids = self.backend.thread_ids(pid)
        except NoSuchProcess:
            return 0
        count = 0
        for tid in tids:
            if tid in self.placed or tid in self.skipped:
                continue
            index = (len(self.placed) + len(self.skipped)) % len(self.targets)
            try:
                self.binder.bind(pid, tid, index, self.targets[index])
            except (NoSuchProcess, Unmovable):      # gone, or may not use the CPUs
                self.skipped.add(tid)
            else:
                self.placed[tid] = self.targets[index]
                count += 1
        return count

    def follow(self, process) -> None:
        """Place threads of ``process`` (a Popen) as they appear, until it exits."""
        pause = FIRST_POLL_S
        while process.poll() is None:
            pause = FIRST_POLL_S if self.place_new(process.pid) else min(pause * 2, LAST_POLL_S)
            time.sleep(pause)


def pinned_targets(domains) -> List[frozenset]:
    """PBind: one CPU at a time, over the domains' CPUs in ascending order."""
    return [frozenset([cpu]) for cpu in sorted(frozenset().union(*domains))]


def psets_targets(domains) -> List[frozenset]:
    """PSets: whole domains, in domain order."""
    return [frozenset(d) for d in domains]


# -- one run ----------------------------------------------------------------------------

@dataclass
class RunResult:
    run: int
    policy: str
    status: int
    wall_s: float
    elapsed_s: Optional[float] = None
    agent_cpu_s: Optional[float] = None
    threads_placed: Optional[int] = None
    probe: Optional[dict] = None        # --probe: see RunTracer.result


# -- tracing a run (--probe) ----------------------------------------------------------------

#: How long compare waits for tumbler to start CMD before giving up tracing it.
CHILD_WAIT_S = 30.0


class RunTracer:
    """Traces the threads of one run's CMD with the platform's probes.

    Every policy is traced the same way, by compare itself: CMD is started
    held at a gate (``gate.Gate``: a shell that waits on a FIFO, then execs
    CMD in the same process); for the tumbler-run policies that shell is
    tumbler's child, found once tumbler has started it.  ``start`` attaches
    to the gate's PID and returns once the tracer says every probe is
    attached (bpftrace takes up to about a second); only then does run_once
    open the gate, so CMD is traced from its first instruction, however
    loaded the machine.  The maps are read every ``period_s``, because a
    thread that exits leaves the scripts' maps: what happens in the last
    ``period_s`` before a thread exits is not counted, alike for every
    policy.
    """

    def __init__(self, kinds, domain_of_cpu, period_s=0.2):
        from ..observers.probes import FIELDS_OF_KIND
        self.kinds = kinds
        self.fields = tuple(f for kind in kinds for f in FIELDS_OF_KIND[kind])
        self.domain_of_cpu = domain_of_cpu
        self.period_s = period_s
        self.totals = dict.fromkeys(self.fields, 0)
        self.failure = None
        self._session = None
        self._last = {}
        self._done = threading.Event()
        self._thread = None

    def start(self, pid):
        """Attach to ``pid`` (None: the command was not started); blocks
        until the probes are attached."""
        if pid is None:
            self.failure = "the command was not started"
            return
        from ..tracing import session as probe
        session = probe.ProbeSession(period_ms=100)
        try:
            session.start([pid], self.kinds, self.domain_of_cpu)
            self._last = session.snapshot()
        except TumblerError as exc:
            session.kill()
            self.failure = str(exc)
            return
        self._session = session
        self._thread = threading.Thread(target=self._follow, name="compare-probe",
                                        daemon=True)
        self._thread.start()

    def _follow(self):
        while not self._done.wait(self.period_s):
            try:
                self._take(self._session.snapshot())
            except TumblerError as exc:
                self.failure = str(exc)
                return

    def _take(self, snapshot):
        from ..tracing import session as probe
        from ..observers.probes import add_into
        for record in probe.delta(snapshot, self._last).values():
            add_into(self.totals, record, self.fields)
        self._last = snapshot

    def stop(self):
        """Take the final readings and end tracing; never raises."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        session, self._session = self._session, None
        if session is None:
            return
        try:
            self._take(session.stop())
        except TumblerError as exc:
            self.failure = self.failure or str(exc)
        finally:
            session.kill()

    def result(self):
        """The run's figures: lock wait (s and waits), run-queue latency (total
        s, waits, mean ms), migrations and cross-domain migrations (absent
        for kinds not traced); ``failure`` says why tracing stopped early."""
        from ..observers.probes import mean_runq_ms
        t = self.totals
        out = {"failure": self.failure}
        if "lock_ns" in t:
            out.update(lock_s=t["lock_ns"] / 1e9, lock_waits=t["lock_count"])
        if "runq_ns" in t:
            out.update(runq_s=t["runq_ns"] / 1e9, runq_waits=t["runq_count"],
                       runq_mean_ms=mean_runq_ms(t))
        if "migrations" in t:
            out.update(migrations=t["migrations"], cross_domain=t["cross_domain"])
        return out


def _child_of(pid, process, timeout=CHILD_WAIT_S):
    """The PID of the process ``pid`` started (tumbler's CMD), or None if
    ``process`` ends first or none appears within ``timeout``."""
    deadline = time.monotonic() + timeout
    path = "/proc/%d/task/%d/children" % (pid, pid)
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with open(path) as f:
                children = f.read().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.005)
    return None


@dataclass
class RunSetup:
    """Everything every run needs, decided once before the first run."""

    command: List[str]
    domains: tuple
    domain_note: str
    tumbler_args: List[str]         # balancing options for tumbler-run policies
    echo_tumbler_summary: bool      # -v: show tumbler's whole stderr
    probe_kinds: tuple = ()         # --probe: the kinds to trace, else empty


def _tracer(setup, process, policy):
    """Trace this run's CMD, held at its gate (--probe): returns once the
    probes are attached (or tracing failed, see RunTracer.failure)."""
    tracer = RunTracer(setup.probe_kinds, {cpu: index for index, cpus in
                                           enumerate(setup.domains) for cpu in cpus})
    if policy in OWN_POLICIES:
        tracer.start(process.pid)
    else:
        tracer.start(_child_of(process.pid, process))
    return tracer


def _exit_status(returncode):
    return 128 - returncode if returncode < 0 else returncode


def _argv(setup, policy, summary_path, gate=None):
    """The run's argv: CMD (behind ``gate``, if any), or tumbler running it
    and writing its summary as JSON to ``summary_path``."""
    command = gate.argv(setup.command) if gate is not None else list(setup.command)
    if policy in OWN_POLICIES:
        return command
    return [sys.executable, "-m", "tumbler", "--policy", policy, *setup.tumbler_args,
            "--summary-json", summary_path,
            *([] if setup.echo_tumbler_summary else ["--quiet"]), "exec", "--", *command]


def _placer(setup, policy):
    if policy == "pinned":
        return StaticPlacer(pinned_targets(setup.domains))
    if policy == "psets":
        return StaticPlacer(psets_targets(setup.domains))
    return None


def run_once(setup: RunSetup, policy: str, run: int) -> RunResult:
    """Run CMD once under ``policy``; stderr of tumbler runs is replayed.

    The wall time runs from the start of CMD (without --probe: of the
    process compare starts, CMD or tumbler; with --probe: the opening of
    the gate, once the probes are attached) to the reaping of that process.
    """
    captures_stderr = policy not in OWN_POLICIES
    if setup.probe_kinds:
        missing = check_command(setup.command[0])
        if missing is not None:
            click.echo("tumbler: compare: %s: %s" % (setup.command[0], missing[1]), err=True)
            return RunResult(run, policy, missing[0], 0.0)
    placer = _placer(setup, policy)
    gate = Gate() if setup.probe_kinds else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory(prefix="tumbler-compare-") as scratch:
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
                tracer = _tracer(setup, process, policy)
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
            _stop(process)
            if tracer is not None:
                tracer.stop()
        wall = (ended or time.monotonic()) - started
        out.seek(0)
        stdout_text = out.read().decode(errors="replace")
        err.seek(0)
        stderr_text = err.read().decode(errors="replace")
        summary = read_summary(summary_path) if captures_stderr else None
    result = RunResult(run, policy, _exit_status(process.returncode), wall,
                       elapsed_s=parse_elapsed(stdout_text), agent_cpu_s=agent_cpu,
                       threads_placed=len(placer.placed) if placer is not None else None,
                       probe=tracer.result() if tracer is not None else None)
    if captures_stderr:
        # tumbler printed its human summary only with -v (else --quiet); its
        # figures come from the JSON one.
        result.agent_cpu_s = own_cpu_of(summary)
        for line in stderr_text.splitlines():
            click.echo(line, err=True)
    return result


def _stop(process):
    """After an interruption: let CMD (or tumbler, which restores) end cleanly."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# -- all runs, and the report ------------------------------------------------------------

def run_all(setup, policies, runs, progress=None):
    """Run the interleaved schedule; stop at the first failing run.

    Returns (results in run order, the failed RunResult or None).
    """
    results = []
    for run, policy in run_order(policies, runs):
        result = run_once(setup, policy, run)
        results.append(result)
        if progress is not None:
            progress(result, runs)
        if result.status != 0:
            return results, result
    return results, None


def report(setup, policies, runs, results, failed):
    """The JSON-ready report (see the module docstring for the keys)."""
    summaries = {}
    for policy in policies:
        made = [r for r in results if r.policy == policy]
        done = [r for r in made if r.status == 0]
        elapsed = [r.elapsed_s for r in done]
        agent = [r.agent_cpu_s for r in done if r.agent_cpu_s is not None]
        summaries[policy] = {
            "policy": policy,
            "runs": len(done),
            "statuses": [r.status for r in made],
            "wall_s": summarize(r.wall_s for r in done),
            "elapsed_s": summarize(elapsed) if None not in elapsed else None,
            "agent_cpu_s": math.fsum(agent) / len(agent) if agent else None,
            "probe": _probe_means(done) if setup.probe_kinds else None,
        }
    default = summaries.get("default")
    for summary in summaries.values():
        for key, measure in (("speedup_vs_default", "wall_s"),
                             ("elapsed_speedup_vs_default", "elapsed_s")):
            summary[key] = speedup(_mean(default, measure), _mean(summary, measure))
    return {
        "command": list(setup.command),
        "runs": runs,
        "domains": [format_cpulist(d) for d in setup.domains],
        "domain_note": setup.domain_note,
        "results": [summaries[policy] for policy in policies],
        "run_results": [asdict(r) for r in results],
        "failed": ({"run": failed.run, "policy": failed.policy, "status": failed.status}
                   if failed is not None else None),
    }


#: Per-run probe figures averaged per policy (--probe).
_PROBE_FIGURES = ("lock_s", "lock_waits", "runq_s", "runq_waits", "runq_mean_ms",
                  "migrations", "cross_domain")


def _probe_means(runs):
    """Mean of each probe figure over the runs traced to the end; None if none was."""
    traced = [r.probe for r in runs if r.probe is not None and r.probe["failure"] is None]
    if not traced:
        return None
    means = {"runs": len(traced)}
    for figure in _PROBE_FIGURES:
        values = [p[figure] for p in traced if figure in p]
        if values:
            means[figure] = math.fsum(values) / len(values)
    return means


def _mean(summary, measure):
    if summary is None or summary[measure] is None:
        return None
    return summary[measure]["mean"]


def _cell(value, fmt, width):
    return ("%" + str(width) + "s") % ("-" if value is None else fmt % value)


def format_table(data) -> List[str]:
    """The report as a text table, one line per policy."""
    lines = [
        "command: %s" % " ".join(data["command"]),
        "%d run%s per policy, interleaved; domains %s (%s)" % (
            data["runs"], "" if data["runs"] == 1 else "s", " / ".join(data["domains"]),
            data["domain_note"]),
        "",
        "%16s%s  %9s  %s  %8s" % ("", " wall time (s) ".center(38, "-"), "elapsed_s",
                                  "speedup vs default", "agent"),
        "%-9s %4s  %7s %7s %7s %7s %6s  %9s  %8s %9s  %8s" % (
            "policy", "runs", "mean", "median", "min", "max", "CV", "mean", "wall",
            "elapsed", "CPU s"),
    ]
    for row in data["results"]:
        wall = row["wall_s"] or {}
        elapsed = row["elapsed_s"] or {}
        lines.append("%-9s %4d  %s %s %s %s %s  %s  %s %s  %s" % (
            row["policy"], row["runs"],
            _cell(wall.get("mean"), "%.3f", 7), _cell(wall.get("median"), "%.3f", 7),
            _cell(wall.get("min"), "%.3f", 7), _cell(wall.get("max"), "%.3f", 7),
            _cell(100 * wall["cv"] if wall else None, "%.1f%%", 6),
            _cell(elapsed.get("mean"), "%.3f", 9),
            _cell(row["speedup_vs_default"], "%.2f", 8),
            _cell(row["elapsed_speedup_vs_default"], "%.2f", 9),
            _cell(row["agent_cpu_s"], "%.3f", 8)))
    if any(row.get("probe") for row in data["results"]):
        lines += ["", "probes, mean per run (traced from the command's start):",
                  "%-9s %6s  %10s %9s  %12s %9s  %10s %12s" % (
                      "policy", "traced", "lock s", "waits", "runq mean ms", "waits",
                      "migrations", "cross-domain")]
        for row in data["results"]:
            probe = row.get("probe") or {}
            lines.append("%-9s %6s  %s %s  %s %s  %s %s" % (
                row["policy"], probe.get("runs", 0),
                _cell(probe.get("lock_s"), "%.3f", 10), _cell(probe.get("lock_waits"), "%.0f", 9),
                _cell(probe.get("runq_mean_ms"), "%.3f", 12),
                _cell(probe.get("runq_waits"), "%.0f", 9),
                _cell(probe.get("migrations"), "%.0f", 10),
                _cell(probe.get("cross_domain"), "%.0f", 12)))
    lines += [
        "",
        "speedup = default's mean / the policy's mean: above 1 is faster than default.",
        "agent CPU = mean CPU seconds spent placing threads (tumbler's own, from its "
        "summary; compare's pinning loop for pinned and psets).",
    ]
    if data["failed"] is not None:
        failed = data["failed"]
        lines.append("run %d of %s FAILED with exit status %d; later runs were not made."
                     % (failed["run"], failed["policy"], failed["status"]))
    return lines


# -- the command ------------------------------------------------------------------------

def _tumbler_args(settings, options):
    args = []
    if settings["platform"]:
        args += ["--platform", settings["platform"]]
    for key, flag in _FORWARDED:
        if options.get(key) is not None:
            args += [flag, "%s" % options[key]]
    if settings["dry_run"]:
        args.append("--dry-run")
    if settings["verbose"]:
        args.append("--verbose")
    return args


def _reject_unusable(ctx, options, settings):
    """Balancing options that make no sense for compare are errors, not ignored."""
    if options.get("policy") is not None:
        raise UsageError("compare runs several policies: use --policies, not --policy")
    if options.get("log_path") is not None:
        raise UsageError("--log cannot be used with compare: every run would overwrite it")
    for name in OPTION_NAMES:
        if name not in USED_OPTIONS and options.get(name):
            raise UsageError("%s does not apply to compare" % _flag(ctx, name))
    if settings["root"] != "/":
        raise UsageError("--root cannot be used with compare: it runs real programs")


def _flag(ctx, name):
    for param in ctx.command.params:
        if param.name == name:
            return max(param.opts, key=len)
    return name


def _make_setup(ctx, options, policies, command):
    settings = make_settings(ctx, options)
    _reject_unusable(ctx, options, settings)
    backend = open_backend(settings["platform"], settings["root"])
    static = [p for p in policies if p in ("pinned", "psets")]
    if static:
        try:
            backend.binder("affinity")          # the binder StaticPlacer uses
        except PlatformError as exc:
            raise UsageError("policies %s: %s" % (", ".join(static), exc)) from None
    probe_kinds = ()
    if settings["probe"]:
        from ..tracing import session as probe
        from ..observers.probes import check_tracing
        check_tracing(backend.name, probe.KINDS)     # one clear line if it cannot
        probe_kinds = tuple(probe.KINDS)
    choice = choose_domains(backend.topology(), backend.own_allowed(),
                            settings["level"], settings["domains"])
    return RunSetup(command=list(command), domains=choice.domains, domain_note=choice.note,
                tumbler_args=_tumbler_args(settings, options),
                echo_tumbler_summary=settings["verbose"], probe_kinds=probe_kinds), settings


def _print_progress(result, runs):
    elapsed = "" if result.elapsed_s is None else ", elapsed_s %.3f" % result.elapsed_s
    click.echo("compare: run %d/%d %-8s %.3f s%s%s" % (
        result.run, runs, result.policy, result.wall_s, elapsed,
        "" if result.status == 0 else ", exit status %d" % result.status), err=True)


@click.command("compare", context_settings={"allow_interspersed_args": False})
@click.option("--runs", type=click.IntRange(1, 10000), default=DEFAULT_RUNS, show_default=True,
              help="Runs per policy.")
@click.option("--policies", "policies_text", metavar="LIST", show_default=True,
              default=",".join(DEFAULT_POLICIES),
              help="Comma-separated policies: default, pinned, psets, or any tumbler "
                   "--policy.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@balancing_options
@click.argument("command", nargs=-1, required=True, metavar="-- CMD [ARGS...]")
@click.pass_context
def compare_command(ctx, runs, policies_text, as_json, command, **options):
    """Time CMD under several policies, interleaved, and compare.

    -q hides the per-run progress lines; -v shows tumbler's stderr in full.
    """
    if ctx.obj is None:
        ctx.obj = {"root": "/", "platform": None, "options": {}}
    merged = dict(ctx.obj["options"])
    merged.update({k: v for k, v in options.items() if v is not None})
    policies = parse_policies(policies_text)
    setup, settings = _make_setup(ctx, merged, policies, command)
    results, failed = run_all(setup, policies, runs,
                              progress=None if settings["quiet"] else _print_progress)
    data = report(setup, policies, runs, results, failed)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        for line in format_table(data):
            click.echo(line)
    if failed is not None:
        click.echo("tumbler: compare: run %d of %s exited with status %d"
                   % (failed.run, failed.policy, failed.status), err=True)
        sys.exit(EXIT_FAILURE)


for _param in compare_command.params:
    if _param.name in OPTION_NAMES and _param.name not in USED_OPTIONS:
        _param.hidden = True
