"""crowded_by_other_work's pass over every thread (engine/merging.py,
_domain_figures) in C (engine/_window.c) against its Python reference:
the same sums, bit for bit, and the same answers, on random threads."""

import random

import pytest

from tumbler.engine import merging
from tumbler.engine.model import ThreadView
from tumbler.engine.policy import RUNNABLE_SHARE, SLEEPS_PER_SECOND

pytestmark = pytest.mark.skipif(merging._c_domain_figures is None,
                                reason="engine/_window.c not built")


def random_threads(rng, count, domains):
    return [ThreadView(
        tid, rng.choice((0.0, rng.random(), 1.0)),
        rng.choice((None, -1, domains, 2 ** 70, *range(domains))), None, None,
        rng.choice((0, -7, rng.randrange(0, 2 * 10**9))),
        rng.choice((0, -5, 100_000_000, 130_000_000, rng.randrange(1, 10**9))),
        rng.choice((None, 0.0, rng.random(), RUNNABLE_SHARE, 1.0, 1.3)),
        rng.choice((None, 0.0, float(SLEEPS_PER_SECOND), rng.random() * 2 * SLEEPS_PER_SECOND)),
        None) for tid in range(count)]


@pytest.mark.parametrize("seed", range(60))
def test_the_c_pass_gives_the_python_sums_and_answers(seed, monkeypatch):
    rng = random.Random(seed)
    domains = rng.choice((1, 2, 3, 4, 9))
    threads = random_threads(rng, rng.choice((0, 1, 5, 50, 400)), domains)
    figures = merging._c_domain_figures(threads, domains, ThreadView, RUNNABLE_SHARE,
                                        SLEEPS_PER_SECOND)
    assert figures is not None
    assert figures == merging._py_domain_figures(threads, domains)
    cores = [rng.choice((1, 2, 4)) for _ in range(domains)]
    others = ([0.0] * domains, [rng.choice((0.0, 0.1, 0.3, 0.9)) for _ in range(domains)])
    answers = [merging.crowded_by_other_work(threads, cores, other) for other in others]
    monkeypatch.setattr(merging, "_c_domain_figures", None)
    assert answers == [merging.crowded_by_other_work(threads, cores, other) for other in others]


def test_values_of_other_kinds_take_the_python_pass():
    views = [ThreadView(1, 0.5, 0, None, None, 10, 100, 0.95, None, None)]
    c = merging._c_domain_figures
    assert c(views, 2, ThreadView, RUNNABLE_SHARE, SLEEPS_PER_SECOND) == \
        merging._py_domain_figures(views, 2)
    for odd in (views[0]._replace(runnable=1), views[0]._replace(domain=True),
                views[0]._replace(exec_ns=2 ** 60), views[0]._replace(sleeps_per_s=3)):
        assert c(views + [odd], 2, ThreadView, RUNNABLE_SHARE, SLEEPS_PER_SECOND) is None
        assert merging._domain_figures(views + [odd], 2) == \
            merging._py_domain_figures(views + [odd], 2)        # the Python pass answers
    assert c([tuple(views[0])], 2, ThreadView, RUNNABLE_SHARE, SLEEPS_PER_SECOND) is None
