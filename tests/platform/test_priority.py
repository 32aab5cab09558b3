"""platform/priority.py: tumbler starts raised, balances at nice 0, and rises
again after LATE_WAKES waits for a CPU of LATE_S or more in a row."""

import pytest

from tumbler.platform import priority


@pytest.fixture
def fresh(monkeypatch):
    """A priority state of its own, setpriority recorded, waits scripted."""
    calls, waits = [], []
    monkeypatch.setattr(priority, "_state", ["nice -20"])
    monkeypatch.setattr(priority, "_settled", [None])
    monkeypatch.setattr(priority, "_late", [0])
    monkeypatch.setattr(priority.os, "setpriority", lambda which, who, nice: calls.append(nice))
    monkeypatch.setattr(priority, "_run_queue_wait_s", lambda: waits.pop(0))
    return calls, waits


def test_balancing_at_nice_0_rises_after_three_late_waits_in_a_row(fresh):
    calls, waits = fresh
    priority.woke(1.0)                  # not settled yet: nothing
    priority.settle_priority()
    assert calls == [0] and priority.note().startswith("nice 0 (-20 at start-up")
    waits += [0.08, 0.08, 0.01, 0.06, 0.07]   # a short wait breaks the run
    for _ in range(5):
        priority.woke(0.0)
    assert calls == [0]
    waits.append(0.09)
    priority.woke(0.0)
    assert calls == [0, priority.NICE]
    assert priority.note() == "nice -20 (raised: it waited 90 ms for a CPU at nice 0)"
    priority.settle_priority()          # once raised, it stays so
    priority.woke(5.0)
    assert calls == [0, priority.NICE]


def test_without_a_run_queue_reading_how_late_it_woke_counts(fresh):
    calls, waits = fresh
    priority.settle_priority()
    waits += [None, None, None]
    for late in (0.06, 0.2, 0.05):
        priority.woke(late)
    assert calls == [0, priority.NICE]


def test_not_raised_at_start_up_nothing_settles(fresh, monkeypatch):
    calls, _ = fresh
    monkeypatch.setattr(priority, "_state", ["unchanged (not root: ...)"])
    priority.settle_priority()
    priority.woke(9.0)
    assert calls == []
