"""benchmarks/real_programs.py's guard against other work: a pair during
which another process ran is thrown away, so the CPU it counts as its own
must be the timed runs' and the background neighbours' -- checked against
what those processes say of themselves, so that the checks hold on a busy
machine too."""

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from support.helpers import REPO

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")

#: Busy for the given seconds of wall time, then prints its own CPU seconds.
BUSY = ("import time\nend = time.monotonic() + %s\nwhile time.monotonic() < end: pass\n"
        "print(time.process_time())\n")


def real_programs():
    spec = importlib.util.spec_from_file_location(
        "real_programs", os.path.join(REPO, "benchmarks", "real_programs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_ns(pid):
    """The process's run time from /proc/PID/schedstat (ns), a source the
    guard does not read."""
    with open("/proc/%d/schedstat" % pid) as f:
        return int(f.read().split()[0])


@linux
def test_a_timed_runs_own_cpu_is_counted_as_ours():
    guard = real_programs().OtherWork(0.03)
    before = guard.reading()
    said = float(subprocess.check_output([sys.executable, "-c", BUSY % 0.6]))
    ours = guard.reading()[3] - before[3]
    assert said > 0.1                                   # it did run
    # Its CPU (and this test's) is ours, not other work's.
    assert ours >= said - 0.02
    assert ours <= said + 0.5                           # this process's own time beside


@linux
def test_a_background_neighbour_is_ours_only_when_named():
    module = real_programs()
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY % 30], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)                                 # its start-up is over
        alone, with_it = module.OtherWork(0.03), module.OtherWork(0.03, [neighbour])
        first, second, start_ns = alone.reading(), with_it.reading(), run_ns(neighbour.pid)
        time.sleep(0.6)
        ran = (run_ns(neighbour.pid) - start_ns) / 1e9
        third, fourth = alone.reading(), with_it.reading()
    finally:
        neighbour.kill()
        neighbour.wait()
    assert ran > 0.1                                    # it ran in the window
    extra = (fourth[3] - second[3]) - (third[3] - first[3])
    # /proc/PID/stat counts in ticks: 10 ms each, at both ends.
    assert abs(extra - ran) <= 0.05


def test_the_python_parent_row_starts_the_command_as_its_child_and_burns_what_it_is_told():
    """--python-parent's floor: the command runs as the parent's own child
    (found on PATH, its arguments and exit status passed through), and the
    parent burns the CPU it is given besides its start -- else the row would
    not be the floor it is printed as."""
    parent = real_programs().python_parent_argv(["sh", "-c", 'echo "$PPID $1"; exit 7', "sh", "x y"])
    plain = real_programs().python_parent_argv(["true"])
    burnt = real_programs().python_parent_argv(["true"], burn_ms=300)

    def children_cpu(argv):
        before = os.times()
        status = subprocess.call(argv)
        after = os.times()
        return status, (after.children_user + after.children_system
                        - before.children_user - before.children_system)

    process = subprocess.Popen(parent, stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate()
    assert process.returncode == 7
    assert out == "%d x y\n" % process.pid
    status, _ = children_cpu(plain)
    assert status == 0
    status, burnt_cpu = children_cpu(burnt)
    assert status == 0
    # CPU, not wall time: its own start besides (process_time() already
    # counts it where the burn begins).  Not against a plain parent's CPU:
    # two starts differ by more than a tick under load, and os.times()
    # counts user and system time in 10 ms ticks each (the clean-clone
    # suite once read 0.30 burnt against 0.02 plain, under 0.02 + 0.3).
    assert burnt_cpu >= 0.3 - 0.02 - 1e-9, burnt_cpu
