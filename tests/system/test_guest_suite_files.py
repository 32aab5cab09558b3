"""Test files of the suite that cannot run on the development host, run in
a guest where they can (scripts/guest: 2 sockets of 1 core, cgroup v2
only: the 2 CPUs these files were written for): the cpuset binder on cgroup v2 (the host's cpuset controller is on a
v1 hierarchy: tests/platform/linux/test_cpuset_v2_real.py skips there) and
the bpftrace probes.  Each must pass with nothing skipped.

One boot per kernel (tests/support/guest_checks.py's "pytest" plan).
"""

import re

import pytest

from support import guest

FILES = ("tests/platform/linux/test_cpuset_v2_real.py", "tests/tracing/test_probes_linux.py")


@pytest.fixture(scope="module", params=guest.KERNELS)
def ran(request):
    return guest.plan(request.param, ["--sockets", "2", "--cores", "1", "--cgroup", "v2"],
                      "pytest", *FILES)


@pytest.mark.parametrize("name", FILES)
def test_passes_in_the_guest_with_nothing_skipped(ran, name):
    result = ran[name]
    summary = result["output"].strip().splitlines()[-1:]
    assert result["status"] == 0, result["output"] + result["stderr"]
    assert summary and re.search(r"\d+ passed", summary[0]), result["output"]
    assert not re.search(r"skipped|xfail", summary[0]), result["output"]
    # Only the one test the plan leaves out (guest_checks.TIMED_ON_THE_HOST).
    assert re.findall(r"(\d+) deselected", summary[0]) in ([], ["1"]), result["output"]
