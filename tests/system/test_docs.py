"""The manual renders cleanly and documents what the CLI offers."""

import os
import re
import shutil
import subprocess

import pytest

from support.helpers import REPO, run_tumbler
from tumbler.commands.main import SUBCOMMANDS

MAN = os.path.join(REPO, "man", "tumbler.8")


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db not installed")
def test_man_page_renders_without_warnings():
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    result = subprocess.run(["man", "--warnings", "-l", MAN], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0
    assert result.stderr == ""
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "PERMISSIONS",
                    "EXIT STATUS", "SIGNALS", "FILES", "SEE ALSO", "PLATFORMS"):
        assert "\n%s\n" % section in result.stdout, section


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
