"""Space sharing (``--share space``, the service's ``sharing: {mode:
space}``): the coordinator on stand-in controllers (pools, units, steady
state, arrivals and exits), then on real processes -- disjoint real masks
while they run, every mask back at the end, on every way the run ends."""

import json
import os
import signal
import subprocess
import sys

import pytest

from support.helpers import REPO, run_tumbler, thread_masks, tumbler_cmd
from support.processes import env_for, finish, wait_until
from support.sharing import StandIn, Thread, spinners
from tumbler.balance import sharing as sharing_module
from tumbler.balance.sharing import SpaceSharing
from tumbler.config import SHARE_POLICY_CHOICES
from tumbler.engine.share import DEFAULT_TOLERANCE, POLICIES
from tumbler.platform.linux import counters as perf
from tumbler.service.config import load_service_config


# -- the coordinator, on stand-ins ---------------------------------------------


FOUR = [{0, 1}, {2, 3}, {4, 5}, {6, 7}]


def test_the_cli_and_the_engine_know_the_same_policies():
    assert set(SHARE_POLICY_CHOICES) == set(POLICIES)


def test_a_program_alone_keeps_everything_and_nothing_is_reshaped():
    sharing = SpaceSharing()
    a = StandIn(FOUR, [1.0] * 4)
    sharing.join("a", a)
    assert a.shapes == []           # exactly as time sharing
    assert sharing.cpus_of("a") is None


def test_arrivals_split_by_demand_and_exits_give_the_cpus_back():
    said = []
    sharing = SpaceSharing(log=said.append)
    a = StandIn(FOUR, [1.0] * 2)
    b = StandIn(FOUR, [1.0] * 6)
    sharing.join("a", a)
    sharing.join("b", b)
    # equal-qos on demands 2 and 6: 1 and 3 units of 2 CPUs (QoS 1 and 1).
    assert a.cpus == {0, 1} and b.cpus == {2, 3, 4, 5, 6, 7}
    assert a.shapes[-1][2] and b.shapes[-1][2]      # confined
    # Each program keeps the pool's domains as its own: wave grouping still
    # balances b across its three.
    assert b.shapes[-1][0] == (2, 4, 6)
    assert not a.cpus & b.cpus
    assert "demand 2.0" in said[-1] and "demand 6.0" in said[-1]
    sharing.leave("a")
    assert b.shapes[-1] == ((0, 2, 4, 6), frozenset(range(8)), False)
    assert sharing.cpus_of("b") is None


def test_unmeasured_threads_count_as_busy():
    sharing = SpaceSharing()
    a = StandIn(FOUR, [None] * 5)          # demand 5: 3 units of 2 CPUs
    b = StandIn(FOUR, [0.0])
    sharing.join("a", a)
    sharing.join("b", b)
    assert len(a.cpus) == 6 and len(b.cpus) == 2


def test_more_programs_than_domains_take_single_cpus():
    sharing = SpaceSharing()
    two = [{0, 1}, {2, 3}]
    programs = [StandIn(two, [1.0, 1.0]) for _ in range(3)]
    for i, p in enumerate(programs):
        sharing.join(i, p)
    sets = [p.cpus for p in programs]
    assert all(sets)
    assert sum(len(s) for s in sets) == 4
    assert all(not (x & y) for i, x in enumerate(sets) for y in sets[i + 1:])
    # A set across both domains stays two domains of the program.
    for p in programs:
        cpus, parts = p.cpus, p.shapes[-1][0]
        assert len(parts) == len({0 if c < 2 else 1 for c in cpus})


def test_more_programs_than_cpus_share_in_time_and_say_so_once():
    said = []
    sharing = SpaceSharing(log=said.append)
    one = [{0}, {1}]
    programs = [StandIn(one, [1.0]) for _ in range(3)]
    for i, p in enumerate(programs):
        sharing.join(i, p)
    assert programs[2].shapes == []                 # never confined
    assert all(p.cpus is None or p.shapes[-1][2] is False for p in programs)
    assert sum("share CPUs" in line for line in said) == 1
    sharing.leave(2)                                # two on two CPUs: space again
    assert programs[0].cpus == {0} and programs[1].cpus == {1}


def test_programs_of_other_cpusets_are_other_pools():
    sharing = SpaceSharing()
    a = StandIn([{0, 1}, {2, 3}], [1.0])
    b = StandIn([{4, 5}, {6, 7}], [1.0])
    sharing.join("a", a)
    sharing.join("b", b)
    assert a.shapes == [] and b.shapes == []


def test_a_change_of_demand_repartitions_after_two_agreeing_checks(monkeypatch):
    sharing = SpaceSharing()
    a = StandIn(FOUR, [1.0, 1.0])
    b = StandIn(FOUR, [1.0, 1.0])
    sharing.join("a", a)
    sharing.join("b", b)
    assert len(a.cpus) == len(b.cpus) == 4
    shapes = len(a.shapes)
    now = 100.0
    due = sharing.tick(now)                 # first call: schedules
    assert due == now + sharing_module.CHECK_S
    for thread in b.threads.values():       # b now wants 6 CPUs, a 0.2
        thread.load = 1.0
    b.threads.update({i: Thread(1.0) for i in range(2, 6)})
    for thread in a.threads.values():
        thread.load = 0.1
    sharing.tick(due)
    assert len(a.shapes) == shapes          # one check is a phase, not a state
    sharing.tick(due + sharing_module.CHECK_S)
    assert len(a.shapes) == shapes + 1 and len(a.cpus) == 2 and len(b.cpus) == 6


def test_noise_below_the_tolerance_moves_nothing():
    sharing = SpaceSharing()
    a = StandIn(FOUR, [1.0, 1.0, 1.0, 1.0])
    b = StandIn(FOUR, [1.0, 1.0, 1.0, 1.0])
    sharing.join("a", a)
    sharing.join("b", b)
    shapes = (list(a.shapes), list(b.shapes))
    t = sharing.tick(0.0)
    for step in range(10):
        jitter = 0.03 if step % 2 else -0.03
        for thread in a.threads.values():
            thread.load = 1.0 + jitter
        for thread in b.threads.values():
            thread.load = 1.0 - jitter
        t = sharing.tick(t)
    assert (a.shapes, b.shapes) == shapes


# -- the service's configuration ---------------------------------------------------

def test_service_sharing_keys_and_weights(tmp_path):
    path = tmp_path / "tumbler.yaml"
    path.write_text("sharing:\n  mode: space\n  policy: max-qos\n"
                    "programs:\n  - name: a\n    match: {comm: a}\n    weight: 2.5\n")
    config = load_service_config(str(path))
    assert config.sharing == {"mode": "space", "policy": "max-qos",
                              "tolerance": DEFAULT_TOLERANCE}
    assert config.rules[0].weight == 2.5


@pytest.mark.parametrize("text, line, words", [
    ("sharing:\n  mode: spatial\n", 2, "sharing.mode must be one of time, space"),
    ("sharing:\n  mode: space\n  policy: fair\n", 3, "sharing.policy"),
    ("sharing:\n  tolerance: -1\n", 2, "sharing.tolerance"),
    ("sharing:\n  size: 3\n", 2, "unknown key sharing.size"),
    ("programs:\n  - name: a\n    weight: 0\n", 3, "weight"),
])
def test_bad_sharing_keys_name_file_and_line(tmp_path, text, line, words):
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    result = run_tumbler("service", "--check", str(path))
    assert result.returncode == 2, result.stderr
    assert "%s:%d:" % (path, line) in result.stderr and words in result.stderr, result.stderr


# -- real processes ----------------------------------------------------------------

linux_root = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root")


def disjoint(a, b):
    """The CPU sets of two programs' threads, if every thread of each is
    confined and the two do not overlap; else None."""
    masks_a, masks_b = thread_masks(a), thread_masks(b)
    cpus_a = frozenset().union(*masks_a.values())
    cpus_b = frozenset().union(*masks_b.values())
    if cpus_a and cpus_b and not cpus_a & cpus_b:
        return cpus_a, cpus_b
    return None


@linux_root
@pytest.mark.parametrize("ending", ["duration", signal.SIGTERM, signal.SIGINT, "exit"])
def test_two_programs_get_disjoint_cpus_and_them_back(spawner, domains, procs, state, tmp_path,
                                                       two_cpus, ending):
    spec, _ = domains
    both = frozenset(two_cpus)
    small = spinners(procs, spawner, both, 2)
    big = spinners(procs, spawner, both, 4)
    summary = tmp_path / "summary.json"
    duration = ["--duration", "60"] if ending == "duration" else []
    tumbler = procs.start(tumbler_cmd("--share", "space", "--domains", spec, "-p", str(small.pid),
                                      "-p", str(big.pid), "--summary-json", str(summary),
                                      *duration),
                          env=env_for(state), cwd=REPO, stderr=subprocess.PIPE, text=True)
    sets = wait_until(lambda: disjoint(small.pid, big.pid), what="disjoint masks")
    assert set().union(*sets) == both
    if ending == "duration":
        tumbler.send_signal(signal.SIGTERM)     # --duration 60: ended like any other
    elif ending == "exit":
        big.kill()
        big.wait()
        # The one left has both domains again: its two spinners, together
        # on its one CPU until now, are balanced across them.
        wait_until(lambda: frozenset().union(*thread_masks(small.pid).values()) == both,
                   what="the remaining program on both domains")
        tumbler.send_signal(signal.SIGTERM)
    else:
        tumbler.send_signal(ending)
    status, stderr = finish(tumbler)
    assert status == 0, stderr
    assert "space sharing (equal-qos" in stderr, stderr
    for proc in (small, big):
        if proc.poll() is None:
            masks = thread_masks(proc.pid)
            assert all(m == both for m in masks.values()), masks
    record = json.loads(summary.read_text())
    assert record["share"] == "space" and record["unrestored"] == 0
    assert {p["pid"] for p in record["programs"]} == {small.pid, big.pid}
    # tumbler's whole CPU, its start-up too, for the run and each program's part
    assert record["process_cpu_s"] > record["own_cpu_s"]
    assert {p["process_cpu_s"] for p in record["programs"]} == {record["process_cpu_s"]}
    # LLC counters: off on a machine without a PMU (this VM), said once.
    no_pmu = perf.probe_support()
    assert (record["llc_counters_off"] is None) == (no_pmu is None), record
    assert stderr.count("LLC counters off") == (0 if no_pmu is None else 1), stderr


@linux_root
def test_space_sharing_refuses_what_it_cannot_do(spawner, procs, two_cpus):
    both = frozenset(two_cpus)
    a = spinners(procs, spawner, both, 1)
    b = spinners(procs, spawner, both, 1)
    for args, words in ((("--binder", "cpuset"), "--binder affinity"),
                        (("--probe",), "tumbler probe")):
        result = run_tumbler("--share", "space", *args, "-p", str(a.pid), "-p", str(b.pid))
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
    result = run_tumbler("--share", "space", "exec", "--", "true")
    assert result.returncode == 2 and "--share does not apply to exec" in result.stderr
    assert all(m == both for p in (a, b) for m in thread_masks(p.pid).values())


@linux_root
def test_the_service_shares_in_space_and_hands_back(spawner, domains, procs, state, tmp_path,
                                                     two_cpus):
    from support.service import Service, config
    spec, _ = domains
    both = frozenset(two_cpus)
    a = spinners(procs, spawner, both, 2)
    b = spinners(procs, spawner, both, 2)
    rules = ('  - name: spinners\n    match: {comm: "spawn.*", cmdline: " 0 0$"}\n'
             '    domains: "%s"\n    weight: 1\n' % spec)
    service = Service(procs, state, tmp_path,
                      config(rules).replace("programs:", "sharing:\n  mode: space\nprograms:"))
    wait_until(lambda: disjoint(a.pid, b.pid), what="disjoint masks")
    assert "space sharing (equal-qos, PID" in service.log()
    a.kill()
    a.wait()
    wait_until(lambda: frozenset().union(*thread_masks(b.pid).values()) == both,
               what="the remaining program on both domains")
    assert service.stop() == 0
    assert all(m == both for m in thread_masks(b.pid).values())
