"""A service started by a test (its config file, socket and log) and
programs tagged for its rules."""

import json
import os
import signal
import subprocess

from support.helpers import REPO, on_cpus, run_tumbler, tumbler_cmd
from support.processes import env_for, wait_until


class Service:
    """A service started by a test: its config file, socket and log."""

    def __init__(self, procs, state, directory, text, args=()):
        self.directory = directory
        self.config = directory / "tumbler.yaml"
        self.socket = str(directory / "tumbler.sock")
        self.write(text)
        # Append mode: the service shares the file's offset, and the test's
        # seek(0) would make its next line overwrite the ones it read.
        self.stderr = open(directory / "service.log", "a+")
        # A service started again in the same directory appends to the log
        # of the one before: its own lines begin here.  (Reading from 0,
        # the old "service started" was taken for the new one's, before
        # the new one had restored anything or opened its socket.)
        self.begins = self.stderr.seek(0, os.SEEK_END)
        self.proc = procs.start(tumbler_cmd("service", "--config", str(self.config), *args),
                                env=env_for(state), cwd=REPO, stderr=self.stderr,
                                stdout=subprocess.DEVNULL)
        # (not the socket file: a killed service's is still there)
        wait_until(lambda: "service started" in self.log() or self.proc.poll() is not None,
                   what="the service to start")
        assert self.proc.poll() is None, self.log()

    def write(self, text):
        self.config.write_text(text.replace("SOCKET", str(self.directory / "tumbler.sock")))

    def log(self):
        """What this service wrote to stderr."""
        self.stderr.seek(self.begins)
        return self.stderr.read()

    def status(self):
        result = run_tumbler("status", "--json", "--socket", self.socket)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def managed(self):
        return {p["pid"] for p in self.status()["programs"]}

    def stop(self, signum=signal.SIGTERM):
        self.proc.send_signal(signum)
        self.proc.wait(timeout=30)
        assert "Traceback" not in self.log(), self.log()
        return self.proc.returncode


#: The services of the tests scan every 0.2 s to pick programs up soon, and
#: run beside the rest of the suite: a budget that slows nothing they ask
#: (the budget's own behaviour: tests/service/test_budget.py).
TEST_CPU_BUDGET = 1.0


def config(rules, scan=0.2, cpu_budget=TEST_CPU_BUDGET):
    return ("service:\n  scan_interval: %s\n  cpu_budget: %s\n  socket: SOCKET\nprograms:\n%s"
            % (scan, cpu_budget, rules))


def spinners(procs, spawner, cpus, count=2, tag="x"):
    """spawner with ``count`` spinning threads, its argv tagged for rules."""
    proc = procs.start([spawner, str(count), "100000", "1", "0", "0", tag],
                       stdout=subprocess.PIPE, text=True, preexec_fn=on_cpus(cpus))
    assert proc.stdout.readline().strip() == "spawner: ready"
    return proc
