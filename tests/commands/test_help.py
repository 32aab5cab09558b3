"""Every --help: examples at the end, defaults written one way, the
diagnostic options last, only options the command takes, whole-sentence
summaries, a synopsis of every command, a line per --policy choice."""

import re

import pytest

from support.helpers import run_tumbler
from tumbler.commands.main import SUBCOMMANDS
from tumbler.config import POLICY_CHOICES

COMMANDS = ((),) + tuple((name,) for name in SUBCOMMANDS)


def help_text(*command):
    result = run_tumbler(*command, "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "tumbler")
def test_help_ends_with_two_to_four_examples(command):
    text = help_text(*command)
    assert "\n  Examples:\n" in text, text
    examples = text.split("\n  Examples:\n", 1)[1].rstrip().splitlines()
    assert 2 <= len(examples) <= 4, examples
    for line in examples:
        assert line.startswith("    ") and "tumbler" in line, line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "tumbler")
def test_help_writes_defaults_one_way(command):
    text = " ".join(help_text(*command).split())     # as if no line were wrapped
    assert "[default" not in text, text
    assert not re.search(r"\(default(?!: )", text), text


def test_main_help_lists_diagnostic_options_last():
    options = re.findall(r"^  (?:-\w, )?(--[\w-]+)", help_text().split("Options:", 1)[1],
                         re.MULTILINE)
    assert options[-4:] == ["--root", "--platform", "--version", "--help"], options


def test_exec_help_lists_only_options_exec_takes():
    text = help_text("exec")
    assert "--share" not in text and "--force" not in text
    for option in (["--share", "time"], ["--force"]):
        # After exec, and before it (the main command's options).
        for args in (["exec", *option], [*option, "exec"]):
            result = run_tumbler(*args, "--", "true")
            assert result.returncode == 2, args
            assert "%s does not apply to exec" % option[0] in result.stderr, args


def test_command_summaries_are_whole_sentences():
    commands = help_text().split("\nCommands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in commands] == list(SUBCOMMANDS)
    for line in commands:
        assert line.endswith(".") and not line.endswith("..."), line


def test_synopsis_lists_every_command():
    synopsis = help_text().split("Options:", 1)[0]
    for name in SUBCOMMANDS:
        assert re.search(r"^    tumbler (\[OPTIONS\] )?%s\b" % name, synopsis, re.MULTILINE), name


@pytest.mark.parametrize("command", [(), ("exec",)], ids=["tumbler", "exec"])
def test_policy_choices_one_line_each(command):
    block = help_text(*command).split("Policies (--policy):\n", 1)[1].split("\n\n", 1)[0]
    lines = block.splitlines()
    assert [line.split()[0] for line in lines] == list(POLICY_CHOICES), lines
