"""The balancing loop's timings (``Timings``): when a run's first round
comes, how often it looks for new threads between rounds, the window
thread loads are measured over -- their defaults are here and only here,
each with its evidence -- and whether quiet rounds may stand in for full
ones (quiet.py).

A run's configuration file may set ``discover_ms`` and ``load_window_ms``
(tumbler.config, ``Config.loop_options``), ``exec`` an earlier first
round (commands/run.py); the run puts them together (service/assembly.py)
and hands them to its controller, which owns them (controller.py).
"""

from __future__ import annotations

from ..records import record


@record
class Timings:
    """A controller's timings (the module doc).  ``discover_ms`` measured
    (BENCHMARKS.md, issue 27: 100 or 800 ms, the same ratio beside a hog;
    threads living under 100 ms are never placed, 148 of ~120,000 in the
    soak); the first round and the load window reasoned (tumbler-auto(7),
    THRESHOLDS, which tests/system/test_auto_manual.py checks against
    these)."""

    discover_ms: int = 100          # new threads are looked for this often between rounds
    first_interval_ms: int = 100    # the first round comes this long after balancing starts
    load_window_ms: int = 500       # thread load is measured over at least this long
    quiet_rounds: bool = True       # False: every round a full one (benchmarks, tests)
