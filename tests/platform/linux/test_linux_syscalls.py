"""The system calls Python's os module lacks (platform/linux/procfs.py):
sched_getcpu and prctl(PR_SET_CHILD_SUBREAPER), each made by _steady.c
where it was built and through ctypes where it was not -- both ways, on
the real kernel."""

import os
import sys
import time

import pytest

from tumbler.platform.linux import procfs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@pytest.fixture(params=["c", "ctypes"])
def way(request, monkeypatch):
    """procfs as built (``c``; skipped where _steady.c was not built) or as
    it is without the C module (``ctypes``)."""
    if request.param == "c":
        if procfs._steady is None:
            pytest.skip("_steady.c was not built")
    else:
        monkeypatch.setattr(procfs, "_steady", None)
        monkeypatch.setattr(procfs, "_sched_getcpu", None)
    return request.param


def test_current_cpu_is_the_cpu_the_thread_was_pinned_to(way):
    mask = os.sched_getaffinity(0)
    try:
        for cpu in sorted(mask):
            os.sched_setaffinity(0, {cpu})
            assert procfs.current_cpu() == cpu
    finally:
        os.sched_setaffinity(0, mask)


def _orphans_parent(on):
    """In a child process: set_child_subreaper(``on``), then fork a process
    that forks an orphan and exits.  Returns (the child's PID, the
    orphan's parent once re-parented, whether the call said the kernel
    took it)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:                                  # no pytest beyond this
        try:
            took = procfs.set_child_subreaper(on)
            middle = os.fork()
            if middle == 0:
                middle = os.getpid()
                if os.fork() == 0:                  # the orphan
                    while os.getppid() == middle:   # until its parent has exited
                        time.sleep(0.001)
                    os.write(write_end, b"%d %d" % (os.getppid(), took))
                os._exit(0)
            os.waitpid(middle, 0)   # the orphan is re-parented by now (exit_notify)
            try:
                os.wait()           # adopted: wait until it has answered
            except ChildProcessError:
                pass                # not adopted
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()    # until the orphan, the last writer, exits
    finally:
        os.waitpid(child, 0)
    ppid, took = map(int, answer.split())
    return child, ppid, bool(took)


def test_a_subreaper_adopts_the_orphans_of_its_descendants(way):
    child, ppid, took = _orphans_parent(True)
    assert took
    assert ppid == child


def test_without_it_the_orphans_go_elsewhere(way):
    child, ppid, took = _orphans_parent(False)
    assert took
    assert ppid != child


def test_a_build_older_than_its_source_is_taken_as_not_built(monkeypatch):
    """A tree pulled past these calls and not rebuilt keeps a _steady
    without them: procfs then makes them through ctypes (it used to raise
    AttributeError in every ``exec``).  A copy of procfs is loaded beside
    the real one, over a stand-in _steady that has neither."""
    import importlib.util
    import types
    stale = types.ModuleType("tumbler.platform.linux._steady")
    monkeypatch.setitem(sys.modules, "tumbler.platform.linux._steady", stale)
    monkeypatch.setattr(sys.modules["tumbler.platform.linux"], "_steady", stale, raising=False)
    spec = importlib.util.spec_from_file_location("tumbler.platform.linux._procfs_stale",
                                                  procfs.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy._steady is None
    assert copy.current_cpu() in os.sched_getaffinity(0)
