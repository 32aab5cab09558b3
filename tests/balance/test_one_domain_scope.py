"""With one domain, the domain choice's note -- what ``topology`` prints
after ``auto:`` and the exit summary prints once -- says in one line what
tumbler can and cannot do there."""

from types import SimpleNamespace

import pytest

from tumbler.balance.domains import choose_domains

ONE_SOCKET = SimpleNamespace(online=frozenset({0, 1}), levels={
    "package": (frozenset({0, 1}),), "numa": (frozenset({0, 1}),),
    "llc": (frozenset({0, 1}),), "core": (frozenset({0}), frozenset({1}))})


@pytest.mark.parametrize("level, domains", [("auto", None), ("llc", None),
                                            ("auto", [frozenset({0, 1})])])
def test_one_domain_says_what_can_and_cannot_happen(level, domains):
    note = choose_domains(ONE_SOCKET, frozenset({0, 1}), level, domains).note
    assert "\n" not in note
    assert "nothing to group across" in note
    assert "speed-balance threads that outnumber the cores" in note
    assert "--policy speed" in note
