"""engine/window.py: the sums a quiet round decides on, in C and in Python,
and policy.quiet_verdict / quiet_decision held to the policies' decide()."""

import random
from array import array

import pytest

from tumbler.engine import window
from tumbler.engine.grouping import deviation, spread
from tumbler.engine.model import Domain
from tumbler.engine.model import ThreadView
from tumbler.engine.policy import RUNNABLE_SHARE, make_policy
from tumbler.engine.variation import cv

C_MODULE_MISSING = ("tumbler.engine._window was not built: scripts/setup.sh builds it "
                    "(it needs gcc and Python's headers, python3-dev)")

MS = 1_000_000


def columns(rows):
    """rows of (run now, lat now, run then, lat then, domain) -> arrays."""
    run, lat, base_run, base_lat, domain_of = zip(*rows) if rows else ((),) * 5
    return (array("q", run), array("q", lat), array("q", base_run), array("q", base_lat),
            array("i", domain_of))


def both(*args):
    """The Python answer, and the C one (which must be built)."""
    assert window._c_summarize_window is not None, C_MODULE_MISSING
    python = window.py_summarize_window(*args)
    c = window.summarize_window(*args)
    return python, c


def test_known_loads_sums_and_counts():
    span = 100 * MS
    run, lat, base_run, base_lat, domain_of = columns([
        (150 * MS, 10 * MS, 100 * MS, 10 * MS, 0),     # ran 50 of 100 ms
        (100 * MS, 50 * MS, 10 * MS, 45 * MS, 0),      # ran 90, waited 5: runnable 0.95
        (5 * MS, 0, 9 * MS, 0, 1),                     # went backwards: counts 0
        (80 * MS, 30 * MS, 0, 0, 1),                   # ran 80, waited 30: runnable 1.1
    ])
    for summary in both(run, lat, base_run, base_lat, span, domain_of, array("i", [1, 1]),
                        RUNNABLE_SHARE):
        # Loads are demand: CPU time plus run-queue wait, capped at one CPU.
        assert summary.domain_loads == pytest.approx((1.45, 1.0))
        assert summary.thread_cv == pytest.approx(cv([0.5, 0.95, 0.0, 1.0]))
        assert summary.spread == pytest.approx(spread([1.45, 1.0], [1, 1]))
        assert summary.threads == (2, 2)
        assert summary.runnable == (1, 1)
        assert summary.crowded == 0
        # CPU received, without the waits: 0.5 + 0.9 and 0 + 0.8.
        assert summary.domain_cpu == pytest.approx((1.4, 0.8))


def test_saturated_domains_show_their_queues():
    """3 + 1 CPU-bound threads on two 1-CPU domains: each of the three got
    a third of its CPU and queued the rest.  CPU received sums to 1.0 on
    both domains; demand shows 3.0 against 1.0."""
    span = 300 * MS
    rows = [(100 * MS, 200 * MS, 0, 0, 0)] * 3 + [(300 * MS, 0, 0, 0, 1)]
    for summary in both(*columns(rows)[:4], span, columns(rows)[4], array("i", [1, 1]),
                        RUNNABLE_SHARE):
        assert summary.domain_loads == pytest.approx((3.0, 1.0))
        assert summary.domain_cpu == pytest.approx((1.0, 1.0))
        assert summary.spread == pytest.approx(0.5)
        assert summary.crowded == 1


def test_threads_outside_every_domain_count_nowhere():
    rows = [(100 * MS, 0, 0, 0, 0), (50 * MS, 0, 0, 0, window.OUTSIDE),
            (60 * MS, 0, 0, 0, 1)]
    for summary in both(*columns(rows)[:4], 100 * MS, columns(rows)[4], array("i", [1, 1]),
                        RUNNABLE_SHARE):
        assert summary.domain_loads == pytest.approx((1.0, 0.6))
        assert summary.threads == (1, 1)
        assert summary.thread_cv == pytest.approx(cv([1.0, 0.6]))


def test_crowded_counts_domains_with_more_runnable_threads_than_cpus():
    rows = [(100 * MS, 0, 0, 0, 0)] * 3 + [(100 * MS, 0, 0, 0, 1)] * 2
    for summary in both(*columns(rows)[:4], 100 * MS, columns(rows)[4], array("i", [2, 2]),
                        RUNNABLE_SHARE):
        assert summary.runnable == (3, 2)
        assert summary.crowded == 1
        assert summary.spread == pytest.approx(spread([3.0, 2.0], [2, 2]))


def test_c_and_python_agree_on_random_columns():
    rng = random.Random(3)
    for case in range(300):
        count = rng.choice([1, 2, 5, 64, 300])
        domains = rng.randint(1, 6)
        span = rng.randint(1, 2000) * MS
        rows = []
        for _ in range(count):
            base_run, base_lat = rng.randint(0, 10 ** 13), rng.randint(0, 10 ** 12)
            rows.append((base_run + rng.randint(-MS, span), base_lat + rng.randint(-MS, span),
                         base_run, base_lat, rng.randrange(-1, domains)))
        capacities = array("i", [rng.randint(1, 8) for _ in range(domains)])
        python, c = both(*columns(rows)[:4], span, columns(rows)[4], capacities,
                         RUNNABLE_SHARE)
        assert (c.threads, c.runnable, c.crowded) == \
            (python.threads, python.runnable, python.crowded), case
        assert c.domain_loads == pytest.approx(python.domain_loads, rel=1e-12, abs=1e-15)
        assert c.thread_cv == pytest.approx(python.thread_cv, rel=1e-12, abs=1e-15)
        assert c.spread == pytest.approx(python.spread, rel=1e-12, abs=1e-15)
        assert c.domain_cpu == pytest.approx(python.domain_cpu, rel=1e-12, abs=1e-15)


def test_a_span_per_thread_sums_several_processes_each_over_its_own_window():
    """The threads of two processes (a wrapper shell and its program), read
    at different moments: each thread's load over its own process's span,
    in one summary -- what each would give alone, added up."""
    shell = [(1 * MS, 0, 1 * MS, 0, 0)]                                 # idle
    program = [(150 * MS, 0, 50 * MS, 0, 0), (290 * MS, 60 * MS, 100 * MS, 0, 1)]
    rows = shell + program
    spans = array("q", [200 * MS, 210 * MS, 210 * MS])
    capacities = array("i", [1, 1])
    for summary in both(*columns(rows)[:4], spans, columns(rows)[4], capacities,
                        RUNNABLE_SHARE):
        assert summary.threads == (2, 1)
        # 100 of 210 ms, and (190 + 60) of 210 ms, runnable: capped at 1.
        assert summary.domain_loads == pytest.approx((100 / 210, 1.0))
        assert summary.domain_cpu == pytest.approx((100 / 210, 190 / 210))
        assert summary.thread_cv == pytest.approx(cv([0.0, 100 / 210, 1.0]))
        assert summary.runnable == (0, 1)
    # A column of one span is that span.
    same = array("q", [210 * MS] * 3)
    for summary in both(*columns(rows)[:4], same, columns(rows)[4], capacities,
                        RUNNABLE_SHARE):
        assert summary == window.py_summarize_window(*columns(rows)[:4], 210 * MS,
                                                     columns(rows)[4], capacities,
                                                     RUNNABLE_SHARE)


@pytest.mark.parametrize("implementation", ["python", "c"])
def test_bad_arguments_raise(implementation):
    summarize = (window.py_summarize_window if implementation == "python"
                 else window._c_summarize_window)
    assert summarize is not None, C_MODULE_MISSING
    run, lat, base_run, base_lat, domain_of = columns([(10, 0, 0, 0, 0), (10, 0, 0, 0, 1)])
    two = array("i", [1, 1])
    with pytest.raises(ValueError):
        summarize(run, lat, base_run, base_lat, 0, domain_of, two, 0.9)
    with pytest.raises(ValueError):     # a domain out of range
        summarize(run, lat, base_run, base_lat, 10, domain_of, array("i", [1]), 0.9)
    with pytest.raises(ValueError):     # columns of different lengths
        summarize(run, lat[:1], base_run, base_lat, 10, domain_of, two, 0.9)
    with pytest.raises(ValueError):     # a domain without CPUs
        summarize(run, lat, base_run, base_lat, 10, domain_of, array("i", [1, 0]), 0.9)
    with pytest.raises(ValueError):     # a span column of another length
        summarize(run, lat, base_run, base_lat, array("q", [10]), domain_of, two, 0.9)
    with pytest.raises(ValueError):     # a span that is not positive
        summarize(run, lat, base_run, base_lat, array("q", [10, 0]), domain_of, two, 0.9)
    if implementation == "c":
        with pytest.raises(TypeError):  # not int64 columns
            summarize(array("d", [1.0, 2.0]), lat, base_run, base_lat, 10, domain_of, two, 0.9)


def test_empty_columns_sum_to_nothing():
    empty = array("q")
    for summary in both(empty, empty, empty, empty, 10, array("i"), array("i", [1, 1]), 0.9):
        assert summary == ((0.0, 0.0), 0.0, 0.0, (0, 0), (0, 0), 0, (0.0, 0.0))


# -- quiet_verdict / quiet_decision against decide() ----------------------------------

def random_case(rng):
    """Views of placed, unpinned threads measured over one window, and the
    same threads as columns."""
    domain_count = rng.choice([1, 2, 2, 3, 4])
    domains = [Domain(i, frozenset(range(10 * i, 10 * i + rng.choice([1, 1, 2, 4]))))
               for i in range(domain_count)]
    span = rng.choice([100, 300, 500]) * MS
    count = rng.randint(1, 12)
    style = rng.random()
    rows, views = [], []
    for tid in range(1, count + 1):
        domain = rng.randrange(domain_count)
        if style < 0.6:         # near-even loads: mostly within the tolerance
            ran = int(span * rng.uniform(0.28, 0.32))
        else:
            ran = rng.randint(0, span)
        waited = rng.choice([0, 0, span - ran, rng.randint(0, span)])
        rows.append((ran, waited, 0, 0, domain))
        views.append(ThreadView(tid, window.demand(ran / span, (ran + waited) / span,
                                                   RUNNABLE_SHARE), domain,
                                frozenset(range(domain_count)),
                                None, ran, span, (ran + waited) / span, None))
    return domains, span, rows, views


@pytest.mark.parametrize("name", ["tumbler", "observe", "auto", "speed"])
def test_quiet_decision_is_what_decide_decides(name):
    rng = random.Random(11)
    quiet_cases = full_cases = 0
    for case in range(400):
        domains, span, rows, views = random_case(rng)
        capacities = array("i", [d.capacity for d in domains])
        run, lat, base_run, base_lat, domain_of = columns(rows)
        summary = window.summarize_window(run, lat, base_run, base_lat, span, domain_of,
                                          capacities, RUNNABLE_SHARE)
        assignment = {v.tid: v.domain for v in views}
        quiet = make_policy(name).quiet_decision(summary, domains, assignment)
        full = make_policy(name).decide(views, domains)
        plan = full.plan
        # Quiet exactly when decide() keeps the groups without computing
        # new ones (one domain, or a spread within the tolerance) and, for
        # auto, no domain has more runnable threads than CPUs.
        may_be_quiet = (not plan.moves and not full.pins and not full.engaged
                        and (len(domains) < 2 or deviation(
                            plan.domain_loads, [d.capacity for d in domains]) <= 0.10)
                        and (name != "auto" or all(summary.runnable[d.index] <= d.capacity
                                                   for d in domains))
                        and name != "speed")
        assert (quiet is not None) == may_be_quiet, case
        if quiet is None:
            full_cases += 1
            continue
        quiet_cases += 1
        assert quiet.interval_ms == full.interval_ms
        assert (quiet.pins, quiet.engaged, quiet.speed_interval_ms) == ({}, [], None)
        assert quiet.notes == full.notes
        assert quiet.plan.moves == [] and quiet.plan.assignment == plan.assignment
        assert quiet.plan.reason == plan.reason
        assert quiet.plan.interval_ms == plan.interval_ms
        assert quiet.plan.domain_loads == pytest.approx(plan.domain_loads, rel=1e-12)
        assert quiet.plan.spread_before == pytest.approx(plan.spread_before, abs=1e-12)
        assert quiet.plan.thread_cv == pytest.approx(plan.thread_cv, rel=1e-12, abs=1e-15)
        verdict = make_policy(name).quiet_verdict(summary, capacities)
        assert verdict == (quiet.interval_ms, pytest.approx(quiet.plan.spread_before))
    if name == "speed":
        assert quiet_cases == 0
    else:
        assert quiet_cases > 50 and full_cases > 50, (quiet_cases, full_cases)


def test_auto_is_never_quiet_while_engaged():
    policy = make_policy("auto")
    domains = [Domain(0, frozenset({0, 1}))]
    # Three always-runnable threads on 2 cores at unequal speeds, yielding
    # at barriers (1,300 switches per CPU-second): engaged.
    views = [ThreadView(tid, 0.66, 0, frozenset({0}), None, share, 100 * MS, 1.0, 0.0, 1300.0)
             for tid, share in ((1, 50 * MS), (2, 50 * MS), (3, 100 * MS))]
    assert policy.decide(views, domains).engaged == [0]
    calm = window.WindowSummary((0.5,), 0.0, 0.0, (3,), (0,), 0)
    assert policy.quiet_verdict(calm, array("i", [2])) is None
    assert make_policy("auto").quiet_verdict(calm, array("i", [2])) == (200, 0.0)


def test_demand_counts_the_wait_of_always_runnable_threads_only():
    """An always-runnable thread wants a whole CPU whatever it got (3 + 1
    busy threads on two 1-CPU domains: 1 each); a thread runnable less of
    the time got what it asked for, and its wait -- the overlap with its
    neighbours' bursts, which changes with every regrouping -- is not
    counted (four 30% threads on two CPUs were moved back and forth on it)."""
    assert window.demand(1 / 3, 1.0, 0.9) == 1.0
    assert window.demand(0.5, 0.95, 0.9) == 0.95
    assert window.demand(0.3, 0.45, 0.9) == 0.3
    assert window.demand(1.2, 1.2, 0.9) == 1.0
    run, lat = array("q", [30, 33]), array("q", [15, 67])
    zeros = array("q", [0, 0])
    for summary in both(run, lat, zeros, zeros, 100, array("i", [0, 1]),
                        array("i", [1, 1]), 0.9):
        assert summary.domain_loads == pytest.approx((0.30, 1.0))
