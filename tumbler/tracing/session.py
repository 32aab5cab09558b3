"""Run the tracing scripts in ``probes/`` and read per-thread totals from them.

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

import atexit
import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .parse import (FIELDS, KIND_OF_SCRIPT, KINDS, SCRIPT_OF_KIND, ParseError,
                                  ProbeStream, by_tid, delta, empty_record,
                                  merge, process_totals)
from ..errors import TumblerError, UsageError
from ..platform import PLATFORMS, NoSuchProcess, PlatformError, native_platform, open_backend
from ..safefile import UnsafePath, private_tempdir, read_trusted

__all__ = [
    "FIELDS", "KINDS", "ProbeSession", "by_tid", "check_tool",
    "delta", "empty_record", "ensure_tracefs",
    "find_script", "probe_dirs", "process_totals", "run_window",
]

SCRIPT_NAMES = ("locktime", "runqlat", "migrations")
EXTENSION = {"linux": ".bt", "illumos": ".d"}
PRELUDE_MARK = {"linux": "// TUMBLER-PRELUDE", "illumos": "/* TUMBLER-PRELUDE */"}

#: bpftrace uses the first that exists (src/tracefs: debugfs, then tracefs).
DEBUGFS_TRACEFS = "/sys/kernel/debug/tracing"
TRACEFS = "/sys/kernel/tracing"

#: bpftrace's default number of keys per map (BPFTRACE_MAP_KEYS_MAX).
BPFTRACE_DEFAULT_MAP_KEYS = 4096
#: Above this many threads, the script learns them itself (see probes/README.md)
#: instead of a long BEGIN block.
MAX_PRELUDE_TIDS = 2000
#: A probe script is a few KiB; a larger file is not one of ours.
MAX_SCRIPT_BYTES = 1 << 20

_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39


# -- locating scripts --------------------------------------------------------

def _check_platform(platform_name):
    if platform_name not in PLATFORMS:
        raise UsageError("unknown probe platform %r (one of: %s)"
                         % (platform_name, ", ".join(PLATFORMS)))


def probe_dirs():
    """Directories searched for scripts, in order.

    1. ``$TUMBLER_PROBES`` (laid out like ``probes/``: ``linux/``, ``illumos/``);
    2. ``probes/`` next to the ``tumbler`` package (source or editable checkout);
    3. ``<sys.prefix>/share/tumbler/probes`` (installed by setup.cfg data_files).
    """
    dirs = []
    env = os.environ.get("TUMBLER_PROBES")
    if env:
        dirs.append(Path(env))
    dirs.append(Path(__file__).resolve().parents[2] / "probes")
    dirs.append(Path(sys.prefix) / "share" / "tumbler" / "probes")
    return dirs


def find_script(platform_name, name):
    """Path of script ``name`` (locktime, runqlat, migrations) for a platform."""
    _check_platform(platform_name)
    if name not in SCRIPT_NAMES:
        raise UsageError("unknown probe script %r (one of: %s)"
                         % (name, ", ".join(SCRIPT_NAMES)))
    filename = name + EXTENSION[platform_name]
    tried = []
    for base in probe_dirs():
        path = base / platform_name / filename
        if path.is_file():
            # The tracer runs it with the privileges it needs (root): the
            # file and its directories must be root's (or the user's) alone,
            # wherever $TUMBLER_PROBES points (tumbler.safefile).
            try:
                read_trusted(str(path), MAX_SCRIPT_BYTES)
            except UnsafePath as exc:
                raise TumblerError("untrusted probe script %s" % exc) from None
            return path
        tried.append(str(path.parent))
    raise TumblerError("probe script %s not found in %s (set TUMBLER_PROBES to "
                       "the probes directory)" % (filename, ", ".join(tried)))


# -- checking the tool -------------------------------------------------------

def tracefs_dir():
    """The tracefs directory bpftrace will use."""
    return DEBUGFS_TRACEFS if os.path.exists(DEBUGFS_TRACEFS) else TRACEFS


def _tracefs_ready():
    return os.path.isdir(os.path.join(tracefs_dir(), "events"))


def ensure_tracefs():
    """Mount tracefs where bpftrace looks for it, if it is missing.

    Returns the tracefs directory, or None when it is missing and we are not
    root (``check_tool`` then says what to run).  Raises TumblerError when
    root cannot mount it.
    """
    if _tracefs_ready():
        return tracefs_dir()
    if os.geteuid() != 0:
        return None
    target = tracefs_dir()
    import ctypes               # here: only the first probe run on a machine needs it
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_ulong, ctypes.c_void_p)
    if libc.mount(b"nodev", target.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise TumblerError("cannot mount tracefs on %s: %s"
                           % (target, os.strerror(err)))
    if not _tracefs_ready():
        raise TumblerError("tracefs mounted on %s has no events directory"
                           % target)
    return target


def _illumos_missing_privileges():
    """Privileges the process lacks for the probe scripts, per ppriv(1); []
    if unknown."""
    # -p PID needs dtrace_proc.  The sched and proc providers are registered
    # at the dtrace_user level (usr/src/uts/common/dtrace/sdt_subr.c,
    # sdt_providers), but every script reads kernel data of other threads
    # -- args[] of an LWP another thread enqueues, dequeues or wakes, and
    # curthread->t_mstate -- which needs dtrace_kernel (without it DTrace
    # refuses loads from kernel memory); dtrace_kernel includes what
    # dtrace_user allows (dtrace_cred2priv, usr/src/uts/common/dtrace/dtrace.c).
    need = {"dtrace_proc", "dtrace_kernel"}
    ppriv = shutil.which("ppriv") or "/usr/bin/ppriv"
    try:
        out = subprocess.run([ppriv, str(os.getpid())], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("E:"):
            have = set(p.strip() for p in line[2:].split(","))
            if "all" in have:
                return []
            return sorted(need - have)
    return []


def check_tool(platform_name):
    """Return the tracing tool's path, or raise TumblerError saying, in one
    line, what is missing and how to get it."""
    _check_platform(platform_name)
    if platform_name == "linux":
        tool = shutil.which("bpftrace")
        if not tool:
            raise TumblerError(
                "bpftrace not found: install it (Debian/Ubuntu: apt-get install "
                "bpftrace; Fedora/RHEL: dnf install bpftrace)")
        if os.geteuid() != 0:
            # Here, not at the top: only a probe run on Linux needs the backend.
            from ..platform.linux.backend import has_capability
            if not (has_capability(_CAP_SYS_ADMIN)
                    or (has_capability(_CAP_BPF) and has_capability(_CAP_PERFMON))):
                raise TumblerError("bpftrace needs root (or CAP_BPF and "
                                   "CAP_PERFMON): run tumbler as root")
        if not _tracefs_ready():
            raise TumblerError("tracefs is not mounted: mount -t tracefs nodev %s"
                               % tracefs_dir())
        return tool
    tool = shutil.which("dtrace")
    if not tool and os.path.exists("/usr/sbin/dtrace"):
        tool = "/usr/sbin/dtrace"
    if not tool:
        raise TumblerError("dtrace not found in PATH or /usr/sbin: install "
                           "the DTrace package of your distribution")
    from ..platform.illumos import zone as zones    # illumos only: not loaded on Linux
    zone = zones.nonglobal_zone()
    if zone is not None:
        raise TumblerError(zones.prohibited(
            "dtrace_kernel", zone,
            "the probe scripts (they read other threads' kernel data through DTrace)"))
    if os.geteuid() != 0:
        missing = _illumos_missing_privileges()
        if missing:
            raise TumblerError(
                "dtrace needs root or the privileges %s (usermod -K "
                "defaultpriv=basic,%s USER)" % (", ".join(missing), ",".join(missing)))
    return tool


# -- script preludes ---------------------------------------------------------

def _bpftrace_prelude(script, pids, tids_of, domain_of_cpu):
    """BEGIN-block lines: more target processes, known threads, CPU domains."""
    lines = []
    for pid in pids[1:]:
        lines.append("@target[%d] = 1;" % pid)
    for pid in pids:
        for tid in sorted(set(tids_of.get(pid, ())) | {pid}):
            if (tid, pid) != (pids[0], pids[0]):   # the script sets that one
                lines.append("@tgid[%d] = %d;" % (tid, pid))
            if script == "locktime" and tid in tids_of.get(pid, ()):
                # listed from the start: a thread that leaves @lock_seen has exited
                lines.append("@lock_seen[%d, %d] = 0;" % (pid, tid))
    if script == "migrations" and domain_of_cpu:
        for cpu, dom in sorted(domain_of_cpu.items()):
            lines.append("@dom[%d] = %d;" % (cpu, dom + 1))
    return " ".join(lines)


def _dtrace_prelude(script, domain_of_cpu, pid=None, tids=()):
    """BEGIN-block statements: CPU domains (migrations.d), the known LWPs
    ``tids`` of process ``pid`` (locktime.d)."""
    if script == "migrations" and domain_of_cpu:
        return " ".join("dom[%d] = %d;" % (cpu, dom + 1)
                        for cpu, dom in sorted(domain_of_cpu.items()))
    if script == "locktime" and pid is not None:
        # listed: an LWP asleep since the start is found by its first event
        return " ".join("locktime_unseen[%d, %d] = 1; @lock_seen[%d, %d] = sum(0);"
                        % (pid, tid, pid, tid) for tid in sorted(set(tids)))
    return ""


def _with_prelude(platform_name, path, prelude, drop_mark=None):
    """The script's text with ``prelude`` put on its TUMBLER-PRELUDE line, and
    the lines that end with ``drop_mark`` emptied, so that line numbers in
    the tool's error messages stay those of the file."""
    text = path.read_text()
    mark = PRELUDE_MARK[platform_name]
    if text.count(mark) != 1:
        raise TumblerError("probe script %s must hold the line '%s' once"
                           % (path, mark))
    if drop_mark:
        text = "\n".join("" if line.endswith(drop_mark) else line
                         for line in text.split("\n"))
    return text.replace(mark, prelude + " " + mark if prelude else mark)


#: locktime.bt's lines that trace futex_waitv(2), whose tracepoints kernels
#: before 5.16 lack (a missing tracepoint stops bpftrace from loading).
WAITV_MARK = "// TUMBLER-WAITV"


def _has_futex_waitv():
    return os.path.isdir(os.path.join(tracefs_dir(), "events", "syscalls",
                                      "sys_enter_futex_waitv"))


def _threads(backend, pid):
    try:
        return list(backend.thread_ids(pid))
    except NoSuchProcess:
        raise TumblerError("no such process: %d" % pid) from None
    except PlatformError as e:
        raise TumblerError("cannot list the threads of process %d: %s" % (pid, e)) from None


# -- one tracing process -----------------------------------------------------

_ERROR_NOISE = ("RLIMIT_MEMLOCK",)


class _Child:
    """One bpftrace or dtrace process, its reader threads and its parser."""

    def __init__(self, label, argv, scripts, fmt, env=None, sources=None):
        self.label = label
        self.sources = dict(sources or {})  # generated file -> script it came from
        self.argv = argv
        self.scripts = frozenset(scripts)
        self.env = env
        self.stream = ProbeStream(fmt)
        self.lock = threading.Lock()
        self.printed = threading.Condition(self.lock)   # notified at each print's marker
        self.ready = threading.Event()      # all scripts ready, or EOF
        self.eof = threading.Event()
        self.stderr = collections.deque(maxlen=40)
        self.parse_errors = []
        self.proc = None
        self.stopping = False
        self._threads = []

    def start(self):
        _LIVE_CHILDREN.add(self)
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                universal_newlines=True, encoding="utf-8", errors="replace")
        except OSError as e:
            _LIVE_CHILDREN.discard(self)
            raise TumblerError("cannot run %s: %s" % (self.argv[0], e.strerror)) from None
        for target in (self._read_stdout, self._read_stderr):
            t = threading.Thread(target=target, name="tumbler-probe-" + self.label,
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _read_stdout(self):
        try:
            for line in self.proc.stdout:
                self.take_line(line, time.monotonic_ns())
        finally:
            self.eof.set()
            self.ready.set()
            with self.lock:
                self.printed.notify_all()

    def take_line(self, line, received):
        """One line of the tool's output, received at ``received`` (ns)."""
        with self.lock:
            try:
                event = self.stream.feed(line, received)
            except ParseError as e:
                self.parse_errors.append(str(e))
                event = None
            if self.scripts <= self.stream.ready:
                self.ready.set()
            if event and event[0] == "marker" and event[2] != "ready":
                self.printed.notify_all()

    def _read_stderr(self):
        for line in self.proc.stderr:
            line = line.strip()
            if line:
                self.stderr.append(line)

    def is_ready(self):
        with self.lock:
            return self.scripts <= self.stream.ready

    def values(self):
        """(values, spans) of the stream, read together."""
        with self.lock:
            return self.stream.values(), self.stream.spans()

    def _printed_since(self, since_ns):
        at = self.stream.at_ns
        return all(at.get(script, -1) >= since_ns for script in self.scripts)

    def wait_print(self, since_ns, deadline):
        """Wait until the values of every script are as of ``since_ns``
        (CLOCK_MONOTONIC) or later, the tool ended, or ``deadline``
        (monotonic s) passed; True if so.

        A print is as of the time its marker says (the scripts read their
        maps after it), not of when its lines arrive: a print made just
        before ``since_ns`` can arrive after it, with maps read before
        what happened up to then (a move tumbler had just seen done was
        missing from the probe's final values, 1 run in 50).  A print
        without a time is as of its arrival."""
        with self.lock:
            while not self._printed_since(since_ns) and not self.eof.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.printed.wait(left)
            return self._printed_since(since_ns)

    def stop_at(self, ns):
        with self.lock:
            self.stream.stop_at(ns)

    def expect_blocked(self, waiters):
        with self.lock:
            self.stream.expect_blocked(waiters)

    def error_line(self):
        """The most telling line bpftrace/dtrace wrote to stderr, or ''."""
        lines = [l for l in self.stderr if not any(n in l for n in _ERROR_NOISE)]
        found = ""
        for line in lines:
            if "ERROR" in line or "error" in line or "failed" in line:
                found = line
                break
        if not found:
            with self.lock:
                found = (self.stream.messages[-1] if self.stream.messages
                         else self.parse_errors[-1] if self.parse_errors
                         else lines[-1] if lines else "")
        for generated, source in self.sources.items():
            found = found.replace(generated, source)
        return found

    def describe_failure(self):
        rc = self.proc.poll() if self.proc else None
        why = self.error_line()
        status = ("exited with status %d" % rc if rc is not None and rc >= 0
                  else "killed by signal %d" % -rc if rc is not None
                  else "did not start tracing")
        return "%s (%s) %s%s" % (os.path.basename(self.argv[0]), self.label,
                                  status, ": " + why if why else "")

    def interrupt(self):
        """Ask for the final print: SIGINT runs the scripts' END clauses."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass

    def kill(self):
        """SIGKILL the process group (never one that was already reaped)."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return
        _LIVE_CHILDREN.discard(self)

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        if self.proc is not None:
            try:
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        if self.proc is not None and self.proc.poll() is not None:
            _LIVE_CHILDREN.discard(self)
            if not any(t.is_alive() for t in self._threads):
                self.proc.stdout.close()
                self.proc.stderr.close()


# -- sessions ----------------------------------------------------------------

#: Every tracing process started and not yet reaped.
_LIVE_CHILDREN = set()


@atexit.register
def _kill_live_children():
    for child in list(_LIVE_CHILDREN):
        child.kill()


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
        _check_platform(self.platform)
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

    @property
    def running(self):
        return self._running

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
        drop = None if _has_futex_waitv() else WAITV_MARK
        env = dict(os.environ)
        keys = BPFTRACE_DEFAULT_MAP_KEYS
        while keys < 4 * nthreads:
            keys *= 2
        if keys > BPFTRACE_DEFAULT_MAP_KEYS:
            env["BPFTRACE_MAP_KEYS_MAX"] = str(keys)
        children = []
        for script in scripts:
            text = _with_prelude("linux", find_script("linux", script),
                                 _bpftrace_prelude(script, self.pids, tids_of,
                                                   self.domain_of_cpu), drop)
            path = os.path.join(workdir, script + ".bt")
            with open(path, "w") as f:
                f.write(text)
            argv = [tool, "-f", "json", path, str(self.pids[0]), str(self.period_ms)]
            children.append(_Child(script, argv, [script], "json", env,
                                   {path: str(find_script("linux", script))}))
        return children

    def _illumos_children(self, backend, tool, scripts, workdir):
        tids_of = self._list_threads(backend)[0] if "locktime" in scripts else {}
        children = []
        for pid in self.pids:
            paths, sources = [], {}
            for script in scripts:
                prelude = _dtrace_prelude(script, self.domain_of_cpu, pid,
                                          tids_of.get(pid, ()))
                src = find_script("illumos", script)
                if prelude:
                    path = os.path.join(workdir, "%d-%s.d" % (pid, script))
                    with open(path, "w") as f:
                        f.write(_with_prelude("illumos", src, prelude))
                    paths.append(path)
                    sources[path] = str(src)
                else:
                    paths.append(str(src))
            argv = [tool, "-q", "-p", str(pid)]
            for path in paths:
                argv += ["-s", path]
            argv.append(str(self.period_ms))
            children.append(_Child("pid %d" % pid, argv, scripts, "dtrace",
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

    def totals(self):
        """``{pid: record}`` from :meth:`snapshot`."""
        return process_totals(self.snapshot())

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
