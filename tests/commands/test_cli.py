"""CLI behaviour: exit statuses, one-line errors, exec pass-through."""

import json
import os
import signal
import stat
import subprocess
import threading

import pytest

from support.helpers import REPO, assert_no_traceback, run_tumbler, tumbler_cmd


def test_version_and_help():
    result = run_tumbler("--version")
    assert result.returncode == 0 and "tumbler" in result.stdout
    result = run_tumbler("--help")
    assert result.returncode == 0
    for option in ("--level", "--domains", "--policy", "--interval", "--config", "--binder",
                   "--log", "--dry-run", "--duration", "exec", "topology"):
        assert option in result.stdout


def test_topology_json_lists_levels_and_auto_choice():
    result = run_tumbler("topology", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    online = set()
    for cpus in data["levels"]["core"]:
        online.add(cpus)
    assert data["online"]
    assert set(data["levels"]) >= {"package", "llc", "core"}
    assert data["auto"]["level"] in ("auto", "package", "numa", "llc")
    text = run_tumbler("topology")
    assert text.returncode == 0 and "auto:" in text.stdout


@pytest.mark.parametrize("args, status, words", [
    ((), 2, "nothing to do"),
    (("-p", "999999999"), 1, "no such process"),
    (("--domains", "0-", "-p", "1"), 2, "bad CPU list"),
    (("--domains", "0/0", "-p", str(os.getpid())), 2, "in two domains"),
    (("--domains", "0//1", "-p", str(os.getpid())), 2, "empty domain"),
    (("--domains", "0/4096", "-p", str(os.getpid())), 2, "not on-line"),
    (("-p", "1"), 2, "refusing PID 1"),
    (("-p", "2"), 2, "kernel thread"),
    (("--interval", "0", "-p", str(os.getpid())), 2, "--interval"),
    (("--interval", "-5", "-p", str(os.getpid())), 2, "--interval"),
    (("--duration", "-1", "-p", str(os.getpid())), 2, "--duration"),
    (("--level", "llc", "--domains", "0", "-p", str(os.getpid())), 2, "exclude"),
    (("--policy", "bogus", "-p", "1"), 2, "bogus"),
    (("--config", "/nonexistent/x.yaml", "-p", str(os.getpid())), 2, "cannot read config"),
])
def test_bad_input_is_one_line_and_documented_status(args, status, words):
    result = run_tumbler(*args)
    assert result.returncode == status, (result.returncode, result.stderr)
    assert words in result.stderr
    assert_no_traceback(result.stderr)
    assert "tumbler" in result.stderr.strip().splitlines()[-1]


def test_thread_id_is_refused_as_a_process():
    ready = threading.Event()
    stop = threading.Event()

    def body():
        ready.set()
        stop.wait()

    worker = threading.Thread(target=body)
    worker.start()
    ready.wait()
    try:
        result = run_tumbler("-p", str(worker.native_id))
    finally:
        stop.set()
        worker.join()
    assert result.returncode == 2
    assert "is a thread of process %d" % os.getpid() in result.stderr


@pytest.mark.parametrize("config_text, words", [
    ("- just\n- a list\n", "must be a mapping"),
    ("tolerance: [1, 2\n", "not valid YAML"),
    ("colour: blue\n", "unknown key colour"),
    ("tolerance: -1\n", "tolerance must be a number from 0 to 10"),
    ("idle_interval_ms: 0\n", "idle_interval_ms must be a whole number from 10 to"),
    ("variation_table: [{cv: 0.1, interval_ms: 50}, {cv: 0.2, interval_ms: 100}]\n",
     "strictly decreasing"),
    ("speed: {threshold: 5}\n", "speed.threshold"),
    ("defaults: {policy: fastest}\n", "defaults.policy"),
    # a key of the other layout (the service's tumbler.yaml) says where it goes
    ("service: {scan_interval: 2}\ntolerance: 0.2\n",
     ":2: tolerance goes under balancing: in a file with service:"),
    ("balancing:\n  colour: 1\n", ":2: balancing: unknown key colour"),
    ("colour: blue\n", "the service's tumbler.yaml has service, balancing, sharing, programs"),
])
def test_bad_config_exits_2(tmp_path, config_text, words):
    path = tmp_path / "tumbler.yaml"
    path.write_text(config_text)
    result = run_tumbler("--config", str(path), "-p", str(os.getpid()))
    assert result.returncode == 2, result.stderr
    assert words in result.stderr
    assert_no_traceback(result.stderr)


@pytest.mark.parametrize("args, words", [
    # the syntax, not only the part it could not read
    (("--domains", "0-3/x"), "cannot parse 'x' (CPU numbers and ranges like 0-3,8,10-20:2"),
    # the CPUs that are on-line, not only the one that is not
    (("--domains", "0/4096"), "CPU 4096 is not on-line (on-line: "),
    (("-q", "-v"), "-q/--quiet (no summary) and -v/--verbose (a line per round) exclude"),
    (("--share", "space"), "give two or more -p PID"),
])
def test_error_says_what_would_be_right(args, words):
    result = run_tumbler(*args, "-p", str(os.getpid()))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def test_error_for_an_option_missing_its_value_is_one_line():
    """click lists a choice's values on lines of their own; ours is one."""
    result = run_tumbler("probe", "-p", str(os.getpid()))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "locks, latency, migrations, all (see tumbler probe --help)" in result.stderr


def test_config_that_is_a_directory_says_so(tmp_path):
    result = run_tumbler("--config", str(tmp_path), "-p", str(os.getpid()))
    assert result.returncode == 2
    assert result.stderr == "tumbler: bad config %s: a directory, not a regular file\n" % tmp_path


def test_config_value_out_of_range_names_the_range(tmp_path):
    path = tmp_path / "tumbler.yaml"
    path.write_text("tolerance: 20%\n")           # YAML: a string
    result = run_tumbler("--config", str(path), "-p", str(os.getpid()))
    assert result.returncode == 2
    assert result.stderr.rstrip().endswith(
        ":1: tolerance must be a number from 0 to 10 (a fraction: 0.1 means 10%)"), result.stderr


@pytest.mark.parametrize("text", [
    "root:$y$j9T$SECRETSECRET:20228:0:99999:7:::\n",       # /etc/shadow's shape
    "speed:\n  SECRET SECRET: 1\n",
    "tolerance: 12345.SECRET\n",
    "tolerance: 4711\n",
    "defaults: {policy: SECRET}\n",
    "discover_ms: 987654321\n",
])
def test_config_error_never_shows_the_files_content(tmp_path, text):
    """Root reads any file it is given; an error line names the key, its
    line and what is expected, never what the file holds."""
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    result = run_tumbler("--config", str(path), "-p", str(os.getpid()))
    assert result.returncode == 2 and "bad config %s:" % path in result.stderr, result.stderr
    for secret in ("SECRET", "4711", "987654321", "12345"):
        assert secret not in result.stderr, result.stderr


def test_config_takes_the_services_file_and_uses_its_balancing_keys(tmp_path):
    """The service's tumbler.yaml (as shipped, with a balancing: part
    added) is a --config file too: its balancing: keys apply to the run,
    its service: and programs: are the service's."""
    shipped = open(os.path.join(REPO, "platform", "tumbler.yaml")).read()
    path = tmp_path / "tumbler.yaml"
    path.write_text(shipped + "balancing:\n  tolerance: 0.2\n  defaults: {policy: observe}\n")
    summary = tmp_path / "summary.json"
    result = run_tumbler("--config", str(path), "-q", "--duration", "0.1", "--summary-json",
                         str(summary), "-p", str(os.getpid()))
    assert result.returncode == 0, result.stderr
    assert json.loads(summary.read_text())["policy"] == "observe"


def test_service_check_says_where_a_runs_key_goes(tmp_path):
    path = tmp_path / "tumbler.yaml"
    path.write_text("tolerance: 0.2\n")
    result = run_tumbler("service", "--check", str(path))
    assert result.returncode == 2
    assert "tolerance goes under balancing: in the service's file" in result.stderr


def test_good_config_is_accepted(tmp_path, spawner):
    """The file's settings take effect: its default policy runs, and its
    variation table sets the rounds' intervals (a CV of 0.4 or more: 100
    ms by this table, 50 ms by the built-in one)."""
    path = tmp_path / "tumbler.yaml"
    path.write_text("variation_table:\n  - {cv: 0.3, interval_ms: 100}\n  - [0.1, 300]\n"
                    "tolerance: 0.2\ndefaults: {policy: observe}\n")
    log, summary = tmp_path / "run.jsonl", tmp_path / "summary.json"
    # two spinners and an idle main thread: a CV of about 0.7 every round
    result = run_tumbler("--config", str(path), "-q", "--log", str(log), "--summary-json",
                         str(summary), "exec", "--", spawner, "2", "100000", "1", "1", "0")
    assert result.returncode == 0, result.stderr
    assert json.loads(summary.read_text())["policy"] == "observe"
    rounds = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(record["thread_cv"] >= 0.4 for record in rounds), rounds
    for record in rounds:
        assert record["policy"] == "observe" and record["moves"] == []
        # (the idle interval, 800 ms, below the table's last row)
        cv = record["thread_cv"]
        assert record["interval_ms"] == (100 if cv >= 0.3 else 300 if cv >= 0.1 else 800), record


@pytest.mark.parametrize("command, status", [
    (["true"], 0),
    (["false"], 1),
    (["sh", "-c", "exit 7"], 7),
    (["sh", "-c", "kill -TERM $$"], 128 + 15),
    (["sh", "-c", "kill -KILL $$"], 128 + 9),
    (["/nonexistent/command"], 127),
])
def test_exec_passes_exit_status_through(command, status):
    result = run_tumbler("-q", "exec", "--", *command)
    assert result.returncode == status, result.stderr
    assert_no_traceback(result.stderr)


def test_exec_not_executable_is_126(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(stat.S_IRUSR)
    result = run_tumbler("exec", "--", str(script))
    assert result.returncode == 126
    assert "cannot execute" in result.stderr


def test_options_after_exec_override_those_before(tmp_path):
    log = tmp_path / "run.jsonl"
    result = run_tumbler("--policy", "tumbler", "--log", str(log), "exec", "--policy",
                         "observe", "--", "sh", "-c", "sleep 0.4")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines and all(line["policy"] == "observe" for line in lines)


def test_exec_forwards_sigterm_and_reports_status(tmp_path):
    marker = tmp_path / "got-term"
    script = "trap 'touch %s; exit 3' TERM; while :; do sleep 0.05; done" % marker
    proc = subprocess.Popen(tumbler_cmd("-q", "exec", "--", "sh", "-c", script),
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = 50
        while deadline and not _has_child(proc.pid):
            deadline -= 1
            threading.Event().wait(0.05)
        threading.Event().wait(0.2)
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert marker.exists(), "SIGTERM was not forwarded to the command"
    assert proc.returncode == 3, stderr


def _has_child(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return bool(f.read().split())
    except OSError:
        return False


def test_summary_is_printed_on_stderr():
    result = run_tumbler("--domains", "0/1", "exec", "--", "sh", "-c", "sleep 0.3")
    assert result.returncode == 0
    assert " rounds, " in result.stderr and "own CPU time" in result.stderr
    assert "explicit domains" in result.stderr


def test_summary_json_has_the_figures_of_the_human_summary(tmp_path):
    out = tmp_path / "summary.json"
    result = run_tumbler("--domains", "0/1", "--summary-json", str(out), "exec", "--",
                         "sh", "-c", "sleep 0.3")
    assert result.returncode == 0, result.stderr
    assert "own CPU time" in result.stderr          # the human summary is unchanged
    summary = json.loads(out.read_text())
    assert {"wall_s", "end_reason", "intervals", "quiet_intervals", "threads_seen",
            "migrations", "core_changes", "policy", "dry_run", "domain_note",
            "spread_early", "spread_late", "own_cpu_s", "unrestored"} <= set(summary)
    assert summary["policy"] == "auto" and summary["end_reason"] == "command exited"
    assert summary["domain_note"] in result.stderr
    assert "%.3f s" % summary["own_cpu_s"] in result.stderr
    assert summary["unrestored"] == 0 and "probe" not in summary
    # The whole process: Python's start alone is several ms of CPU.
    assert summary["process_cpu_s"] >= summary["own_cpu_s"] + 0.002
    assert "%.3f s with its start-up" % summary["process_cpu_s"] in result.stderr


def test_summary_json_is_written_with_quiet_and_checked_first(tmp_path):
    out = tmp_path / "summary.json"
    result = run_tumbler("-q", "--summary-json", str(out), "exec", "--", "true")
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(out.read_text())["threads_seen"] >= 1
    marker = tmp_path / "ran"
    result = run_tumbler("--summary-json", str(tmp_path / "no" / "dir.json"), "exec", "--",
                         "touch", str(marker))
    assert result.returncode == 2 and "cannot write summary" in result.stderr
    assert not marker.exists()


def test_the_summary_is_one_line_with_sorted_keys_even_where_json_writes_it(tmp_path,
                                                                           capsys):
    """The state files' writer writes the summary; json only what that
    cannot (a NaN), in the same form: one line, keys sorted, no spaces.
    A write that fails is one warning naming the file, not a traceback."""
    from tumbler.commands.run import _write_summary
    path = tmp_path / "summary.json"
    for record, text in (({"b": 1.5, "a": [1, "x"]}, '{"a":[1,"x"],"b":1.5}'),
                         ({"b": float("nan"), "a": 1}, '{"a":1,"b":NaN}')):
        _write_summary(open(path, "w"), str(path), record)
        assert path.read_text() == text + "\n"
    _write_summary(open("/dev/full", "w"), "/dev/full", {"a": 1})
    assert capsys.readouterr().err == \
        "tumbler: cannot write summary /dev/full: No space left on device\n"


def test_illumos_fixture_tree_through_the_cli(tmp_path):
    """--platform illumos --root DIR: topology, stat and a dry run on a captured tree."""
    from support.illumos_fixtures import build_example_tree
    root = str(build_example_tree(str(tmp_path / "tree")))
    base = ("--platform", "illumos", "--root", root)
    topo = run_tumbler(*base, "topology", "--json")
    assert topo.returncode == 0, topo.stderr
    data = json.loads(topo.stdout)
    assert data["platform"] == "illumos"
    assert data["levels"]["package"] == ["0-7", "8-14"]         # CPU 15 is off-line
    assert data["auto"]["level"] == "package"
    stat_result = run_tumbler(*base, "stat", "-p", "4242")
    assert stat_result.returncode == 0, stat_result.stderr
    assert "compute-0" in stat_result.stdout and "LCK" in stat_result.stdout
    dry = run_tumbler(*base, "--domains", "0-3/4-7", "-n", "-p", "4242", "--duration", "0.3")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stderr


def _ignored_signals(text):
    mask = int(next(line for line in text.splitlines() if line.startswith("SigIgn:")).split()[1],
               16)
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}


@pytest.mark.parametrize("quick", [True, False])
def test_exec_command_gets_the_signals_python_ignores_back(quick):
    """Python ignores SIGPIPE and SIGXFSZ for itself; the command must not
    inherit that (``tumbler exec -- yes | head`` would never get SIGPIPE).
    Both ways in: the quick path and click's (--summary-json is not quick)."""
    extra = () if quick else ("--summary-json", os.devnull)
    result = run_tumbler("-q", *extra, "exec", "--", "grep", "SigIgn", "/proc/self/status")
    assert result.returncode == 0, result.stderr
    ignored = _ignored_signals(result.stdout)
    assert not ignored & {signal.SIGPIPE, signal.SIGXFSZ}, ignored


def test_a_signal_ignored_at_start_stays_ignored():
    """``nohup tumbler exec -- CMD``: SIGHUP was ignored, so the command
    keeps it ignored, and a SIGHUP to tumbler neither stops it nor reaches
    the command: both run on and exit 0, as CMD alone would."""
    def ignore_hup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(
        tumbler_cmd("-q", "exec", "--", "sh", "-c", "grep SigIgn /proc/self/status; sleep 1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore_hup)
    try:
        first = proc.stdout.readline()          # the command runs
        proc.send_signal(signal.SIGHUP)
        rest, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert signal.SIGHUP in _ignored_signals(first)
    assert proc.returncode == 0, stderr
    assert_no_traceback(stderr)
