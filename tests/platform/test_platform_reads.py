"""The platform layer's own small reads (``tumbler.platform``): a file read
whole in one pread, tumbler's own start time, the boot's token."""

import os
import re
import sys

import pytest

from tumbler.platform import boot_token, own_start_ticks
from tumbler.platform.files import read_file

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


def test_read_file_reads_the_file_and_keeps_no_descriptor():
    before = open_fds()
    with open("/proc/self/cmdline", "rb") as f:
        whole = f.read()
    assert read_file("/proc/self/cmdline") == whole
    assert read_file("/proc/self/cmdline", 5) == whole[:5]
    assert open_fds() == before


def test_read_file_lets_the_os_error_through(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "absent"))


def test_own_start_ticks_is_this_process_start_time():
    from tumbler.platform.linux.backend import LinuxBackend
    backend = LinuxBackend()
    try:
        assert own_start_ticks() == backend.process(os.getpid()).start
    finally:
        backend.close()


def test_boot_token_is_the_kernel_boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", boot_id)
    assert boot_token() == boot_id
