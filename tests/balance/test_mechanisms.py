"""What acted in each domain, said once per change (balance/mechanisms.py,
issue 49 item 4): the states read from the policy's own notes, a line only
when a domain's state or the domains change, the time in each state summed
for the summary; and on a real run of ``tumbler exec``, the log's
``changes`` exactly at the rounds whose states changed, ``-v`` saying the
same lines once each."""

import json
import os
import sys

import pytest

from support.helpers import REPO, run_tumbler
from tumbler.balance import mechanisms
from tumbler.balance.domains import Domain
from tumbler.balance.mechanisms import MechanismLog, state_of
from tumbler.engine.policy import _os_note

BOTH = Domain(0, frozenset({0, 1}))


def test_the_states_are_read_from_the_policys_notes():
    assert state_of(_os_note(3, 3, BOTH, 0.0, 150.0)) == (
        "crowded", "3 runnable threads on 2 cores, 150 switches per CPU-second, no sign of "
        "waiting at barriers")
    assert state_of(_os_note(3, 3, BOTH, 0.4, 150.0)) == (
        "other", "other work uses 0.4 CPU of its CPUs")
    assert state_of(_os_note(4, 4, BOTH))[0] == "os"          # a multiple: the OS evens it
    assert state_of(_os_note(3, 3, BOTH)) == (                  # switches not counted yet
        "judging", "3 runnable threads on 2 cores, watched for signs of waiting at barriers")
    assert state_of(_os_note(1, 5, BOTH)) == ("os", "1 runnable of 5 threads on 2 cores")
    assert state_of("speed: 3 runnable threads on 2 cores, speeds 0.50-1.00, 1300 switches "
                    "per CPU-second, 4 pulls") == (
        "speed", "3 runnable threads on 2 cores, speeds 0.50-1.00, 1300 switches per "
        "CPU-second, as threads that yield at barriers do")
    assert state_of("os") == ("os", "")                         # the tumbler policy's


def test_a_line_only_when_a_state_or_the_domains_change_and_the_time_in_each():
    log = MechanismLog()
    speed = "speed: 3 runnable threads on 2 cores, speeds 0.50-1.00, 1300 switches per " \
            "CPU-second, 2 pulls"
    log.follow({0: _os_note(1, 3, BOTH)}, [BOTH], 0.0)
    log.follow({0: _os_note(1, 3, BOTH)}, [BOTH], 1.0)
    assert log.changes == []                        # placed by the OS from the start
    log.follow({0: speed}, [BOTH], 2.0)
    log.follow({0: speed.replace("2 pulls", "5 pulls")}, [BOTH], 3.0)
    log.follow({0: _os_note(3, 3, BOTH, 0.4, 900.0)}, [BOTH], 6.0)
    lines, cursor = log.since_cursor(0)
    assert lines == [
        "speed balancing on in domain 0-1: 3 runnable threads on 2 cores, speeds 0.50-1.00, "
        "1300 switches per CPU-second, as threads that yield at barriers do",
        "speed balancing off in domain 0-1, left to the OS: other work uses 0.4 CPU of its "
        "CPUs"]
    assert log.since_cursor(cursor) == ([], cursor)
    pair = [BOTH, Domain(1, frozenset({2, 3}))]
    notes = {0: _os_note(1, 1, pair[0]), 1: _os_note(3, 3, pair[1], 0.0, 120.0)}
    log.follow(notes, pair, 8.0)
    assert log.since_cursor(cursor)[0] == [
        "domains 0-1 now 0-1 / 2-3",
        "domain 0-1 placed by the OS: 1 runnable of 1 threads on 2 cores",
        "domain 2-3 left to the OS: 3 runnable threads on 2 cores, 120 switches per "
        "CPU-second, no sign of waiting at barriers (--policy speed pins such threads; see "
        "tumbler(8), --policy)"]
    log.follow(notes, pair, 10.0)
    merged = "domains 0-1 / 2-3 merged: more runnable threads than their 4 CPUs, and no " \
        "grouping even"
    log.follow({}, [Domain(0, frozenset({0, 1, 2, 3}))], 10.0, merged)
    assert log.since_cursor(cursor)[0][-1] == merged     # why, where the round knows it
    log.follow(notes, pair, 10.0)
    assert "domains 0-3 now 0-1 / 2-3" in log.since_cursor(cursor)[0]     # no why given
    assert log.seconds[("speed", "0-1")] == 4.0 and log.seconds[("other", "0-1")] == 2.0
    assert log.seconds[("crowded", "2-3")] == 2.0
    summary = log.summary_lines(10.0)
    assert summary[0] == "speed balancing engaged in domain 0-1 for 4.0 s (40% of the run)"
    assert summary[1] == "left to the OS for other work in domain 0-1 for 2.0 s (20% of the run)"
    assert summary[2].startswith("domain 2-3: 3 runnable threads on 2 cores, 120 switches")
    assert "--policy speed may be faster (1.18x on spin barriers here)" in summary[2]
    assert "0.981x" in summary[2] and len(summary) == 3


def test_a_domain_changing_state_for_months_keeps_a_bounded_log_and_readers_miss_nothing():
    """A service runs for months: a domain flipping between two states
    every round must not grow the log without end; a reader taking the
    lines every round gets each once, one far behind gets the last kept."""
    log = MechanismLog()
    crowd, other = _os_note(3, 3, BOTH, 0.0, 150.0), _os_note(3, 3, BOTH, 0.4, 150.0)
    every_round, cursor = [], 0
    rounds = 10 * mechanisms.KEPT_LINES
    for index in range(rounds):
        log.follow({0: crowd if index % 2 else other}, [BOTH], float(index))
        lines, cursor = log.since_cursor(cursor)
        every_round += lines
    assert len(every_round) == rounds and cursor == rounds
    assert [line.startswith("domain 0-1 left to the OS: other work") for line in every_round] \
        == [index % 2 == 0 for index in range(rounds)]
    assert len(log.changes) < 2 * mechanisms.KEPT_LINES
    behind, at = log.since_cursor(0)
    assert at == rounds and behind == every_round[-len(behind):]
    assert len(behind) >= mechanisms.KEPT_LINES


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_real_runs_log_names_each_change_once_where_the_states_changed(tmp_path):
    """3 threads yielding at barriers on this machine's CPUs: whatever auto
    decides here (engaged, other work, the OS), each record's ``changes``
    are exactly the domains whose state differs from the record before,
    and ``-v`` prints each of them once."""
    spmd = os.path.join(REPO, "examples", "workloads", "spmd")
    if not os.path.exists(spmd):
        pytest.skip("the example workloads are not built (make -C examples)")
    log = tmp_path / "run.jsonl"
    result = run_tumbler("-v", "--log", str(log), "exec", "--", spmd, "-t", "3", "-b",
                         "yield", "-p", "30", timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) > 3
    said, before, before_domains = [], {}, None
    for record in records:
        names = record["domains"]
        states = {names[int(index)]: state_of(note)[0]
                  for index, note in (record.get("mechanisms") or {}).items()}
        expected = before_domains is not None and names != before_domains
        if expected:
            before = {name: state for name, state in before.items() if name in names}
        for name, state in states.items():
            was = before.get(name)
            expected = expected or (state != was and not (was is None and state == "os"))
        assert bool(record.get("changes")) == expected, (record, before)
        said += record.get("changes", [])
        before, before_domains = dict(before, **states), names
    verbose = [line[len("tumbler: "):] for line in result.stderr.splitlines()]
    assert [line for line in verbose if line in said] == said
