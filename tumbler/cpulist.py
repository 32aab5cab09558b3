"""util-linux CPU-list syntax: ``0-3,8,10-20:2`` (see taskset(1)).

Domains on the command line are CPU lists separated by ``/``.
"""

from .errors import UsageError


def parse_cpulist(text):
    """Return the frozenset of CPUs named by a util-linux CPU list.

    Accepts ``N``, ``A-B`` and ``A-B:S`` items separated by commas, as
    taskset(1) and /sys do.  Raises UsageError on anything else.
    """
    text = text.strip()
    if not text:
        raise UsageError("empty CPU list")
    cpus = set()
    for item in text.split(","):
        item = item.strip()
        try:
            cpus.update(_parse_item(item))
        except ValueError:
            raise UsageError("bad CPU list %s: cannot parse %s (%s)"
                             % (quote(text), quote(item), SYNTAX)) from None
    return frozenset(cpus)


#: What error lines say a CPU list looks like (taskset(1)'s syntax).
SYNTAX = "CPU numbers and ranges like 0-3,8,10-20:2; domains separated by /"


def _parse_item(item):
    stride = 1
    if ":" in item:
        item, stride_text = item.split(":", 1)
        stride = _nonneg(stride_text)
        if stride == 0:
            raise ValueError(item)
    if "-" in item:
        first_text, last_text = item.split("-", 1)
        first, last = _nonneg(first_text), _nonneg(last_text)
        if last < first:
            raise ValueError(item)
        return range(first, last + 1, stride)
    if stride != 1:
        raise ValueError(item)
    return (_nonneg(item),)


#: Highest CPU number accepted; Linux's NR_CPUS tops out at 8192.
MAX_CPU = 65535


def _nonneg(text):
    text = text.strip()
    # isascii(): str.isdigit() also takes "\u0661" and friends, and int() reads them.
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) > MAX_CPU:
        raise ValueError(text)
    return int(text)


def quote(text, limit=40):
    """repr() of user input, cut short: error lines stay short whatever the input."""
    return repr(text[:limit]) + "..." if len(text) > limit else repr(text)


def brief(cpus, limit=60):
    """format_cpulist() for messages, cut short."""
    text = format_cpulist(cpus)
    return text if len(text) <= limit else text[:limit] + "..."


def format_cpulist(cpus):
    """Format CPUs as the shortest util-linux list: {0,1,2,5} -> '0-2,5'."""
    items = []
    run_start = prev = None
    for cpu in sorted(cpus):
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if run_start is not None:
            items.append(_run(run_start, prev))
        run_start = prev = cpu
    if run_start is not None:
        items.append(_run(run_start, prev))
    return ",".join(items)


def _run(first, last):
    return str(first) if first == last else "%d-%d" % (first, last)


def parse_domains(text):
    """Parse ``--domains``: CPU lists separated by '/', e.g. '0-3,8-11/4-7'.

    Domains must be non-empty and must not overlap.
    """
    domains = []
    for part in text.split("/"):
        if not part.strip():
            raise UsageError("bad --domains %s: empty domain" % quote(text))
        domains.append(parse_cpulist(part))
    seen = set()
    for cpus in domains:
        overlap = seen & cpus
        if overlap:
            raise UsageError("bad --domains %s: CPU %s is in two domains"
                             % (quote(text), brief(overlap)))
        seen |= cpus
    return domains


def check_explicit(domains, usable, online):
    """Refuse explicit domains (``parse_domains``) that name a CPU not
    on-line or outside ``usable`` (the CPUs the target may use, on-line):
    the one check, made when the domains are chosen (balance/domains.py)
    and, with nothing heavier imported, before ``exec``'s command starts
    (commands/run.py)."""
    for cpus in domains:
        offline = cpus - online
        if offline:
            raise UsageError("--domains: CPU %s is not on-line (on-line: %s)"
                             % (brief(offline), brief(online)))
        outside = cpus - usable
        if outside:
            raise UsageError("--domains: CPU %s is outside the CPUs the target may use (%s)"
                             % (brief(outside), brief(usable)))
