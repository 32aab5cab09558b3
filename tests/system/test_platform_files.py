"""OS integration files (``platform/``) and ``tumbler plot``: the unit
passes systemd-analyze verify, the SMF manifest has what SMF needs, and a
real run's log draws.  (The metrics file: tests/observers/test_metrics.py.)"""

import json
import os
import re
import shutil
import subprocess
import xml.dom.minidom

import pytest

from support.helpers import REPO, run_tumbler

PLATFORM = os.path.join(REPO, "platform")
UNIT = os.path.join(PLATFORM, "systemd", "tumbler.service")
MANIFEST = os.path.join(PLATFORM, "smf", "tumbler.xml")
METHOD = os.path.join(PLATFORM, "smf", "svc-tumbler")


# -- systemd -------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze not installed (Debian: systemd)")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    """ExecStart's /usr/bin/tumbler is where packages put it; here it is the
    venv's, and the man pages the unit names are found through MANPATH."""
    text = open(UNIT).read()
    tumbler = os.path.join(REPO, ".venv", "bin", "tumbler")
    unit = tmp_path / "tumbler.service"
    unit.write_text(text.replace("/usr/bin/tumbler", tumbler))
    for page in os.listdir(os.path.join(REPO, "man")):
        section = tmp_path / "man" / ("man" + page.rsplit(".", 1)[1])
        section.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.join(REPO, "man", page), section / page)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, cwd=tmp_path,
                            env=dict(os.environ, MANPATH=str(tmp_path / "man")))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr


def test_unit_directives():
    directives = {}
    for line in open(UNIT):
        if "=" in line and not line.startswith("#"):
            key, value = line.strip().split("=", 1)
            directives.setdefault(key, []).append(value)
    assert directives["ExecStart"] == ["/usr/bin/tumbler service"]
    assert directives["KillSignal"] == ["SIGTERM"]          # stop restores every thread
    assert directives["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert directives["Restart"] == ["on-failure"]
    assert "StartLimitBurst" in directives and "ConditionCPUs" in directives
    for harmful in ("PrivateUsers", "ProtectKernelTunables", "ProtectControlGroups",
                    "ProtectProc"):
        assert harmful not in directives, harmful


# -- SMF -------------------------------------------------------------------------

def test_smf_manifest_has_what_smf_needs():
    # The DTD (/usr/share/lib/xml/dtd/service_bundle.dtd.1) exists on illumos
    # only: minidom does not fetch it.
    document = xml.dom.minidom.parse(MANIFEST)
    bundle = document.documentElement
    assert bundle.tagName == "service_bundle" and bundle.getAttribute("type") == "manifest"
    service = bundle.getElementsByTagName("service")[0]
    assert service.getAttribute("name") == "system/tumbler"
    assert service.getElementsByTagName("create_default_instance")[0].getAttribute(
        "enabled") == "false"
    fmris = [e.getAttribute("value") for e in service.getElementsByTagName("service_fmri")]
    assert "svc:/system/filesystem/local" in fmris
    methods = {m.getAttribute("name"): m.getAttribute("exec")
               for m in service.getElementsByTagName("exec_method")}
    assert methods == {"start": "/lib/svc/method/svc-tumbler", "stop": ":kill",
                       "refresh": ":kill -HUP"}
    pages = {(p.getAttribute("title"), p.getAttribute("section"))
             for p in service.getElementsByTagName("manpage")}
    assert pages == {("tumbler", "8"), ("tumbler.yaml", "5")}
    props = {p.getAttribute("name"): p.getAttribute("value")
             for p in service.getElementsByTagName("propval")}
    assert props["file"] == "/etc/tumbler/tumbler.yaml"


def test_smf_method_script():
    assert os.access(METHOD, os.X_OK)
    assert subprocess.run(["sh", "-n", METHOD]).returncode == 0
    text = open(METHOD).read()
    assert "smf_include.sh" in text and "config/file" in text
    assert "tumbler service --check" in text and "SMF_EXIT_ERR_CONFIG" in text


# -- plot ------------------------------------------------------------------------

def test_plot_draws_a_real_run(workloads, tmp_path, two_cpus):
    log, svg = tmp_path / "run.jsonl", tmp_path / "run.svg"
    # --policy tumbler: auto merges the two domains while other work competes
    # with the program (a loaded machine), and this draws two domains' lines.
    run = run_tumbler("--domains", "%d/%d" % two_cpus, "--policy", "tumbler", "--log", str(log),
                      "-q", "exec", "--", os.path.join(workloads, "skewed"))
    assert run.returncode == 0, run.stderr
    result = run_tumbler("plot", str(log), "-o", str(svg))
    assert result.returncode == 0, result.stderr
    rounds = [json.loads(line) for line in open(log)]
    document = xml.dom.minidom.parse(str(svg))
    lines = [p for p in document.getElementsByTagName("polyline")
             if p.getAttribute("class") == "domain"]
    assert sorted(p.getAttribute("data-domain") for p in lines) == ["%d" % c for c in two_cpus]
    split = [r for r in rounds if len(r["domains"]) == 2]
    assert len(split) >= len(rounds) / 2
    for line in lines:
        assert len(line.getAttribute("points").split()) == len(split)
    texts = [t.firstChild.data for t in document.getElementsByTagName("text") if t.firstChild]
    # the time axis: ticks labelled in seconds from the first round on
    assert "%g s" % round(rounds[0]["t"], 3) in texts and sum(t.endswith(" s") for t in texts) >= 4
    assert document.getElementsByTagName("polygon")         # the tolerance band


@pytest.mark.parametrize("content, status, message", [
    (None, 1, "cannot read"),
    ("", 2, "no rounds"),
    ('{"t": 1}\n', 2, ":1: not a tumbler --log record"),
])
def test_plot_refuses_bad_logs_in_one_line(tmp_path, content, status, message):
    log = tmp_path / "bad.jsonl"
    if content is not None:
        log.write_text(content)
    result = run_tumbler("plot", str(log), "-o", str(tmp_path / "out.svg"))
    assert result.returncode == status
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


# -- packages ----------------------------------------------------------------------

DEB_TOOLS = ("dpkg-buildpackage", "dh", "pybuild", "fakeroot", "dpkg-deb")


@pytest.mark.skipif(any(shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") is None
                        for t in DEB_TOOLS) or not os.path.exists(
                            "/usr/share/dh-python/dhpython/build/plugin_pyproject.py"),
                    reason="Debian packaging tools not installed (apt-get install debhelper "
                           "dh-python pybuild-plugin-pyproject python3-all-dev "
                           "python3-setuptools python3-build python3-installer fakeroot)")
def test_deb_builds_with_the_expected_files(tmp_path):
    result = subprocess.run(["sh", os.path.join(PLATFORM, "debian", "build-deb.sh"),
                             str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    deb = next(tmp_path.glob("tumbler_*.deb"))
    files = set(subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                               check=True).stdout.split())
    pages = ["./usr/share/man/man%s/%s.gz" % (page.rsplit(".", 1)[1], page)
             for page in os.listdir(os.path.join(REPO, "man"))]
    assert "./usr/share/man/man8/tumbler.8.gz" in pages
    for path in pages + ["./usr/bin/tumbler", "./lib/systemd/system/tumbler.service",
                         "./etc/tumbler/tumbler.yaml",
                         "./usr/share/tumbler/probes/linux/runqlat.bt",
                         "./usr/lib/python3/dist-packages/tumbler/service/loop.py"]:
        assert path in files, path
    script = subprocess.run("dpkg-deb --fsys-tarfile %s | tar xOf - ./usr/bin/tumbler" % deb,
                            shell=True, capture_output=True, text=True, check=True).stdout
    assert script.startswith("#!/usr/bin/python3\n"), script[:80]     # the system's Python
    assert any(re.search(r"tumbler/platform/linux/_steady\..*\.so$", f) for f in files)
    assert any(re.search(r"tumbler/engine/_window\..*\.so$", f) for f in files)
    assert any(re.search(r"tumbler/engine/_columns\..*\.so$", f) for f in files)
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    assert "Package: tumbler" in control and "python3-click" in control
    meta = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True,
                          check=True).stdout
    listing = subprocess.run(["tar", "xOf", "-", "./conffiles", "./postinst"], input=meta,
                             capture_output=True, check=True).stdout.decode()
    assert "/etc/tumbler/tumbler.yaml" in listing                # a conffile
    assert "was-enabled" in listing and "deb-systemd-invoke start" not in listing  # disabled


def test_rpm_spec_and_ips_manifest():
    spec = open(os.path.join(PLATFORM, "rpm", "tumbler.spec")).read()
    for needed in ("%systemd_post tumbler.service", "%systemd_preun tumbler.service",
                   "%config(noreplace) %{_sysconfdir}/tumbler/tumbler.yaml",
                   "%{_unitdir}/tumbler.service", "%pyproject_install"):
        assert needed in spec, needed
    manifest = open(os.path.join(PLATFORM, "ips", "tumbler.p5m")).read()
    assert "path=lib/svc/manifest/system/tumbler.xml" in manifest
    assert "path=lib/svc/method/svc-tumbler" in manifest
    assert "restart_fmri=svc:/system/manifest-import:default" in manifest
    for line in manifest.splitlines():
        if line.startswith("file ") and "path=usr/bin/tumbler" not in line:
            source = line.split()[1]
            assert os.path.exists(os.path.join(REPO, source)), source


def test_default_config_selects_nothing():
    from tumbler.service.config import load_service_config
    config = load_service_config(os.path.join(PLATFORM, "tumbler.yaml"))
    assert config.rules == []
