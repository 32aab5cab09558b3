"""Run the tracing scripts in ``probes/`` and read per-thread totals from them.

A ``ProbeSession`` is one tracing of a set of processes: the scripts are
found and given their preludes in ``scripts.py``, the tool and its
privileges checked in ``tool.py``, each tracing process run and read in
``process.py``, and its output parsed in ``parse.py``.

Linux runs ``probes/linux/*.bt`` with bpftrace, one bpftrace per kind of
measurement; illumos runs ``probes/illumos/*.d`` with dtrace, one dtrace per
process (the scripts filter on ``$target``, which ``-p PID`` sets, and a
process can be grabbed by one dtrace only, so all the scripts of a process
share it).

Kinds (``KINDS``) and what they fill in a thread's record:

``locks``       ``lock_ns``, ``lock_count``   time blocked on user-level
                synchronisation (Linux: futex waits; illumos: the LCK
                microstate's sleeps, condition variables included)
``latency``     ``runq_ns``, ``runq_count``   run-queue latency
``migrations``  ``migrations``, ``cross_domain``   CPU changes, and those
                between two CPU domains of ``domain_of_cpu``

Snapshots are ``{(pid, tid): record}`` with every field of ``FIELDS`` (0 for
kinds not traced), CUMULATIVE since ``start()``.  Keys are (pid, tid) pairs
because illumos LWP ids restart at 1 in every process.  ``delta(new, old)``
gives an interval's values, ``process_totals(snap)`` sums per process,
``by_tid(snap, pid)`` keeps one process.

Values lag by up to one period (``period_ms``): the scripts print their
totals every period.  The scripts say when each print was made and count
lock waits and run-queue waits as they go (the Linux ones start counting
once every probe is attached; the illumos ones' values are dtrace's last
aggregation snapshot, up to 20 ms after the print's time) (``reading`` gives each kind's span): an
interval's values hold what happened in it.  Lock waits already in
progress at the start count from the start: a thread the platform backend
finds asleep in a lock wait just after the start (``lock_waiters``) and
the script has seen nothing of since, while it lasts (illumos: up to its
enqueue, as pr_ltime); on Linux any other when it ends
(``parse.locks_as_of``).  On Linux a thread that exits is dropped from the totals.
"""

import os
import shutil
import time

from ..errors import TumblerError, UsageError
from ..platform import native_platform, open_backend
from ..platform.base import NoSuchProcess, PlatformError
from ..safefile import private_tempdir
from .parse import (FIELDS, KIND_OF_SCRIPT, KINDS, SCRIPT_OF_KIND, by_tid, delta,  # noqa: F401
                    empty_record, merge, process_totals)
from .process import TracingProcess
from .scripts import (WAITV_MARK, bpftrace_prelude, check_platform, dtrace_prelude,
                      find_script, with_prelude)
from .tool import check_tool, ensure_tracefs, has_futex_waitv

__all__ = [
    "FIELDS", "KINDS", "ProbeSession", "by_tid", "delta", "empty_record",
    "process_totals", "run_window",
]

#: bpftrace's default number of keys per map (BPFTRACE_MAP_KEYS_MAX).
BPFTRACE_DEFAULT_MAP_KEYS = 4096
#: Above this many threads, the script learns them itself (see probes/README.md)
#: instead of a long BEGIN block.
MAX_PRELUDE_TIDS = 2000


def _threads(backend, pid):
    try:
        return list(backend.thread_ids(pid))
    except NoSuchProcess:
        raise TumblerError("no such process: %d" % pid) from None
    except PlatformError as e:
        raise TumblerError("cannot list the threads of process %d: %s" % (pid, e)) from None


class ProbeSession:
    """Tracing of a set of processes, read while it runs.

    ::

        with ProbeSession() as s:
            s.start([pid], {"latency", "migrations"}, {0: 0, 1: 0, 2: 1, 3: 1})
            ...
            now = s.snapshot()        # non-blocking, cumulative
            values, spans = s.next_reading()    # after the scripts' next print
            ...
            final = s.stop()

    ``start`` returns once every probe is attached and counting.  ``backend``
    (a platform Backend; default: one opened for ``start``) lists the
    threads and finds those asleep in a lock wait.  No tracing process
    outlives the session: ``stop``, leaving the ``with`` block, an exception
    in ``start``, interpreter exit (atexit) and the death of this process
    (the tools die of SIGPIPE at their next print) all end them.  A session
    is used once.
    """

    def __init__(self, platform_name=None, period_ms=100, ready_timeout=120.0,
                 stop_timeout=30.0, backend=None):
        self.platform = platform_name or native_platform(required=True)
        check_platform(self.platform)
        if not isinstance(period_ms, int) or period_ms < 10:
            raise UsageError("probe period must be at least 10 ms, not %r" % (period_ms,))
        self.period_ms = period_ms
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.pids = ()
        self.kinds = frozenset()
        self.domain_of_cpu = None
        self._children = []
        self._running = False
        self._final = None
        self._backend = backend         # None: one is opened for start() only
        self._tids_of = {}              # threads listed to the scripts

    # context manager: always end the children
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._running:
            if exc_type is None:
                self.stop()
            else:
                self.kill()
        return False

    def start(self, pids, kinds=KINDS, domain_of_cpu=None):
        """Start tracing ``pids`` for ``kinds``; return once probes are attached."""
        if self._running or self._children:
            raise TumblerError("probe session already started")
        pids = _validate_pids(pids)
        kinds = _validate_kinds(kinds)
        domain_of_cpu = _validate_domains(domain_of_cpu)
        self.pids, self.kinds, self.domain_of_cpu = pids, kinds, domain_of_cpu

        if self.platform == "linux":
            ensure_tracefs()
        tool = check_tool(self.platform)
        scripts = [SCRIPT_OF_KIND[k] for k in KINDS if k in kinds]
        workdir = private_tempdir("tumbler-probe-")
        backend = self._backend or open_backend(self.platform)
        try:
            if self.platform == "linux":
                self._children = self._linux_children(backend, tool, scripts, workdir)
            else:
                self._children = self._illumos_children(backend, tool, scripts, workdir)
            for child in self._children:
                child.start()
            self._wait_ready()
            if "locks" in kinds:
                self._find_lock_waiters(backend)
        except BaseException:
            self.kill()
            raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            if backend is not self._backend:
                backend.close()
        self._running = True
        return self

    def _find_lock_waiters(self, backend):
        """Tell locktime's reader which listed threads are asleep in a lock
        wait now that every probe is attached: those the script has seen no
        event of since its start have been blocked since then (see
        ``parse.locks_as_of``).  Unlisted threads are never told: nothing
        would show that they exited."""
        waiters = {}
        for pid, tids in self._tids_of.items():
            try:
                found = backend.lock_waiters(pid, tids)
            except PlatformError:
                continue                # gone: nothing to count
            waiters.update(((pid, tid), ns) for tid, ns in found.items())
        for child in self._children:
            if "locktime" in child.scripts:
                child.expect_blocked(waiters)

    def _list_threads(self, backend):
        """{pid: [tid]} to list to the scripts, and the number of threads."""
        threads = dict((pid, _threads(backend, pid)) for pid in self.pids)
        nthreads = sum(len(t) for t in threads.values())
        # Too many threads make a long BEGIN block: let the scripts learn them.
        self._tids_of = threads if nthreads <= MAX_PRELUDE_TIDS else {}
        return self._tids_of, nthreads

    def _linux_children(self, backend, tool, scripts, workdir):
        tids_of, nthreads = self._list_threads(backend)
        drop = None if has_futex_waitv() else WAITV_MARK
        env = dict(os.environ)
        keys = BPFTRACE_DEFAULT_MAP_KEYS
        while keys < 4 * nthreads:
            keys *= 2
        if keys > BPFTRACE_DEFAULT_MAP_KEYS:
            env["BPFTRACE_MAP_KEYS_MAX"] = str(keys)
        children = []
        for script in scripts:
            text = with_prelude("linux", find_script("linux", script),
                                 bpftrace_prelude(script, self.pids, tids_of,
                                                   self.domain_of_cpu), drop)
            path = os.path.join(workdir, script + ".bt")
            with open(path, "w") as f:
                f.write(text)
            argv = [tool, "-f", "json", path, str(self.pids[0]), str(self.period_ms)]
            children.append(TracingProcess(script, argv, [script], "json", env,
                                   {path: str(find_script("linux", script))}))
        return children

    def _illumos_children(self, backend, tool, scripts, workdir):
        tids_of = self._list_threads(backend)[0] if "locktime" in scripts else {}
        children = []
        for pid in self.pids:
            paths, sources = [], {}
            for script in scripts:
                prelude = dtrace_prelude(script, self.domain_of_cpu, pid,
                                          tids_of.get(pid, ()))
                src = find_script("illumos", script)
                if prelude:
                    path = os.path.join(workdir, "%d-%s.d" % (pid, script))
                    with open(path, "w") as f:
                        f.write(with_prelude("illumos", src, prelude))
                    paths.append(path)
                    sources[path] = str(src)
                else:
                    paths.append(str(src))
            argv = [tool, "-q", "-p", str(pid)]
            for path in paths:
                argv += ["-s", path]
            argv.append(str(self.period_ms))
            children.append(TracingProcess("pid %d" % pid, argv, scripts, "dtrace",
                                   sources=sources))
        return children

    def _wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        for child in self._children:
            child.ready.wait(max(0.0, deadline - time.monotonic()))
            if not child.is_ready():
                if child.eof.is_set():
                    child.join(5.0)         # its last words on stderr
                reason = child.describe_failure()
                if not child.eof.is_set():
                    reason += " within %g s" % self.ready_timeout
                raise TumblerError(reason)

    def _check_children(self):
        for child in self._children:
            if child.eof.is_set() and not child.stopping:
                rc = child.proc.poll()
                if rc is None:
                    child.proc.wait()
                    rc = child.proc.returncode
                # dtrace -p exits 0 when its process exits: not an error
                if rc != 0:
                    raise TumblerError(child.describe_failure())

    def _values(self):
        values, spans = [], {}
        for child in self._children:
            v, s = child.values()
            values.append(v)
            for script, (start, at) in s.items():
                # illumos: one dtrace per process, each with every script
                first, last = spans.get(script, (start, at))
                spans[script] = (min(first, start), max(last, at))
        return merge(*values), {KIND_OF_SCRIPT[script]: span for script, span in spans.items()}

    def reading(self):
        """(snapshot, spans): :meth:`snapshot` and, for each kind that has
        printed, ``(start ns, ns of the values)`` on CLOCK_MONOTONIC (the
        clock of ``time.monotonic_ns``), read together.  The values of a
        kind hold what happened between those two times, and include the
        lock and run-queue waits still in progress then.  Never
        blocks.

        Raises TumblerError if a tracing process died with an error.
        """
        if self._final is not None:
            return {k: dict(v) for k, v in self._final.items()}, dict(self._final_spans)
        if not self._children:
            raise TumblerError("probe session not started")
        self._check_children()
        return self._values()

    def next_reading(self, timeout=None):
        """:meth:`reading` once every tracing process has printed again
        after this call: values as of a moment after it, for windows that
        must start or end now (``tumbler probe``).  TumblerError if one
        has not printed within ``timeout`` s (default: 10 periods + 5 s)."""
        if not self._children or self._final is not None:
            return self.reading()
        if timeout is None:
            timeout = 10 * self.period_ms / 1000.0 + 5.0
        deadline = time.monotonic() + timeout
        since_ns = time.monotonic_ns()
        for child in self._children:
            if not child.wait_print(since_ns, deadline):
                self._check_children()      # died with an error: say so
                if not child.eof.is_set():
                    raise TumblerError("%s (%s) printed nothing for %g s"
                                       % (os.path.basename(child.argv[0]), child.label,
                                          timeout))
        return self.reading()

    def snapshot(self):
        """``{(pid, tid): record}``, cumulative since start; never blocks.

        Raises TumblerError if a tracing process died with an error.
        """
        return self.reading()[0]

    @property
    def lost_events(self):
        total = 0
        for child in self._children:
            with child.lock:
                total += child.stream.lost_events
        return total

    def stop(self):
        """End tracing and return the final cumulative ``{(pid, tid): record}``."""
        if self._final is not None:
            return {k: dict(v) for k, v in self._final.items()}
        if not self._children:
            raise TumblerError("probe session not started")
        try:
            self.next_reading()             # values as of a moment after this call
        except TumblerError:
            pass                            # a tool that died: said just below
        failed = [c for c in self._children
                  if c.eof.is_set() and not c.stopping and c.proc.poll() not in (None, 0)]
        # On SIGINT bpftrace detaches its probes one by one (a few hundred
        # ms) and goes on printing: waits would then end unseen and go on
        # counting.  The final values are those of the last print before it.
        stop_ns = time.monotonic_ns()
        for child in self._children:
            child.stop_at(stop_ns)
            child.interrupt()
        for child in self._children:
            child.join(self.stop_timeout)
        self._running = False
        self._final, self._final_spans = self._values()
        if failed:
            raise TumblerError(failed[0].describe_failure())
        return {k: dict(v) for k, v in self._final.items()}

    def tool_pids(self):
        """The PIDs of the tracing processes it started and has not reaped."""
        return [child.proc.pid for child in self._children
                if child.proc is not None and child.proc.returncode is None]

    def kill(self):
        """End every tracing process at once, without the final print."""
        for child in self._children:
            child.kill()
        for child in self._children:
            child.join(5.0)
        self._running = False


def _validate_pids(pids):
    if isinstance(pids, int):
        pids = [pids]
    try:
        out = tuple(int(p) for p in pids)
    except (TypeError, ValueError):
        raise UsageError("process ids must be integers: %r" % (pids,)) from None
    if not out:
        raise UsageError("no process to trace")
    for p in out:
        if p <= 0:
            raise UsageError("bad process id: %d" % p)
    if len(set(out)) != len(out):
        raise UsageError("a process id is given twice: %r" % (out,))
    return out


def _validate_kinds(kinds):
    if isinstance(kinds, str):
        kinds = [kinds]
    out = frozenset(kinds)
    unknown = out - set(KINDS)
    if unknown or not out:
        raise UsageError("probe kinds are %s, not %s"
                         % (", ".join(KINDS), ", ".join(sorted(unknown)) or "none"))
    return out


def _validate_domains(domain_of_cpu):
    if domain_of_cpu is None:
        return None
    out = {}
    for cpu, dom in dict(domain_of_cpu).items():
        if (not isinstance(cpu, int) or not isinstance(dom, int)
                or cpu < 0 or dom < 0):
            raise UsageError("bad CPU-to-domain entry %r: %r" % (cpu, dom))
        out[cpu] = dom
    return out


def run_window(pids, kinds, duration_s, domain_of_cpu=None, platform_name=None,
               period_ms=100):
    """Trace ``pids`` for ``duration_s`` seconds; the final ``{(pid, tid): record}``.

    A one-shot window from the start (``tumbler probe`` instead takes its
    window between two prints, ``commands.probe.trace_window``).  Returns
    early if every tracing process ends by itself (illumos: the processes
    exited).
    """
    if duration_s <= 0:
        raise UsageError("probe duration must be positive, not %r" % (duration_s,))
    with ProbeSession(platform_name, period_ms=period_ms) as session:
        session.start(pids, kinds, domain_of_cpu)
        deadline = time.monotonic() + duration_s
        for child in session._children:
            child.eof.wait(max(0.0, deadline - time.monotonic()))
        return session.stop()
