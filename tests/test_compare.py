"""``tumbler compare``: statistics, run order, report shape, real runs, real pinning."""

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from tumbler.commands import main as cli     # before compare, which builds on the CLI's options
from tumbler.commands.compare import (RunSetup, RunResult, StaticPlacer, compare_command, format_table,
                             parse_elapsed, parse_policies, pinned_targets, psets_targets,
                             own_cpu_of, read_summary, report, run_order, speedup, summarize)
from tumbler.errors import UsageError

from conftest import thread_masks, wait_for_threads

cli.main.add_command(compare_command)       # as cli.py registers it


def invoke(*args):
    return CliRunner().invoke(cli.main, ["compare", *args], catch_exceptions=False)


# -- statistics ------------------------------------------------------------------

def test_summarize_known_numbers():
    stats = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert stats["mean"] == 5.0
    assert stats["median"] == 4.5
    assert stats["min"] == 2.0 and stats["max"] == 9.0
    # sample standard deviation: sqrt(32 / 7)
    assert stats["cv"] == pytest.approx((32 / 7) ** 0.5 / 5.0)


def test_summarize_single_value_empty_and_zero_mean():
    assert summarize([3.0]) == {"mean": 3.0, "median": 3.0, "min": 3.0, "max": 3.0, "cv": 0.0}
    assert summarize([]) is None
    assert summarize([0.0, 0.0])["cv"] == 0.0


def test_speedup_is_default_over_policy():
    assert speedup(10.0, 5.0) == 2.0          # twice as fast as default
    assert speedup(10.0, 20.0) == 0.5
    assert speedup(None, 5.0) is None
    assert speedup(10.0, None) is None
    assert speedup(10.0, 0.0) is None


def test_run_order_interleaves_runs_across_policies():
    assert run_order(["default", "pinned", "tumbler"], 2) == [
        (1, "default"), (1, "pinned"), (1, "tumbler"),
        (2, "default"), (2, "pinned"), (2, "tumbler")]


@pytest.mark.parametrize("text, words", [
    ("default,bogus", "unknown policy 'bogus'"),
    ("default,,pinned", "empty policy name"),
    ("default,default", "named twice"),
])
def test_parse_policies_rejects_bad_lists(text, words):
    with pytest.raises(UsageError, match=words):
        parse_policies(text)


def test_parse_policies_accepts_own_and_tumbler_policies():
    assert parse_policies(" default, pinned,psets,tumbler,auto,observe") == [
        "default", "pinned", "psets", "tumbler", "auto", "observe"]


def test_parse_elapsed_takes_the_last_value():
    assert parse_elapsed("workload=spmd threads=3 elapsed_s=1.250000 throughput=9\n") == 1.25
    assert parse_elapsed("elapsed_s=1\nelapsed_s=2.5\n") == 2.5
    assert parse_elapsed("no timing here\n") is None
    assert parse_elapsed("elapsed_s=soon\n") is None
    assert parse_elapsed("myelapsed_s=3\n") is None


def test_summary_json_is_read_not_the_human_summary(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"wall_s": 2.0, "own_cpu_s": 0.042, "policy": "tumbler"}))
    assert own_cpu_of(read_summary(str(path))) == 0.042
    assert read_summary(str(tmp_path / "none.json")) is None        # tumbler wrote none
    path.write_text("tumbler: own CPU time 0.042 s\n")
    assert read_summary(str(path)) is None
    assert own_cpu_of(None) is None


def test_pinned_and_psets_targets():
    domains = (frozenset({0, 2}), frozenset({1, 3}))
    assert pinned_targets(domains) == [frozenset({c}) for c in (0, 1, 2, 3)]
    assert psets_targets(domains) == [frozenset({0, 2}), frozenset({1, 3})]


# -- the report ------------------------------------------------------------------

def _setup():
    return RunSetup(command=["prog", "-x"], domains=(frozenset({0}), frozenset({1})),
                domain_note="explicit domains: 0 / 1", tumbler_args=[],
                echo_tumbler_summary=False)


def _results():
    return [RunResult(1, "default", 0, 4.0, elapsed_s=3.9),
            RunResult(1, "pinned", 0, 5.0, elapsed_s=4.9, agent_cpu_s=0.01, threads_placed=4),
            RunResult(1, "tumbler", 0, 2.0, elapsed_s=1.9, agent_cpu_s=0.05),
            RunResult(2, "default", 0, 6.0, elapsed_s=5.9),
            RunResult(2, "pinned", 0, 5.0, elapsed_s=None, agent_cpu_s=0.03, threads_placed=4),
            RunResult(2, "tumbler", 0, 3.0, elapsed_s=2.9, agent_cpu_s=0.07)]


def test_report_structure_and_numbers():
    data = report(_setup(), ["default", "pinned", "tumbler"], 2, _results(), None)
    assert set(data) == {"command", "runs", "domains", "domain_note", "results",
                         "run_results", "failed"}
    assert data["domains"] == ["0", "1"] and data["failed"] is None
    by_policy = {row["policy"]: row for row in data["results"]}
    assert [row["policy"] for row in data["results"]] == ["default", "pinned", "tumbler"]
    for row in data["results"]:
        assert set(row) == {"policy", "runs", "statuses", "wall_s", "elapsed_s",
                            "agent_cpu_s", "speedup_vs_default", "elapsed_speedup_vs_default",
                            "probe"}
        assert row["probe"] is None                        # not asked for
        assert set(row["wall_s"]) == {"mean", "median", "min", "max", "cv"}
    assert by_policy["default"]["wall_s"]["mean"] == 5.0
    assert by_policy["default"]["speedup_vs_default"] == 1.0
    assert by_policy["default"]["agent_cpu_s"] is None
    assert by_policy["tumbler"]["speedup_vs_default"] == 2.0          # 5.0 / 2.5
    assert by_policy["tumbler"]["elapsed_speedup_vs_default"] == pytest.approx(4.9 / 2.4)
    assert by_policy["tumbler"]["agent_cpu_s"] == pytest.approx(0.06)
    assert by_policy["pinned"]["elapsed_s"] is None       # one run printed no elapsed_s
    assert by_policy["pinned"]["elapsed_speedup_vs_default"] is None
    assert [(r["run"], r["policy"]) for r in data["run_results"]] == \
        run_order(["default", "pinned", "tumbler"], 2)
    json.dumps(data)                                       # serialisable as is


def test_report_without_default_has_no_speedup():
    results = [r for r in _results() if r.policy != "default"]
    data = report(_setup(), ["pinned", "tumbler"], 2, results, None)
    assert all(row["speedup_vs_default"] is None for row in data["results"])


def test_failed_run_is_reported_and_kept_out_of_the_figures():
    results = _results()[:3] + [RunResult(2, "default", 3, 0.5)]
    data = report(_setup(), ["default", "pinned", "tumbler"], 2, results, results[-1])
    assert data["failed"] == {"run": 2, "policy": "default", "status": 3}
    default = data["results"][0]
    assert default["statuses"] == [0, 3]
    assert default["runs"] == 1 and default["wall_s"]["mean"] == 4.0
    assert "FAILED" in "\n".join(format_table(data))


def test_text_table_has_a_row_per_policy():
    data = report(_setup(), ["default", "pinned", "tumbler"], 2, _results(), None)
    lines = format_table(data)
    for policy in ("default", "pinned", "tumbler"):
        assert sum(1 for line in lines if line.split()[:1] == [policy]) == 1
    tumbler_row = next(line for line in lines if line.startswith("tumbler"))
    assert "2.000" in tumbler_row and "2.00" in tumbler_row and "0.060" in tumbler_row
    assert any("speedup" in line and "faster than default" in line for line in lines)


# -- the static placements, checked against the kernel ------------------------------

@pytest.fixture
def long_running(duty):
    """A process with 1 + 4 threads that lives until killed."""
    process = subprocess.Popen([duty, "600", "5", "5", "5", "5"])
    try:
        wait_for_threads(process.pid, 5)
        yield process
    finally:
        process.kill()
        process.wait()


def test_pinned_binds_each_thread_to_the_next_cpu(two_cpus, long_running):
    targets = pinned_targets([frozenset(two_cpus)])
    placer = StaticPlacer(targets)
    assert placer.place_new(long_running.pid) == 5
    assert placer.place_new(long_running.pid) == 0          # each thread only once
    masks = thread_masks(long_running.pid)
    tids = sorted(masks)
    assert list(placer.placed) == tids
    for i, tid in enumerate(tids):
        assert masks[tid] == targets[i % len(targets)] == placer.placed[tid]


def test_psets_binds_thread_i_to_domain_i_mod_k(two_cpus, long_running):
    domains = [frozenset({two_cpus[0]}), frozenset({two_cpus[1]})]
    placer = StaticPlacer(psets_targets(domains))
    placer.place_new(long_running.pid)
    masks = thread_masks(long_running.pid)
    assert [masks[tid] for tid in sorted(masks)] == [domains[i % 2] for i in range(5)]


def test_placer_skips_a_process_that_is_gone():
    process = subprocess.Popen(["true"])
    process.wait()
    placer = StaticPlacer([frozenset(os.sched_getaffinity(0))])
    assert placer.place_new(process.pid) == 0 and placer.placed == {}


# -- whole runs -------------------------------------------------------------------

def test_real_runs_of_every_policy(workloads, two_cpus):
    spmd = os.path.join(workloads, "spmd")
    domains = "%d/%d" % two_cpus
    result = invoke("--runs", "2", "--policies", "default,pinned,psets,tumbler",
                    "--domains", domains, "--json", "-q", "--", spmd, "-w", "1", "-p", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["domains"] == ["%d" % two_cpus[0], "%d" % two_cpus[1]]
    assert data["failed"] is None
    assert [(r["run"], r["policy"]) for r in data["run_results"]] == \
        run_order(["default", "pinned", "psets", "tumbler"], 2)
    for row in data["results"]:
        assert row["runs"] == 2 and row["statuses"] == [0, 0]
        assert row["wall_s"]["min"] > 0
        assert row["elapsed_s"] is not None          # spmd prints elapsed_s=
        assert row["speedup_vs_default"] is not None
    by_run = data["run_results"]
    assert all(r["agent_cpu_s"] is None for r in by_run if r["policy"] == "default")
    assert all(r["agent_cpu_s"] is not None for r in by_run if r["policy"] == "tumbler")
    for r in by_run:
        placed = r["threads_placed"]
        assert (placed is None) == (r["policy"] not in ("pinned", "psets"))


def test_text_output_names_every_policy(workloads):
    result = invoke("--runs", "1", "--policies", "default,tumbler,observe", "-q", "--",
                    os.path.join(workloads, "spmd"), "-w", "1", "-p", "1")
    assert result.exit_code == 0, result.output
    rows = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    for policy in ("default", "tumbler", "observe"):
        assert policy in rows


def test_failing_command_stops_and_exits_1():
    result = invoke("--runs", "3", "--policies", "default,pinned", "--json", "-q", "--",
                    "sh", "-c", "exit 3")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["failed"] == {"run": 1, "policy": "default", "status": 3}
    assert len(data["run_results"]) == 1
    assert "run 1 of default exited with status 3" in result.stderr


def test_missing_command_is_a_failed_run():
    result = invoke("--runs", "1", "--policies", "pinned", "-q", "--", "/nonexistent/prog")
    assert result.exit_code == 1
    assert "status 127" in result.stderr


@pytest.mark.parametrize("args, words", [
    (("--policies", "default,fastest"), "unknown policy"),
    (("--policy", "tumbler"), "use --policies"),
    (("--log", "/tmp/x.jsonl"), "--log cannot be used"),
    (("--interval", "1"), "--interval"),
    (("--domains", "0/0"), "in two domains"),
    (("--force",), "--force does not apply to compare"),
])
def test_bad_input_exits_2_before_any_run(tmp_path, args, words):
    marker = tmp_path / "ran"
    result = invoke(*args, "--", "touch", str(marker))
    assert result.exit_code == 2
    assert words in result.stderr
    assert not marker.exists()


def test_good_input_does_run(tmp_path):
    marker = tmp_path / "ran"
    result = invoke("--runs", "1", "--policies", "default", "-q", "--", "touch", str(marker))
    assert result.exit_code == 0, result.output
    assert marker.exists()


def test_verbose_shows_tumbler_summary_and_forwards_options(workloads, two_cpus):
    result = invoke("--runs", "1", "--policies", "tumbler", "--domains", "%d/%d" % two_cpus,
                    "--interval", "50", "-v", "--", os.path.join(workloads, "spmd"),
                    "-w", "1", "-p", "1")
    assert result.exit_code == 0, result.output
    assert "own CPU time" in result.stderr
    assert "explicit domains: %d / %d" % two_cpus in result.stderr   # --domains reached tumbler


# -- --probe -----------------------------------------------------------------------

def _bpftrace_missing():
    import shutil
    import sys
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "bpftrace needs Linux and root"
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    return None


@pytest.mark.skipif(_bpftrace_missing() is not None, reason=_bpftrace_missing() or "")
def test_probe_traces_the_command_under_every_policy(workloads, two_cpus):
    """Four threads on two mutexes wait for the locks under every policy,
    tumbler-run ones included: compare traces the command (tumbler's
    child), not tumbler."""
    locks = os.path.join(workloads, "locks")
    result = invoke("--runs", "1", "--policies", "default,pinned,tumbler", "--probe",
                    "--domains", "%d/%d" % two_cpus, "--json", "-q", "--",
                    locks, "-t", "4", "-w", "60", "-p", "8")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for run in data["run_results"]:
        assert run["probe"]["failure"] is None, run
        assert run["probe"]["lock_waits"] > 10 and run["probe"]["lock_s"] > 0, run
        assert run["probe"]["runq_waits"] > 0, run
        assert run["probe"]["cross_domain"] <= run["probe"]["migrations"]
    for row in data["results"]:
        assert row["probe"]["runs"] == 1
        assert row["probe"]["lock_s"] > 0
    # pinned binds each thread to one CPU at its start: afterwards nothing
    # migrates (a thread may move once, when it is bound).
    pinned = next(r for r in data["run_results"] if r["policy"] == "pinned")
    assert pinned["probe"]["migrations"] <= 5


@pytest.mark.skipif(_bpftrace_missing() is not None, reason=_bpftrace_missing() or "")
def test_probe_sees_a_command_that_contends_only_in_its_first_moments(early_locks, two_cpus):
    """A command whose lock contention is over after its first 0.3 s, well
    before bpftrace would attach to a running process (its threads then
    idle 1.5 s, so that the waits are read before they exit): every policy
    must still count its lock waits, because the command is held at a gate
    until the probes are attached.  Without the gate every policy reads 0."""
    result = invoke("--runs", "1", "--policies", "default,pinned,psets,tumbler", "--probe",
                    "--domains", "%d/%d" % two_cpus, "--json", "-q", "--",
                    early_locks, "300", "1500")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["policy"] for r in data["run_results"]] == ["default", "pinned", "psets",
                                                          "tumbler"]
    for run in data["run_results"]:
        assert run["probe"]["failure"] is None, run
        assert run["probe"]["lock_waits"] > 0, run
        assert run["elapsed_s"] is not None and run["wall_s"] >= run["elapsed_s"], run


def test_probe_missing_command_is_127_without_a_gate_left(tmp_path, monkeypatch):
    from tumbler.commands import compare
    setup = _setup()
    setup.command = ["/nonexistent/prog"]
    setup.probe_kinds = ("locks",)
    monkeypatch.setattr(compare.tempfile, "tempdir", str(tmp_path))
    result = compare.run_once(setup, "default", 1)
    assert result.status == 127
    assert os.listdir(str(tmp_path)) == []


def test_probe_table_lines_only_with_probe():
    data = report(_setup(), ["default", "tumbler"], 2, _results(), None)
    assert all(row["probe"] is None for row in data["results"])
    assert not any("probes" in line for line in format_table(data))


def test_probe_without_bpftrace_is_one_line_before_any_run(tmp_path, monkeypatch):
    import sys
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    empty = tmp_path / "empty"
    empty.mkdir()
    marker = tmp_path / "ran"
    monkeypatch.setenv("PATH", str(empty))
    result = invoke("--probe", "--policies", "default", "--", "/usr/bin/touch", str(marker))
    assert result.exit_code == 1
    assert result.stderr.startswith("tumbler: bpftrace not found")
    assert result.stderr.count("\n") == 1
    assert not marker.exists()
