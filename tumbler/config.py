"""The YAML configuration file (``--config FILE``).

Every key is optional; an unknown key, a wrong type or an out-of-range
value is a usage error (exit 2) naming the key and its line.  A key that
is absent leaves the default of the code that uses it, defined there and
only there (the variation table, idle interval and tolerance in
``engine``, speed balancing's parameters in ``engine.speed.SpeedParams``,
``discover_ms`` and ``load_window_ms`` in ``balance.timings``).  The
example shows those defaults::

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
      share: time             # several -p programs: time or space
      share_policy: equal-qos
      capacity: cpus          # or measured (see tumbler(8))
"""

from .errors import UsageError

#: Levels of the CPU hierarchy, outermost first (the platform's topologies
#: group CPUs at each).  ``auto`` picks the first of package, numa, llc that
#: splits the target's CPUs into two or more domains.
LEVELS = ("package", "numa", "llc", "core")
LEVEL_CHOICES = ("auto",) + LEVELS
POLICY_CHOICES = ("auto", "tumbler", "speed", "observe")
#: Policies that never move a thread (their engine class says
#: ``moves_threads = False``; tests/engine/test_engine_policy.py checks the two
#: agree): such a run keeps no state and needs no binder.
OBSERVING_POLICIES = ("observe",)

BINDER_CHOICES = ("affinity", "cpuset", "pset")
#: How several managed programs share the CPUs (balance/sharing.py).
SHARE_CHOICES = ("time", "space")
SHARE_POLICY_CHOICES = ("equal-qos", "max-qos")     # engine.share.POLICIES
#: A domain's capacity: measured from what other work leaves of its CPUs,
#: or its CPU count (balance/capacity.py).
CAPACITY_CHOICES = ("measured", "cpus")


def moves_threads(policy, dry_run):
    """Whether a balancing run of ``policy`` may move threads (a policy
    that does, no -n): only such a run needs a binder and, on the running
    system, keeps crash-safe state (``exec``/``-p``, and ``compare``, which
    waits for that state to know a run has attached)."""
    return policy not in OBSERVING_POLICIES and not dry_run


# Bounds that catch typos (an interval of 50000 s) without second-guessing
# deliberate choices.
MAX_INTERVAL_MS = 3_600_000
MIN_INTERVAL_MS = 10

#: Larger than any sane configuration; a larger file is refused unread.
MAX_CONFIG_BYTES = 1 << 20
#: Mappings and lists nested deeper than this are refused before they are
#: built (the YAML constructor recurses once per level).
MAX_CONFIG_DEPTH = 32
#: A plain scalar this long that YAML would read as a number is refused:
#: Python refuses to convert integers of over 4,300 digits anyway.
MAX_NUMBER_CHARS = 64
_NUMBER = r"[-+]?[0-9][0-9_.:eE+-]*$|[-+]?0[box][0-9a-fA-F_]+$"


class ConfigError(UsageError):
    """A bad value in a config file; ``key`` names it (``speed.threshold``,
    ``variation_table[2].cv``) so the file's line can be given."""

    def __init__(self, message, key=None):
        super().__init__(message)
        self.key = key


class Config:
    """What the file sets; None (or an empty ``speed``) where it is silent.

    A plain class, not a dataclass: ``tumbler exec`` makes one before its
    command starts, and importing dataclasses (with inspect) costs more
    than the rest of that path (commands/quick.py)."""

    #: field -> default (``speed``: the SpeedParams fields given)
    DEFAULTS = {"variation_table": None, "idle_interval_ms": None, "tolerance": None,
                "discover_ms": None, "load_window_ms": None, "speed": None,
                "level": "auto", "policy": "auto",
                "binder": None,     # binder None: the platform's default
                "share": "time", "share_policy": "equal-qos", "capacity": "cpus"}
    __slots__ = tuple(DEFAULTS)

    def __init__(self, **values):
        unknown = values.keys() - self.DEFAULTS.keys()
        if unknown:
            raise TypeError("Config has no field %s" % ", ".join(sorted(unknown)))
        for name, default in self.DEFAULTS.items():
            object.__setattr__(self, name, values.get(name, default))
        if self.speed is None:
            object.__setattr__(self, "speed", {})

    def __setattr__(self, name, value):
        raise AttributeError("Config is read-only: use replace()")

    def replace(self, **changes):
        """A copy with ``changes``."""
        return Config(**{**{name: getattr(self, name) for name in self.DEFAULTS}, **changes})

    def __eq__(self, other):
        return type(other) is Config and all(
            getattr(self, name) == getattr(other, name) for name in self.DEFAULTS)

    __hash__ = None

    def __repr__(self):
        return "Config(%s)" % ", ".join("%s=%r" % (name, getattr(self, name))
                                        for name in self.DEFAULTS)

    def loop_options(self):
        """The loop's timings the file sets, as keyword arguments (the
        fields of balance/timings.py's Timings, which has the defaults)."""
        return {key: value for key, value in (("discover_ms", self.discover_ms),
                                               ("load_window_ms", self.load_window_ms))
                if value is not None}


def load_config(path):
    """Read and validate a config file; raise UsageError on any problem,
    as ``bad config FILE:LINE: reason`` where the line is known.  The file
    is either a run's (the keys above, at the top) or the service's
    (tumbler.yaml(5)): of that, only ``balancing:`` is read."""
    if path is None:
        return Config()
    text = read_config_file(path)
    data = load_yaml(path, text)
    if data is None:
        return Config()
    try:
        return parse_run_part(data)
    except ConfigError as exc:
        raise located_error(path, text, exc) from None


#: The keys at the top of a run's file (the module docstring).
RUN_KEYS = ("variation_table", "idle_interval_ms", "tolerance", "discover_ms",
            "load_window_ms", "speed", "defaults")
#: The keys at the top of the service's file (service/config.py): a run
#: reads its ``balancing:``, the same keys as RUN_KEYS; the others are the
#: service's own (what it looks for, how programs share the CPUs).
SERVICE_LAYOUT_KEYS = ("service", "balancing", "sharing", "programs")


def parse_run_part(data):
    """The Config of the part of a file's ``data`` a run reads: all of a
    run's file; the ``balancing:`` mapping of the service's
    (tumbler.yaml(5)), so that ``--config /etc/tumbler/tumbler.yaml``
    balances as the service does.  A key of neither layout, or of both
    mixed, is refused, naming both."""
    require_mapping(data, "the file")
    service_keys = [key for key in data if key in SERVICE_LAYOUT_KEYS]
    for key in data:
        if service_keys and key in RUN_KEYS:
            raise ConfigError("%s goes under balancing: in a file with %s: (the service's "
                              "layout, tumbler.yaml(5))" % (key, service_keys[0]), key)
        if key not in RUN_KEYS + SERVICE_LAYOUT_KEYS:
            raise ConfigError("unknown key %s (a run's file has %s; the service's "
                              "tumbler.yaml has %s)"
                              % (key_name("", key), ", ".join(RUN_KEYS),
                                 ", ".join(SERVICE_LAYOUT_KEYS)), key)
    if not service_keys:
        return parse_config(data)
    return parse_balancing(data.get("balancing") or {})


def parse_balancing(data):
    """The Config of the service's ``balancing:`` mapping, its errors
    located under it."""
    require_mapping(data, "balancing")
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError("balancing: %s" % exc,
                          "balancing" + ("." + exc.key if exc.key else "")) from None


def located_error(path, text, exc):
    """The UsageError ``bad config FILE:LINE: reason`` for a ConfigError
    raised on the data of ``text``, read from ``path``."""
    # Composed again only now: the nodes know their lines.
    yaml, loader = _yaml()
    node = yaml.compose(text, Loader=loader)
    return UsageError("bad config %s: %s" % (located(path, node, exc.key), exc))


def read_config_file(path):
    """The bytes of a config file: a regular file of at most
    MAX_CONFIG_BYTES (a FIFO or a device would block or never end),
    belonging to root (or the user tumbler runs as) and not writable by
    others, reached through directories only they can change, as sshd's
    StrictModes asks (tumbler.safefile): a configuration decides which
    programs root moves."""
    from .safefile import NotAFile, TooLarge, UnsafePath, read_trusted
    try:
        return read_trusted(path, MAX_CONFIG_BYTES)
    except TooLarge:
        raise UsageError("bad config %s: larger than %d KiB" % (path, MAX_CONFIG_BYTES >> 10)) \
            from None
    except NotAFile as exc:
        raise UsageError("bad config %s" % exc) from None
    except UnsafePath as exc:
        raise UsageError("untrusted config %s" % exc) from None
    except OSError as exc:
        raise UsageError("cannot read config %s: %s" % (path, exc.strerror)) from None


def _yaml():
    """PyYAML and its fastest safe loader (libyaml where built: 10x faster);
    imported only when a config file is read (tumbler starts sooner)."""
    import yaml
    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path, text):
    """The data of YAML ``text`` (bytes: YAML's reader checks the
    encoding).  The events are checked first -- nesting depth, numbers too
    long to convert -- so that nothing hostile reaches the constructor."""
    import re           # here: a run without a config file never needs it
    number = re.compile(_NUMBER)
    yaml, loader = _yaml()
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_CONFIG_DEPTH:
                    raise UsageError("bad config %s:%d: nested deeper than %d levels"
                                     % (path, event.start_mark.line + 1, MAX_CONFIG_DEPTH))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent) and event.implicit[0] \
                    and len(event.value) > MAX_NUMBER_CHARS and number.match(event.value):
                raise UsageError("bad config %s:%d: a number of %d characters"
                                 % (path, event.start_mark.line + 1, len(event.value)))
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = ":%d" % (mark.line + 1) if mark is not None else ""
        if "nesting depth" in str(getattr(exc, "problem", "")):
            # libyaml >= 0.2.5 (PyYAML 6.0.4's wheels) refuses deep nesting
            # itself, while scanning ahead of the events counted above.
            raise UsageError("bad config %s%s: nested deeper than %d levels"
                             % (path, at, MAX_CONFIG_DEPTH)) from None
        raise UsageError("bad config %s%s: not valid YAML" % (path, at)) from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise UsageError("bad config %s: cannot read a value (%s)"
                         % (path, type(exc).__name__)) from None
    return data


def located(path, node, key):
    """``path:LINE`` of ``key`` (``a.b[2].c``) in the composed ``node``,
    or ``path`` alone where it cannot be told."""
    import yaml
    line = None
    import re
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key or ""):
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if k.value == part), None)
            if found is None:
                break
            line, node = found[0].start_mark.line, found[1]
        elif isinstance(node, yaml.SequenceNode) and part.startswith("["):
            index = int(part[1:-1])
            if index >= len(node.value):
                break
            node = node.value[index]
            line = node.start_mark.line
        else:
            break
    return path if line is None else "%s:%d" % (path, line + 1)


#: Said after the range of a key that is a fraction (``tolerance: 20%`` is
#: a string to YAML).
FRACTION_HINT = " (a fraction: 0.1 means 10%)"


def parse_config(data):
    require_mapping(data, "the file")
    reject_unknown(data, RUN_KEYS, "")
    config = Config()
    if "variation_table" in data:
        config = config.replace(variation_table=_parse_table(data["variation_table"]))
    if "idle_interval_ms" in data:
        config = config.replace(idle_interval_ms=_interval(data["idle_interval_ms"],
                                                            "idle_interval_ms"))
    if "tolerance" in data:
        config = config.replace(tolerance=number_in(data["tolerance"], "tolerance", 0.0, 10.0,
                                                       FRACTION_HINT))
    if "discover_ms" in data:
        config = config.replace(discover_ms=_interval(data["discover_ms"], "discover_ms"))
    if "load_window_ms" in data:
        config = config.replace(load_window_ms=_interval(data["load_window_ms"],
                                                          "load_window_ms"))
    if "speed" in data:
        config = config.replace(speed=_parse_speed(data["speed"]))
    if "defaults" in data:
        config = _parse_defaults(config, data["defaults"])
    return config


def _parse_table(rows):
    if not isinstance(rows, list) or not rows:
        raise ConfigError("variation_table must be a non-empty list of {cv, interval_ms}",
                          "variation_table")
    table = []
    for i, row in enumerate(rows):
        where = "variation_table[%d]" % i
        if isinstance(row, dict):
            reject_unknown(row, ("cv", "interval_ms"), where + ".")
            if "cv" not in row or "interval_ms" not in row:
                raise ConfigError("%s needs both cv and interval_ms" % where, where)
            cv, interval = row["cv"], row["interval_ms"]
        elif isinstance(row, list) and len(row) == 2:
            cv, interval = row
        else:
            raise ConfigError("%s must be {cv: X, interval_ms: Y}" % where, where)
        table.append((number_in(cv, where + ".cv", 0.0, 100.0),
                      _interval(interval, where + ".interval_ms")))
    for (cv_hi, _), (cv_lo, _) in zip(table, table[1:]):
        if cv_lo >= cv_hi:
            raise ConfigError("variation_table rows must have strictly decreasing cv",
                              "variation_table")
    return tuple(table)


def _parse_speed(data):
    require_mapping(data, "speed")
    reject_unknown(data, ("threshold", "block_intervals", "interval_ms", "jitter"), "speed.")
    speed = {}
    if "threshold" in data:
        speed["threshold"] = number_in(data["threshold"], "speed.threshold", 0.01, 1.0)
    if "block_intervals" in data:
        speed["block_intervals"] = integer_in(data["block_intervals"], "speed.block_intervals",
                                            0, 1000)
    if "interval_ms" in data:
        speed["interval_ms"] = _interval(data["interval_ms"], "speed.interval_ms")
    if "jitter" in data:
        if not isinstance(data["jitter"], bool):
            raise ConfigError("speed.jitter must be true or false", "speed.jitter")
        speed["jitter"] = data["jitter"]
    return speed


def _parse_defaults(config, data):
    require_mapping(data, "defaults")
    reject_unknown(data, ("level", "policy", "binder", "share", "share_policy", "capacity"),
                   "defaults.")
    for key, choices in (("level", LEVEL_CHOICES), ("policy", POLICY_CHOICES),
                         ("binder", BINDER_CHOICES), ("share", SHARE_CHOICES),
                         ("share_policy", SHARE_POLICY_CHOICES),
                         ("capacity", CAPACITY_CHOICES)):
        if key in data:
            value = data[key]
            if value not in choices:
                raise ConfigError("defaults.%s must be one of %s" % (key, ", ".join(choices)),
                                  "defaults." + key)
            config = config.replace(**{key: value})
    return config


def require_mapping(data, what):
    if not isinstance(data, dict):
        raise ConfigError("%s must be a mapping of keys to values" % what,
                          None if what == "the file" else what)


def reject_unknown(data, known, prefix):
    """Refuse a key not in ``known``.  The key is named only if it looks
    like one (a short word): the file may be anything root can read --
    ``--config /etc/shadow`` -- and an error line never shows its content."""
    for key in data:
        if key not in known:
            raise ConfigError("unknown key %s (known: %s)"
                              % (key_name(prefix, key), ", ".join(known)),
                              "%s%s" % (prefix, key))


#: A key an error line may name: a short word, as every key of ours is.
_KEY_NAME = r"[A-Za-z_][A-Za-z0-9_-]{0,39}"


def key_name(prefix, key):
    """``prefix + key`` for an error line, or, where the key is not a
    short word, ``prefix`` and a placeholder (its line is given beside)."""
    import re
    if isinstance(key, str) and re.fullmatch(_KEY_NAME, key):
        return prefix + key
    return prefix + "<not a key of this file>"


def number_in(value, key, low, high, hint=""):
    """``value`` as a float in [low, high].  An error names the range, never
    the value (it is the file's content: see reject_unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not low <= value <= high:
        raise ConfigError("%s must be a number from %g to %g%s" % (key, low, high, hint), key)
    return float(value)


def integer_in(value, key, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError("%s must be a whole number from %d to %d" % (key, low, high), key)
    return value


def _interval(value, key):
    return integer_in(value, key, MIN_INTERVAL_MS, MAX_INTERVAL_MS)
