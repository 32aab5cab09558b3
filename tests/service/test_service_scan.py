"""What a scan reads of the processes it already knows (issue 29: the
service in its stride), on real processes: a process it refused -- a
kernel thread, most of a scan -- is known by its start time alone, one
stat read and no full look, and is looked at in full again as soon as
that start time names another process (a reused PID); the machine is
looked at once per scan interval, not at every turn of the loop; /proc
is listed again only when a PID was made since the last listing."""

import os
import signal
import subprocess
import sys

import pytest

from support.processes import descendants, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root")


def service_with_no_rule_selecting(tmp_path, monkeypatch):
    from tumbler.service import loop
    from tumbler.service.config import load_service_config
    monkeypatch.setenv("TUMBLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tumbler.yaml").write_text(
        'programs:\n  - name: none\n    match: {cmdline: "^no such command line$"}\n')
    return loop.Service(load_service_config(str(tmp_path / "tumbler.yaml")),
                        str(tmp_path / "tumbler.yaml"), lambda priority, message: None)


def test_a_refused_process_is_read_in_full_again_only_when_its_pid_names_another(
        tmp_path, monkeypatch):
    # Not the test's children (the service never looks at its own).
    parent = subprocess.Popen(["sh", "-c", "for i in 1 2 3; do sleep 60 & done; wait"],
                              start_new_session=True)
    try:
        wait_until(lambda: len(descendants(parent.pid)) == 3, what="three sleepers")
        sleepers = descendants(parent.pid)
        service = service_with_no_rule_selecting(tmp_path, monkeypatch)
        service.scan(cpu_budget=60)
        refused = set(service.declined)     # kernel threads, and the test's child
        assert parent.pid in refused
        assert set(sleepers) <= set(service.unselected)
        full = []
        process = service.backend.process
        monkeypatch.setattr(service.backend, "process",
                            lambda pid: full.append(pid) or process(pid))
        service.scan(cpu_budget=60)
        assert full and not refused & set(full), refused & set(full)
        # A refusal left by another process that had a sleeper's PID
        # before: its start time differs, so the sleeper is looked at in
        # full, and found no longer refused.
        reused = sleepers[0]
        service.declined[reused] = process(reused).start - 1
        full.clear()
        service.scan(cpu_budget=60)
        assert reused in full and reused not in service.declined
        assert reused in service.unselected
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_proc_is_listed_again_only_when_a_pid_was_made(tmp_path, monkeypatch):
    from tumbler.service import loop
    service = service_with_no_rule_selecting(tmp_path, monkeypatch)
    listings, token = [], ["A"]
    process_ids = service.backend.process_ids
    monkeypatch.setattr(service.backend, "process_ids",
                        lambda: listings.append(1) or process_ids())
    monkeypatch.setattr(service.backend, "newest_pid", lambda: token[0])
    service.scan(cpu_budget=60)
    service.scan(cpu_budget=60)
    assert len(listings) == 1           # nothing made since: the same PIDs
    parent = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        wait_until(lambda: len(descendants(parent.pid)) == 1, what="a sleeper")
        sleeper = descendants(parent.pid)[0]
        token[0] = "B"                  # as /proc/loadavg says once it is made
        service.scan(cpu_budget=60)
        assert len(listings) == 2 and sleeper in service.unselected
        for _ in range(loop.RELIST_SCANS):
            service.scan(cpu_budget=60)
        assert len(listings) == 2
        service.scan(cpu_budget=60)     # and every RELIST_SCANS scans whatever it says
        assert len(listings) == 3
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


class Enough(Exception):
    pass


def test_the_machine_is_looked_at_once_per_scan_interval(tmp_path, monkeypatch):
    # Its look only tells of a change (each controller follows on its own)
    # and reads a cpuset per program: at every turn of the loop -- three
    # looks at parked programs per scan interval, rounds -- it cost 0.6%
    # of a core with 200 programs.
    from tumbler.balance.machine import MachineWatch
    from tumbler.platform.signals import SignalWaiter
    service = service_with_no_rule_selecting(tmp_path, monkeypatch)
    service.config.scan_interval = 0.1
    looks, scans, turns = [], [], []
    look, scan = MachineWatch.look, service.scan
    monkeypatch.setattr(MachineWatch, "look", lambda *a: looks.append(1) or look(*a))
    monkeypatch.setattr(service, "scan", lambda **k: scans.append(1) or scan(**k))
    waiter = SignalWaiter()
    sleep = waiter.sleep

    def counted(seconds):
        turns.append(seconds)
        if len(turns) == 40:
            raise Enough
        return sleep(seconds)
    monkeypatch.setattr(waiter, "sleep", counted)
    try:
        with pytest.raises(Enough):
            service.run(waiter)
    finally:
        waiter.close()
    # Both every scan interval from the same start: never more than one
    # apart, whatever the loop's timing; far fewer than the turns.
    assert abs(len(looks) - len(scans)) <= 1, (len(looks), len(scans))
    assert len(looks) < len(turns) / 2, (len(looks), len(turns))
