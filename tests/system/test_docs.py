"""The manual renders cleanly and documents what the CLI offers."""

import os
import shutil
import subprocess

import pytest

from support.helpers import REPO, run_tumbler

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
    commands = help_text.split("Commands:")[1].split()
    for command in commands:
        if command.isalpha() and command.islower():
            assert "\n.B %s" % command in text or ".B %s " % command in text or \
                command in text, command


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
