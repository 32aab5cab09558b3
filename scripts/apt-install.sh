#!/bin/sh
# Install the Debian packages named as arguments, as root with apt-get;
# elsewhere say what to install and fail.  No arguments: nothing to do.
# For scripts/setup.sh and benchmarks/suite.sh, which name what is missing.
set -eu
[ $# -gt 0 ] || exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
else
    echo "please install: $*" >&2
    exit 1
fi
