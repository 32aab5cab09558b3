"""Helpers shared by tests: the repository's paths, running tumbler,
thread inspection, waiting, building the test workloads (tests/workloads/)."""

import contextlib
import os
import shutil
import subprocess
import sys
import time

import pytest

#: The repository's top: tests/support/ is two folders below it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOADS = os.path.join(REPO, "examples", "workloads")


def tumbler_cmd(*args):
    return [sys.executable, "-m", "tumbler", *args]


def run_tumbler(*args, timeout=60, **kwargs):
    """Run tumbler to completion; return the CompletedProcess (text)."""
    return subprocess.run(tumbler_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, **kwargs)


def thread_masks(pid):
    """{tid: frozenset of allowed CPUs} for every thread of ``pid``."""
    masks = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            masks[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
        except OSError:
            pass
    return masks


def on_cpus(cpus):
    """preexec_fn: start the process allowed exactly ``cpus``."""
    return lambda: os.sched_setaffinity(0, cpus)


def thread_names(pid):
    names = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names[int(tid)] = f.read().strip()
        except OSError:
            pass
    return names


def wait_for_threads(pid, count, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(os.listdir("/proc/%d/task" % pid)) >= count:
            return
        time.sleep(0.01)
    raise AssertionError("process %d never reached %d threads" % (pid, count))


#: Failure guard for conditions tests wait for (never asserted on).
WAIT_LIMIT_S = 60.0


def wait_until(cond, what):
    """Wait for ``cond()``; fail the test naming ``what`` after WAIT_LIMIT_S."""
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("gave up waiting for " + what)
        time.sleep(0.01)


def run_in_process(*args):
    """Run ``tumbler ARGS`` in-process: (exit status, stdout, stderr)."""
    from click.testing import CliRunner
    from tumbler.commands.main import main
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:                       # click >= 8.2: always separate
        runner = CliRunner()
    result = runner.invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def assert_no_traceback(stderr):
    assert "Traceback" not in stderr, stderr


@contextlib.contextmanager
def started(command, **popen_options):
    """subprocess.Popen(command) (text, from the repository's top), killed
    and reaped if the block leaves it running (a failed assertion)."""
    proc = subprocess.Popen(command, text=True, cwd=REPO, **popen_options)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def exited_cleanly(proc, timeout=30):
    """Wait for ``proc``; it must exit 0 without a traceback.  Returns
    (stdout, stderr)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    assert_no_traceback(err)
    return out, err


def cpuset_mount():
    """Mount point of the cgroup v1 cpuset hierarchy, or None."""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup" and "cpuset" in fields[3].split(","):
                return fields[1]
    return None


def build_workload(tmp_path_factory, name):
    """Path of tests/workloads/NAME.c, built in a fresh directory."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("a C compiler is needed: the test command installs gcc")
    out = tmp_path_factory.mktemp(name) / name
    subprocess.run([compiler, "-O2", "-Wall", "-pthread", "-o", str(out),
                    os.path.join(REPO, "tests", "workloads", name + ".c")], check=True)
    return str(out)


class LockWait:
    """tests/workloads/lockwait running: ``tids`` by thread name, ``tell``
    it a command, ``times`` of a released thread."""

    NAMES = ("held", "cond", "late", "waitv", "never")

    def __init__(self, path):
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     universal_newlines=True, start_new_session=True)
        self.pid = self.proc.pid
        self.tids = {}
        while len(self.tids) < len(self.NAMES):
            name, tid = self.proc.stdout.readline().split()
            self.tids[name] = int(tid)

    def key(self, name):
        return (self.pid, self.tids[name])

    def tell(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def times(self, name):
        """(began, came back) of ``name``'s wait, CLOCK_MONOTONIC ns."""
        while True:
            words = self.proc.stdout.readline().split()
            if len(words) == 3 and words[0] == name and words[1] != "calling":
                return int(words[1]), int(words[2])

    def wait_blocked(self, *names):
        from tumbler.platform import open_backend
        backend = open_backend()
        tids = [self.tids[n] for n in names]
        wait_until(lambda: set(backend.lock_waiters(self.pid, tids)) == set(tids),
                   "%s to block" % ", ".join(names))
        backend.close()

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
