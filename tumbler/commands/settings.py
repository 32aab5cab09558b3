"""The settings of a balancing run, made from its options: defaults from the
config file, every value checked once, before anything is changed or
started.  No click here: ``tumbler exec``'s quick path (quick.py) makes
the same settings from the same options without it."""

from ..config import MAX_INTERVAL_MS, MIN_INTERVAL_MS, load_config
from ..cpulist import parse_domains
from ..errors import UsageError


class Settings:
    """A balancing run's settings: each option as given or, where it was
    not, the config file's default (``config``); flags are booleans; made
    once, read-only after.  A plain class with slots, not a ``@record``
    (records.py): ``exec`` makes one before its command starts, and
    ``collections``, where named tuples come from, costs 1.3 ms there
    (BENCHMARKS.md, start-up)."""
    level: str                  # a LEVEL_CHOICES name
    domains_text: str | None    # --domains as given
    policy: str
    interval_ms: int | None     # --interval: a fixed interval instead of the table
    config_path: str | None
    binder: str | None          # None: the platform's own default
    log_path: str | None
    summary_json: str | None
    dry_run: bool
    duration: float | None      # seconds of balancing; None: until the targets exit
    force: bool
    probe: bool
    children: bool | None       # None: the command's default (exec yes, -p no)
    quiet: bool
    verbose: bool
    share: str
    share_policy: str
    capacity: str
    config: object              # tumbler.config.Config, the file's
    root: str                   # "/" or a captured tree (--root)
    platform: str | None        # --platform; None: the running OS's
    domains: tuple | None       # --domains parsed: CPU frozensets

    __slots__ = _fields = tuple(__annotations__)

    def __init__(self, **values):
        if values.keys() != set(self._fields):
            raise TypeError("settings: %s" % ", ".join(sorted(values.keys() ^ set(self._fields))))
        for name in self._fields:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name, value):
        raise AttributeError("settings are read-only")

    def _asdict(self):
        return {name: getattr(self, name) for name in self._fields}

    def __repr__(self):
        return "Settings(%s)" % ", ".join("%s=%r" % item for item in self._asdict().items())


#: The balancing options' names, as click passes them (options.py).
OPTION_NAMES = Settings._fields[:Settings._fields.index("config")]


def make_settings(options, root, platform_name):
    """The validated Settings of the options (None where not given)."""
    config = load_config(options.get("config_path"))
    given = {name: options.get(name) for name in OPTION_NAMES}
    if given["probe"] and root != "/":
        raise UsageError("--probe traces the running system; it cannot be combined with --root")
    if given["quiet"] and given["verbose"]:
        raise UsageError("-q/--quiet (no summary) and -v/--verbose (a line per round) "
                         "exclude each other")
    domains = (parse_domains(given["domains_text"])
               if given["domains_text"] is not None else None)
    if domains is not None and options.get("level"):
        raise UsageError("--domains and --level exclude each other")
    if given["interval_ms"] is not None:
        check_interval(given["interval_ms"])
    if given["duration"] is not None:
        check_duration(given["duration"])
    return Settings(**dict(
        given, config=config, root=root, platform=platform_name, domains=domains,
        level=given["level"] or config.level,
        policy=given["policy"] or config.policy,
        binder=given["binder"] or config.binder,
        share=given["share"] or config.share,
        share_policy=given["share_policy"] or config.share_policy,
        capacity=given["capacity"] or config.capacity,
        dry_run=bool(given["dry_run"]), force=bool(given["force"]),
        quiet=bool(given["quiet"]), verbose=bool(given["verbose"]),
        probe=bool(given["probe"])))


def check_interval(interval_ms):
    """UsageError unless ``--interval`` is within the bounds every command takes."""
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise UsageError("--interval must be between %d and %d ms, not %d"
                         % (MIN_INTERVAL_MS, MAX_INTERVAL_MS, interval_ms))


def check_duration(duration):
    """UsageError unless ``--duration`` is a usable number of seconds."""
    if not 0 < duration < 10 ** 9:
        raise UsageError("--duration must be a positive number of seconds")
