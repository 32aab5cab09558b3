"""The run log (observers/runlog.py, ``--log``): one JSON line per full
round with the documented keys and values, rounded as documented; a write
that fails stops the log, not the run."""

import errno
import json
import os
from types import SimpleNamespace

import pytest

from support.observed import Clock, make_controller, thread
from tumbler.errors import UsageError
from tumbler.observers import runlog
from tumbler.observers.runlog import RunLog, open_run_log


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(100.0)
    monkeypatch.setattr(runlog, "time", clock)
    return clock


def lines(path):
    return [json.loads(line) for line in open(path)]


def busy_controller(two_domains):
    """Round 12: threads 1 and 2 bound to domain 0 (0.75 and 0.5 CPUs
    received), 3 to domain 1 (1/3), 4 bound nowhere, 5 not measured yet;
    speed balancing engaged on domain 1 with two pins since the last line."""
    threads = {(100, 1): thread(1, "w1", 0, 0.75), (100, 2): thread(2, "w2", 0, 0.5),
               (100, 3): thread(3, "w3", 1, 1 / 3), (100, 4): thread(4, "w4", None, 0.9),
               (100, 5): thread(5, "w5", 1, None)}
    decision = SimpleNamespace(notes={1: "speed: 3 threads on 2 CPUs", 0: "os"})
    pins = [(threads[(100, 3)], 2, 6), (threads[(100, 1)], None, 7)]
    return make_controller(two_domains, intervals=12, threads=threads, decision=decision,
                           pins_made=pins, steps=7)


def test_a_round_is_one_line_of_every_documented_key(tmp_path, clock, two_domains, plan):
    path = tmp_path / "run.jsonl"
    log = RunLog(str(path), started=100.0)
    controller = busy_controller(two_domains)
    clock.now = 102.345678
    applied = [(thread(2, "w2"), 0, 1), (thread(9, "new"), None, 0)]
    log.write_round(controller, plan, applied)
    log.close()
    assert lines(path) == [{
        "t": 2.3457, "round": 12, "policy": "tumbler",
        "reason": "regroup: spread 0.44 > tolerance 0.10",
        "threads": 3, "thread_cv": 0.1235, "interval_ms": 200,
        "domains": ["0-1", "2-3"], "domain_loads": [1.2346, 0.5], "capacity": [2, 1.5],
        "domain_spread": 0.4444, "domain_cpu": [1.25, 0.3333],
        "predicted_loads": [0.75, 0.9877], "predicted_spread": 0.0123,
        "moves": [{"tid": 2, "name": "w2", "from": 0, "to": 1},
                  {"tid": 9, "name": "new", "from": None, "to": 0}],
        "dry_run": False,
        "mechanisms": {"0": "os", "1": "speed: 3 threads on 2 CPUs"},
        "pins": [{"tid": 3, "name": "w3", "cpu": 2, "step": 6},
                 {"tid": 1, "name": "w1", "cpu": None, "step": 7}],
        "step": 7}]


def test_without_a_decision_there_are_no_mechanisms_pins_or_step(tmp_path, clock,
                                                                  two_domains, plan):
    path = tmp_path / "run.jsonl"
    log = RunLog(str(path), started=100.0)
    log.write_round(make_controller(two_domains, intervals=1, dry_run=True), plan, [])
    log.close()
    (record,) = lines(path)
    assert "mechanisms" not in record and "pins" not in record and "step" not in record
    assert record["dry_run"] is True and record["moves"] == []
    assert record["domain_cpu"] == [0.0, 0.0]


def test_extra_fields_are_merged_into_each_line(tmp_path, clock, two_domains, plan):
    path = tmp_path / "run.jsonl"
    log = RunLog(str(path), started=100.0)
    log.extra.append(lambda controller: {"probe": {"round": controller.stats.intervals}})
    for intervals in (1, 2):
        clock.now += 0.5
        log.write_round(make_controller(two_domains, intervals=intervals), plan, [])
    log.close()
    assert [(r["t"], r["round"], r["probe"]) for r in lines(path)] == [
        (0.5, 1, {"round": 1}), (1.0, 2, {"round": 2})]


def test_the_services_log_is_appended_to(tmp_path, clock, two_domains, plan):
    """append: every program's rounds go to one file, whole lines."""
    path = tmp_path / "service.jsonl"
    path.write_text('{"earlier": true}\n')
    first = RunLog(str(path), append=True, started=90.0)
    second = RunLog(str(path), append=True, started=95.0)
    first.write_round(make_controller(two_domains, intervals=4, policy="auto"), plan, [])
    second.write_round(make_controller(two_domains, intervals=1, policy="speed"), plan, [])
    first.close()
    second.close()
    records = lines(path)
    assert records[0] == {"earlier": True}
    assert [(r["t"], r["round"], r["policy"]) for r in records[1:]] == [
        (10.0, 4, "auto"), (5.0, 1, "speed")]


class FullDisk:
    """A file whose writes fail as on a full device."""

    def __init__(self):
        self.closed = False

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self):
        self.closed = True


def test_a_failed_write_stops_the_log_with_one_warning(tmp_path, clock, two_domains, plan):
    warned = []
    log = RunLog(str(tmp_path / "run.jsonl"), warn=warned.append, started=100.0)
    log.file.close()
    log.file = full = FullDisk()
    controller = make_controller(two_domains, intervals=1)
    log.write_round(controller, plan, [])
    assert warned == ["cannot write log %s: No space left on device; the log stops here"
                      % (tmp_path / "run.jsonl")]
    assert controller.stats.warnings == 1 and full.closed and log.file is None
    log.write_round(controller, plan, [])              # the run goes on, silently
    log.close()
    assert len(warned) == 1 and controller.stats.warnings == 1


def test_on_dev_full_the_first_line_fails(clock, two_domains, plan):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    warned = []
    log = RunLog("/dev/full", warn=warned.append, started=100.0)
    controller = make_controller(two_domains, intervals=1)
    log.write_round(controller, plan, [])           # line-buffered: written at once
    log.close()
    assert warned == ["cannot write log /dev/full: No space left on device; "
                      "the log stops here"]
    assert controller.stats.warnings == 1


def test_a_log_that_cannot_be_opened_is_a_usage_error(tmp_path):
    path = tmp_path / "missing" / "run.jsonl"
    with pytest.raises(UsageError) as caught:
        open_run_log(str(path))
    assert str(caught.value) == "cannot write log %s: No such file or directory" % path
