#!/bin/sh
# Set up, then run the whole test suite (pytest).  Extra arguments go to pytest.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
# The Debian package test (tests/system/test_platform_files.py) builds the .deb:
# its tools, as root on Debian, if missing (elsewhere the test is skipped).
deb_tools="debhelper dh-python pybuild-plugin-pyproject python3-all-dev python3-setuptools \
python3-build python3-installer fakeroot"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && \
   ! { command -v dh >/dev/null 2>&1 && command -v pybuild >/dev/null 2>&1 && \
       [ -e /usr/share/dh-python/dhpython/build/plugin_pyproject.py ]; }; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $deb_tools >/dev/null
fi
# The guest system tests (tests/system/test_guest_*.py, docs/guests.md) boot
# QEMU guests: qemu-system-x86, as root on Debian, if missing (elsewhere they
# are skipped, saying so).  Their kernels are downloaded on first use.
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && \
   ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    sh scripts/apt-install.sh qemu-system-x86
fi
# tests/commands/test_plot.py renders tumbler plot's SVG to a PNG with rsvg-convert.
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && \
   ! command -v rsvg-convert >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null
fi
# The cgroup v2 cpuset tests (tests/platform/linux/test_cpuset_v2_real.py) may move the
# cpuset controller from an unused v1 hierarchy to v2 for their duration
# (always put back and checked); TUMBLER_TEST_CGROUP_SWAP=0 skips them.
export TUMBLER_TEST_CGROUP_SWAP="${TUMBLER_TEST_CGROUP_SWAP:-1}"
exec .venv/bin/python -m pytest -q "$@" tests
