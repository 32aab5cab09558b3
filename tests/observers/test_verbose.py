"""``-v`` (observers/verbose.py): a line per round, a line per move."""

from types import SimpleNamespace

from support.observed import make_controller, thread
from tumbler.cpulist import format_cpulist
from tumbler.engine.model import Domain
from tumbler.observers.verbose import VerboseReport


def test_a_line_per_round_and_per_placement_or_move(capsys, two_domains, plan):
    controller = make_controller(two_domains, intervals=3)
    VerboseReport().write_round(controller, plan, [(thread(9, "new"), None, 0),
                                                   (thread(2, "w2"), 0, 1)])
    out, err = capsys.readouterr()
    assert out == ""
    cpus = [format_cpulist(d.cpus) for d in two_domains]
    assert err.splitlines() == [
        "tumbler: round 3: thread loads vary 12%% (CV); domains %s / %s carry 1.23 / 0.50 "
        "CPUs of demand; next round in 200 ms; regroup: spread 0.44 > tolerance 0.10"
        % tuple(cpus),
        "tumbler:   place thread 9 (new) in domain %s" % cpus[0],
        "tumbler:   move thread 2 (w2) to domain %s" % cpus[1]]


def test_a_reason_is_said_once_while_it_stays_the_same(capsys, plan):
    """One domain: "nothing to group across" at the first round, not every round."""
    controller = make_controller([Domain(0, {0, 1})], intervals=1)
    report = VerboseReport()
    same = SimpleNamespace(thread_cv=0.82, interval_ms=200, domain_loads=[2.98],
                           reason="single domain: nothing to group across")
    for _ in range(3):
        report.write_round(controller, same, [])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("tumbler: round 1: thread loads vary 82% (CV); domain 0-1 carries "
                        "2.98 CPUs of demand; next round in 200 ms; single domain: nothing "
                        "to group across")
    assert lines[1:] == [lines[0].split("; single domain")[0]] * 2
