"""``--probe``: trace lock waits, run-queue latency and migrations while
tumbler balances, and put them in the log and the exit summary.

A ProbeObserver is one of the controller's observers.  It runs the tracing
scripts of ``probes/`` (``tumbler.tracing.session.ProbeSession``) on the controller's
targets, with the controller's domains as the CPU-to-domain map, so that
``cross_domain`` counts exactly the migrations between the domains tumbler
balances across -- the ones that cost cache and memory locality, and the
ones tumbler's own moves cause.

Life cycle (called by the run):

``check()``                  before anything changes: is tracing possible?
``start(controller)``        once the targets are added: start tracing
                             (``trace(pids, cpu_domains)`` without a
                             controller, then ``read()`` on one's own cadence)
``write_round(controller, plan, moves)``   every round: read the scripts'
                             cumulative totals and keep this interval's
                             deltas, per thread and summed
``log_fields(controller)``   ``{"probe": {...}}`` for the round's JSON log
                             line (``RunLog.extra`` takes it as is)
``summary_lines()``          lines for the exit summary
``summary_fields()``         ``{"probe": {...}}`` for ``--summary-json``:
                             ``traced_s``, the totals of the traced fields,
                             ``runq_mean_ms`` with latency, ``failure``
``close()``                  stop tracing (always: also after errors)

The ``probe`` log object (stable keys): ``interval_s`` (seconds since the
previous reading), ``traced_s`` (per kind, the seconds the interval's
values cover: between the scripts' last prints before the two readings),
the traced fields of ``tumbler.tracing.parse.FIELDS`` summed over the targets'
threads (``lock_ns``, ``lock_count``, ``runq_ns``, ``runq_count``,
``migrations``, ``cross_domain``), and ``per_thread``: ``{"PID:TID":
{field: value}}`` with only the threads and fields that are not zero.

Each interval holds what happened in it: lock waits in progress count as
far as they have gone (a thread blocked through three rounds shows its
time blocked in each, never more than ``traced_s``), so the lock time a
regrouping saves or costs shows in the round after it, not when the
waits end.  Values lag the round by up to one period of the scripts
(``period_ms``), the time since their last print.

Tracing is an aid, not the job: if the tracing tool dies during a run, the
observer warns once (through the controller) and balancing goes on.
``start`` raises TumblerError if tracing cannot start at all (missing
bpftrace/dtrace or privilege), before any thread has been moved by rounds.
"""

import shutil
import time

from ..tracing import session as probe
from ..tracing.tool import check_tool, ensure_tracefs
from ..errors import TumblerError, UsageError
from ..platform import native_platform
from . import Observer

#: Traced fields per kind.
FIELDS_OF_KIND = {"locks": ("lock_ns", "lock_count"), "latency": ("runq_ns", "runq_count"),
                  "migrations": ("migrations", "cross_domain")}


def mean_runq_ms(totals):
    """Mean run-queue latency in ms of summed ``runq_ns`` / ``runq_count``
    (0 without waits)."""
    count = totals["runq_count"]
    return totals["runq_ns"] / count / 1e6 if count else 0.0


def domain_of_cpu(domains):
    """``{cpu: domain index}`` from the controller's Domain objects."""
    return {cpu: domain.index for domain in domains for cpu in domain.cpus}


def check_tracing(platform_name):
    """Fail now, in one line, if the tracing tool or the privilege it needs
    is missing (mounting tracefs first when root can); returns the tool."""
    if platform_name == "linux" and shutil.which("bpftrace"):
        ensure_tracefs()
    return check_tool(platform_name)


def thread_key(pid, tid):
    return "%d:%d" % (pid, tid)


def add_into(total, record, fields):
    for field in fields:
        total[field] = total.get(field, 0) + record.get(field, 0)


class ProbeObserver(Observer):
    def __init__(self, kinds=probe.KINDS, platform_name=None, period_ms=100):
        self.kinds = tuple(k for k in probe.KINDS if k in set(kinds))
        if not self.kinds or set(kinds) - set(probe.KINDS):
            raise UsageError("probe kinds are %s, not %s"
                             % (", ".join(probe.KINDS), ", ".join(sorted(kinds))))
        self.fields = tuple(f for kind in self.kinds for f in FIELDS_OF_KIND[kind])
        self.platform_name = platform_name
        self.period_ms = period_ms
        self.session = None
        self.failure = None             # why tracing stopped early, if it did
        self.started = None             # time.monotonic() at start
        self.ended = None               # at the last reading
        self._last = {}                 # cumulative snapshot at the last reading
        self._last_spans = {}           # its spans (ProbeSession.reading)
        self._last_time = None
        self._round = None              # controller round of the current interval
        self.interval = None            # {"interval_s", fields..., "per_thread"}
        self.totals = dict.fromkeys(self.fields, 0)   # sum of every interval

    # -- the observer interface ----------------------------------------------

    def check(self):
        """Raise TumblerError now if tracing cannot start: call it before
        anything is changed, so a missing tool stops the run cleanly."""
        if self.platform_name is None:
            self.platform_name = native_platform(required=True)
        check_tracing(self.platform_name)

    def start(self, controller):
        """Start tracing the controller's targets (call once they are added)."""
        if self.session is not None or not controller.targets:
            return
        self.trace(list(controller.targets), domain_of_cpu(controller.domains))
        self._round = controller.stats.intervals

    def trace(self, pids, cpu_domains):
        """Start tracing ``pids`` with ``cpu_domains`` (``{cpu: domain
        index}``) as the CPU-to-domain map: ``start`` without a controller,
        for ``compare``, which reads (``read``) on its own cadence.  Raises
        TumblerError, leaving no tracing process, if tracing cannot start."""
        session = probe.ProbeSession(self.platform_name, period_ms=self.period_ms)
        try:
            session.start(pids, self.kinds, cpu_domains)
            self._last, self._last_spans = session.reading()
        except BaseException:
            session.kill()
            raise
        self.session = session
        self.started = self._last_time = self.ended = time.monotonic()

    def read(self):
        """Add what happened since the last reading to the totals, between
        rounds (``compare``: a thread that exits leaves the scripts' maps,
        so they are read often).  Raises TumblerError if tracing failed."""
        self._account(self.session.reading(), time.monotonic(), per_thread=False)

    def write_round(self, controller, plan, moves):
        self._read_for_round(controller)

    def log_fields(self, controller=None):
        """``{"probe": {...}}`` for the current round; {} when not tracing."""
        if controller is not None:
            self._read_for_round(controller)
        if self.interval is None:
            return {}
        return {"probe": self.interval}

    def summary_lines(self):
        """Lines for the exit summary (without the "tumbler: " prefix)."""
        if self.started is None:
            return []
        span = max(self.ended - self.started, 1e-9)
        parts = []
        t = self.totals
        if "lock_ns" in t:
            parts.append("lock wait %.3f s in %d waits" % (t["lock_ns"] / 1e9, t["lock_count"]))
        if "runq_ns" in t:
            parts.append("run-queue latency mean %.3f ms over %d waits"
                         % (mean_runq_ms(t), t["runq_count"]))
        if "migrations" in t:
            parts.append("%d migrations (%.1f/s), %d cross-domain (%.1f/s)"
                         % (t["migrations"], t["migrations"] / span,
                            t["cross_domain"], t["cross_domain"] / span))
        lines = ["probes over %.1f s: %s" % (span, "; ".join(parts))]
        if self.failure:
            lines.append("probes stopped early: %s" % self.failure)
        return lines

    def summary_fields(self):
        """``{"probe": {...}}`` for the JSON summary; {} if tracing never started."""
        if self.started is None:
            return {}
        fields = {"traced_s": self.ended - self.started, "failure": self.failure}
        fields.update(self.totals)
        if "runq_ns" in self.totals:
            fields["runq_mean_ms"] = mean_runq_ms(self.totals)
        return {"probe": fields}

    def processes(self):
        session = self.session
        return session.tool_pids() if session is not None else ()

    def close(self):
        """Stop tracing and take the final totals; never raises, always
        leaves no tracing process behind."""
        session, self.session = self.session, None
        if session is None:
            return
        try:
            session.stop()
            final = session.reading()
        except TumblerError as exc:
            self.failure = self.failure or str(exc)
            final = None
        finally:
            session.kill()
        if final is not None:
            self._account(final, time.monotonic(), per_thread=False)

    # -- readings ------------------------------------------------------------

    def _read_for_round(self, controller):
        """Take this round's reading once, whichever of write_round and
        log_fields comes first."""
        if self.session is None or self._round == controller.stats.intervals:
            return
        self._round = controller.stats.intervals
        try:
            reading = self.session.reading()
        except TumblerError as exc:
            self._give_up(controller, str(exc))
            return
        self.interval = self._account(reading, time.monotonic(), per_thread=True)

    def _give_up(self, controller, why):
        self.failure = why
        self.interval = None
        session, self.session = self.session, None
        session.kill()
        controller.warn("probes stopped, balancing goes on: %s" % why)

    def _account(self, reading, now, per_thread):
        """Add the change since the last reading (a ProbeSession.reading)
        to the totals; return it."""
        snap, spans = reading
        change = probe.delta(snap, self._last)
        summed = {}
        threads = {}
        for (pid, tid), record in change.items():
            add_into(summed, record, self.fields)
            nonzero = {f: record[f] for f in self.fields if record.get(f)}
            if nonzero:
                threads[thread_key(pid, tid)] = nonzero
        for field in self.fields:
            summed.setdefault(field, 0)
        add_into(self.totals, summed, self.fields)
        interval = {"interval_s": round(now - self._last_time, 4),
                    "traced_s": {kind: round((at - self._last_spans.get(kind, (start, start))[1])
                                             / 1e9, 4)
                                 for kind, (start, at) in spans.items()}}
        interval.update(summed)
        if per_thread:
            interval["per_thread"] = threads
        self._last, self._last_spans = snap, spans
        self._last_time = self.ended = now
        return interval
