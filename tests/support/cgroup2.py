"""cgroup v2 on the real kernel: where it is mounted, its controllers, and
moving the cpuset controller from an unused v1 hierarchy to v2 and back
(only with TUMBLER_TEST_CGROUP_SWAP=1; scripts/test.sh sets it)."""

import os
import subprocess
import time

import pytest

from support.helpers import cpuset_mount


def read(path):
    with open(path) as f:
        return f.read().strip()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


SWAP_ENV = "TUMBLER_TEST_CGROUP_SWAP"


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup2":
                return fields[1]
    return None


def v1_cpuset_options():
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup" and "cpuset" in fields[3].split(","):
                return fields[3]
    return None


def controllers(v2):
    return read(os.path.join(v2, "cgroup.controllers")).split()


def release_v1_cpuset(v1):
    if any(os.path.isdir(os.path.join(v1, n)) for n in os.listdir(v1)):
        pytest.skip("the v1 cpuset hierarchy has child cgroups: it cannot be released")
    result = subprocess.run(["umount", v1], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip("cannot unmount %s to release cpuset to cgroup v2: %s"
                    % (v1, result.stderr.strip()))


def remount_v1_cpuset(v1, options):
    """Mount the v1 cpuset hierarchy again; it binds once v2 lets go of
    cpuset (its css may take a moment to die).  Raises if it cannot."""
    deadline = time.monotonic() + 20
    while True:
        result = subprocess.run(["mount", "-t", "cgroup", "-o", options, "cgroup", v1],
                                capture_output=True, text=True)
        if result.returncode == 0 and cpuset_mount() == v1:
            return
        if time.monotonic() > deadline:
            raise AssertionError("could not mount the cpuset hierarchy at %s again: %s; "
                                 "run: mount -t cgroup -o %s cgroup %s"
                                 % (v1, result.stderr.strip(), options, v1))
        time.sleep(0.2)
