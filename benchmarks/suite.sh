#!/bin/sh
# The real-program suite of issue 27 in one command, on a fresh Debian 12
# machine as root, from anywhere:
#   sh benchmarks/suite.sh [--only NAME,...] [--runs N] [--tumbler-args "..."]
#                          [--background-hog|--background-bursty|--background-waker] [--json FILE] [...]
# Installs what is missing -- Debian's ImageMagick (built with OpenMP),
# pigz, zstd, xz, gcc and Go; the repository's venv (scripts/setup.sh) and
# numpy from PyPI into it -- then runs benchmarks/real_programs.py with
# these arguments; that script builds the kernels of benchmarks/kernels/
# and says what each option does (--help).
set -eu
cd "$(dirname "$0")/.."

need=""
convert -version 2>/dev/null | grep -q OpenMP || need="$need imagemagick"
command -v pigz >/dev/null 2>&1 || need="$need pigz"
command -v zstd >/dev/null 2>&1 || need="$need zstd"
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
# gcc brings libgomp (OpenMP's runtime) with it.
command -v gcc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v go >/dev/null 2>&1 || need="$need golang-go"
# shellcheck disable=SC2086
sh scripts/apt-install.sh $need

[ -x .venv/bin/tumbler ] || sh scripts/setup.sh
.venv/bin/python -c 'import numpy' 2>/dev/null || \
    .venv/bin/python -m pip install -q --disable-pip-version-check numpy
exec .venv/bin/python benchmarks/real_programs.py "$@"
