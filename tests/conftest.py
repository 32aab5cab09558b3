"""Fixtures every test folder may use: built workloads, the lockwait
program, two CPUs, a private state directory, processes killed at the end.
Helpers that are not fixtures are in tests/support/ (importable as
``support``: this file's folder is on sys.path for every test).
"""

import os
import signal
import subprocess

import pytest

from support.helpers import WORKLOADS, LockWait, build_workload
from support.processes import Processes

# A suite started in the background by a shell without job control (`cmd &`)
# inherits SIGINT ignored, one started with `nohup` SIGHUP, and so would
# every tumbler it starts: the tests that stop tumbler with SIGINT (as a
# terminal's Ctrl-C does) or SIGHUP, or reload the service with SIGHUP,
# then time out (the service's reload and a stop signal's test did, under
# nohup).  Ignored dispositions survive exec; a handler of the suite's own
# does not.  SIGHUP's handler does nothing: the suite itself still outlives
# a hang-up, as nohup asked.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)


@pytest.fixture(scope="session")
def workloads():
    """Directory with the example workloads built (make)."""
    subprocess.run(["make", "-s", "-C", WORKLOADS], check=True)
    return WORKLOADS


@pytest.fixture(scope="session")
def duty(tmp_path_factory):
    """Path of the duty-cycle test workload (tests/workloads/duty.c)."""
    return build_workload(tmp_path_factory, "duty")


@pytest.fixture(scope="session")
def churn(tmp_path_factory):
    """Path of tests/workloads/churn.c, built (thread churn; -x: exec)."""
    return build_workload(tmp_path_factory, "churn")


@pytest.fixture(scope="session")
def waker(tmp_path_factory):
    """Path of a neighbour that wakes often (tests/workloads/waker.c)."""
    return build_workload(tmp_path_factory, "waker")


@pytest.fixture(scope="session")
def crowd(tmp_path_factory):
    """Path of the overload workload (tests/workloads/crowd.c)."""
    return build_workload(tmp_path_factory, "crowd")


@pytest.fixture(scope="session")
def early_locks(tmp_path_factory):
    """Path of tests/workloads/early_locks.c built: lock contention in the
    first BUSY_MS of the program only, then LINGER_MS idle."""
    return build_workload(tmp_path_factory, "early_locks")


@pytest.fixture(scope="session")
def lockwait_bin(tmp_path_factory):
    """Path of tests/workloads/lockwait.c built: threads that block on locks
    when told to, and say when."""
    return build_workload(tmp_path_factory, "lockwait")


@pytest.fixture
def lockwait(lockwait_bin):
    """lockwait with held, cond and waitv blocked: before any trace starts."""
    lw = LockWait(lockwait_bin)
    try:
        lw.wait_blocked("held", "cond", "waitv")
        yield lw
    finally:
        lw.close()


@pytest.fixture
def two_cpus():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs at least 2 CPUs")
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[0], cpus[1]


@pytest.fixture
def state(tmp_path):
    """A private state directory; asserts at the end that nothing is left in it."""
    directory = tmp_path / "state"
    yield directory
    left = sorted(os.listdir(directory)) if directory.exists() else []
    assert not left, "state files left behind: %s" % left


@pytest.fixture
def procs():
    keeper = Processes()
    yield keeper
    keeper.close()


@pytest.fixture
def domains(two_cpus):
    cpu_a, cpu_b = two_cpus
    return "%d/%d" % (cpu_a, cpu_b), [frozenset([cpu_a]), frozenset([cpu_b])]


@pytest.fixture(scope="session")
def spawner(tmp_path_factory):
    """Path of tests/workloads/spawner.c, built."""
    return build_workload(tmp_path_factory, "spawner")
