"""The service's metrics in the Prometheus text format (version 0.0.4), for
node_exporter's textfile collector (``service.metrics_file``).

``write_metrics(path, status)`` writes them atomically -- a temporary file
in the same directory (a random name, O_EXCL), fsync(2), rename(2) -- so
the collector never reads half a file (tumbler.safefile).  ``status`` is the service's status record (what ``tumbler
status --json`` prints).  Names follow Prometheus' naming guide: a
``tumbler_`` prefix, base units, ``_total`` for counters; each program's
series carry ``pid``, ``name`` and ``rule`` labels, per-domain ones also
``domain`` (its CPU list).
"""

from ..safefile import write_atomic

#: (name, type, help) of every metric, in the order written.
METRICS = (
    ("tumbler_info", "gauge", "tumbler's version (always 1)."),
    ("tumbler_uptime_seconds", "gauge", "Seconds since the service started."),
    ("tumbler_cpu_seconds_total", "counter", "CPU time the service itself used."),
    ("tumbler_programs", "gauge", "Programs the service manages."),
    ("tumbler_programs_parked", "gauge",
     "Of them, parked: too little CPU to imbalance a domain, not sampled."),
    ("tumbler_program_threads", "gauge", "Threads of a managed program."),
    ("tumbler_program_domain_load_cpus", "gauge",
     "Load of a program's threads on one domain, in CPUs (over the load window)."),
    ("tumbler_program_moves_total", "counter", "Threads moved between domains."),
    ("tumbler_program_speed_pins_total", "counter", "Speed balancing's core changes."),
    ("tumbler_program_speed_balancing", "gauge", "1 while speed balancing is engaged."),
)


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(pairs):
    return "{%s}" % ",".join('%s="%s"' % (key, _escape(value)) for key, value in pairs)


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def format_metrics(status):
    """The text of the metrics file for a status record."""
    samples = {name: [] for name, _, _ in METRICS}
    samples["tumbler_info"].append((_labels([("version", status["version"])]), 1))
    samples["tumbler_uptime_seconds"].append(("", status["uptime_s"]))
    samples["tumbler_cpu_seconds_total"].append(("", status["own_cpu_s"]))
    samples["tumbler_programs"].append(("", len(status["programs"])))
    samples["tumbler_programs_parked"].append(
        ("", sum(1 for p in status["programs"] if p.get("parked"))))
    for program in status["programs"]:
        who = [("pid", program["pid"]), ("name", program["name"]), ("rule", program["rule"])]
        labels = _labels(who)
        samples["tumbler_program_threads"].append((labels, program["threads"]))
        for domain, load in zip(program["domains"], program["domain_load"]):
            samples["tumbler_program_domain_load_cpus"].append(
                (_labels(who + [("domain", domain)]), load))
        samples["tumbler_program_moves_total"].append((labels, program["moves"]))
        samples["tumbler_program_speed_pins_total"].append((labels, program["pins"]))
        samples["tumbler_program_speed_balancing"].append((labels, program["speed"]))
    lines = []
    for name, kind, text in METRICS:
        lines.append("# HELP %s %s" % (name, text))
        lines.append("# TYPE %s %s" % (name, kind))
        lines += ["%s%s %s" % (name, labels, _number(value)) for labels, value in samples[name]]
    return "\n".join(lines) + "\n"


def write_metrics(path, status):
    """Replace ``path`` with the metrics of ``status``, atomically (mode
    0644, by tumbler.safefile's rules: the collector's directory may be
    shared with its group)."""
    write_atomic(path, format_metrics(status).encode(), mode=0o644, sync=True)
