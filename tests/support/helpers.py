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
    it a command, ``times`` of a released thread, ``released``: main's
    clock around the unlock that woke it, ``asleep_by``: when it was seen
    asleep in its lock."""

    NAMES = ("held", "cond", "late", "waitv", "never")

    def __init__(self, path):
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     universal_newlines=True, start_new_session=True)
        self.pid = self.proc.pid
        self.tids = {}
        self.kept = []              # lines read past the one asked for, as words
        while len(self.tids) < len(self.NAMES):
            name, tid = self.proc.stdout.readline().split()
            self.tids[name] = int(tid)

    def key(self, name):
        return (self.pid, self.tids[name])

    def tell(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def _line(self, wanted):
        """The first line (its words) ``wanted`` accepts; lines of other
        threads read past it are kept for the calls that want them."""
        for words in self.kept:
            if wanted(words):
                self.kept.remove(words)
                return words
        while True:
            words = self.proc.stdout.readline().split()
            if not words:
                raise AssertionError("lockwait ended")
            if wanted(words):
                return words
            self.kept.append(words)

    def times(self, name):
        """(began, came back) of ``name``'s wait, CLOCK_MONOTONIC ns."""
        words = self._line(lambda w: len(w) == 3 and w[0] == name and w[1] != "calling")
        return int(words[1]), int(words[2])

    def released(self, name):
        """(before, after): main's clock around the unlock that woke
        ``name`` (CLOCK_MONOTONIC ns).  The wakeup comes after ``before``;
        made on the woken thread's CPU, it may come after ``after`` too."""
        words = self._line(lambda w: len(w) == 4 and w[:2] == [name, "released"])
        return int(words[2]), int(words[3])

    def asleep_by(self, name):
        """Wait for ``name`` to be asleep in a futex wait; CLOCK_MONOTONIC
        ns just after the read that showed it so (Backend.lock_waiters).
        It had left the CPU by then: the kernel shows a sleeping thread's
        system call only once the thread is off the CPU
        (task_current_syscall waits for it), so the read is made over and
        over, not every few ms."""
        from tumbler.platform import open_backend
        backend = open_backend()
        tid = self.tids[name]
        deadline = time.monotonic() + WAIT_LIMIT_S
        try:
            while time.monotonic() < deadline:
                seen = backend.lock_waiters(self.pid, [tid]).get(tid)
                if seen is not None:
                    return seen
        finally:
            backend.close()
        pytest.fail("gave up waiting for %s to sleep in its lock" % name)

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
