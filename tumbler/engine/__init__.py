"""The balancing engine: pure, deterministic, OS-free.

Given per-thread loads and the CPU domains of a target, decide which threads
go to which domain and when to look again.  Nothing here reads /proc or binds
a thread; the controller does that with the platform layer.

* model.py     -- Domain, ThreadLoad, Move, Plan; ThreadView, Decision.
* variation.py -- CV and the variation-interval table (paper Table IV).
* wave.py      -- wave grouping (paper Algorithm 2), capacity units.
* mapping.py   -- slots -> domains with the fewest migrations (Hungarian).
* grouping.py  -- the tumbler policy: plan_tumbler, place_new.
* columns.py   -- a round's threads as columns (grouping.py's input;
                  ``_columns.c``: their checks and sums in one C pass).
* swaps.py     -- opposite moves of near-equal loads cancelled.
* leftout.py   -- left-out domains (``--capacity measured``): left_out.
* speed.py     -- speed balancing inside a domain.
* policy.py    -- policy choice: decide, and quiet_verdict for quiet rounds.
* merging.py   -- when auto merges a program's domains, and splits them.
* window.py    -- the sums a quiet round decides on (``_window.c``: in C).
* share.py     -- space sharing: disjoint CPU sets for several programs.

Imports nothing outside itself but ``tumbler.records`` (tests/system/test_layers.py).
"""

from .grouping import DEFAULT_TOLERANCE, place_new, plan_tumbler, spread
from .leftout import left_out
from .mapping import assign_slots, hungarian
from .model import Domain, Move, Plan, ThreadLoad
from .variation import DEFAULT_TABLE, VariationTable, cv
from .wave import capacity_units, sort_by_load, wave_groups, wave_slots

__all__ = [
    "DEFAULT_TABLE", "DEFAULT_TOLERANCE", "Domain", "Move", "Plan", "ThreadLoad",
    "VariationTable", "assign_slots", "capacity_units", "cv", "hungarian", "left_out",
    "place_new", "plan_tumbler", "sort_by_load", "spread", "wave_groups", "wave_slots",
]
