"""The YAML configuration file (``--config FILE``).

Every key is optional; an unknown key, a wrong type or an out-of-range
value is a usage error (exit 2) naming the key.  Example, with the
defaults::

    variation_table:          # paper Table IV: lowest CV of a row -> interval
      - {cv: 0.40, interval_ms: 50}
      - {cv: 0.36, interval_ms: 100}
      - {cv: 0.31, interval_ms: 150}
      - {cv: 0.21, interval_ms: 200}
      - {cv: 0.11, interval_ms: 400}
      - {cv: 0.05, interval_ms: 800}
    idle_interval_ms: 800     # below the last row: no grouping, keep monitoring
    tolerance: 0.10           # no domain further than this from the mean: keep groups
    discover_ms: 100          # how often new threads are looked for
    load_window_ms: 500       # thread load is measured over at least this long
    speed:                    # speed balancing (papers/speed-balancing.md)
      threshold: 0.9
      block_intervals: 0      # the paper: 2
      interval_ms: 20         # the paper: 100
      jitter: true
    defaults:                 # command-line defaults
      level: auto
      policy: auto
      binder: affinity
"""

from dataclasses import dataclass, field, replace
from typing import Optional

import yaml

from .errors import UsageError

LEVEL_CHOICES = ("auto", "package", "numa", "llc", "core")
POLICY_CHOICES = ("auto", "tumbler", "speed", "observe")
BINDER_CHOICES = ("affinity", "cpuset", "pset")

DEFAULT_TABLE = ((0.40, 50), (0.36, 100), (0.31, 150), (0.21, 200), (0.11, 400), (0.05, 800))

# Bounds that catch typos (an interval of 50000 s) without second-guessing
# deliberate choices.
MAX_INTERVAL_MS = 3_600_000
MIN_INTERVAL_MS = 10


@dataclass(frozen=True)
class SpeedConfig:
    """Speed balancing parameters.

    The paper used 100 ms and blocked a core for 2 intervals after a
    migration, on 16 cores with phases of seconds.  A thread's turn on a
    fast core only helps if it comes within a barrier phase, so for phases
    of ~0.1 s tumbler rotates every 20 ms without blocking (measured in
    BENCHMARKS.md); ``{interval_ms: 100, block_intervals: 2}`` restores the
    paper's settings.
    """

    threshold: float = 0.9
    block_intervals: int = 0
    interval_ms: int = 20
    jitter: bool = True


@dataclass(frozen=True)
class Config:
    variation_table: tuple = DEFAULT_TABLE
    idle_interval_ms: int = 800
    tolerance: float = 0.10
    discover_ms: int = 100
    load_window_ms: int = 500
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    level: str = "auto"
    policy: str = "auto"
    binder: Optional[str] = None      # None: the platform's default


def load_config(path):
    """Read and validate a config file; raise UsageError on any problem."""
    if path is None:
        return Config()
    try:
        with open(path, "rb") as f:        # bytes: YAML's reader checks the encoding
            data = yaml.safe_load(f)
    except OSError as exc:
        raise UsageError("cannot read config %s: %s" % (path, exc.strerror)) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = " at line %d" % (where.line + 1) if where is not None else ""
        raise UsageError("bad config %s: not valid YAML%s" % (path, at)) from None
    if data is None:
        return Config()
    try:
        return parse_config(data)
    except UsageError as exc:
        raise UsageError("bad config %s: %s" % (path, exc)) from None


def parse_config(data):
    _require_mapping(data, "the file")
    _reject_unknown(data, ("variation_table", "idle_interval_ms", "tolerance",
                           "discover_ms", "load_window_ms", "speed", "defaults"), "")
    config = Config()
    if "variation_table" in data:
        config = replace(config, variation_table=_parse_table(data["variation_table"]))
    if "idle_interval_ms" in data:
        config = replace(config, idle_interval_ms=_interval(data["idle_interval_ms"],
                                                            "idle_interval_ms"))
    if "tolerance" in data:
        config = replace(config, tolerance=_number(data["tolerance"], "tolerance", 0.0, 10.0))
    if "discover_ms" in data:
        config = replace(config, discover_ms=_interval(data["discover_ms"], "discover_ms"))
    if "load_window_ms" in data:
        config = replace(config, load_window_ms=_interval(data["load_window_ms"],
                                                          "load_window_ms"))
    if "speed" in data:
        config = replace(config, speed=_parse_speed(data["speed"]))
    if "defaults" in data:
        config = _parse_defaults(config, data["defaults"])
    return config


def _parse_table(rows):
    if not isinstance(rows, list) or not rows:
        raise UsageError("variation_table must be a non-empty list of {cv, interval_ms}")
    table = []
    for i, row in enumerate(rows):
        where = "variation_table[%d]" % i
        if isinstance(row, dict):
            _reject_unknown(row, ("cv", "interval_ms"), where + ".")
            if "cv" not in row or "interval_ms" not in row:
                raise UsageError("%s needs both cv and interval_ms" % where)
            cv, interval = row["cv"], row["interval_ms"]
        elif isinstance(row, list) and len(row) == 2:
            cv, interval = row
        else:
            raise UsageError("%s must be {cv: X, interval_ms: Y}" % where)
        table.append((_number(cv, where + ".cv", 0.0, 100.0),
                      _interval(interval, where + ".interval_ms")))
    for (cv_hi, _), (cv_lo, _) in zip(table, table[1:]):
        if cv_lo >= cv_hi:
            raise UsageError("variation_table rows must have strictly decreasing cv")
    return tuple(table)


def _parse_speed(data):
    _require_mapping(data, "speed")
    _reject_unknown(data, ("threshold", "block_intervals", "interval_ms", "jitter"), "speed.")
    speed = SpeedConfig()
    if "threshold" in data:
        speed = replace(speed, threshold=_number(data["threshold"], "speed.threshold", 0.01, 1.0))
    if "block_intervals" in data:
        speed = replace(speed, block_intervals=_integer(data["block_intervals"],
                                                        "speed.block_intervals", 0, 1000))
    if "interval_ms" in data:
        speed = replace(speed, interval_ms=_interval(data["interval_ms"], "speed.interval_ms"))
    if "jitter" in data:
        if not isinstance(data["jitter"], bool):
            raise UsageError("speed.jitter must be true or false")
        speed = replace(speed, jitter=data["jitter"])
    return speed


def _parse_defaults(config, data):
    _require_mapping(data, "defaults")
    _reject_unknown(data, ("level", "policy", "binder"), "defaults.")
    for key, choices in (("level", LEVEL_CHOICES), ("policy", POLICY_CHOICES),
                         ("binder", BINDER_CHOICES)):
        if key in data:
            value = data[key]
            if value not in choices:
                raise UsageError("defaults.%s must be one of %s" % (key, ", ".join(choices)))
            config = replace(config, **{key: value})
    return config


def _require_mapping(data, what):
    if not isinstance(data, dict):
        raise UsageError("%s must be a mapping of keys to values" % what)


def _reject_unknown(data, known, prefix):
    for key in data:
        if key not in known:
            raise UsageError("unknown key %s%s (known: %s)" % (prefix, key, ", ".join(known)))


def _number(value, key, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError("%s must be a number" % key)
    if not low <= value <= high:
        raise UsageError("%s must be between %g and %g, not %g" % (key, low, high, value))
    return float(value)


def _integer(value, key, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError("%s must be a whole number" % key)
    if not low <= value <= high:
        raise UsageError("%s must be between %d and %d, not %d" % (key, low, high, value))
    return value


def _interval(value, key):
    return _integer(value, key, MIN_INTERVAL_MS, MAX_INTERVAL_MS)
