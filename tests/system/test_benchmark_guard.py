"""benchmarks/real_programs.py's guard against other work: a pair during
which another process ran is thrown away, so the CPU it sees must be the
machine's less the timed runs' own and the background neighbours'."""

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from support.helpers import REPO

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")

BUSY = "import time\nend = time.monotonic() + %s\nwhile time.monotonic() < end: pass\n"


def real_programs():
    spec = importlib.util.spec_from_file_location(
        "real_programs", os.path.join(REPO, "benchmarks", "real_programs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@linux
def test_a_timed_runs_own_cpu_is_not_other_work():
    guard = real_programs().OtherWork(0.03)
    before = guard.reading()
    subprocess.check_call([sys.executable, "-c", BUSY % 0.6])      # waited: a timed run
    # Counting the run itself would make this ~1 (a CPU for the whole window).
    assert guard.since(before) < 0.25


@linux
def test_a_neighbour_is_other_work_unless_it_is_a_background_one():
    module = real_programs()
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY % 30])
    try:
        time.sleep(0.2)                         # its start-up is over
        alone, with_it = module.OtherWork(0.03), module.OtherWork(0.03, [neighbour])
        first, second = alone.reading(), with_it.reading()
        time.sleep(0.6)
        seen, seen_as_background = alone.since(first), with_it.since(second)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert seen > 0.5                           # a busy loop, on 2 CPUs or more
    assert seen_as_background < seen - 0.4
