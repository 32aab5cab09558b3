"""The service's configuration: ``/etc/tumbler/tumbler.yaml`` and the
drop-ins ``/etc/tumbler/conf.d/*.yaml`` (tumbler.yaml(5)).

::

    service:
      scan_interval: 2          # seconds between looks for new programs
      socket: /run/tumbler/tumbler.sock
      metrics_file: /var/lib/prometheus/node-exporter/tumbler.prom   # optional
      max_programs: 64          # programs managed at once, all rules together
      max_threads: 16384        # their threads, all together
      park_below: 0.1           # CPUs; default: tolerance x smallest domain (loop.py)
      cpu_budget: 0.02          # CPUs the whole service may use (budget.py)
    balancing:                  # the keys of a tumbler --config file
      tolerance: 0.10
    programs:                   # rules, first match wins
      - name: solvers
        match: {comm: "solver", cmdline: "regex", user: "name-or-uid",
                cgroup: "/prefix", zone: "z", project: "p"}
        min_threads: 2          # fewer threads: not managed
        min_cpu: 0.5            # CPUs used over a scan interval, at least
        domains: "0-15/16-31"   # or level: auto|package|numa|llc|core
        policy: auto            # as --policy
        override: false         # true: manage it even if someone narrowed its masks
        weight: 1.0             # its share under space sharing (> 0)
        max_programs: 8         # programs of this rule at once (default: the service's)
        max_threads: 4096       # threads of one program (default: the service's)
        park_below: 0.05        # CPUs below which it is parked (default: the service's)
    sharing:                    # how the managed programs share the CPUs
      mode: time                # time (all on every CPU) or space (CPUs of their own)
      policy: equal-qos         # space: equal-qos or max-qos
      tolerance: 0.05           # space: the gain a re-partition must bring

Files are read in order: the main file, then the drop-ins in name order.
``service``, ``sharing`` and ``balancing`` keys of a later file replace
those of an earlier one; a rule of a later file replaces the earlier rule of the same
name, in its place, or is appended.  Every error is ``FILE:LINE: reason``.
Every file is checked like a ``--config`` file (a regular file of at most
1 MiB, at most 32 levels deep: config.py).
"""

import os

from ..config import (FRACTION_HINT, LEVEL_CHOICES, POLICY_CHOICES, RUN_KEYS,
                      SERVICE_LAYOUT_KEYS, SHARE_CHOICES, SHARE_POLICY_CHOICES,
                      ConfigError, integer_in, load_yaml, located_error, number_in,
                      parse_balancing, parse_config, read_config_file, reject_unknown, require_mapping)
from ..cpulist import parse_domains
from ..engine.share import DEFAULT_TOLERANCE, EQUAL_QOS
from ..errors import UsageError
from ..safefile import UnsafePath, open_directory
from ..state.paths import RUN_DIR
from .pattern import Pattern, PatternError

DEFAULT_CONFIG = "/etc/tumbler/tumbler.yaml"
DEFAULT_SCAN_INTERVAL_S = 2.0
DEFAULT_SOCKET = RUN_DIR + "/tumbler/tumbler.sock"
#: Rules' defaults: a program of one thread has nothing to balance.
DEFAULT_MIN_THREADS = 2
DEFAULT_MIN_CPU = 0.0
#: Caps on what the service manages at once (tumbler.yaml(5)): whatever
#: users start that a rule selects, the root service never balances more
#: than this -- its cost follows them, and a rule that matches on a name
#: lets any user opt in.
DEFAULT_MAX_PROGRAMS = 64
DEFAULT_MAX_THREADS = 16384
#: CPUs the whole service may use (budget.py): 2% of one CPU, issue 47's
#: goal.  20 programs x 100 threads in their stride measured 0.26-0.33%
#: of a core when none flapped (issue 47), so the budget slows no program
#: of such a machine; 8,000 threads of one program of ``nobody``, 35-85%
#: before it (BENCHMARKS.md, "A CPU budget for the whole service").
DEFAULT_CPU_BUDGET = 0.02
#: Its bounds: below a thousandth of a CPU, rounds of a few threads would
#: come minutes apart; the top lets an admin take the brake off.
CPU_BUDGET_RANGE = (0.001, 1 << 16)
#: ``sharing:``, the engine's defaults (engine/share.py).
DEFAULT_SHARING = {"mode": "time", "policy": EQUAL_QOS, "tolerance": DEFAULT_TOLERANCE}

MATCH_KEYS = ("comm", "cmdline", "user", "cgroup", "zone", "project")
RULE_KEYS = ("name", "match", "min_threads", "min_cpu", "domains", "level", "policy",
             "override", "weight", "max_programs", "max_threads", "park_below")
SERVICE_KEYS = ("scan_interval", "socket", "metrics_file", "max_programs", "max_threads",
                "park_below", "cpu_budget")
#: Match keys any user can make a process meet: a rule with no other is
#: one any user can opt into (``service --check`` says so).
USER_CHOSEN_KEYS = ("comm", "cmdline")
SHARING_KEYS = ("mode", "policy", "tolerance")


class Rule:
    """One ``programs`` entry (see the module docstring)."""

    __slots__ = ("name", "comm", "cmdline", "user", "cgroup", "zone", "project",
                 "min_threads", "min_cpu", "domains", "level", "policy", "override",
                 "weight", "max_programs", "max_threads", "park_below", "source")

    def __init__(self, name, source, comm=None, cmdline=None, user=None, cgroup=None,
                 zone=None, project=None, min_threads=DEFAULT_MIN_THREADS,
                 min_cpu=DEFAULT_MIN_CPU, domains=None, level="auto", policy="auto",
                 override=False, weight=1.0, max_programs=None, max_threads=None,
                 park_below=None):
        self.name = name
        self.source = source            # the file it came from
        self.comm = comm                # Pattern (service/pattern.py), matched in full
        self.cmdline = cmdline          # Pattern, searched (first MAX_TEXT characters)
        self.user = user                # UID
        self.cgroup = cgroup            # path prefix
        self.zone = zone
        self.project = project
        self.min_threads = min_threads
        self.min_cpu = min_cpu
        self.domains = domains          # parsed --domains, or None
        self.level = level
        self.policy = policy
        self.override = override
        self.weight = weight            # space sharing's weight
        self.max_programs = max_programs    # None: the service's cap only
        self.max_threads = max_threads      # per program; None: the service's cap only
        self.park_below = park_below        # CPUs; None: the service's (loop.py)

    def anyone_can_opt_in(self):
        """Whether only keys any user controls select processes (a name,
        a command line): then any user can have the root service manage
        their programs, up to the caps."""
        return all(getattr(self, key) is None for key in MATCH_KEYS
                   if key not in USER_CHOSEN_KEYS)

    def matches(self, facts, cmdline=None):
        """Whether ProcessFacts ``facts`` meets every ``match`` key (the
        thresholds are the service's to judge, over time).  ``cmdline()``
        reads the command line where ``facts`` has none, and only if this
        rule needs it and every other key matched."""
        if self.comm is not None and not self.comm.fullmatch(facts.comm):
            return False
        if self.user is not None and facts.uid != self.user:
            return False
        if self.cgroup is not None and not _under(facts.cgroup, self.cgroup):
            return False
        if self.zone is not None and facts.zone != self.zone:
            return False
        if self.project is not None and facts.project != self.project:
            return False
        if self.cmdline is not None:
            text = facts.cmdline if facts.cmdline is not None else cmdline()
            if not self.cmdline.search(text):
                return False
        return True


def _under(path, prefix):
    if path is None:
        return False
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or prefix == ""


class ServiceConfig:
    """The merged configuration of every file."""

    def __init__(self, files=(), scan_interval=DEFAULT_SCAN_INTERVAL_S, socket=DEFAULT_SOCKET,
                 metrics_file=None, balancing=None, rules=(), sharing=None,
                 max_programs=DEFAULT_MAX_PROGRAMS, max_threads=DEFAULT_MAX_THREADS,
                 park_below=None, cpu_budget=DEFAULT_CPU_BUDGET):
        self.files = list(files)
        self.sharing = dict(DEFAULT_SHARING, **(sharing or {}))   # SHARING_KEYS -> value
        self.scan_interval = scan_interval
        self.socket = socket
        self.metrics_file = metrics_file
        self.max_programs = max_programs
        self.max_threads = max_threads
        self.park_below = park_below    # CPUs; None: each program's own (loop.py)
        self.cpu_budget = cpu_budget    # CPUs for the whole service (budget.py)
        self.balancing = balancing      # tumbler.config.Config
        self.rules = list(rules)


def config_files(path):
    """The files of a configuration: ``path``, then ``conf.d/*.yaml`` beside
    it in name order."""
    files = [path]
    drop_ins = os.path.join(os.path.dirname(path) or ".", "conf.d")
    try:
        with open_directory(drop_ins) as directory:     # checked as the files are
            names = sorted(directory.listdir())
    except (FileNotFoundError, NotADirectoryError):
        names = []
    except UnsafePath as exc:
        raise UsageError("untrusted config directory %s" % exc) from None
    except OSError as exc:
        raise UsageError("cannot read %s: %s" % (drop_ins, exc.strerror)) from None
    files += [os.path.join(drop_ins, name) for name in names if name.endswith(".yaml")]
    return files


def load_service_config(path=DEFAULT_CONFIG, resolve_user=None):
    """Read and merge ``path`` and its drop-ins; UsageError (exit 2) naming
    FILE:LINE on any problem.  ``resolve_user(name) -> uid`` (default: the
    password database)."""
    resolve_user = resolve_user or _uid_of
    merged = ServiceConfig()
    balancing = {}
    rules = []
    for file in config_files(path):
        text = read_config_file(file)
        data = load_yaml(file, text)
        if data is None:
            continue
        try:
            _merge(file, data, merged, balancing, rules, resolve_user)
        except ConfigError as exc:
            raise located_error(file, text, exc) from None
        merged.files.append(file)
    merged.balancing = parse_config(balancing)     # each file's part checked above
    merged.rules = rules
    return merged


def _merge(file, data, merged, balancing, rules, resolve_user):
    require_mapping(data, "the file")
    for key in data:
        if key in RUN_KEYS:     # a tumbler --config file's layout
            raise ConfigError("%s goes under balancing: in the service's file" % key, key)
    reject_unknown(data, SERVICE_LAYOUT_KEYS, "")
    service = data.get("service") or {}
    require_mapping(service, "service")
    reject_unknown(service, SERVICE_KEYS, "service.")
    if "scan_interval" in service:
        merged.scan_interval = number_in(service["scan_interval"], "service.scan_interval",
                                         0.1, 3600)
    for key in ("max_programs", "max_threads"):
        if key in service:
            setattr(merged, key, integer_in(service[key], "service." + key, 1, 1 << 22))
    if "park_below" in service:
        merged.park_below = number_in(service["park_below"], "service.park_below", 0.0, 1 << 16)
    if "cpu_budget" in service:
        merged.cpu_budget = number_in(service["cpu_budget"], "service.cpu_budget",
                                      *CPU_BUDGET_RANGE)
    for key in ("socket", "metrics_file"):
        if key in service:
            value = service[key]
            if not isinstance(value, str) or not value.startswith("/"):
                raise ConfigError("service.%s must be an absolute path" % key,
                                  "service." + key)
            setattr(merged, key, value)
    if "sharing" in data:
        merged.sharing.update(_sharing(data["sharing"]))
    if "balancing" in data:
        parse_balancing(data["balancing"])      # checked here: the error names this file
        balancing.update(data["balancing"])
    if "programs" in data:
        programs = data["programs"]
        if not isinstance(programs, list):
            raise ConfigError("programs must be a list of rules", "programs")
        for index, entry in enumerate(programs):
            rule = _rule(file, entry, "programs[%d]" % index, resolve_user)
            same = next((i for i, old in enumerate(rules) if old.name == rule.name), None)
            if same is None:
                rules.append(rule)
            else:
                rules[same] = rule


def _rule(file, entry, key, resolve_user):
    require_mapping(entry, key)
    reject_unknown(entry, RULE_KEYS, key + ".")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("%s.name must be a non-empty string" % key, key + ".name"
                          if "name" in entry else key)
    values = {}
    match = entry.get("match") or {}
    require_mapping(match, key + ".match")
    reject_unknown(match, MATCH_KEYS, key + ".match.")
    for what in ("comm", "cmdline"):
        if what in match:
            pattern = match[what]
            if not isinstance(pattern, str):
                raise ConfigError("%s.match.%s must be a string" % (key, what),
                                  "%s.match.%s" % (key, what))
            try:
                values[what] = Pattern(pattern)
            except PatternError as exc:
                raise ConfigError("%s.match.%s: bad regular expression (%s)" % (key, what, exc),
                                  "%s.match.%s" % (key, what)) from None
    if "user" in match:
        values["user"] = _user(match["user"], key + ".match.user", resolve_user)
    if "cgroup" in match:
        prefix = match["cgroup"]
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ConfigError("%s.match.cgroup must be a path starting with /" % key,
                              key + ".match.cgroup")
        values["cgroup"] = prefix
    for what in ("zone", "project"):
        if what in match:
            values[what] = integer_in(match[what], "%s.match.%s" % (key, what), 0, 2 ** 31 - 1)
    if "min_threads" in entry:
        values["min_threads"] = integer_in(entry["min_threads"], key + ".min_threads", 1,
                                           1 << 22)
    if "min_cpu" in entry:
        values["min_cpu"] = number_in(entry["min_cpu"], key + ".min_cpu", 0.0, 1 << 16)
    if "domains" in entry and "level" in entry:
        raise ConfigError("%s: domains and level exclude each other" % key, key + ".level")
    if "domains" in entry:
        text = entry["domains"]
        if not isinstance(text, str):
            raise ConfigError("%s.domains must be a string like \"0-3/4-7\"" % key,
                              key + ".domains")
        try:
            values["domains"] = parse_domains(text)
        except UsageError as exc:
            raise ConfigError("%s.domains: %s" % (key, exc), key + ".domains") from None
    for what, choices in (("level", LEVEL_CHOICES), ("policy", POLICY_CHOICES)):
        if what in entry:
            if entry[what] not in choices:
                raise ConfigError("%s.%s must be one of %s" % (key, what, ", ".join(choices)),
                                  "%s.%s" % (key, what))
            values[what] = entry[what]
    if "override" in entry:
        if not isinstance(entry["override"], bool):
            raise ConfigError("%s.override must be true or false" % key, key + ".override")
        values["override"] = entry["override"]
    if "weight" in entry:
        values["weight"] = number_in(entry["weight"], key + ".weight", 0.001, 1000.0)
    for what in ("max_programs", "max_threads"):
        if what in entry:
            values[what] = integer_in(entry[what], "%s.%s" % (key, what), 1, 1 << 22)
    if "park_below" in entry:
        values["park_below"] = number_in(entry["park_below"], key + ".park_below", 0.0, 1 << 16)
    return Rule(name, file, **values)


def _sharing(data):
    require_mapping(data, "sharing")
    reject_unknown(data, SHARING_KEYS, "sharing.")
    values = {}
    for key, choices in (("mode", SHARE_CHOICES), ("policy", SHARE_POLICY_CHOICES)):
        if key in data:
            if data[key] not in choices:
                raise ConfigError("sharing.%s must be one of %s" % (key, ", ".join(choices)),
                                  "sharing." + key)
            values[key] = data[key]
    if "tolerance" in data:
        values["tolerance"] = number_in(data["tolerance"], "sharing.tolerance", 0.0, 10.0,
                                       FRACTION_HINT)
    return values


def _user(value, key, resolve_user):
    if isinstance(value, bool):
        raise ConfigError("%s must be a user name or UID" % key, key)
    if isinstance(value, int):
        return integer_in(value, key, 0, 2 ** 32 - 1)
    if not isinstance(value, str):
        raise ConfigError("%s must be a user name or UID" % key, key)
    uid = resolve_user(value)
    if uid is None:
        raise ConfigError("%s: no such user" % key, key)    # the value: see reject_unknown
    return uid


def _uid_of(name):
    import pwd
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None
