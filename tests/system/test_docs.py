"""The manual renders cleanly, documents what the CLI offers, fits the
conventions (tumbler(8) short enough to read), and refers only to what the
packages install."""

import os
import re
import shutil
import subprocess

import pytest

from support.helpers import REPO, run_tumbler
from tumbler.commands.main import SUBCOMMANDS

MAN = os.path.join(REPO, "man", "tumbler.8")
PAGES = sorted(os.listdir(os.path.join(REPO, "man")))
# issue 50: taskset(1) renders to 114 lines, perf-stat(1) to 777; tumbler(8)
# was 1,603 with its explanations inline, which now have pages of their own
MAX_MAIN_PAGE_LINES = 600


def render(page):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    return subprocess.run(["man", "--warnings", "-l", os.path.join(REPO, "man", page)],
                          capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db not installed")
def test_man_page_renders_without_warnings():
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    result = subprocess.run(["man", "--warnings", "-l", MAN], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0
    assert result.stderr == ""
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLES", "OPTIONS", "COMMANDS",
                    "EXIT STATUS", "ENVIRONMENT", "FILES", "SEE ALSO"):
        assert "\n%s\n" % section in result.stdout, section
    assert len(result.stdout.splitlines()) <= MAX_MAIN_PAGE_LINES
    # DESCRIPTION short enough to read before the examples
    description = result.stdout.split("\nDESCRIPTION\n")[1].split("\nEXAMPLES\n")[0]
    assert len(description.splitlines()) <= 60


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db not installed")
@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_warnings(page):
    result = render(page)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "\nNAME\n" in result.stdout and "\nSEE ALSO\n" in result.stdout


def test_every_page_is_installed_by_every_package():
    setup = open(os.path.join(REPO, "setup.cfg")).read()     # pip and the .deb (pybuild)
    spec = open(os.path.join(REPO, "platform", "rpm", "tumbler.spec")).read()
    ips = open(os.path.join(REPO, "platform", "ips", "tumbler.p5m")).read()
    data_files = setup.split("[options.data_files]")[1]
    for page in PAGES:
        section = page.rsplit(".", 1)[1]
        assert re.search(r"^share/man/man%s = .*\bman/%s\b" % (section, re.escape(page)),
                         data_files, re.M), page
        assert "%%{_mandir}/man%s/%s*" % (section, page) in spec, page
        assert "file man/%s path=usr/share/man/man%s/%s " % (page, section, page) in ips, page


def test_pages_refer_only_to_what_the_packages_ship():
    """No page sends an admin to BENCHMARKS.md, the README or a file of the
    source tree; every tumbler page named in SEE ALSO or the text exists."""
    for page in PAGES:
        text = open(os.path.join(REPO, "man", page)).read().replace("\\-", "-")
        for unshipped in ("BENCHMARKS", "README", "ARCHITECTURE", "docs/", "scripts/",
                          "examples/", "tests/", "../shared", "in the source"):
            assert unshipped not in text, (page, unshipped)
        for name, section in re.findall(r"^\.BR (tumbler[\w.-]*) \((\d)\)", text, re.M):
            assert "%s.%s" % (name, section) in PAGES, (page, name)


def test_every_option_and_command_is_in_the_man_page():
    text = open(MAN).read().replace("\\-", "-")
    help_text = run_tumbler("--help").stdout
    options = {word.rstrip(",") for word in help_text.split() if word.startswith("--")}
    options.discard("--help")
    for option in options:
        assert option in text, option
    # each command's line of --help: two spaces, the name, its description
    commands = re.findall(r"^  (\S+)  ", help_text.split("Commands:")[1], re.M)
    assert sorted(commands) == sorted(SUBCOMMANDS)
    synopsis = man_section(text, "SYNOPSIS")
    entries = {line.split()[1] for line in man_section(text, "COMMANDS").splitlines()
               if line.startswith(".B ") and len(line.split()) > 1}
    for command in commands:
        assert re.search(r"^\.B (tumbler )?%s\b" % command, synopsis, re.M), command
        assert command in entries, command


def man_section(text, name):
    """The text of the man page's section ``.SH NAME`` (to the next .SH)."""
    return text.split("\n.SH %s\n" % name, 1)[1].split("\n.SH ", 1)[0]


def test_every_service_key_is_in_tumbler_yaml_5():
    from tumbler.service.config import MATCH_KEYS, RULE_KEYS
    page = os.path.join(REPO, "man", "tumbler.yaml.5")
    text = open(page).read()
    for key in MATCH_KEYS + RULE_KEYS + ("scan_interval", "socket", "metrics_file", "service",
                                         "balancing", "programs"):
        assert "%s:" % key in text or ".B %s" % key in text, key
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    if shutil.which("man"):
        result = subprocess.run(["man", "--warnings", "-l", page], capture_output=True,
                                text=True, env=env)
        assert result.returncode == 0 and result.stderr == ""


def test_readme_first_screen_answers_a_new_user():
    """issue 50: what it is, whether it helps, how to install, what to run
    first, and what it can do on one socket, all in the first 40 lines;
    the set-up and test commands first; developer material elsewhere."""
    readme = open(os.path.join(REPO, "README.md")).read()
    first = "\n".join(readme.splitlines()[:40])
    assert readme.index("sh scripts/demo.sh") < readme.index("sh scripts/test.sh") < 400
    for needed in ("tumbler balances the threads", "one socket", "--policy speed",
                   "| your program | what tumbler does | measured effect",
                   "yield barriers", "spinning barriers", "independent threads",
                   "beside other work", "pip install", ".deb", "tumbler topology",
                   "tumbler compare", "tumbler exec"):
        assert needed in first, needed
    for developer in ("_steady.c", "## Code map", "../shared/papers"):
        assert developer not in readme, developer
    developing = open(os.path.join(REPO, "docs", "DEVELOPING.md")).read()
    assert "## Code map" in developing and "_steady.c" in developing
    assert "docs/DEVELOPING.md" in first


def test_links_into_benchmarks_find_their_section():
    """README's and BENCHMARKS' front-page links name sections that exist
    (GitHub's heading anchors: lower case, punctuation dropped, spaces to -)."""
    benchmarks = open(os.path.join(REPO, "BENCHMARKS.md")).read()
    anchors = {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
               for heading in re.findall(r"^#+ (.*)$", benchmarks, re.M)}
    readme = open(os.path.join(REPO, "README.md")).read()
    links = (re.findall(r"\]\(BENCHMARKS\.md#([^)]+)\)", readme)
             + re.findall(r"\]\(#([^)]+)\)", benchmarks))
    assert len(links) > 10
    for link in links:
        assert link in anchors, link
