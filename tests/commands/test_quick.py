"""``tumbler exec``'s quick path (tumbler/commands/quick.py): the same
settings as click makes, or none at all; bad options still refused before
the command starts."""

import json
import os
import subprocess
import sys

import click
import pytest

from support.helpers import REPO, assert_no_traceback, run_tumbler, tumbler_cmd
from tumbler.commands import quick, run
from tumbler.commands.main import main
from tumbler.commands.options import BALANCING_OPTIONS

#: exec lines the quick path takes.
TAKEN = [
    ["exec", "--", "prog"],
    ["exec", "prog", "-q", "--", "x"],
    ["-q", "exec", "--", "prog", "a", "b"],
    ["--policy", "tumbler", "exec", "--policy", "speed", "--", "prog"],
    ["--domains", "0/1", "exec", "-v", "--interval", "200", "prog"],
    ["--domains=0/1", "exec", "--interval=200", "--duration=2.5", "--", "prog"],
    ["exec", "--no-children", "-n", "--level", "llc", "--", "prog"],
    ["--children", "exec", "--no-children", "--", "prog"],
    ["exec", "--interval", " 300 ", "--", "prog"],
    ["exec", "--duration", "1e3", "--", "prog", "--"],
    ["exec", "--quiet", "--dry-run", "--", "-prog"],     # (-q with -v: refused on both)
    ["exec", "--verbose", "--dry-run", "--", "-prog"],
    ["exec", "-q", "--summary-json", "s.json", "--", "prog"],
    ["--summary-json=t.json", "exec", "--summary-json=s.json", "prog"],
]

#: Lines it leaves to click: anything else, and every mistake.
LEFT = [
    ["exec"],
    ["exec", "--"],
    ["exec", "-qv", "--", "prog"],
    ["exec", "--config", "c.yaml", "--", "prog"],
    ["exec", "--log", "l.jsonl", "--", "prog"],
    ["exec", "--summary-json"],
    ["exec", "--probe", "--", "prog"],
    ["exec", "--help"],
    ["-p", "1", "exec", "--", "prog"],
    ["--root", "/tmp", "exec", "--", "prog"],
    ["exec", "--policy", "nope", "--", "prog"],
    ["exec", "--interval", "abc", "--", "prog"],
    ["exec", "--interval"],
    ["exec", "--quiet=yes", "--", "prog"],
    ["topology"],
    ["compare", "exec", "--", "prog"],
]


def click_settings(args, monkeypatch):
    """(settings, command) as the click path makes them for ``args``."""
    seen = []
    monkeypatch.setattr(run, "run_exec", lambda settings, command: seen.append(
        (settings, command)) or 0)
    with pytest.raises(SystemExit) as stop:
        main.main(list(args), prog_name="tumbler")
    assert stop.value.code == 0
    return seen[0]


def comparable(settings):
    return {key: value for key, value in settings._asdict().items() if key != "config"}


@pytest.mark.parametrize("args", TAKEN, ids=" ".join)
def test_quick_path_makes_clicks_settings(args, monkeypatch):
    parsed = quick.parse(args)
    assert parsed is not None
    options, command = parsed
    mine = quick.make_settings(options, "/", None)
    theirs, their_command = click_settings(args, monkeypatch)
    assert command == their_command
    assert comparable(mine) == comparable(theirs)
    assert mine.config == theirs.config


@pytest.mark.parametrize("args", LEFT, ids=" ".join)
def test_quick_path_leaves_the_rest_to_click(args):
    assert quick.parse(args) is None


def test_quick_options_are_the_click_options():
    """Every option the quick path reads has the name, kind and choices of
    the click option it stands for."""
    by_flag = {}
    for decorator in BALANCING_OPTIONS:
        @decorator
        def probe():
            pass
        param = probe.__click_params__[0]
        for flag in param.opts + param.secondary_opts:
            by_flag[flag] = param
    for flag, (name, kind) in quick.QUICK_OPTIONS.items():
        param = by_flag[flag]
        assert param.name == name, flag
        if kind is True or kind is False:
            assert param.is_flag
            assert (flag in param.secondary_opts) == (kind is False), flag
        elif isinstance(kind, tuple):
            assert isinstance(param.type, click.Choice)
            assert tuple(param.type.choices) == kind
        else:
            expected = {int: click.INT, float: click.FLOAT, str: click.STRING}[kind]
            assert param.type == expected, flag


@pytest.mark.parametrize("options", [
    ["--interval", "5"],                # below the minimum
    ["--duration", "-1"],
    ["--duration", "nan"],
    ["--policy", "nope"],
    ["--domains", "0/9999"],            # CPUs that do not exist
    ["--domains", "0-"],
    ["--level", "core", "--domains", "0"],
])
def test_bad_options_are_refused_before_the_command_starts(options, tmp_path):
    marker = tmp_path / "ran"
    result = run_tumbler("exec", *options, "--", "touch", str(marker))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("tumbler: ")
    assert not marker.exists()


def test_domains_outside_tumblers_own_cpus_are_refused_before_the_command_starts(tmp_path):
    """The light check before the start (commands/run.py, _check_domains)
    reads tumbler's own CPUs as the full one does: started on CPU 0 only,
    a domain of CPU 1 is refused and the command never runs."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    marker = tmp_path / "ran"
    result = subprocess.run(["taskset", "-c", "0"] + tumbler_cmd(
        "--domains", "0/1", "exec", "--", "touch", str(marker)), cwd=REPO,
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("tumbler: --domains: CPU 1 is outside the CPUs the target "
                             "may use (0)\n")
    assert not marker.exists()


def test_missing_command_is_127_in_one_line():
    result = run_tumbler("exec", "-q", "--", "/nonexistent/command")
    assert result.returncode == 127
    assert result.stderr == "tumbler: /nonexistent/command: command not found\n"


def test_unwritable_state_directory_is_refused_before_the_command_starts(tmp_path):
    marker = tmp_path / "ran"
    state = tmp_path / "state"
    state.write_text("not a directory")
    result = subprocess.run(tumbler_cmd("exec", "--", "touch", str(marker)), cwd=REPO,
                            capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, TUMBLER_STATE_DIR=str(state)))
    assert result.returncode == 1, result.stderr
    assert "state directory" in result.stderr
    assert not marker.exists()


def test_exec_passes_the_status_through_the_quick_path():
    result = run_tumbler("exec", "-q", "--", "sh", "-c", "exit 7")
    assert result.returncode == 7
    assert_no_traceback(result.stderr)


def test_version_without_click():
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "tumbler", "--version"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.stdout == "tumbler, version %s\n" % __import__("tumbler").__version__
    assert " click" not in result.stderr


#: Modules that must not be loaded when exec's command starts: each costs
#: the command's start 0.1-35 ms (BENCHMARKS.md, start-up): click, the
#: standard library's heavier modules, and tumbler's interface and
#: balancing code, all imported while the command runs instead.
NOT_BEFORE_THE_COMMAND = ("click", "collections", "typing", "re", "enum", "signal", "json",
                          "subprocess", "dataclasses", "tumbler.records",
                          "tumbler.platform.base", "tumbler.engine", "tumbler.balance",
                          "tumbler.service", "tumbler.observers")


def _modules_loaded(code, tmp_path):
    """Run ``code`` (a tumbler command line behind a spy that prints
    ``LOADED:`` and sys.modules) in a new interpreter: the modules it
    printed."""
    env = dict(os.environ, TUMBLER_STATE_DIR=str(tmp_path / "state"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(next(line for line in result.stdout.splitlines()
                    if line.startswith("LOADED:"))[len("LOADED:"):].split(","))


@pytest.mark.parametrize("files", [[], ["--summary-json", "s.json"], ["--domains", "0"]],
                         ids=["plain", "summary-json", "domains"])
def test_exec_starts_its_command_before_the_heavy_imports(files, tmp_path):
    """Also with the files a benchmark asks for: its measure is the
    command's start as a user sees it; and with explicit domains, checked
    before the start without the platform layer or the engine (they made
    the command wait ~10 ms more)."""
    argv = ["tumbler", "-q", "exec", *[str(tmp_path / arg) if "." in arg else arg
                                       for arg in files], "--", "true"]
    code = ("import os, sys\n"
            "spawn = os.posix_spawnp\n"
            "def spy(*args, **kwargs):\n"
            "    print('LOADED:' + ','.join(sorted(sys.modules)), flush=True)\n"
            "    return spawn(*args, **kwargs)\n"
            "os.posix_spawnp = spy\n"
            "sys.argv = %r\n" % argv +
            "from tumbler.launch import entry_point\n"
            "entry_point()\n")
    loaded = _modules_loaded(code, tmp_path)
    assert "tumbler.commands.quick" in loaded          # the quick path was taken
    early = sorted(m for m in loaded for heavy in NOT_BEFORE_THE_COMMAND
                   if m == heavy or m.startswith(heavy + "."))
    assert not early, early


#: Modules a whole ``exec`` run of a crowded program must never load: they
#: are imported while the command runs, and their CPU (re with enum 8 ms,
#: platform 6 ms, ctypes 3.5, contextlib 2, threading 1 ms here) is taken
#: from it on a full machine; json (with re) at the end, after it.  ctypes
#: only where _steady.c was built (its calls are otherwise made through it).
NEVER_IN_A_RUN = ("click", "re", "enum", "platform", "threading", "typing", "json",
                  "subprocess", "dataclasses", "contextlib", "functools", "ctypes")


@pytest.mark.parametrize("options", [[], ["--domains", "0/1", "--summary-json", "s.json"]],
                         ids=["plain", "domains-summary"])
def test_a_whole_exec_run_loads_no_heavy_module(options, workloads, tmp_path):
    """Three spinning threads on the CPUs tumbler has (more than cores on
    this 2-CPU VM): rounds, the CPUs' switches (platform/linux/switches.py),
    the cgroup's cpuset read, the exit -- and none of these modules; also
    over explicit domains (other work is measured: the CPU tumbler runs on)
    with the summary a benchmark asks for."""
    from tumbler.platform.linux import procfs
    options = [str(tmp_path / arg) if arg.endswith(".json") else arg for arg in options]
    argv = ["tumbler", "-q", "exec", *options, "--", os.path.join(workloads, "spmd"), "-t",
            "3", "-b", "spin", "-p", "1", "-w", "700"]
    code = ("import os, sys\n"
            "real_exit = os._exit\n"
            "def report(status=0):\n"
            "    print('LOADED:' + ','.join(sorted(sys.modules)), flush=True)\n"
            "    real_exit(status)\n"
            "os._exit = report\n"
            "sys.argv = %r\n" % argv +
            "from tumbler.launch import entry_point\n"
            "try:\n"
            "    entry_point()\n"
            "except SystemExit as exit:\n"
            "    report(exit.code or 0)\n"
            "report()\n")
    loaded = _modules_loaded(code, tmp_path)
    never = set(NEVER_IN_A_RUN) - ({"ctypes"} if procfs._steady is None else set())
    assert not sorted(never & loaded)
    if not options:
        assert "tumbler.platform.linux.switches" in loaded, sorted(loaded)  # crowded: counted
    else:       # over the two domains (merged or not yet: what is measured, either way)
        with open(options[-1]) as summary:
            assert "0 / 1" in json.load(summary)["domain_note"]
