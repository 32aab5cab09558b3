#!/bin/sh
# Set up, then run the whole test suite (pytest).  Extra arguments go to pytest.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@" tests
