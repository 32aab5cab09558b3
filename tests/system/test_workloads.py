"""Tests for the example workloads under examples/workloads.

The workloads are the C programs tumbler is demonstrated and evaluated on, so
these tests check their contract rather than their speed: the command line
(help, errors), the single key=value result line, that the worker threads
exist under their documented names, and that the pipeline really gives its
stages unequal CPU load.  Parameters are tiny so the file runs in seconds, and
nothing asserts on elapsed time (the machine may be busy).
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import helpers

REPO_ROOT = Path(helpers.REPO)
WORKLOADS_DIR = REPO_ROOT / "examples" / "workloads"

COMMON_KEYS = ("workload", "threads", "phases", "elapsed_s", "throughput")

# (short, long) options every program documents in --help, besides help.
OPTIONS = {
    "pipeline": (
        ("-t", "--threads"),
        ("-w", "--work"),
        ("-p", "--phases"),
        ("-W", "--weights"),
        ("-q", "--queue"),
    ),
    "spmd": (("-t", "--threads"), ("-w", "--work"), ("-p", "--phases"), ("-b", "--barrier")),
    "skewed": (
        ("-t", "--threads"),
        ("-w", "--work"),
        ("-p", "--phases"),
        ("-s", "--skew"),
        ("-b", "--barrier"),
        ("-r", "--rotate"),
    ),
    "locks": (
        ("-t", "--threads"),
        ("-w", "--work"),
        ("-p", "--phases"),
        ("-m", "--mutexes"),
        ("-c", "--critical"),
        ("-a", "--acquires"),
    ),
}
PROGRAMS = tuple(OPTIONS)

# Safety net only: a wedged workload should fail the test, not hang it.
RUN_TIMEOUT_S = 60

needs_linux_proc = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads Linux /proc/PID/task"
)


@pytest.fixture(scope="session")
def workloads():
    """Build the workloads once and return the directory holding them."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    build = subprocess.run(
        ["make", "-C", str(WORKLOADS_DIR)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"make failed:\n{build.stdout}\n{build.stderr}"
    return WORKLOADS_DIR


def run(workloads, program, *args):
    return subprocess.run(
        [str(workloads / program), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def parse_result(stdout):
    """Parse the single result line into a dict, checking its shape."""
    lines = stdout.splitlines()
    assert len(lines) == 1, f"expected exactly one result line, got {lines!r}"
    pairs = lines[0].split(" ")
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        assert sep and key and value, f"malformed pair {pair!r} in {lines[0]!r}"
        assert key not in result, f"duplicate key {key!r}"
        result[key] = value
    assert pairs[0].startswith("workload="), "the line must start with workload="
    for key in COMMON_KEYS:
        assert key in result, f"missing {key} in {lines[0]!r}"
    assert re.fullmatch(r"\d+\.\d{6}", result["elapsed_s"])
    assert re.fullmatch(r"\d+\.\d{2}", result["throughput"])
    return result


def run_ok(workloads, program, *args):
    completed = run(workloads, program, *args)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    return parse_result(completed.stdout)


# ---- command line -----------------------------------------------------------


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_lists_every_option_with_defaults(workloads, program, flag):
    completed = run(workloads, program, flag)
    assert completed.returncode == 0
    assert completed.stderr == ""
    text = completed.stdout
    assert text.startswith("Usage:")
    for short, long in OPTIONS[program] + (("-h", "--help"),):
        assert re.search(rf"^  {short}, {long}\b", text, re.M), f"{long} not documented"
    # Every option except --help states its default.
    assert text.count("(default") >= len(OPTIONS[program])


BAD_ARGUMENTS = [
    ("--bogus",),
    ("-Z",),
    ("--threads",),
    ("-t", "0"),
    ("-t", "many"),
    ("--work", "-1"),
    ("--phases", "0"),
    ("--help=yes",),
    ("stray-operand",),
]

PROGRAM_BAD_ARGUMENTS = {
    "pipeline": [("-W", "1,,2"), ("--weights", "0,1"), ("-q", "0")],
    "spmd": [("-b", "fast")],
    "skewed": [("--skew", "-0.5"), ("-s", "lots"), ("--barrier", ""), ("--rotate", "-1")],
    "locks": [("-m", "0"), ("--acquires", "0"), ("-c", "1.5")],
}


@pytest.mark.parametrize(
    "program,args",
    [(p, a) for p in PROGRAMS for a in BAD_ARGUMENTS + PROGRAM_BAD_ARGUMENTS[p]],
)
def test_bad_arguments_exit_2_with_one_line(workloads, program, args):
    completed = run(workloads, program, *args)
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(program + ": ")
    assert "--help" in lines[0]


# ---- result line --------------------------------------------------------------


@pytest.mark.parametrize("barrier", ["spin", "yield", "sleep"])
def test_spmd_result(workloads, barrier):
    result = run_ok(workloads, "spmd", "-t", "3", "-w", "1", "-p", "4", "-b", barrier)
    assert result["workload"] == "spmd"
    assert result["threads"] == "3"
    assert result["phases"] == "4"
    assert result["barrier"] == barrier
    assert result["work"] == "1"


def test_spmd_defaults_are_the_paper_case(workloads):
    # Only the help is checked: running the 4.8 s default is the demo's job.
    text = run(workloads, "spmd", "--help").stdout
    assert re.search(r"--threads N .*\(default 3\)", text)
    assert re.search(r"\(default 120\)", text)
    assert re.search(r"--phases N .*\(default 20\)", text)
    assert re.search(r"\(default spin\)", text)


def test_skewed_result_follows_share_formula(workloads):
    result = run_ok(
        workloads, "skewed", "--threads", "3", "--work", "2", "--phases", "2", "--skew", "1"
    )
    assert result["workload"] == "skewed"
    assert result["threads"] == "3"
    assert result["phases"] == "2"
    assert result["barrier"] == "sleep"
    # units_i = T * work * (1 + skew * i) / sum_j (1 + skew * j) = 6 * (1 + i) / 6
    assert result["min_units"] == "1.00"
    assert result["max_units"] == "3.00"


def test_locks_result_counts_acquisitions(workloads):
    result = run_ok(
        workloads, "locks", "-t", "3", "-w", "2", "-p", "2", "-m", "2", "-c", "100", "-a", "5"
    )
    assert result["workload"] == "locks"
    assert result["threads"] == "3"
    assert result["phases"] == "2"
    assert result["mutexes"] == "2"
    # threads * phases * work * acquires
    assert int(result["acquisitions"]) == 3 * 2 * 2 * 5
    assert 0 <= int(result["contended"]) <= int(result["acquisitions"])
    assert "acquisitions_per_s" in result


def test_locks_single_thread_never_contends(workloads):
    result = run_ok(workloads, "locks", "-t", "1", "-w", "2", "-p", "2", "-c", "20000")
    assert result["threads"] == "1"
    assert int(result["acquisitions"]) > 0
    assert result["contended"] == "0"


def test_pipeline_result(workloads):
    result = run_ok(workloads, "pipeline", "-t", "1", "-w", "2", "-p", "5", "-W", "1, 2.5,2")
    assert result["workload"] == "pipeline"
    assert result["threads"] == "1"
    assert result["phases"] == "5"
    assert result["stages"] == "3"
    assert result["total_threads"] == "3"
    assert result["weights"] == "1,2.5,2"


def test_pipeline_defaults_are_ferret_like(workloads):
    result = run_ok(workloads, "pipeline", "-w", "1", "-p", "3")
    assert result["threads"] == "2"
    assert result["stages"] == "4"
    assert result["total_threads"] == "8"
    assert result["weights"] == "2,1,11,36"


# ---- threads, as seen from outside ------------------------------------------


def task_comms(pid):
    """{tid: comm} for the live threads of `pid` (missing threads skipped)."""
    comms = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return comms
    for tid in tids:
        try:
            comms[int(tid)] = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            continue  # the thread exited between listdir and open
    return comms


def task_cpu_ns(pid, tid):
    """CPU time of one thread in ns, or None if it is gone."""
    try:
        schedstat = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text()
        return int(schedstat.split()[0])
    except FileNotFoundError:
        pass  # kernel without schedstats: fall back to utime + stime
    except (OSError, ValueError, IndexError):
        return None
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def wait_and_check(process):
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0, stderr
    return parse_result(stdout)


@needs_linux_proc
def test_spmd_threads_exist_and_are_named(workloads):
    process = subprocess.Popen(
        [str(workloads / "spmd"), "-t", "3", "-w", "60", "-p", "2", "-b", "sleep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    expected = {"spmd-0", "spmd-1", "spmd-2"}
    seen = set()
    try:
        while process.poll() is None and not expected <= seen:
            seen |= set(task_comms(process.pid).values())
            time.sleep(0.005)
    finally:
        result = wait_and_check(process)
    assert expected <= seen, f"saw thread names {sorted(seen)}"
    assert result["threads"] == "3"


@needs_linux_proc
def test_pipeline_stage_loads_are_unequal(workloads):
    """The pipeline's purpose: heavy and light threads a balancer can pair up.

    Samples every thread's CPU time until the run ends and keeps the last
    reading per thread, i.e. one taken near the end of its life.
    """
    process = subprocess.Popen(
        [str(workloads / "pipeline"), "-p", "60"],  # ~1.5 s on 2 idle cores
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cpu_ns = last_cpu_ns_by_name(process, "stage")

    expected = {f"stage{s}-{j}" for s in range(4) for j in range(2)}
    assert expected <= set(cpu_ns), f"saw {sorted(cpu_ns)}"
    heaviest = min(cpu_ns["stage3-0"], cpu_ns["stage3-1"])  # weight 36
    lightest = max(cpu_ns["stage1-0"], cpu_ns["stage1-1"])  # weight 1
    vector = min(cpu_ns["stage2-0"], cpu_ns["stage2-1"])  # weight 11
    assert heaviest > 3 * lightest, cpu_ns
    assert heaviest > vector > lightest, cpu_ns


def last_cpu_ns_by_name(process, prefix):
    """comm -> the last CPU time read of each thread named ``prefix...``,
    sampled until the process ends (the last reading is near its end)."""
    cpu_ns = {}
    try:
        while process.poll() is None:
            for tid, comm in task_comms(process.pid).items():
                if comm.startswith(prefix):
                    ns = task_cpu_ns(process.pid, tid)
                    if ns is not None:
                        cpu_ns[comm] = ns
            time.sleep(0.01)
    finally:
        wait_and_check(process)
    return cpu_ns


@needs_linux_proc
@pytest.mark.parametrize("rotate", ["0", "1"])
def test_skewed_rotate_moves_the_shares_between_threads(workloads, rotate):
    """--rotate 1: the heavy share (4 x the light one at skew 3) changes
    thread every phase, so over 200 phases both threads do the same work;
    without it one thread does four times the other's."""
    process = subprocess.Popen(
        [str(workloads / "skewed"), "-t", "2", "-w", "4", "-p", "200", "-s", "3",
         "-r", rotate],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu_ns = last_cpu_ns_by_name(process, "skewed-")
    assert set(cpu_ns) == {"skewed-0", "skewed-1"}, cpu_ns
    ratio = cpu_ns["skewed-1"] / cpu_ns["skewed-0"]
    if rotate == "1":
        assert 0.75 < ratio < 1.33, cpu_ns
    else:
        assert ratio > 2.5, cpu_ns
