"""``compare --probe``: every run's CMD traced from its first instruction,
by compare itself, alike for every policy.

The tracing is the probe observer's (``tumbler.observers.probes``), run
without a controller: CMD is started held at a gate (``gate.Gate``: a
shell that waits on a FIFO, then execs CMD in the same process); for the
tumbler-run policies that shell is tumbler's child, found once tumbler
has started it.  ``RunTracer.start`` attaches to the gate's PID and
returns once the tracer says every probe is attached (bpftrace takes up
to about a second); only then does the run open the gate, so CMD is
traced from its first instruction, however loaded the machine.  The maps
are read every ``period_s``, because a thread that exits leaves the
scripts' maps: what happens in the last ``period_s`` before a thread exits
is not counted, alike for every policy.
"""

import threading
import time

from ...errors import TumblerError


class RunTracer:
    """Traces the threads of one run's CMD with the platform's probes."""

    def __init__(self, kinds, domain_of_cpu, period_s=0.2):
        from ...observers.probes import ProbeObserver
        self.observer = ProbeObserver(kinds)
        self.domain_of_cpu = domain_of_cpu
        self.period_s = period_s
        self._done = threading.Event()
        self._thread = None

    def start(self, pid):
        """Attach to ``pid`` (None: the command was not started); blocks
        until the probes are attached."""
        if pid is None:
            self.observer.failure = "the command was not started"
            return
        try:
            self.observer.trace([pid], self.domain_of_cpu)
        except TumblerError as exc:
            self.observer.failure = str(exc)
            return
        self._thread = threading.Thread(target=self._follow, name="compare-probe",
                                        daemon=True)
        self._thread.start()

    def _follow(self):
        while not self._done.wait(self.period_s):
            try:
                self.observer.read()
            except TumblerError as exc:
                self.observer.failure = str(exc)
                return

    def stop(self):
        """Take the final readings and end tracing; never raises."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.observer.close()

    def result(self):
        """The run's figures: lock wait (s and waits), run-queue latency (total
        s, waits, mean ms), migrations and cross-domain migrations (absent
        for kinds not traced); ``failure`` says why tracing stopped early."""
        from ...observers.probes import mean_runq_ms
        t = self.observer.totals
        out = {"failure": self.observer.failure}
        if "lock_ns" in t:
            out.update(lock_s=t["lock_ns"] / 1e9, lock_waits=t["lock_count"])
        if "runq_ns" in t:
            out.update(runq_s=t["runq_ns"] / 1e9, runq_waits=t["runq_count"],
                       runq_mean_ms=mean_runq_ms(t))
        if "migrations" in t:
            out.update(migrations=t["migrations"], cross_domain=t["cross_domain"])
        return out


def child_of(backend, pid, process, timeout):
    """The PID of the process ``pid`` started (tumbler's CMD), or None if
    ``process`` ends first or none appears within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        # Forked by tumbler's main thread: its children are the ones asked.
        children = backend.children(pid, [pid])
        if children:
            return min(children)
        time.sleep(0.005)
    return None
