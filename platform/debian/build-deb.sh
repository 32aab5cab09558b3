#!/bin/sh
# Build tumbler's Debian package with pybuild, from this source tree:
#
#   sh platform/debian/build-deb.sh [OUTDIR]
#
# Needs (Debian 12): debhelper dh-python pybuild-plugin-pyproject
# python3-all-dev python3-setuptools fakeroot.  Copies the tree to a
# temporary directory, adds debian/ (this directory's, plus the systemd
# unit and the default configuration), runs dpkg-buildpackage -b and puts
# the .deb in OUTDIR (default: the current directory).  Installs the
# command, its C modules, the probes, the unit (disabled, not started),
# /etc/tumbler/tumbler.yaml as a conffile and every page of man/ (setup.cfg's
# data_files; tests/system/test_platform_files.py checks the .deb has them).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$(cd "${1:-.}" && pwd)
for tool in dpkg-buildpackage dh pybuild fakeroot; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "build-deb.sh: $tool not found (apt-get install debhelper dh-python" \
             "pybuild-plugin-pyproject python3-all-dev python3-setuptools fakeroot)" >&2
        exit 1
    }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/tumbler-$(cd "$top" && python3 -c 'import tumbler; print(tumbler.__version__)')"
mkdir "$src"
(cd "$top" && tar cf - --exclude=.git --exclude=.venv --exclude=build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude='*.so' --exclude=debian .) | (cd "$src" && tar xf -)
cp -r "$here/debian" "$src/debian"
cp "$top/platform/systemd/tumbler.service" "$src/debian/tumbler.service"
(cd "$src" && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -b -us -uc -rfakeroot \
    >"$work/build.log" 2>&1) || {
    tail -40 "$work/build.log" >&2
    exit 1
}
cp "$work"/tumbler_*.deb "$out"/
ls "$out"/tumbler_*.deb
