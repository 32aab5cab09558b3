"""Guest system tests' host side: boot scripts/guest once per shape, run
tests/support/guest_checks.py (or a command) inside, return what it saw.

Skips (one line naming the missing piece) when the guest cannot be had:
not root, no qemu-system-x86_64, no kernel package to download.  A guest
that was built but did not boot, or a plan that printed no JSON, fails.
TUMBLER_GUEST_KERNELS chooses the kernels (default "6.1 6.12": Debian 12's
CFS kernel and the EEVDF one; scripts/guest runs them in single-threaded
TCG, where neither crashed nor hung: docs/guests.md).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from support.helpers import REPO

GUEST = os.path.join(REPO, "scripts", "guest")
KERNELS = os.environ.get("TUMBLER_GUEST_KERNELS", "6.1 6.12").split()
# Failure guard for one boot and its plan (never asserted on): the balance
# plan's six tumbler runs took minutes in a 4-vCPU guest on 2 host CPUs.
BOOT_LIMIT_S = 1800
# QEMU below the rest of the machine's work: the vCPU threads would
# otherwise crowd out the other tests and whatever else runs here.
NICE = "5"


def missing():
    """Why no guest can run here, or None."""
    if not sys.platform.startswith("linux"):
        return "guests need Linux"
    if os.geteuid() != 0:
        return "guests need root (the host's root is shared as root over 9p)"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (scripts/test.sh installs qemu-system-x86)"
    return None


def run(kernel, shape, command):
    """COMMAND in a guest of SHAPE (scripts/guest options) on KERNEL:
    the CompletedProcess (text)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    built = subprocess.run([sys.executable, GUEST, "--build", "--kernel", kernel],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip("no guest kernel %s: %s" % (kernel, built.stderr.strip().splitlines()[-1:]))
    return subprocess.run(["nice", "-n", NICE, sys.executable, GUEST, "--kernel", kernel,
                           "--timeout", str(BOOT_LIMIT_S), "-v", *shape, "--", *command],
                          capture_output=True, text=True, cwd=REPO)


def plan(kernel, shape, name, *args):
    """tests/support/guest_checks.py NAME ARGS in a guest: its JSON."""
    proc = run(kernel, shape, [sys.executable, os.path.join(REPO, "tests", "support",
                                                            "guest_checks.py"), name, *args])
    lines = proc.stdout.strip().splitlines()
    try:
        facts = json.loads(lines[-1])
    except (IndexError, ValueError):
        facts = None
    if not isinstance(facts, dict):
        pytest.fail("guest plan %s on %s (%s) printed no JSON: exit %d\n%s\n%s"
                    % (name, kernel, " ".join(shape), proc.returncode, proc.stdout[-3000:],
                       proc.stderr[-3000:]))
    facts["kernel"] = kernel
    return facts
