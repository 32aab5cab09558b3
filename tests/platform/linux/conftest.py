"""Fixtures of the Linux backend's tests."""

import os

import pytest


@pytest.fixture
def task_dir(tmp_path):
    """task_dir(n) -> fd of a directory whose link count says n threads."""
    fds = []

    def make(threads):
        path = tmp_path / ("task%d" % len(fds))
        path.mkdir()
        for i in range(threads):
            (path / str(i)).mkdir()
        fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
        if os.fstat(fds[-1]).st_nlink != threads + 2:
            pytest.skip("this file system does not count subdirectory links")
        return fds[-1]
    yield make
    for fd in fds:
        os.close(fd)
