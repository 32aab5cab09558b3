"""Parked programs (issue 29): a managed program too idle to imbalance a
domain is not sampled at all, and the first look at parked programs that
sees it busy wakes it for full rounds, within one scan interval of its
rise -- on real processes, stopped (SIGSTOP: no CPU at all)
and continued, with real masks; parked threads are handed back like any
others on SIGTERM, and after SIGKILL by the next service.  Measured
capacity: the service's other programs are no other work."""

import os
import signal
import subprocess
import sys
import time

import pytest

from support.helpers import REPO, thread_masks, tumbler_cmd, wait_for_threads
from support.processes import wait_bound, wait_until
from support.service import Service, config
from tumbler.service.control import request

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root")


def busy_duty(procs, duty):
    """duty's four threads, 80/60/40/20% busy: 2 CPUs' worth of load."""
    proc = procs.start([duty, "120", "80", "60", "40", "20"])
    wait_for_threads(proc.pid, 5)
    return proc


def program(service, pid):
    return next((p for p in service.status()["programs"] if p["pid"] == pid), None)


def parked(service, pid):
    found = program(service, pid)
    return found is not None and found["parked"]


def test_idle_program_is_parked_then_woken_and_balanced(duty, domains, procs, state, tmp_path):
    spec, doms = domains
    target = busy_duty(procs, duty)
    before = thread_masks(target.pid)
    # The tumbler policy: under auto, a machine busy with other work (the
    # rest of the suite) merges the two 1-CPU domains, and the threshold
    # the test reads is then the merged domain's.
    rules = ('  - name: duty\n    match: {comm: "duty"}\n    domains: "%s"\n'
             '    policy: tumbler\n' % spec)
    service = Service(procs, state, tmp_path, config(rules, scan=0.2))
    wait_bound(target.pid, doms, count=4)
    assert not parked(service, target.pid)
    os.kill(target.pid, signal.SIGSTOP)             # no CPU at all from now on
    wait_until(lambda: parked(service, target.pid), what="the program parked")
    status = program(service, target.pid)
    assert "CPUs used, below 0.100" in status["parked"], status
    rounds = status["intervals"]
    bound = thread_masks(target.pid)
    time.sleep(1.0)                                 # five scans, no round
    status = program(service, target.pid)
    assert status["intervals"] == rounds and status["parked"]
    assert thread_masks(target.pid) == bound        # its threads stay where they are
    os.kill(target.pid, signal.SIGCONT)
    # Woken by the first look that sees it busy: rounds again, balanced.
    wait_until(lambda: not parked(service, target.pid), what="the program woken")
    wait_until(lambda: program(service, target.pid)["intervals"] > rounds,
               what="full rounds again")
    wait_bound(target.pid, doms, count=4)
    assert service.stop() == 0
    assert thread_masks(target.pid) == before


def test_a_parked_program_turning_busy_is_under_full_rounds_within_one_scan_interval(
        duty, domains, procs, state, tmp_path):
    """Three rises, a third of a scan interval apart in the cycle of looks:
    each time the service's own clock says it woke the program less than
    one scan interval after the test continued it (the program was
    stopped: it used no CPU before that), and full rounds follow.  The
    status is asked on the socket, in this process: a ``tumbler status``
    process every poll would take the CPU the service's looks need."""
    spec, doms = domains
    scan = 1.0
    target = busy_duty(procs, duty)
    rules = ('  - name: duty\n    match: {comm: "duty"}\n    domains: "%s"\n'
             '    policy: tumbler\n' % spec)
    service = Service(procs, state, tmp_path, config(rules, scan=scan))

    def status():
        reply = request(service.socket, {"cmd": "status"})
        return next((p for p in reply["programs"] if p["pid"] == target.pid), None)
    wait_bound(target.pid, doms, count=4)
    for phase in range(3):
        os.kill(target.pid, signal.SIGSTOP)         # no CPU at all from now on
        before = wait_until(lambda: (lambda p: p if p and p["parked"] else None)(status()),
                            what="the program parked")
        time.sleep(phase * scan / 3)
        continued = time.monotonic()                # the clock the service's status uses
        os.kill(target.pid, signal.SIGCONT)
        woken = wait_until(lambda: (lambda p: p if p and not p["parked"] else None)(status()),
                           what="the program woken")
        # Stopped until ``continued``, it cannot have risen before it.
        assert continued < woken["unparked_at"] < continued + scan, (continued, woken)
        wait_until(lambda: status()["intervals"] > before["intervals"],
                   what="full rounds again")
    assert service.stop() == 0


def test_parked_threads_are_restored_after_sigkill_and_metrics_count_them(
        duty, domains, procs, state, tmp_path):
    spec, doms = domains
    target = busy_duty(procs, duty)
    before = thread_masks(target.pid)
    metrics = tmp_path / "metrics" / "tumbler.prom"
    metrics.parent.mkdir()
    text = ("service:\n  scan_interval: 0.2\n  cpu_budget: 1\n  socket: SOCKET\n  metrics_file: %s\n"
            "programs:\n  - name: duty\n    match: {comm: \"duty\"}\n    domains: \"%s\"\n"
            "    policy: tumbler\n" % (metrics, spec))
    service = Service(procs, state, tmp_path, text)
    wait_bound(target.pid, doms, count=4)
    os.kill(target.pid, signal.SIGSTOP)
    wait_until(lambda: parked(service, target.pid), what="the program parked")
    wait_until(lambda: metrics.exists() and "tumbler_programs_parked 1" in metrics.read_text(),
               what="the metrics to count it", timeout=15)
    # The status table says so too.
    table = subprocess.run(tumbler_cmd("status", "--socket", service.socket),
                           capture_output=True, text=True, cwd=REPO)
    assert "parked: " in table.stdout, table.stdout
    service.proc.kill()                             # its threads stay bound
    service.proc.wait()
    assert thread_masks(target.pid) != before
    os.kill(target.pid, signal.SIGCONT)
    again = Service(procs, state, tmp_path, text)   # restores what the dead one left first
    wait_until(lambda: "restored" in again.log() or thread_masks(target.pid) == before
               or target.pid in again.managed(), what="the new service to take over")
    assert again.stop() == 0
    assert thread_masks(target.pid) == before


def test_measured_capacity_counts_no_managed_program_as_other_work(duty, domains, procs,
                                                                   state, tmp_path):
    """Two busy programs on the same two CPUs: each one's CPU there is taken
    off the other's other work (``other_programs`` in the status), so
    neither plans around the other."""
    spec, doms = domains
    first, second = busy_duty(procs, duty), busy_duty(procs, duty)
    rules = '  - name: duty\n    match: {comm: "duty"}\n    domains: "%s"\n' % spec
    text = config(rules, scan=0.2) + "balancing:\n  defaults:\n    capacity: measured\n"
    service = Service(procs, state, tmp_path, text)
    wait_bound(first.pid, doms, count=4)
    wait_bound(second.pid, doms, count=4)

    def counted_as_managed():
        both = [program(service, pid) for pid in (first.pid, second.pid)]
        # Each uses ~0.5 of each CPU beside the other (2 CPUs of demand each).
        return all(p is not None and not p["parked"] and p["other_programs"] is not None
                   and min(p["other_programs"]) >= 0.2 for p in both)
    wait_until(counted_as_managed, what="each program's CPU counted as managed by the other")
    for pid in (first.pid, second.pid):
        status = program(service, pid)
        assert len(status["other_work"]) == len(status["capacity"]) == 2, status
    assert service.stop() == 0
