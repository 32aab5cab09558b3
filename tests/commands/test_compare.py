"""``tumbler compare``: statistics, run order, report shape, real runs, real pinning."""

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from tumbler.commands import main as cli     # before compare, which builds on the CLI's options
from tumbler.balance.static import StaticPlacer, pinned_targets, psets_targets
from tumbler.commands.compare import compare_command
from tumbler.commands.compare.report import format_table, report
from tumbler.commands.compare.runs import (RunResult, RunSetup, own_cpu_of, parse_elapsed,
                                           read_summary)
from tumbler.commands.compare.schedule import run_order
from tumbler.commands.compare.stats import slowdown_spread, speedup, summarize
from tumbler.commands.compare.variants import parse_policies, split_variant, variant_flags
from tumbler.errors import UsageError

from support.helpers import thread_masks, wait_for_threads

cli.main.add_command(compare_command)       # as commands/main.py's SUBCOMMANDS loads it


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
                            "probe", "verdict"}
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
    assert by_policy["default"]["verdict"] is None
    # Pairs (4.0, 2.0) and (6.0, 3.0): ratio 0.5 each, [min, max] at 50%.
    assert by_policy["tumbler"]["verdict"] == {
        "pairs": 2, "ratio_median": 0.5, "ratio_low": 0.5, "ratio_high": 0.5,
        "confidence": 0.5, "verdict": "faster"}
    assert by_policy["pinned"]["verdict"]["ratio_median"] == pytest.approx((5 / 4 + 5 / 6) / 2)
    assert by_policy["pinned"]["verdict"]["verdict"] == "no difference"
    assert "  tumbler: faster, median 0.500, 50% interval 0.500-0.500 over 2 pairs" \
        in format_table(data)
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
        walls = sorted(r["wall_s"] for r in data["run_results"] if r["policy"] == row["policy"])
        assert row["wall_s"]["min"] == pytest.approx(walls[0]) and walls[0] > 0
        assert row["wall_s"]["max"] == pytest.approx(walls[-1])
        assert row["elapsed_s"] is not None          # spmd prints elapsed_s=
        assert row["elapsed_s"]["max"] <= row["wall_s"]["max"]
    default = data["results"][0]
    assert default["policy"] == "default" and default["speedup_vs_default"] == 1.0
    for row in data["results"]:
        assert row["speedup_vs_default"] == pytest.approx(
            default["wall_s"]["mean"] / row["wall_s"]["mean"], rel=1e-3)
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
    import tempfile
    from tumbler.commands.compare.runs import run_once
    setup = _setup()
    setup.command = ["/nonexistent/prog"]
    setup.probe_kinds = ("locks",)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run_once(setup, "default", 1)
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


# -- policy variants -----------------------------------------------------------------

def test_variants_are_policies_with_tumbler_options():
    assert parse_policies("default,auto+capacity=cpus,auto") == [
        "default", "auto+capacity=cpus", "auto"]
    assert parse_policies("auto+share=time,auto+share=space") == [
        "auto+share=time", "auto+share=space"]
    assert split_variant("speed+share=space+share-policy=max-qos") == (
        "speed", [("share", "space"), ("share-policy", "max-qos")])
    assert split_variant("pinned") == ("pinned", [])
    assert variant_flags("auto+capacity=measured+share=time") == [
        "--capacity", "measured", "--share", "time"]
    assert variant_flags("tumbler") == []


@pytest.mark.parametrize("args, words", [
    (("--policies", "auto+capacity"), "'capacity' is not KEY=VALUE"),
    (("--policies", "auto+speed=fast"), "unknown variant option 'speed'"),
    (("--policies", "auto+capacity=all"), "capacity must be measured or cpus, not 'all'"),
    (("--policies", "auto+share=time+share=space"), "share is given twice"),
    (("--policies", "default+capacity=cpus"), "only the tumbler-run policies"),
    (("--policies", "fast+capacity=cpus"), "unknown policy 'fast'"),
    (("--policies", "auto+share=space,auto+share=space"), "named twice"),
    (("--policies", "auto+capacity=cpus+share=time,auto+share=time+capacity=cpus"),
     "are the same policy"),
    (("--policies", "default,alone"), "'alone' is not a policy to name"),
    (("--policies", "default,auto+share=space"), "give the others with --together"),
    (("--capacity", "measured"), "--policies default,auto+capacity=measured"),
    (("--share", "space"), "--share does not apply to compare: give it to a policy"),
    (("--together", "sleep 1", "--policies", "default,pinned"),
     "--together cannot be used with pinned"),
    (("--together", "sleep 1", "--policies", "default,auto", "--probe"),
     "--together cannot be used with --probe"),
    (("--together", "sh -c 'exit"), "No closing quotation"),
    (("--background", "  "), "--background: empty command"),
])
def test_bad_variants_and_combinations_exit_2_with_one_line(tmp_path, args, words):
    marker = tmp_path / "ran"
    result = invoke(*args, "--", "touch", str(marker))
    assert result.exit_code == 2
    assert words in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tumbler: ")
    assert not marker.exists()


@pytest.fixture
def recorded(monkeypatch):
    """The argv of every process compare starts, and every tumbler summary it reads."""
    from tumbler.commands.compare import runs, together
    seen = {"argv": [], "summaries": []}
    real_popen, real_read = subprocess.Popen, runs.read_summary

    class Recording(real_popen):
        def __init__(self, args, *rest, **options):
            seen["argv"].append([str(a) for a in args])
            super().__init__(args, *rest, **options)

    def reading(path):
        summary = real_read(path)
        seen["summaries"].append(summary)
        return summary

    monkeypatch.setattr(subprocess, "Popen", Recording)
    monkeypatch.setattr(runs, "read_summary", reading)        # a run of CMD
    monkeypatch.setattr(together, "read_summary", reading)    # --together
    return seen


def test_a_variant_passes_its_options_to_its_tumbler_run(workloads, two_cpus, recorded):
    result = invoke("--runs", "1", "--policies", "auto+capacity=measured,tumbler",
                    "--domains", "%d/%d" % two_cpus, "--json", "-q", "--",
                    os.path.join(workloads, "spmd"), "-w", "1", "-p", "1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [row["policy"] for row in data["results"]] == ["auto+capacity=measured", "tumbler"]
    assert all(row["runs"] == 1 for row in data["results"])
    variant, plain = [argv for argv in recorded["argv"] if "exec" in argv]
    head = variant[:variant.index("exec")]
    assert head[head.index("--policy") + 1] == "auto"
    assert head[head.index("--capacity") + 1] == "measured"
    assert "--capacity" not in plain and plain[plain.index("--policy") + 1] == "tumbler"
    assert all(s is not None for s in recorded["summaries"])
    assert recorded["summaries"][0]["policy"] == "auto"


# -- --background ------------------------------------------------------------------

_COUNT_ALIVE = """
import os, sys, time
pids_file, counts_file = sys.argv[1:3]
previous = open(counts_file).read().split() if os.path.exists(counts_file) else []
deadline = time.monotonic() + 20
while True:     # this run's background has written its 2 PIDs
    pids = open(pids_file).read().split() if os.path.exists(pids_file) else []
    if len(pids) >= 2 * (len(previous) + 1):
        break
    if time.monotonic() > deadline:
        sys.exit(5)
    time.sleep(0.01)
def alive(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False
with open(counts_file, "a") as f:
    f.write("%d\\n" % sum(alive(pid) for pid in pids))
"""


def _alive(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_background_runs_during_each_run_and_nothing_is_left(tmp_path):
    """The background command (a shell and the sleep it started) runs
    during every run, and is gone -- both processes -- before the next."""
    import sys
    pids, counts = tmp_path / "pids", tmp_path / "counts"
    background = "sh -c 'sleep 60 & echo $! >> %s; echo $$ >> %s; wait'" % (pids, pids)
    result = invoke("--runs", "3", "--policies", "default", "--background", background,
                    "--json", "-q", "--", sys.executable, "-c", _COUNT_ALIVE,
                    str(pids), str(counts))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["background"] == [["sh", "-c", background.split("'")[1]]]
    assert all(r["failure"] is None for r in data["run_results"])
    # Each run saw its own two background processes alive, and no earlier one.
    assert counts.read_text().split() == ["2", "2", "2"]
    started = pids.read_text().split()
    assert len(started) == 6 and len(set(started)) == 6
    assert not any(_alive(pid) for pid in started)


def test_background_that_ends_early_fails_the_run():
    result = invoke("--runs", "2", "--policies", "default", "--background", "sh -c 'exit 4'",
                    "--json", "-q", "--", "sleep", "0.2")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["failed"] == {"run": 1, "policy": "default", "status": 0, "failure":
                              "background command `sh -c 'exit 4'` ended during the run "
                              "(exit status 4)"}
    assert len(data["run_results"]) == 1
    assert "run 1 of default failed: background command `sh -c 'exit 4'` ended" \
        in result.stderr


def test_background_that_cannot_start_fails_the_run(tmp_path):
    marker = tmp_path / "ran"
    result = invoke("--runs", "1", "--policies", "default", "--background",
                    "/nonexistent/hog", "-q", "--", "touch", str(marker))
    assert result.exit_code == 1
    assert "background command `/nonexistent/hog` cannot be started" in result.stderr
    assert "FAILED: background command" in result.stdout
    assert not marker.exists()


# -- --together ------------------------------------------------------------------------

def _together_setup():
    setup = _setup()
    setup.together = [["other", "-y"]]
    return setup


def _program_run(run, policy, first, second, agent=None):
    return RunResult(run, policy, 0, max(first, second), agent_cpu_s=agent, programs=[
        {"status": 0, "wall_s": first, "elapsed_s": first - 0.1},
        {"status": 0, "wall_s": second, "elapsed_s": None}])


def test_report_with_together_has_slowdowns_and_their_spread():
    results = [_program_run(1, "alone", 1.0, 2.0), _program_run(1, "default", 2.0, 3.0),
               _program_run(1, "auto", 1.5, 3.0, 0.02)]
    results[0] = results[0]._replace(wall_s=3.0)          # alone: one after the other
    data = report(_together_setup(), ["alone", "default", "auto"], 1, results, None)
    assert data["programs"] == [["prog", "-x"], ["other", "-y"]]
    assert "background" not in data
    rows = {row["policy"]: row for row in data["results"]}
    assert [p["slowdown"] for p in rows["alone"]["programs"]] == [1.0, 1.0]
    assert [p["slowdown"] for p in rows["default"]["programs"]] == [2.0, 1.5]
    assert rows["default"]["slowdown_spread"] == {
        "mean": 1.75, "stdev": 0.25, "max_over_min": pytest.approx(4 / 3)}
    assert rows["default"]["programs"][0]["elapsed_slowdown"] == pytest.approx(1.9 / 0.9)
    assert rows["default"]["programs"][1]["elapsed_s"] is None
    assert rows["default"]["programs"][1]["elapsed_slowdown"] is None
    assert rows["alone"]["speedup_vs_default"] == 1.0      # 3.0 / 3.0
    assert rows["auto"]["agent_cpu_s"] == 0.02
    assert [r["programs"][1]["wall_s"] for r in data["run_results"]] == [2.0, 3.0, 3.0]
    json.dumps(data)
    lines = format_table(data)
    default_row = next(line for line in lines[lines.index(next(
        line for line in lines if line.startswith("programs "))):] if line.startswith("default"))
    assert default_row.split()[1:] == ["2.000", "2.00", "3.000", "1.50", "1.75", "0.250",
                                       "1.33"]
    assert any(line.startswith("  program #2: other -y") for line in lines)


def test_slowdown_spread():
    assert slowdown_spread([2.0, 2.0]) == {"mean": 2.0, "stdev": 0.0, "max_over_min": 1.0}
    assert slowdown_spread([1.0, None]) is None
    assert slowdown_spread([]) is None


def test_together_program_that_fails_stops_compare():
    result = invoke("--runs", "2", "--policies", "default", "--together", "sh -c 'exit 3'",
                    "--json", "-q", "--", "true")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["failed"] == {"run": 1, "policy": "alone", "status": 3, "failure": None}
    assert [p["status"] for p in data["run_results"][0]["programs"]] == [0, 3]


def test_tumbler_that_cannot_attach_fails_the_run_and_nothing_runs(tmp_path):
    """tumbler refuses --share space with cpuset sets before it attaches:
    the run fails saying so, and the held programs are never released."""
    marker = tmp_path / "ran"
    result = invoke("--runs", "1", "--policies", "auto+share=space", "--binder", "cpuset",
                    "--json", "-q", "--together", "true", "--", "sh", "-c",
                    "[ -e %s ] && touch %s.twice; touch %s" % (marker, marker, marker))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["failed"] == {"run": 1, "policy": "auto+share=space", "status": 2,
                              "failure": "tumbler exited with status 2 before it attached "
                                         "to the programs"}
    assert data["run_results"][1]["programs"] == []
    assert "--share space binds with --binder affinity only" in result.stderr
    assert marker.exists()                          # the alone run
    assert not (tmp_path / "ran.twice").exists()    # never released under tumbler


def test_two_programs_together_alone_default_and_space_shared(workloads, two_cpus):
    """The issue's case (a), short: two spmd programs run alone, together
    plainly and together under tumbler sharing the CPUs by space; each
    program's slowdown and their spread are reported, and nothing outside
    compare's programs has its mask changed."""
    spmd = os.path.join(workloads, "spmd")
    bystander = subprocess.Popen(["sleep", "60"])
    own_mask = os.sched_getaffinity(0)
    try:
        bystander_mask = thread_masks(bystander.pid)
        result = invoke("--runs", "1", "--policies", "default,auto+share=space",
                        "--domains", "%d/%d" % two_cpus, "--json", "-q",
                        "--together", "%s -t 4 -w 50 -p 1" % spmd,
                        "--", spmd, "-t", "2", "-w", "100", "-p", "1")
        assert result.exit_code == 0, result.output
        assert thread_masks(bystander.pid) == bystander_mask
    finally:
        bystander.kill()
        bystander.wait()
    assert os.sched_getaffinity(0) == own_mask
    data = json.loads(result.stdout)
    assert data["programs"] == [[spmd, "-t", "2", "-w", "100", "-p", "1"],
                                [spmd, "-t", "4", "-w", "50", "-p", "1"]]
    assert data["failed"] is None
    assert [r["policy"] for r in data["run_results"]] == ["alone", "default",
                                                          "auto+share=space"]
    for run in data["run_results"]:
        assert run["status"] == 0 and run["failure"] is None
        assert len(run["programs"]) == 2
        for program in run["programs"]:
            assert program["status"] == 0 and program["wall_s"] > 0
            assert program["elapsed_s"] is not None         # spmd prints elapsed_s=
            assert program["wall_s"] >= program["elapsed_s"]
    alone, default, space = data["results"]
    assert alone["policy"] == "alone"
    assert [p["slowdown"] for p in alone["programs"]] == [1.0, 1.0]
    for row in (default, space):
        assert row["runs"] == 1
        assert len(row["programs"]) == 2
        assert all(p["slowdown"] > 0 for p in row["programs"])
        # the spread of the row's own slowdowns (population stdev)
        slowdowns = [p["slowdown"] for p in row["programs"]]
        mean = sum(slowdowns) / 2
        assert row["slowdown_spread"] == pytest.approx(
            {"mean": mean, "stdev": abs(slowdowns[0] - mean),
             "max_over_min": max(slowdowns) / min(slowdowns)})
    assert default["agent_cpu_s"] is None
    assert space["agent_cpu_s"] is not None                # own_cpu_s of the summary


# -- the verdict against default ---------------------------------------------------

def test_median_interval_is_the_sign_tests():
    from tumbler.commands.compare.stats import median_interval
    # n = 10 at 95%: the 2nd smallest and 2nd largest, P = 1 - 2 * 11/1024.
    low, high, reached = median_interval([0.9, 1.01, 0.95, 1.0, 0.97, 0.99, 1.02, 0.98, 0.96, 1.1])
    assert (low, high) == (0.95, 1.02)
    assert reached == pytest.approx(1 - 2 * 11 / 1024)
    # Too few pairs for 95%: [min, max] and the level it reaches.
    assert median_interval([1.0, 1.2, 1.1]) == (1.0, 1.2, 0.75)
    assert median_interval([1.0]) == (1.0, 1.0, 0.0)


def test_paired_verdict_pairs_runs_by_number():
    from tumbler.commands.compare.runs import RunResult
    from tumbler.commands.compare.stats import paired_verdict
    default = [RunResult(run, "default", 0, wall) for run, wall in
               enumerate([10.0, 10.4, 9.8, 10.1, 10.2, 9.9, 10.0], 1)]
    slower = [RunResult(r.run, "auto", 0, r.wall_s * 1.03) for r in default]
    same = [RunResult(r.run, "auto", 0, r.wall_s * f) for r, f in
            zip(default, (1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01))]
    faster = [RunResult(r.run, "auto", 0, r.wall_s * 0.8) for r in default[:6]]
    v = paired_verdict(default, slower)
    assert v["verdict"] == "slower" and v["pairs"] == 7
    assert v["ratio_median"] == pytest.approx(1.03) and v["ratio_low"] > 1
    assert paired_verdict(default, same)["verdict"] == "no difference"
    v = paired_verdict(default, faster)
    assert v["verdict"] == "faster" and v["pairs"] == 6 and v["confidence"] > 0.95
    assert paired_verdict(default, []) is None
