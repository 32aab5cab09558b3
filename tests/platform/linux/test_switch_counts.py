"""LinuxBackend.context_switches: a thread's voluntary and involuntary
switch counts, found at the end of its status file's bytes
(procfs.switch_counts) -- on real threads, against the whole file's
reading, and on fixture files the real ones seldom show."""

import os
import sys
import threading

import pytest

from tumbler.platform.base import NoSuchProcess, PlatformError
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.linux.procfs import read_status, switch_counts

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _whole_file(path):
    status = read_status(path)
    return (int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]))


def test_real_threads_counts_match_the_whole_status_file():
    """Each thread's counts as the whole file reads them, read just
    before and just after: a sleeping thread's counts cannot pass the
    second reading.  A thread that sleeps 20 times has >= 20 voluntary
    switches: the counts are the right fields, not any number."""
    done = threading.Event()
    slept = threading.Event()

    def sleeper():
        for _ in range(20):
            done.wait(0.001)
        slept.set()
        done.wait()
    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        assert slept.wait(10)
        backend = LinuxBackend()
        pid = os.getpid()
        for tid in (pid, thread.native_id):
            path = "/proc/%d/task/%d/status" % (pid, tid)
            before = _whole_file(path)
            counts = backend.context_switches(pid, tid)
            after = _whole_file(path)
            assert all(b <= c <= a for b, c, a in zip(before, counts, after)), tid
        assert backend.context_switches(pid, thread.native_id)[0] >= 20
    finally:
        done.set()
        thread.join()


def _status(tmp_path, pid, tid, text):
    task = tmp_path / "proc" / str(pid) / "task" / str(tid)
    task.mkdir(parents=True)
    (task / "status").write_bytes(text)
    return LinuxBackend(str(tmp_path))


def test_counts_after_a_long_cpus_allowed_line_are_read_past_4096_bytes(tmp_path):
    """On a machine of thousands of CPUs the mask lines push the counts
    past the first 4 KiB read: they are read from the whole file."""
    mask = ",".join(["ffffffff"] * 600)
    text = ("Name:\tworker\nCpus_allowed:\t%s\nCpus_allowed_list:\t0-19199\n"
            "voluntary_ctxt_switches:\t123\nnonvoluntary_ctxt_switches:\t45\n" % mask).encode()
    assert len(text) > 4096
    assert _status(tmp_path, 10, 11, text).context_switches(10, 11) == (123, 45)


def test_a_thread_name_cannot_stand_for_the_counts():
    """The Name line comes first and the counts are looked for from the
    end; even a name spelling a count line (the kernel escapes a name's
    newline, so it never begins a line) is not taken."""
    text = (b"Name:\tvoluntary_ctxt_switches:\t999\nState:\tR (running)\n"
            b"voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t8\n")
    assert switch_counts(text) == (7, 8)


def test_missing_counts_are_zero_and_malformed_ones_an_error(tmp_path):
    assert switch_counts(b"Name:\tx\nState:\tS (sleeping)\n") == (0, 0)
    assert switch_counts(b"Name:\tx\nvoluntary_ctxt_switches:\t5") == (5, 0)   # no last newline
    backend = _status(tmp_path, 20, 21, b"Name:\tx\nvoluntary_ctxt_switches:\tmany\n")
    with pytest.raises(PlatformError, match="malformed switch counts"):
        backend.context_switches(20, 21)
    with pytest.raises(NoSuchProcess):
        backend.context_switches(20, 22)


@pytest.mark.parametrize("release, keeps", [
    ("6.1.0-56-amd64", False), ("5.10.0-30-amd64", False), ("6.2.0", True),
    ("6.12.117+deb12-amd64", True), ("6.18.44", True), (None, True), ("rc-odd", True)])
def test_whether_the_kernel_keeps_the_mask_asked_for(tmp_path, release, keeps):
    """Backend.keeps_asked_mask from /proc/sys/kernel/osrelease: Linux
    6.2 and later keep a mask set while some of its CPUs are off-line;
    before, the kernel cut them out for good (balance/machine.py).  An
    unreadable release is taken for a kernel that keeps it (no allowance
    that could take an admin's mask for the kernel's)."""
    if release is not None:
        (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
        (tmp_path / "proc" / "sys" / "kernel" / "osrelease").write_text(release + "\n")
    assert LinuxBackend(str(tmp_path)).keeps_asked_mask is keeps
