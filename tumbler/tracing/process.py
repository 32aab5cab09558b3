"""One tracing process (a bpftrace or a dtrace), its reader threads and
the parser its output goes through (``parse.ProbeStream``).

No tracing process outlives tumbler: every one started and not yet reaped
is killed at interpreter exit (atexit), and one whose tumbler died without
that dies of SIGPIPE at its next print.
"""

import atexit
import collections
import os
import signal
import subprocess
import threading
import time

from ..errors import TumblerError
from .parse import ParseError, ProbeStream

_ERROR_NOISE = ("RLIMIT_MEMLOCK",)


class TracingProcess:
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
        _LIVE.add(self)
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                universal_newlines=True, encoding="utf-8", errors="replace")
        except OSError as e:
            _LIVE.discard(self)
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
        _LIVE.discard(self)

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
            _LIVE.discard(self)
            if not any(t.is_alive() for t in self._threads):
                self.proc.stdout.close()
                self.proc.stderr.close()


#: Every tracing process started and not yet reaped.
_LIVE = set()


@atexit.register
def _kill_live():
    for child in list(_LIVE):
        child.kill()
