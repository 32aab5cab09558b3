"""Shared fixtures: built workloads, a tumbler runner, thread inspection."""

import contextlib
import os
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    from tumbler.cli import main
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


@pytest.fixture(scope="session")
def workloads():
    """Directory with the example workloads built (make)."""
    subprocess.run(["make", "-s", "-C", WORKLOADS], check=True)
    return WORKLOADS


def _compiled(tmp_path_factory, name):
    """Path of tests/workloads/NAME.c, compiled once per session."""
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.fail("a C compiler is needed: the test command installs gcc")
    out = tmp_path_factory.mktemp(name) / name
    subprocess.run([shutil.which("gcc") or "cc", "-O2", "-Wall", "-pthread", "-o", str(out),
                    os.path.join(REPO, "tests", "workloads", name + ".c")], check=True)
    return str(out)


@pytest.fixture(scope="session")
def duty(tmp_path_factory):
    """Path of the duty-cycle test workload (tests/workloads/duty.c)."""
    return _compiled(tmp_path_factory, "duty")


@pytest.fixture(scope="session")
def crowd(tmp_path_factory):
    """Path of the overload workload (tests/workloads/crowd.c)."""
    return _compiled(tmp_path_factory, "crowd")


@pytest.fixture
def two_cpus():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs at least 2 CPUs")
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[0], cpus[1]
