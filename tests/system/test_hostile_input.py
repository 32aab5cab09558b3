"""Hostile input: every bad option, CPU list, config file or PID is one line
on stderr and exit 2 -- and nothing changed: the target's masks are what
they were, no command was started, no state file was written.

tests/commands/test_cli.py checks messages for the common mistakes; this file adds
the malicious and absurd ones and the "nothing changed" half.  tumbler runs
under a 1.5 GB address-space limit, so input that would make it allocate
without bound fails the test instead of the machine.
"""

import os
import resource
import subprocess
import sys
import threading

import pytest

from support.helpers import REPO, assert_no_traceback, thread_masks, tumbler_cmd, wait_for_threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

MEMORY_LIMIT = 1536 << 20
LONGEST_LINE = 300          # an error line quotes hostile input only in part


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.fixture(scope="module")
def target(duty):
    """A four-thread process whose masks every test checks."""
    proc = subprocess.Popen([duty, "600", "2", "2", "2", "2"])
    wait_for_threads(proc.pid, 5)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def check(tmp_path):
    """check(args, status=2, words=(), pid=...) runs tumbler and asserts the
    one-line refusal and that nothing changed."""
    state = tmp_path / "state"

    def run(args, status=2, words=(), pid=None, masks_of=()):
        watched = {p: thread_masks(p) for p in masks_of}
        env = dict(os.environ, TUMBLER_STATE_DIR=str(state))
        result = subprocess.run(tumbler_cmd(*args), capture_output=True, text=True,
                                timeout=60, cwd=REPO, env=env, preexec_fn=_limit_memory)
        assert_no_traceback(result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == status, (args, result.returncode, result.stderr[-2000:])
        assert len(lines) == 1, (args, result.stderr[-2000:])
        assert lines[0].startswith("tumbler: "), (args, lines[0][:500])
        assert len(lines[0]) <= LONGEST_LINE, (args, len(lines[0]), lines[0][:500])
        for word in ([words] if isinstance(words, str) else words):
            assert word in lines[0], (args, lines[0])
        assert result.stdout == "", (args, result.stdout[:500])
        for p, before in watched.items():
            # Threads the process made or ended meanwhile are its own doing
            # (PID 1 starts threads on some machines); the ones there before
            # and after must have kept their masks.
            after = thread_masks(p)
            assert {t: after[t] for t in before if t in after} == \
                {t: m for t, m in before.items() if t in after}, (args, p)
        assert not state.exists() or not os.listdir(state), (args, os.listdir(state))
        return lines[0]

    return run


def attach(target, *args):
    # --duration first: should bad input be taken, the run still ends (and
    # the test fails on its status) -- a --duration in ``args`` overrides it.
    return ("--duration", "2", *args, "-p", str(target.pid))


# -- CPU lists and domains -----------------------------------------------------------

BAD_CPU_LISTS = ["1-", "a", "3-1", "0,,1", "1:0", "-1", "0-1:0", "0x1", "1.5", "0-", ",",
                 " ", "", "0-1-2", "1:2", "+1", "\u0661", "0;1", "0 1"]


@pytest.mark.parametrize("cpus", BAD_CPU_LISTS)
def test_malformed_cpu_list(check, target, cpus):
    check(attach(target, "--domains", cpus), masks_of=[target.pid])
    check(attach(target, "--domains", "0/" + cpus), masks_of=[target.pid])


@pytest.mark.parametrize("cpus", [
    "0-99999999999",                    # a range no machine has: no set of 10^11 CPUs
    "0-4294967295/4294967296",
    "9" * 4000,                         # a 4000-digit CPU number
    "0," * 20000 + "x",                 # 40 kB, malformed at the very end
    "0-1," * 10000 + "/1",              # 40 kB, overlapping
])
def test_absurd_cpu_list(check, target, cpus):
    check(attach(target, "--domains", cpus), masks_of=[target.pid])


@pytest.mark.parametrize("domains, words", [
    ("0-1/1", "two domains"),
    ("0/0,1", "two domains"),
    ("/0", "empty domain"),
    ("0/", "empty domain"),
    ("/", "empty domain"),
    (" / ", "empty domain"),
])
def test_overlapping_or_empty_domains(check, target, domains, words):
    check(attach(target, "--domains", domains), words=words, masks_of=[target.pid])


def test_domains_outside_the_targets_cpus(check, duty, two_cpus):
    cpu_a, cpu_b = two_cpus
    proc = subprocess.Popen([duty, "60", "40", "30"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu_a}))
    try:
        wait_for_threads(proc.pid, 3)
        assert set(thread_masks(proc.pid).values()) == {frozenset([cpu_a])}
        for domains in ("%d/%d" % (cpu_a, cpu_b), "%d" % cpu_b):
            check(("--domains", domains, "-p", str(proc.pid)), words="outside",
                  masks_of=[proc.pid])
    finally:
        proc.kill()
        proc.wait()


# -- configuration files ---------------------------------------------------------------

BILLION_LAUGHS = "".join(
    ["a0: &a0 [%s]\n" % ", ".join(["lol"] * 9)]
    + ["a%d: &a%d [%s]\n" % (i, i, ", ".join(["*a%d" % (i - 1)] * 9)) for i in range(1, 9)]
    + ["variation_table: *a8\n"])


@pytest.mark.parametrize("text", [
    "42\n",                                     # not a mapping
    "just some words\n",
    "[1, 2, 3]\n",
    "!!binary aGVsbG8=\n",
    "a: b: c\n",                                # malformed
    "tolerance: [1, 2\n",
    "{unclosed\n",
    "\ttolerance: 0.1\n",
    "? [a, b]\n: 1\n",                          # unhashable key
    BILLION_LAUGHS,
    "speed: 5\n",                               # mappings that are not
    "defaults: [policy, observe]\n",
    "variation_table: 5\n",
    "variation_table: [[0.1]]\n",
    "variation_table: []\n",
    "speed: {colour: blue}\n",                  # unknown keys, nested
    "defaults: {interval: 5}\n",
    "variation_table: [{cv: 0.1, interval_ms: 50, x: 1}]\n",
    "idle_interval_ms: -5\n",                   # negative, zero, absurd
    "idle_interval_ms: 999999999999\n",
    "idle_interval_ms: 1.5\n",
    "discover_ms: 0\n",
    "discover_ms: 5\n",
    "load_window_ms: -1\n",
    "load_window_ms: 1e400\n",
    "tolerance: 1e308\n",
    "tolerance: .nan\n",
    "tolerance: .inf\n",
    "tolerance: -.inf\n",
    "tolerance: true\n",
    "tolerance: '0.1'\n",
    "tolerance: null\n",
    "variation_table: [{cv: -0.1, interval_ms: 50}]\n",
    "variation_table: [{cv: 0.1, interval_ms: 0}]\n",
    "variation_table: [{cv: 1e9, interval_ms: 50}]\n",
    "variation_table: [[0.1, 99999999999]]\n",
    "speed: {threshold: 0}\n",
    "speed: {threshold: 2}\n",
    "speed: {threshold: -1}\n",
    "speed: {block_intervals: -1}\n",
    "speed: {block_intervals: 1000000}\n",
    "speed: {interval_ms: 5}\n",
    "speed: {jitter: 'yes'}\n",
    "defaults: {binder: magic}\n",
])
def test_bad_config(check, target, tmp_path, text):
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    check(attach(target, "--config", str(path)), words="config", masks_of=[target.pid])


@pytest.mark.parametrize("data", [
    b"\xff\xfe\x00bad",                         # not UTF-8
    b"tolerance: 0.1\n\xff\n",
    b"\x00\x00\x00\x00",
])
def test_binary_config(check, target, tmp_path, data):
    path = tmp_path / "tumbler.yaml"
    path.write_bytes(data)
    check(attach(target, "--config", str(path)), words="config", masks_of=[target.pid])


def test_config_that_is_a_directory(check, target, tmp_path):
    check(attach(target, "--config", str(tmp_path)), words="config", masks_of=[target.pid])


@pytest.mark.parametrize("text, line, words", [
    ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", 1, "nested deeper"),
    ("tolerance: 0.1\nspeed:\n  threshold: " + "9" * 4400 + "\n", 3, "a number of 4400"),
    ("tolerance: 0.1\nspeed:\n  jitter: true\n  colour: blue\n", 4, "speed.colour"),
    ("variation_table:\n  - {cv: 0.4, interval_ms: 50}\n  - {cv: 0.2, interval_ms: 5}\n",
     3, "variation_table[1].interval_ms"),
    ("tolerance: [1, 2\nspeed: 1\n", 2, "not valid YAML"),
])
def test_bad_config_names_its_line(check, target, tmp_path, text, line, words):
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    found = check(attach(target, "--config", str(path)), masks_of=[target.pid],
                  words=["%s:%d:" % (path, line), words])
    assert found.startswith("tumbler: bad config "), found


def test_config_that_is_a_fifo_is_refused_unread(check, target, tmp_path):
    """Opening a FIFO with no writer would block forever."""
    path = tmp_path / "tumbler.yaml"
    os.mkfifo(path)
    check(attach(target, "--config", str(path)), words="not a regular file",
          masks_of=[target.pid])


def test_config_larger_than_any_sane_one_is_refused_unread(check, target, tmp_path):
    path = tmp_path / "tumbler.yaml"
    with open(path, "w") as f:
        f.write("# padding\n" * 200_000)      # 2 MB of comments
    check(attach(target, "--config", str(path)), words="larger than", masks_of=[target.pid])


def test_large_config_loads(tmp_path):
    """1 MiB of comments and a valid key: read (libyaml) in well under the
    test's limit, where PyYAML's pure-Python reader took 19 s."""
    from tumbler.config import MAX_CONFIG_BYTES, load_config
    path = tmp_path / "tumbler.yaml"
    body = "tolerance: 0.2\n"
    path.write_text(body + "#" * (MAX_CONFIG_BYTES - len(body) - 1) + "\n")
    assert load_config(str(path)).tolerance == 0.2


# -- intervals and durations -----------------------------------------------------------

@pytest.mark.parametrize("value", ["5", "9", "3600001", str(10 ** 12), str(10 ** 30),
                                   "abc", "1.5", "", "0x10", "1e3"])
def test_bad_interval(check, target, value):
    check(attach(target, "--interval", value), words="--interval", masks_of=[target.pid])


@pytest.mark.parametrize("value", ["0", "-0", "nan", "inf", "-inf", "1e300", "abc", ""])
def test_bad_duration(check, target, value):
    check(attach(target, "--duration", value), words="--duration", masks_of=[target.pid])


def test_bad_input_starts_no_command(check, tmp_path):
    marker = tmp_path / "started"
    for args in (("--domains", "1-"), ("--interval", "0"), ("--duration", "nan"),
                 ("--config", str(tmp_path / "missing.yaml"))):
        check((*args, "exec", "--", "touch", str(marker)))
        assert not marker.exists(), args


# -- PIDs ------------------------------------------------------------------------------

@pytest.mark.parametrize("pid", ["0", "-1", "abc", "1.5", ""])
def test_bad_pid(check, target, pid):
    check(("-p", pid), masks_of=[target.pid])


def test_thread_id_is_not_a_process(check, target):
    tid = max(thread_masks(target.pid))
    assert tid != target.pid
    check(("-p", str(tid)), words="is a thread of process %d" % target.pid,
          masks_of=[target.pid])


def kernel_thread():
    """PID of a kernel thread (kthreadd is PID 2 on Linux)."""
    with open("/proc/2/stat") as f:
        flags = int(f.read().rsplit(")", 1)[1].split()[6])
    if not flags & 0x00200000:
        pytest.skip("PID 2 is not a kernel thread here")
    return 2


def test_pid_1_and_kernel_threads_are_refused(check):
    check(("-p", "1"), words="refusing PID 1", masks_of=[1])
    check(("-p", str(kernel_thread())), words="kernel thread", masks_of=[1, 2])


def test_force_lets_pid_1_and_kernel_threads_through(tmp_path):
    """--force only lifts the refusal; with --dry-run nothing is moved."""
    for pid in (1, kernel_thread()):
        before = thread_masks(pid)
        result = subprocess.run(
            tumbler_cmd("--force", "--dry-run", "--duration", "0.3", "-q", "-p", str(pid)),
            capture_output=True, text=True, timeout=60, cwd=REPO,
            env=dict(os.environ, TUMBLER_STATE_DIR=str(tmp_path / "state")))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        assert thread_masks(pid) == before


def test_own_thread_as_target(check):
    """A thread of this very test process, while it runs."""
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        check(("-p", str(worker.native_id)), words="is a thread of process %d" % os.getpid())
    finally:
        stop.set()
        worker.join()
