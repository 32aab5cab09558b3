"""The Linux backend's one OS error mapper (platform/linux/oserror.py):
what each errno becomes, messages that say whether a read or a change was
refused, and no OSError out of the backend."""

import errno
import os

import pytest

from tumbler.platform.base import AccessDenied, NoSuchProcess, PlatformError, Unmovable
from tumbler.platform.linux import affinity
from tumbler.platform.linux.backend import LinuxBackend
from tumbler.platform.linux.oserror import (READ_PRIVILEGE, SETAFFINITY_PRIVILEGE, mapped,
                                            os_error)


def error(code):
    return OSError(code, os.strerror(code))


@pytest.mark.parametrize("code", [errno.ESRCH, errno.ENOENT])
def test_gone_is_no_such_process(code):
    exc = os_error(error(code), 12, 13, "read /proc/12/task/13/stat")
    assert isinstance(exc, NoSuchProcess) and (exc.pid, exc.tid) == (12, 13)


def test_a_refused_read_says_read_and_a_refused_change_says_change():
    read = os_error(error(errno.EACCES), 12, None, "read /proc/12")
    assert isinstance(read, AccessDenied)
    assert (str(read), read.privilege) == ("cannot read /proc/12", READ_PRIVILEGE)
    change = os_error(error(errno.EPERM), 12, 13, "change thread 13 of process 12", change=True)
    assert isinstance(change, AccessDenied) and change.privilege == SETAFFINITY_PRIVILEGE
    assert str(change) == "not permitted to change thread 13 of process 12"


def test_einval_is_unmovable_only_on_a_change():
    assert isinstance(os_error(error(errno.EINVAL), 12, 13, "x", change=True), Unmovable)
    other = os_error(error(errno.EINVAL), 12, 13, "read /proc/12/task/13/stat")
    assert type(other) is PlatformError
    assert str(other) == "cannot read /proc/12/task/13/stat: Invalid argument"


def test_enoent_of_no_process_is_not_no_such_process():
    with pytest.raises(PlatformError) as info:
        with mapped(None, attempted="list the processes in /x/proc"):
            raise error(errno.ENOENT)
    assert not isinstance(info.value, NoSuchProcess)
    assert str(info.value) == "cannot list the processes in /x/proc: No such file or directory"


def test_process_ids_lets_no_oserror_through(tmp_path):
    with pytest.raises(PlatformError, match="cannot list the processes in"):
        LinuxBackend(str(tmp_path)).process_ids()


def test_set_affinity_of_a_gone_thread(monkeypatch):
    def refuse(tid, cpus):
        raise error(errno.ESRCH)
    monkeypatch.setattr(affinity.os, "sched_setaffinity", refuse)
    with pytest.raises(NoSuchProcess):
        affinity.set_affinity(12, 13, {0})
