"""The runs of a comparison, interleaved (run 1 of every policy, then run 2,
...) so that slow drift in machine noise hits every policy alike; each with
the --background commands around it; stopping at the first that fails."""

from .background import Background
from .runs import RunResult, run_once
from .together import run_together


def run_order(policies, runs):
    """(run number from 1, policy) pairs: run 1 of every policy, then run 2, ..."""
    return [(run, policy) for run in range(1, runs + 1) for policy in policies]


def run_one(setup, policy, run):
    """One run of ``policy``: the --background commands around it, and CMD
    by itself (run_once) or with the --together programs (run_together)."""
    background = Background(setup.background)
    try:
        cannot = background.start()
        if cannot is not None:
            return RunResult(run, policy, cannot[0], 0.0, failure=cannot[1])
        result = (run_together if setup.together else run_once)(setup, policy, run)
    finally:
        ended_early = background.stop()
    if ended_early is not None and result.failure is None:
        return result._replace(failure=ended_early)
    return result


def run_all(setup, policies, runs, progress=None):
    """Run the interleaved schedule; stop at the first failing run.

    Returns (results in run order, the failed RunResult or None).
    """
    results = []
    for run, policy in run_order(policies, runs):
        result = run_one(setup, policy, run)
        results.append(result)
        if progress is not None:
            progress(result, runs)
        if not result.ok:
            return results, result
    return results, None
