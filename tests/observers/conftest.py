"""Fixtures of the observers' tests: domains and a round's plan with
values whose rounding in the output is known."""

import pytest

from tumbler.engine.model import Domain, Move, Plan


@pytest.fixture
def two_domains():
    """CPUs 0-1 (capacity 2) and 2-3, of which other work leaves 1.5."""
    return [Domain(0, {0, 1}), Domain(1, {2, 3}, measured=1.5)]


@pytest.fixture
def plan():
    return Plan(moves=[Move(2, 0, 1)], assignment={1: 0, 2: 1, 3: 1}, thread_cv=0.123456,
                interval_ms=200, regroup=True, domain_loads=[1.234567, 0.5],
                predicted_loads=[0.75, 0.987654], spread_before=0.444444,
                spread_after=0.0123456, reason="regroup: spread 0.44 > tolerance 0.10")
