"""``-v`` (observers/verbose.py): a line per round, a line per move."""

from support.observed import make_controller, thread
from tumbler.observers.verbose import VerboseReport


def test_a_line_per_round_and_per_placement_or_move(capsys, two_domains, plan):
    controller = make_controller(two_domains, intervals=3)
    VerboseReport().write_round(controller, plan, [(thread(9, "new"), None, 0),
                                                   (thread(2, "w2"), 0, 1)])
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "tumbler: round 3: cv 0.12, next 200 ms, domain loads 1.23 0.50: "
        "regroup: spread 0.44 > tolerance 0.10",
        "tumbler:   place 9 (new) -> domain 0",
        "tumbler:   move 2 (w2) -> domain 1"]
