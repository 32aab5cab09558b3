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

Variants: a tumbler-run policy may carry tumbler options, as
``NAME+KEY=VALUE[+KEY=VALUE...]`` with KEY ``capacity`` (measured or
cpus), ``share`` (time or space) or ``share-policy`` (equal-qos or
max-qos), each passed to that policy's tumbler run as ``--KEY VALUE``:
``--policies default,auto+capacity=cpus,auto+capacity=measured``, or
``auto+share=time,auto+share=space``.  The variant's whole text is its
name, in the table and the JSON.  A key given twice, an unknown key or
value, a variant of default/pinned/psets, the same variant twice (in any
order of its keys) and ``share=space`` without ``--together`` are usage
errors.  The three options themselves are refused: they belong to a policy.

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
  start-up.  With ``--together``, each program's from its release to its
  reaping (tumbler's start-up and attach are not counted), and the run's
  from the release of the programs to the reaping of the last (for
  ``alone``: the sum of the programs' wall times, run one after the
  other);
* ``elapsed_s`` when CMD prints ``elapsed_s=SECONDS`` on stdout (the
  example workloads do): the program's own timing, without start-up
  (with ``--together``, per program only);
* agent CPU: the CPU time of whatever placed the threads.  For tumbler
  policies it is ``own_cpu_s`` of tumbler's JSON summary, which each
  tumbler run writes to a file of compare's (``--summary-json``; from the
  start of balancing to the restore; the start-up, 0.1 to 0.3 s of CPU,
  is not included).  tumbler runs with ``--quiet`` unless ``-v``: its
  human summary is for people.  tumbler's rusage cannot be used: it
  includes CMD, its child.  For ``pinned`` and ``psets`` it is compare's
  own CPU time while following the run.  ``default`` has none.  A
  ``--together`` tumbler run's is ``own_cpu_s`` of its summary too (at the
  top level of a ``--share space`` summary as of a single one).

``--background CMD`` (repeatable; one string, split as a shell would,
without expansion): started before every run of every policy alike, in a
session of its own, and killed with SIGKILL (with whatever it started in
its process group; what made a group of its own escapes) and reaped
after the run, on Linux with all the group (compare is their subreaper
while it kills them: PR_SET_CHILD_SUBREAPER, so the next run never
starts beside a dying one) -- e.g. ``--background "taskset -c
1 sh -c 'while :; do :; done'"``, a CPU hog pinned on CPU 1.  It is never
balanced: tumbler runs attach to or start only compare's programs.  Its
stdout goes to /dev/null; its stderr is shown if it ends early.  A
background command that cannot be started, or that ends before the run
does, fails the run (with a message saying so).

``--together CMD`` (repeatable; split the same way): more programs that
run at the same time as CMD in every run.  Every run then starts all the
programs: ``default`` plainly; a tumbler-run policy as ``tumbler
[balancing options] [variant options] --summary-json F -p PID -p PID
...`` attached to them (tumbler ends by itself once they have all exited:
"target exited", or "targets exited" with ``share=space``; ``--children``
is not passed, so only the programs' own processes are balanced).
``pinned``, ``psets`` and ``--probe`` place or trace one program: with
``--together`` they are usage errors.  Each round
first runs every program by itself, plainly, one after the other, as the
policy ``alone`` (round k: the alone runs, then every policy), so that a
program's *slowdown* under a policy is its mean wall time there over its
mean wall time alone.  Per policy compare reports each program's wall time
figures and slowdown, and the spread of the slowdowns: their population
standard deviation and max/min, as the space-sharing paper reports its
programs' QoS (``--share space`` with equal-qos should make the slowdowns
equal: a small spread).

The programs are started held at a gate (``gate.Gate``, as for
``--probe``) and released all at the same instant once everything is
ready: for a tumbler run, once tumbler has attached to every one of them
(``_attached``: a run that moves threads has claimed each -- its state
file names that tumbler --; one that moves none, observe or ``--dry-run``,
has logged its first round to a ``--log`` file of compare's).  So tumbler
balances them from their first instruction, as ``exec`` would, and a
program shorter than tumbler's start-up (0.1 to 0.4 s) cannot be over
before tumbler has seen it.

With ``--probe`` (root; bpftrace or DTrace) every run's CMD is traced with
the probes, by compare itself for every policy alike (see RunTracer), from
CMD's first instruction:
lock waits, run-queue latency and (cross-domain) migrations, per run and
as means per policy.

Per policy: mean, median, min, max and CV of the wall times (CV = sample
standard deviation / mean, 0 for a single run), the same for ``elapsed_s``
when every run printed it, mean agent CPU, and the speedup vs default =
default's mean / this policy's mean: above 1 is faster than default.

A *verdict* against the OS default, from the runs paired as they were
interleaved (run k of the policy with run k of ``default``): the median
of the per-pair ratios policy wall / default wall and a distribution-free
confidence interval of that median (order statistics of the ratios, the
sign test's: 95% where there are 6 pairs or more, the level [min, max]
reaches with fewer, stated).  ``faster`` if the whole interval is below
1, ``slower`` if above, ``no difference`` if it holds 1 -- with 5 pairs
or fewer an interval is wide, and a 2% gain or loss is found only with
more pairs (``--runs``).

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
      verdict                     against default, from the paired runs:
                                  {pairs, ratio_median, ratio_low,
                                  ratio_high, confidence, verdict: faster,
                                  no difference or slower}, or null
                                  (default itself, or no pairs)
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

Keys added by ``--together`` and ``--background``, present only when they
are given (the keys above never change)::

    programs       --together: every program as a list of strings, CMD
                   first, in the order of the per-program lists below
    background     --background: every background command, as lists
    results[]:     (--together; the first result is policy "alone")
      programs         one object per program:
        wall_s             {mean, median, min, max, cv} of its wall times
        elapsed_s          the same for its elapsed_s, or null
        slowdown           its mean wall_s / its mean wall_s alone, or null
        elapsed_slowdown   the same on elapsed_s, or null
      slowdown_spread  {mean, stdev, max_over_min} of the programs'
                       slowdowns (stdev: population standard deviation),
                       or null when a slowdown is unknown
    run_results[]:
      programs         (--together) one {status, wall_s, elapsed_s} per
                       program, fewer if the run failed before they started
      failure          why the run failed when its status does not say (a
                       background command ended early or could not start,
                       tumbler exited or did not attach), else null
    failed.failure     the same for the run that failed

Exit status: 0 when every run exited 0; 1 when a run failed (compare then
stops, prints what it has and says which run failed; a command that cannot
be started counts as a failed run with status 127 or 126; with
``--together`` a run fails when a program exits non-zero, or tumbler
does); 2 on bad input.
"""

import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

import click

from .options import balancing_options, settings as make_settings
from .settings import OPTION_NAMES
from ..config import (CAPACITY_CHOICES, OBSERVING_POLICIES, POLICY_CHOICES, SHARE_CHOICES,
                      SHARE_POLICY_CHOICES)
from ..cpulist import format_cpulist
from ..balance.domains import choose_domains
from ..errors import EXIT_FAILURE, TumblerError, UsageError
from ..platform import open_backend
from ..platform.base import NoSuchProcess, PlatformError, Unmovable
from ..safefile import checked_tempdir
from .gate import Gate, check_command

#: Policies compare runs itself; every other name is a ``tumbler --policy``.
OWN_POLICIES = ("default", "pinned", "psets")
TUMBLER_POLICIES = tuple(p for p in POLICY_CHOICES if p not in OWN_POLICIES)
POLICY_NAMES = OWN_POLICIES + TUMBLER_POLICIES
DEFAULT_POLICIES = ("default", "pinned", "psets", "tumbler", "auto")
DEFAULT_RUNS = 5

#: With --together, every round first runs each program by itself under this name.
ALONE = "alone"

#: Options a tumbler-run policy may carry as a variant (``auto+capacity=cpus``):
#: key -> the values tumbler's option of the same name takes.
VARIANT_OPTIONS = {"capacity": CAPACITY_CHOICES, "share": SHARE_CHOICES,
                   "share-policy": SHARE_POLICY_CHOICES}

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


#: Confidence of the verdict's interval, where the pairs allow it.
VERDICT_CONFIDENCE = 0.95


def median_interval(values, confidence=VERDICT_CONFIDENCE):
    """(low, high, confidence reached) of a distribution-free interval for
    the median of ``values``: the k-th smallest and k-th largest, k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 -- the
    sign test's interval.  With too few values for ``confidence`` (n < 6
    at 95%), [min, max] and the confidence it does reach, 1 - 2^(1-n)."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k = 0.0, 0
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2 ** n       # P(Binomial(n, 1/2) == k)
        if nxt > (1 - confidence) / 2:
            break
        tail, k = nxt, k + 1
    if k == 0:                  # even [min, max] misses the level asked
        return ordered[0], ordered[-1], 1 - 2.0 ** (1 - n)
    return ordered[k - 1], ordered[n - k], 1 - 2 * tail


def paired_verdict(default_runs, runs) -> Optional[dict]:
    """The verdict of the module doc for ``runs`` of a policy against
    ``default_runs`` (RunResults that exited 0), paired by run number;
    None without pairs."""
    default_wall = {r.run: r.wall_s for r in default_runs}
    ratios = [r.wall_s / default_wall[r.run] for r in runs
              if default_wall.get(r.run, 0) > 0]
    if not ratios:
        return None
    low, high, reached = median_interval(ratios)
    verdict = "faster" if high < 1 else "slower" if low > 1 else "no difference"
    return {"pairs": len(ratios), "ratio_median": statistics.median(ratios),
            "ratio_low": low, "ratio_high": high, "confidence": reached,
            "verdict": verdict}


def speedup(default_mean: Optional[float], mean: Optional[float]) -> Optional[float]:
    """default_mean / mean: above 1 means faster than default."""
    if default_mean is None or mean is None or not mean > 0:
        return None
    return default_mean / mean


def run_order(policies: Sequence[str], runs: int) -> List[tuple]:
    """(run number from 1, policy) pairs: run 1 of every policy, then run 2, ..."""
    return [(run, policy) for run in range(1, runs + 1) for policy in policies]


def parse_policies(text: str) -> List[str]:
    """The policies of ``--policies``, in order, each checked (variants
    included, see split_variant); a bad list is a UsageError (one line)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError("--policies: empty policy name in %r" % text)
    seen = {}
    for name in names:
        base, options = split_variant(name)
        key = (base, frozenset(options))
        if key in seen:
            if seen[key] == name:
                raise UsageError("--policies: a policy is named twice in %r" % text)
            raise UsageError("--policies: %r and %r are the same policy" % (seen[key], name))
        seen[key] = name
    return names


def split_variant(name: str):
    """(base policy, [(key, value), ...]) of a policy name: ``auto`` is
    ("auto", []), ``auto+share=space+capacity=cpus`` is ("auto",
    [("share", "space"), ("capacity", "cpus")]).  A UsageError if the name
    is not a policy, or a variant's options are not what tumbler takes."""
    base, *parts = name.split("+")
    if base == ALONE:
        raise UsageError("--policies: %r is not a policy to name: with --together compare "
                         "runs each program alone itself" % name)
    if base not in POLICY_NAMES:
        raise UsageError("--policies: unknown policy %r (choose from %s)"
                         % (base if parts else name, ", ".join(POLICY_NAMES)))
    if parts and base in OWN_POLICIES:
        raise UsageError("--policies: %r: only the tumbler-run policies (%s) take variant "
                         "options" % (name, ", ".join(TUMBLER_POLICIES)))
    options = []
    for part in parts:
        key, equals, value = part.partition("=")
        if not equals:
            raise UsageError("--policies: %r: %r is not KEY=VALUE (keys: %s)"
                             % (name, part, ", ".join(VARIANT_OPTIONS)))
        if key not in VARIANT_OPTIONS:
            raise UsageError("--policies: %r: unknown variant option %r (choose from %s)"
                             % (name, key, ", ".join(VARIANT_OPTIONS)))
        if value not in VARIANT_OPTIONS[key]:
            raise UsageError("--policies: %r: %s must be %s, not %r"
                             % (name, key, " or ".join(VARIANT_OPTIONS[key]), value))
        if any(key == k for k, _ in options):
            raise UsageError("--policies: %r: %s is given twice" % (name, key))
        options.append((key, value))
    return base, options


def variant_flags(name: str) -> List[str]:
    """The tumbler options of a policy variant: ``--KEY VALUE`` for each."""
    return [arg for key, value in split_variant(name)[1] for arg in ("--" + key, value)]


def base_policy(name: str) -> str:
    """The policy a variant is of (``auto`` for ``auto+capacity=cpus``)."""
    return name.split("+", 1)[0]


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
    # --together: one {status, wall_s, elapsed_s} per program, in order
    # (fewer when the run failed before starting them all).
    programs: Optional[List[dict]] = None
    # Why the run failed when its status does not say (a background command
    # ended early, tumbler did not attach, ...), else None.
    failure: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == 0 and self.failure is None


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
    together: List[List[str]] = field(default_factory=list)     # --together commands
    background: List[List[str]] = field(default_factory=list)   # --background commands
    dry_run: bool = False           # -n: tumbler runs move nothing (and keep no state)

    @property
    def programs(self) -> List[List[str]]:
        """Every program of a run: the command, then the --together ones."""
        return [list(self.command)] + [list(c) for c in self.together]


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
    return [*_tumbler_head(setup, policy, summary_path), "exec", "--", *command]


def _tumbler_head(setup, policy, summary_path):
    """``tumbler`` with the balancing options, the variant's options and
    ``--summary-json``: what comes before ``exec`` or the ``-p`` list."""
    return [sys.executable, "-m", "tumbler", "--policy", base_policy(policy),
            *setup.tumbler_args, *variant_flags(policy), "--summary-json", summary_path,
            *([] if setup.echo_tumbler_summary else ["--quiet"])]


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
            tempfile.TemporaryDirectory(prefix="tumbler-compare-",
                                        dir=checked_tempdir()) as scratch:
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


# -- background commands (--background) -------------------------------------------------

class Background:
    """The ``--background`` commands of one run: started before it, killed
    (SIGKILL, with whatever they started in their session) and reaped
    after it.  Their stdout goes to /dev/null (compare's own carries the
    report); their stderr is shown only when one ends before the run does.
    They are compare's children, never tumbler's: no tumbler run balances
    them."""

    def __init__(self, commands):
        self.commands = [list(c) for c in commands]
        self._running = []          # (command, Popen, stderr file)

    def start(self):
        """Start every command: None, or (status, why) when one cannot be
        started (those already started are stopped again)."""
        for command in self.commands:
            err = tempfile.TemporaryFile()
            try:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=err,
                                           start_new_session=True)
            except OSError as exc:
                err.close()
                self.stop()
                return (127 if isinstance(exc, FileNotFoundError) else 126,
                        "background command `%s` cannot be started: %s"
                        % (shlex.join(command), exc.strerror))
            self._running.append((command, process, err))
        return None

    def stop(self):
        """Kill and reap every command; return why the run fails (one had
        ended before) or None."""
        failure = None
        if not self._running:
            return None
        # Orphaned by the kill, what a command started is compare's own
        # child (the subreaper's), so it can be waited for.
        _adopt_orphans(True)
        try:
            for command, process, err in self._running:
                status = _ended(process)
                if status is not None and failure is None:
                    failure = ("background command `%s` ended during the run (exit status %d)"
                               % (shlex.join(command), _exit_status(status)))
                    err.seek(0)
                    for line in err.read().decode(errors="replace").splitlines():
                        click.echo(line, err=True)
                _kill_group(process)
                err.close()
        finally:
            _adopt_orphans(False)
            self._running = []
        return failure


def _kill_group(process):
    """SIGKILL ``process``'s group and wait until every member is gone."""
    try:
        # Not reaped yet, so its PID (its session's process group) cannot
        # have been reused.
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    # SIGKILL is delivered, not done: what the command started may still
    # run for a moment.  Orphaned, those are compare's children now
    # (_adopt_orphans): wait for every one of the group.
    while True:
        try:
            os.waitpid(-process.pid, 0)
        except ChildProcessError:
            break


def _adopt_orphans(adopt):
    """Linux: make compare the subreaper of what it starts (``adopt``) while
    ``Background.stop`` kills the background commands, so their orphans
    can be waited for; then no longer.  Elsewhere, or if refused, they are
    only killed."""
    if sys.platform.startswith("linux"):
        from ..platform.linux.backend import set_child_subreaper
        set_child_subreaper(adopt)


def _ended(process):
    """The raw return code of ``process`` (negative: the signal) if it has
    ended, else None -- without reaping it."""
    if process.returncode is not None:
        return process.returncode
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return process.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


# -- several programs at once (--together) -------------------------------------------------

#: How long compare waits for tumbler to exit once all its programs have.
TUMBLER_EXIT_WAIT_S = 30.0
#: How often compare looks whether tumbler has attached to the held programs.
ATTACH_POLL_S = 0.005
#: How often compare tries again while a gate's shell has not opened its FIFO.
GATE_RETRY_S = 0.002


@dataclass
class _Outcome:
    """What ``_run_programs`` measured."""

    status: int = 0
    wall_s: float = 0.0
    programs: list = field(default_factory=list)
    agent_cpu_s: Optional[float] = None
    failure: Optional[str] = None


def run_together(setup: RunSetup, policy: str, run: int) -> RunResult:
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
    result = RunResult(run, policy, 0, 0.0, programs=[])
    for command in setup.programs:
        outcome = _run_programs(setup, None, [command])
        result.programs += outcome.programs
        result.wall_s += outcome.wall_s
        result.status, result.failure = outcome.status, outcome.failure
        if not result.ok:
            break
    return result


def _run_programs(setup, policy, commands) -> _Outcome:
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
        missing = check_command(command[0])
        if missing is not None:
            click.echo("tumbler: compare: %s: %s" % (command[0], missing[1]), err=True)
            return _Outcome(status=missing[0])
    outcome = _Outcome()
    gates, outs, processes, tumbler = [], [], [], None
    with tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory(prefix="tumbler-compare-",
                                        dir=checked_tempdir()) as scratch:
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
                        "status": _exit_status(process.returncode), "wall_s": end - start,
                        "elapsed_s": parse_elapsed(out.read().decode(errors="replace"))})
                if tumbler is not None:
                    try:
                        tumbler.wait(timeout=TUMBLER_EXIT_WAIT_S)
                    except subprocess.TimeoutExpired:
                        outcome.failure = ("tumbler did not exit within %.0f s of its programs"
                                           % TUMBLER_EXIT_WAIT_S)
        finally:
            for process in processes:
                _stop(process)
            if tumbler is not None:
                _stop(tumbler)
            for gate in gates:
                gate.close()
            for out in outs:
                out.close()
        outcome.status = next((p["status"] for p in outcome.programs if p["status"]), 0)
        if tumbler is not None:
            if outcome.status == 0 and tumbler.returncode != 0:
                outcome.status = _exit_status(tumbler.returncode)
                if outcome.failure is None:
                    outcome.failure = "tumbler exited with status %d" % outcome.status
            outcome.agent_cpu_s = own_cpu_of(read_summary(summary_path))
            err.seek(0)
            for line in err.read().decode(errors="replace").splitlines():
                click.echo(line, err=True)
    return outcome


def _journaled(setup, policy):
    """Whether the tumbler run of ``policy`` keeps crash-safe state: it may
    move threads (as ``run._journals`` decides; compare refuses --root)."""
    return base_policy(policy) not in OBSERVING_POLICIES and not setup.dry_run


def _attach_argv(setup, policy, summary_path, log_path, pids):
    """tumbler attached to ``pids``.  A run that keeps no state (observe,
    --dry-run) also logs to ``log_path``: its first line says it has
    attached (``_attached``)."""
    argv = _tumbler_head(setup, policy, summary_path)
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
                    % _exit_status(status))
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
    from ..state.paths import state_dir
    from ..state.store import list_states, owner_of
    try:
        directory = state_dir()
        return all(any((owner_of(state) or {}).get("pid") == tumbler_pid
                       for state in list_states(directory, pid)) for pid in pids)
    except TumblerError:
        return False


def _release(gates, processes):
    """Release every held program at (nearly) the same instant: open each
    gate's FIFO once its shell waits on it, then write a line into each.
    Returns the release times, or None if a program ended first."""
    import errno
    fds = []
    try:
        for gate, process in zip(gates, processes):
            while True:
                try:
                    fds.append(os.open(gate.path, os.O_WRONLY | os.O_NONBLOCK))
                    break
                except OSError as exc:
                    if exc.errno != errno.ENXIO:    # ENXIO: no reader yet
                        raise
                if process.poll() is not None:
                    for other in processes:         # before the FIFOs close: EOF releases
                        if other.poll() is None:
                            other.kill()
                            other.wait()
                    return None
                time.sleep(GATE_RETRY_S)
        released = []
        for fd in fds:
            released.append(time.monotonic())
            os.write(fd, b"\n")
        return released
    finally:
        for fd in fds:
            os.close(fd)


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


# -- all runs, and the report ------------------------------------------------------------

def run_one(setup: RunSetup, policy: str, run: int) -> RunResult:
    """One run of ``policy``: the --background commands around it, and CMD
    by itself (run_once) or with the --together programs (run_together)."""
    background = Background(setup.background)
    try:
        cannot = background.start()
        if cannot is not None:
            return RunResult(run, policy, cannot[0], 0.0, failure=cannot[1])
        result = (run_together if setup.together else run_once)(setup, policy, run)
    finally:
        ended_early = background.stop()
    if ended_early is not None and result.failure is None:
        result.failure = ended_early
    return result


def run_all(setup, policies, runs, progress=None):
    """Run the interleaved schedule; stop at the first failing run.

    Returns (results in run order, the failed RunResult or None).
    """
    results = []
    for run, policy in run_order(policies, runs):
        result = run_one(setup, policy, run)
        results.append(result)
        if progress is not None:
            progress(result, runs)
        if not result.ok:
            return results, result
    return results, None


def report(setup, policies, runs, results, failed):
    """The JSON-ready report (see the module docstring for the keys)."""
    summaries = {}
    for policy in policies:
        made = [r for r in results if r.policy == policy]
        done = [r for r in made if r.ok]
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
    default_done = [r for r in results if r.policy == "default" and r.ok]
    for policy, summary in summaries.items():
        for key, measure in (("speedup_vs_default", "wall_s"),
                             ("elapsed_speedup_vs_default", "elapsed_s")):
            summary[key] = speedup(_mean(default, measure), _mean(summary, measure))
        summary["verdict"] = None if policy == "default" else paired_verdict(
            default_done, [r for r in results if r.policy == policy and r.ok])
    if setup.together:
        _add_slowdowns(summaries, results, len(setup.programs))
    # Keys of --together and --background appear only when they are given.
    extended = bool(setup.together or setup.background)
    hidden = ({"programs"} if not setup.together else set()) | \
        ({"failure"} if not extended else set())
    data = {
        "command": list(setup.command),
        "runs": runs,
        "domains": [format_cpulist(d) for d in setup.domains],
        "domain_note": setup.domain_note,
        "results": [summaries[policy] for policy in policies],
        "run_results": [{key: value for key, value in asdict(r).items() if key not in hidden}
                        for r in results],
        "failed": ({"run": failed.run, "policy": failed.policy, "status": failed.status}
                   if failed is not None else None),
    }
    if extended and failed is not None:
        data["failed"]["failure"] = failed.failure
    if setup.together:
        data["programs"] = setup.programs
    if setup.background:
        data["background"] = [list(c) for c in setup.background]
    return data


def _add_slowdowns(summaries, results, count):
    """--together: per policy, each program's wall (and elapsed_s) figures,
    its slowdown against running alone, and the spread of the slowdowns."""
    for policy, summary in summaries.items():
        done = [r for r in results if r.policy == policy and r.ok]
        programs = []
        for index in range(count):
            elapsed = [r.programs[index]["elapsed_s"] for r in done]
            programs.append({
                "wall_s": summarize(r.programs[index]["wall_s"] for r in done),
                "elapsed_s": summarize(elapsed) if None not in elapsed else None})
        summary["programs"] = programs
    alone = summaries.get(ALONE, {}).get("programs") or [{}] * count
    for summary in summaries.values():
        for program, by_itself in zip(summary["programs"], alone):
            for key, measure in (("slowdown", "wall_s"), ("elapsed_slowdown", "elapsed_s")):
                # this mean over the mean alone: speedup()'s ratio, the other way up
                program[key] = speedup(_mean(program, measure), _mean(by_itself, measure))
        summary["slowdown_spread"] = slowdown_spread([p["slowdown"]
                                                      for p in summary["programs"]])


def slowdown_spread(slowdowns) -> Optional[dict]:
    """{mean, stdev, max_over_min} of the programs' slowdowns (stdev: the
    population standard deviation, as the space-sharing paper reports the
    spread of its programs' QoS); None unless every one is known."""
    if not slowdowns or None in slowdowns:
        return None
    return {"mean": math.fsum(slowdowns) / len(slowdowns),
            "stdev": statistics.pstdev(slowdowns),
            "max_over_min": max(slowdowns) / min(slowdowns) if min(slowdowns) > 0 else None}


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
    width = max([9] + [len(row["policy"]) for row in data["results"]])
    lines = ["command: %s" % " ".join(data["command"])]
    for index, program in enumerate(data.get("programs") or [], 1):
        lines.append("  program #%d: %s" % (index, shlex.join(program)))
    for command in data.get("background") or []:
        lines.append("background: %s" % shlex.join(command))
    lines += [
        "%d run%s per policy, interleaved; domains %s (%s)" % (
            data["runs"], "" if data["runs"] == 1 else "s", " / ".join(data["domains"]),
            data["domain_note"]),
        "",
        "%*s%s  %9s  %s  %8s" % (width + 7, "", " wall time (s) ".center(38, "-"),
                                 "elapsed_s", "speedup vs default", "agent"),
        "%-*s %4s  %7s %7s %7s %7s %6s  %9s  %8s %9s  %8s" % (
            width, "policy", "runs", "mean", "median", "min", "max", "CV", "mean", "wall",
            "elapsed", "CPU s"),
    ]
    for row in data["results"]:
        wall = row["wall_s"] or {}
        elapsed = row["elapsed_s"] or {}
        lines.append("%-*s %4d  %s %s %s %s %s  %s  %s %s  %s" % (
            width, row["policy"], row["runs"],
            _cell(wall.get("mean"), "%.3f", 7), _cell(wall.get("median"), "%.3f", 7),
            _cell(wall.get("min"), "%.3f", 7), _cell(wall.get("max"), "%.3f", 7),
            _cell(100 * wall["cv"] if wall else None, "%.1f%%", 6),
            _cell(elapsed.get("mean"), "%.3f", 9),
            _cell(row["speedup_vs_default"], "%.2f", 8),
            _cell(row["elapsed_speedup_vs_default"], "%.2f", 9),
            _cell(row["agent_cpu_s"], "%.3f", 8)))
    verdicts = [row for row in data["results"] if row.get("verdict")]
    if verdicts:
        lines += ["", "against default, paired runs (policy wall / default wall):"]
        for row in verdicts:
            v = row["verdict"]
            lines.append("  %s: %s, median %.3f, %.0f%% interval %.3f-%.3f over %d pair%s" % (
                row["policy"], v["verdict"], v["ratio_median"], 100 * v["confidence"],
                v["ratio_low"], v["ratio_high"], v["pairs"], "" if v["pairs"] == 1 else "s"))
    if any(row.get("probe") for row in data["results"]):
        lines += ["", "probes, mean per run (traced from the command's start):",
                  "%-*s %6s  %10s %9s  %12s %9s  %10s %12s" % (
                      width, "policy", "traced", "lock s", "waits", "runq mean ms", "waits",
                      "migrations", "cross-domain")]
        for row in data["results"]:
            probe = row.get("probe") or {}
            lines.append("%-*s %6s  %s %s  %s %s  %s %s" % (
                width, row["policy"], probe.get("runs", 0),
                _cell(probe.get("lock_s"), "%.3f", 10), _cell(probe.get("lock_waits"), "%.0f", 9),
                _cell(probe.get("runq_mean_ms"), "%.3f", 12),
                _cell(probe.get("runq_waits"), "%.0f", 9),
                _cell(probe.get("migrations"), "%.0f", 10),
                _cell(probe.get("cross_domain"), "%.0f", 12)))
    if data.get("programs"):
        lines += _together_lines(data, width)
    lines += [
        "",
        "speedup = default's mean / the policy's mean: above 1 is faster than default.",
        "agent CPU = mean CPU seconds spent placing threads (tumbler's own, from its "
        "summary; compare's pinning loop for pinned and psets).",
    ]
    if data.get("programs"):
        lines += [
            "programs together: a run's wall time is from their release to the end of the "
            "last (alone: the sum of theirs);",
            "slowdown = a program's mean wall under the policy / its mean wall alone; "
            "stdev (population) and max/min of the slowdowns: their spread."]
    if data["failed"] is not None:
        failed = data["failed"]
        if failed.get("failure"):
            lines.append("run %d of %s FAILED: %s; later runs were not made."
                         % (failed["run"], failed["policy"], failed["failure"]))
        else:
            lines.append("run %d of %s FAILED with exit status %d; later runs were not made."
                         % (failed["run"], failed["policy"], failed["status"]))
    return lines


def _together_lines(data, width):
    """--together: each program's mean wall and slowdown per policy, and
    the spread of the slowdowns."""
    count = len(data["programs"])
    lines = ["", "%-*s %s  %s" % (
        width, "programs", "  ".join("%s" % (" #%d " % i).center(17, "-")
                                     for i in range(1, count + 1)),
        " slowdowns ".center(23, "-")),
        "%-*s %s  %7s %7s %7s" % (width, "policy", "  ".join(
            "%8s %8s" % ("wall s", "slowdown") for _ in range(count)),
            "mean", "stdev", "max/min")]
    for row in data["results"]:
        spread = row.get("slowdown_spread") or {}
        lines.append("%-*s %s  %s %s %s" % (
            width, row["policy"], "  ".join(
                "%s %s" % (_cell((p["wall_s"] or {}).get("mean"), "%.3f", 8),
                           _cell(p["slowdown"], "%.2f", 8)) for p in row["programs"]),
            _cell(spread.get("mean"), "%.2f", 7), _cell(spread.get("stdev"), "%.3f", 7),
            _cell(spread.get("max_over_min"), "%.2f", 7)))
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
            flag = _flag(ctx, name)
            if flag[2:] in VARIANT_OPTIONS:
                raise UsageError("%s does not apply to compare: give it to a policy, e.g. "
                                 "--policies default,auto+%s=%s"
                                 % (flag, flag[2:], options[name]))
            raise UsageError("%s does not apply to compare" % flag)
    if settings["root"] != "/":
        raise UsageError("--root cannot be used with compare: it runs real programs")


def _flag(ctx, name):
    for param in ctx.command.params:
        if param.name == name:
            return max(param.opts, key=len)
    return name


def parse_commands(flag, texts) -> List[List[str]]:
    """Each --together/--background string, split as a shell would (no
    expansion)."""
    commands = []
    for text in texts:
        try:
            command = shlex.split(text)
        except ValueError as exc:
            raise UsageError("%s %r: %s" % (flag, text, exc)) from None
        if not command:
            raise UsageError("%s: empty command" % flag)
        commands.append(command)
    return commands


def _check_combinations(policies, together, probe):
    """What --together cannot do, and variants that need it, before any run."""
    if together:
        static = [p for p in policies if p in ("pinned", "psets")]
        if static:
            raise UsageError("--together cannot be used with %s: it places the threads of "
                             "one program" % " or ".join(static))
        if probe:
            raise UsageError("--together cannot be used with --probe: it traces one program")
        return
    for policy in policies:
        if ("share", "space") in split_variant(policy)[1]:
            raise UsageError("--policies: %r: space sharing is between several programs: "
                             "give the others with --together" % policy)


def _make_setup(ctx, options, policies, command, together=(), background=()):
    settings = make_settings(ctx, options)
    _reject_unusable(ctx, options, settings)
    _check_combinations(policies, together, settings["probe"])
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
        check_tracing(backend.name)     # one clear line if it cannot
        probe_kinds = tuple(probe.KINDS)
    choice = choose_domains(backend.topology(), backend.own_allowed(),
                            settings["level"], settings["domains"])
    return RunSetup(command=list(command), domains=choice.domains, domain_note=choice.note,
                tumbler_args=_tumbler_args(settings, options),
                echo_tumbler_summary=settings["verbose"], probe_kinds=probe_kinds,
                together=[list(c) for c in together], background=[list(c) for c in background],
                dry_run=settings["dry_run"]), settings


def _print_progress(result, runs):
    elapsed = "" if result.elapsed_s is None else ", elapsed_s %.3f" % result.elapsed_s
    programs = "" if not result.programs else " (%s)" % ", ".join(
        "#%d %.3f s" % (index, p["wall_s"]) for index, p in enumerate(result.programs, 1))
    click.echo("compare: run %d/%d %-8s %.3f s%s%s%s%s" % (
        result.run, runs, result.policy, result.wall_s, programs, elapsed,
        "" if result.status == 0 else ", exit status %d" % result.status,
        "" if result.failure is None else ", FAILED: %s" % result.failure), err=True)


@click.command("compare", context_settings={"allow_interspersed_args": False})
@click.option("--runs", type=click.IntRange(1, 10000), default=DEFAULT_RUNS, show_default=True,
              help="Runs per policy.")
@click.option("--policies", "policies_text", metavar="LIST", show_default=True,
              default=",".join(DEFAULT_POLICIES),
              help="Comma-separated policies: default, pinned, psets, or any tumbler "
                   "--policy, also as a variant NAME+KEY=VALUE[+KEY=VALUE...] "
                   "(KEY: capacity, share, share-policy).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--together", "together_texts", metavar="CMD", multiple=True,
              help="Another program to run at the same time as CMD in every run "
                   "(one string, split like a shell line; repeatable).  Adds the policy "
                   "'alone' and each program's slowdown.")
@click.option("--background", "background_texts", metavar="CMD", multiple=True,
              help="Started before every run and killed after it, never balanced "
                   "(one string, split like a shell line; repeatable).")
@balancing_options
@click.argument("command", nargs=-1, required=True, metavar="-- CMD [ARGS...]")
@click.pass_context
def compare_command(ctx, runs, policies_text, as_json, together_texts, background_texts,
                    command, **options):
    """Time CMD under several policies, interleaved, and compare.

    A policy may be a variant of a tumbler-run one, NAME+KEY=VALUE[+...]
    with KEY capacity, share or share-policy (tumbler's --KEY VALUE), e.g.
    auto+capacity=measured or auto+share=space.  -q hides the per-run
    progress lines; -v shows tumbler's stderr in full.
    """
    if ctx.obj is None:
        ctx.obj = {"root": "/", "platform": None, "options": {}}
    merged = dict(ctx.obj["options"])
    merged.update({k: v for k, v in options.items() if v is not None})
    policies = parse_policies(policies_text)
    together = parse_commands("--together", together_texts)
    background = parse_commands("--background", background_texts)
    setup, settings = _make_setup(ctx, merged, policies, command, together, background)
    schedule = ([ALONE] if together else []) + policies
    results, failed = run_all(setup, schedule, runs,
                              progress=None if settings["quiet"] else _print_progress)
    data = report(setup, schedule, runs, results, failed)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        for line in format_table(data):
            click.echo(line)
    if failed is not None:
        if failed.failure is not None:
            click.echo("tumbler: compare: run %d of %s failed: %s"
                       % (failed.run, failed.policy, failed.failure), err=True)
        else:
            click.echo("tumbler: compare: run %d of %s exited with status %d"
                       % (failed.run, failed.policy, failed.status), err=True)
        sys.exit(EXIT_FAILURE)


for _param in compare_command.params:
    if _param.name in OPTION_NAMES and _param.name not in USED_OPTIONS:
        _param.hidden = True
