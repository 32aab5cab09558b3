"""scripts/guest's own behaviour around QEMU, with a stand-in for
qemu-system-x86_64 first on PATH: a kernel that dies before its initramfs
runs, or hangs before it, is booted once more (it happened to Linux 6.12
under TCG, issue 48; a hang once to 6.1), and no more than that; every
kernel gets single-threaded TCG unless told; and a guest that never ends
says where its command was.  The guest's real kernel and initramfs are
built (or taken from the cache) as for every guest test; the stand-in
reads the same command line QEMU would and plays the guest's part: the console, the
output share's marks, the command's output and status.
"""

import os
import subprocess
import sys

import pytest

from support import guest

# The stand-in: attempts listed in $FAKE_QEMU_DIES die as a kernel would
# (an oops on the console, no mark, QEMU ends: panic=-1 and -no-reboot);
# the others boot and "run" the command, printing "ran" and exiting 7.
FAKE_QEMU = r"""#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
count_file = os.environ["FAKE_QEMU_COUNT"]
attempt = int(open(count_file).read() or 0) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(attempt))
open(count_file + ".accel", "a").write(args[args.index("-accel") + 1] + "\n")
console = next(a[len("file:"):] for a in args if a.startswith("file:"))
out = next(a.split("path=")[1].split(",")[0] for a in args if "id=guestout" in a)
if str(attempt) in os.environ.get("FAKE_QEMU_HANGS", "").split():
    import time
    open(console, "w").write("[ 1.0] Booting\n")
    time.sleep(600)
if str(attempt) in os.environ["FAKE_QEMU_DIES"].split():
    open(console, "w").write("[ 1.0] Booting\n[ 2.0] Oops: int3: 0000 [#1] PREEMPT SMP\n"
                             "[ 2.1] Kernel panic - not syncing: Fatal exception\n")
    sys.exit(0)
open(console, "w").write("[ 1.0] Booting\n")
for mark in ("booted", "started"):
    open(os.path.join(out, mark), "w").write("up\n")
if os.environ.get("FAKE_QEMU_STUCK"):
    import time
    open(os.path.join(out, "progress"), "w").write("tests/x.py::test_stuck \n")
    time.sleep(600)
open(os.path.join(out, "stdout"), "w").write("ran\n")
open(os.path.join(out, "status"), "w").write("7\n")
"""


def build(kernel):
    """The guest of ``kernel`` built (or cached), else the test skipped."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the guest's build needs Linux and root (its cache is root's)")
    made = subprocess.run([sys.executable, guest.GUEST, "--build", "--kernel", kernel],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip("no guest kernel %s: %s" % (kernel, made.stderr.strip().splitlines()[-1:]))


@pytest.fixture(scope="module")
def built():
    build("6.1")


def run_with_fake_qemu(tmp_path, dies, kernel="6.1", options=(), hangs="", stuck="",
                       timeout=60):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "qemu-system-x86_64"
    fake.write_text(FAKE_QEMU)
    fake.chmod(0o755)
    count = tmp_path / "attempts"
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]),
               FAKE_QEMU_COUNT=str(count), FAKE_QEMU_DIES=dies, FAKE_QEMU_HANGS=hangs,
               FAKE_QEMU_STUCK=stuck)
    done = subprocess.run([sys.executable, guest.GUEST, "--kernel", kernel,
                           "--timeout", str(timeout),
                           *options, "--", "true"], capture_output=True, text=True, env=env)
    return done, int(count.read_text())


def accel(tmp_path):
    """The -accel of each QEMU the last run_with_fake_qemu started."""
    return (tmp_path / "attempts.accel").read_text().split()


def test_a_kernel_that_dies_at_boot_is_booted_once_more(built, tmp_path):
    done, attempts = run_with_fake_qemu(tmp_path, dies="1")
    assert attempts == 2
    assert done.returncode == 7, done.stderr
    assert done.stdout == "ran\n"
    assert "the kernel did not boot (attempt 1 of 2: " in done.stderr
    assert "Oops: int3" in done.stderr


def test_a_kernel_that_hangs_before_its_initramfs_is_ended_and_booted_once_more(built,
                                                                                  tmp_path):
    done, attempts = run_with_fake_qemu(tmp_path, dies="", hangs="1",
                                        options=("--boot-wait", "2"))
    assert attempts == 2
    assert done.returncode == 7, done.stderr
    assert "the kernel did not boot (attempt 1 of 2: no initramfs after 2 s)" in done.stderr


def test_a_guest_that_never_ends_its_command_says_where_it_was(built, tmp_path):
    """A 6.1 guest running the suite's probe tests once kept both vCPUs busy
    until its 30 minutes ran out, and said nothing: the progress the
    command wrote in the output share is printed when it times out."""
    done, attempts = run_with_fake_qemu(tmp_path, dies="", stuck="1", timeout=3)
    assert attempts == 1
    assert "guest: timed out after 3 s" in done.stderr
    assert "  progress: tests/x.py::test_stuck" in done.stderr, done.stderr


def test_a_kernel_that_dies_twice_is_a_guest_that_did_not_run(built, tmp_path):
    done, attempts = run_with_fake_qemu(tmp_path, dies="1 2")
    assert attempts == 2
    assert done.returncode == 125
    assert "the guest did not reach the command" in done.stderr


def test_a_guest_that_boots_is_booted_once(built, tmp_path):
    done, attempts = run_with_fake_qemu(tmp_path, dies="")
    assert attempts == 1
    assert done.returncode == 7
    assert "did not boot" not in done.stderr
    assert accel(tmp_path) == ["tcg,thread=single"]


def test_linux_6_12_runs_in_single_threaded_tcg_unless_told(tmp_path):
    """6.12 crashed where it patched its own code under multi-threaded TCG,
    6.1 hung (scripts/guest, DEFAULT_TCG): one host thread runs all the
    vCPUs of either (6.1's: test_a_guest_that_boots_is_booted_once)."""
    build("6.12")
    done, _ = run_with_fake_qemu(tmp_path / "default", dies="", kernel="6.12")
    assert done.returncode == 7, done.stderr
    assert accel(tmp_path / "default") == ["tcg,thread=single"]
    done, _ = run_with_fake_qemu(tmp_path / "told", dies="", kernel="6.12",
                                 options=("--tcg", "multi"))
    assert done.returncode == 7, done.stderr
    assert accel(tmp_path / "told") == ["tcg,thread=multi"]
