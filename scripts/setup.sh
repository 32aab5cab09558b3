#!/bin/sh
# Set up everything tumbler, its tests and its examples need, on a fresh
# Debian 12 (or Ubuntu) machine, as root; elsewhere, install the same by hand.
#   - system packages: python3-venv, python3-dev, gcc, make, bpftrace, man-db
#   - tracefs mounted (bpftrace probes need it)
#   - a virtualenv in .venv with tumbler installed (editable) and pytest
#   - the example workloads built
# Idempotent: a second run only checks.
set -eu
cd "$(dirname "$0")/.."

need_apt=""
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt="$need_apt python3-venv"
command -v gcc >/dev/null 2>&1 || need_apt="$need_apt gcc libc6-dev"
# Python's headers: tumbler's optional C sampler is built against them.
python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    2>/dev/null || need_apt="$need_apt python3-dev"
command -v make >/dev/null 2>&1 || need_apt="$need_apt make"
command -v bpftrace >/dev/null 2>&1 || need_apt="$need_apt bpftrace"
command -v man >/dev/null 2>&1 || need_apt="$need_apt man-db"
# shellcheck disable=SC2086
sh scripts/apt-install.sh $need_apt

if [ "$(id -u)" -eq 0 ] && [ -d /sys/kernel/tracing ] && \
   ! grep -q ' /sys/kernel/tracing tracefs ' /proc/mounts; then
    mount -t tracefs nodev /sys/kernel/tracing || echo "setup: could not mount tracefs" >&2
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# compat: the source directory on sys.path (a .pth line), not an import
# hook -- the hook's own imports cost ~12 ms at every start of tumbler.
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' \
    --config-settings editable_mode=compat
.venv/bin/python -c 'import tumbler.platform.linux._steady
import tumbler.engine._window
import tumbler.engine._columns
import tumbler.balance._rounds' 2>/dev/null || \
    echo "setup: the optional C modules (tumbler/platform/linux/_steady.c," \
         "tumbler/engine/_window.c, tumbler/engine/_columns.c," \
         "tumbler/balance/_rounds.c) were not built;" \
         "tumbler works without them, at a higher CPU cost per round" >&2
# Byte-compile now: with PYTHONDONTWRITEBYTECODE set, every start would
# otherwise compile tumbler again (~0.1 s of CPU per run).
.venv/bin/python -m compileall -q tumbler >/dev/null
make -s -C examples
