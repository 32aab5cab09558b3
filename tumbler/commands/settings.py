"""The settings of a balancing run, made from its options: defaults from the
config file, every value checked once, before anything is changed or
started.  No click here: ``tumbler exec``'s quick path (quick.py) makes
the same settings from the same options without it."""

from ..config import MAX_INTERVAL_MS, MIN_INTERVAL_MS, load_config
from ..cpulist import parse_domains
from ..errors import UsageError

#: The balancing options' names, as click passes them (options.py).
OPTION_NAMES = ("level", "domains_text", "policy", "interval_ms", "config_path", "binder",
                "log_path", "summary_json", "dry_run", "duration", "force", "probe", "children",
                "quiet", "verbose", "share", "share_policy", "capacity")


def make_settings(options, root, platform_name):
    """One validated settings dict from the options (None where not given)."""
    config = load_config(options.get("config_path"))
    settings = {k: options.get(k) for k in OPTION_NAMES}
    settings["config"] = config
    settings["root"] = root
    settings["platform"] = platform_name
    settings["level"] = settings["level"] or config.level
    settings["policy"] = settings["policy"] or config.policy
    settings["binder"] = settings["binder"] or config.binder
    settings["share"] = settings["share"] or config.share
    settings["share_policy"] = settings["share_policy"] or config.share_policy
    settings["capacity"] = settings["capacity"] or config.capacity
    settings["dry_run"] = bool(settings["dry_run"])
    settings["force"] = bool(settings["force"])
    settings["quiet"] = bool(settings["quiet"])
    settings["verbose"] = bool(settings["verbose"])
    settings["probe"] = bool(settings["probe"])
    if settings["probe"] and settings["root"] != "/":
        raise UsageError("--probe traces the running system; it cannot be combined with --root")
    settings["domains"] = (parse_domains(settings["domains_text"])
                           if settings["domains_text"] is not None else None)
    if settings["domains"] is not None and options.get("level"):
        raise UsageError("--domains and --level exclude each other")
    if settings["interval_ms"] is not None:
        check_interval(settings["interval_ms"])
    if settings["duration"] is not None:
        check_duration(settings["duration"])
    return settings


def check_interval(interval_ms):
    """UsageError unless ``--interval`` is within the bounds every command takes."""
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise UsageError("--interval must be between %d and %d ms, not %d"
                         % (MIN_INTERVAL_MS, MAX_INTERVAL_MS, interval_ms))


def check_duration(duration):
    """UsageError unless ``--duration`` is a usable number of seconds."""
    if not 0 < duration < 10 ** 9:
        raise UsageError("--duration must be a positive number of seconds")
