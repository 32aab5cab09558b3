"""Parsers for the output of the probe scripts in ``probes/``.

Pure code, no I/O: the runner in ``tumbler.probe`` feeds lines in, tests feed
recorded output.  Two formats carry the same logical content:

* ``json`` -- ``bpftrace -f json`` running ``probes/linux/*.bt``.  One JSON
  object a line: ``{"type": "map", "data": {"@lock_ns": {"4242,4243": 17}}}``
  (bpftrace >= 0.17; some versions write the key as ``"4242, 4243"`` or
  ``"(4242, 4243)"``, all are accepted; the placeholder entry ``"0,0"`` that
  keeps a map printed when it has no thread is dropped) and ``{"type": "printf", "data":
  "tumbler-probe locktime period\\n"}``.  Other types (``attached_probes``,
  ``lost_events``, ``hist``...) are recognised or ignored.

* ``dtrace`` -- ``dtrace -q`` running ``probes/illumos/*.d``.  One record a
  line, printed by ``printa``::

      locktime pid=4242 tid=3 ns=1520003399 count=517
      runqlat pid=4242 tid=3 ns=331052774 count=84
      migrations pid=4242 tid=3 count=12 cross=4

  and marker lines ``tumbler-probe <script> ready|period|final`` (the same
  text as the bpftrace ``printf`` markers).

Every script prints CUMULATIVE values since it started, all of them, then a
``period`` marker (``final`` at exit).  :class:`ProbeStream` collects a
script's values until its marker and only then makes them visible, so a
snapshot never mixes two prints of one script.
"""

import json
import re

#: Script names, one per kind of measurement.
SCRIPTS = ("locktime", "runqlat", "migrations")

#: User-facing kind -> script name.
SCRIPT_OF_KIND = {"locks": "locktime", "latency": "runqlat",
                  "migrations": "migrations"}
KINDS = tuple(SCRIPT_OF_KIND)

#: Fields of one thread's record, in display order.
FIELDS = ("lock_ns", "lock_count", "runq_ns", "runq_count",
          "migrations", "cross_domain")

#: The fields each script fills.
FIELDS_OF_SCRIPT = {
    "locktime": ("lock_ns", "lock_count"),
    "runqlat": ("runq_ns", "runq_count"),
    "migrations": ("migrations", "cross_domain"),
}

#: bpftrace map name -> (script, field).
MAP_FIELD = {
    "@lock_ns": ("locktime", "lock_ns"),
    "@lock_count": ("locktime", "lock_count"),
    "@runq_ns": ("runqlat", "runq_ns"),
    "@runq_count": ("runqlat", "runq_count"),
    "@migrations": ("migrations", "migrations"),
    "@cross_domain": ("migrations", "cross_domain"),
}

#: DTrace record: script -> {printed name: field}.
DTRACE_NAMES = {
    "locktime": {"ns": "lock_ns", "count": "lock_count"},
    "runqlat": {"ns": "runq_ns", "count": "runq_count"},
    "migrations": {"count": "migrations", "cross": "cross_domain"},
}

MARKER = "tumbler-probe"
MARKS = ("ready", "period", "final")

_MARKER_RE = re.compile(r"^%s (%s) (%s)$" % (
    MARKER, "|".join(SCRIPTS), "|".join(MARKS)))
_RECORD_RE = re.compile(r"^(%s)((?:\s+[a-z_]+=-?\d+)+)$" % "|".join(SCRIPTS))
_PAIR_RE = re.compile(r"([a-z_]+)=(-?\d+)")


class ParseError(ValueError):
    """A line that claims to be probe output but is malformed."""


def empty_record():
    return dict.fromkeys(FIELDS, 0)


def parse_marker(text):
    """``"tumbler-probe runqlat period"`` -> ``("runqlat", "period")``."""
    m = _MARKER_RE.match(text.strip())
    return (m.group(1), m.group(2)) if m else None


def _parse_key(key):
    """A bpftrace map key ``"4242,4243"`` -> ``(4242, 4243)``."""
    parts = key.strip().strip("()").replace(" ", "").split(",")
    try:
        pid, tid = (int(p) for p in parts)
    except ValueError:
        raise ParseError("map key %r is not 'pid,tid'" % key) from None
    return pid, tid


def parse_bpftrace_line(line):
    """Classify one line of ``bpftrace -f json`` output.

    Returns one of::

        None                                  blank, not JSON, or of no interest
        ("map", script, field, {(pid, tid): value})
        ("marker", script, mark)              mark in MARKS
        ("attached", nprobes)
        ("lost", nevents)
        ("error", text)                       a bpftrace error/warning message

    Raises :class:`ParseError` for a map of ours that is malformed.
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict):
        return None
    kind, data = msg.get("type"), msg.get("data")
    if kind == "map" and isinstance(data, dict):
        for name, values in data.items():
            if name not in MAP_FIELD:
                continue
            if not isinstance(values, dict):
                raise ParseError("map %s is not keyed by [pid, tid]" % name)
            script, fld = MAP_FIELD[name]
            out = {}
            for key, value in values.items():
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ParseError("map %s has a non-integer value %r" % (name, value))
                pid_tid = _parse_key(key)
                if pid_tid[0] != 0:     # [0, 0] keeps the map printed: skip it
                    out[pid_tid] = value
            return ("map", script, fld, out)
        return None
    if kind == "printf" and isinstance(data, str):
        marker = parse_marker(data)
        return ("marker",) + marker if marker else None
    if kind == "attached_probes" and isinstance(data, dict):
        return ("attached", int(data.get("probes", 0)))
    if kind == "lost_events" and isinstance(data, dict):
        return ("lost", int(data.get("events", 0)))
    if kind in ("errorf", "warnf", "helper_error", "runtime_error"):
        return ("error", str(data if data is not None else msg))
    return None


def parse_dtrace_line(line):
    """Classify one line of the DTrace scripts' output.

    Returns ``None``, ``("marker", script, mark)`` or
    ``("record", script, (pid, tid), {field: value})``.
    Raises :class:`ParseError` for a record line with wrong or missing names.
    """
    text = line.strip()
    if not text:
        return None
    marker = parse_marker(text)
    if marker:
        return ("marker",) + marker
    m = _RECORD_RE.match(text)
    if not m:
        return None
    script = m.group(1)
    pairs = dict((k, int(v)) for k, v in _PAIR_RE.findall(m.group(2)))
    names = DTRACE_NAMES[script]
    if "pid" not in pairs or "tid" not in pairs or not set(names) <= set(pairs):
        raise ParseError("%s record needs pid, tid, %s: %r"
                         % (script, ", ".join(sorted(names)), text))
    values = dict((fld, pairs[name]) for name, fld in names.items())
    return ("record", script, (pairs["pid"], pairs["tid"]), values)


class ProbeStream:
    """Turns the lines of one probe process into cumulative snapshots.

    ``fmt`` is ``"json"`` (bpftrace) or ``"dtrace"``.  Not thread-safe: the
    runner serialises ``feed`` and ``values`` with its own lock.
    """

    def __init__(self, fmt):
        if fmt not in ("json", "dtrace"):
            raise ValueError("unknown probe output format %r" % fmt)
        self.fmt = fmt
        self.ready = set()         # scripts that printed "ready"
        self.final = set()         # scripts that printed "final"
        self.periods = {}          # script -> number of markers seen
        self.lost_events = 0
        self.messages = []         # bpftrace error/warning messages
        self._pending = {}         # script -> field -> {(pid, tid): value}
        self._committed = {}       # same, as of the last marker

    def feed(self, line):
        """Consume one line; returns the parsed event (see the parsers)."""
        if self.fmt == "json":
            event = parse_bpftrace_line(line)
        else:
            event = parse_dtrace_line(line)
        if event is None:
            return None
        tag = event[0]
        if tag == "map":
            _, script, fld, values = event
            self._pending.setdefault(script, {})[fld] = values
        elif tag == "record":
            _, script, key, values = event
            fields = self._pending.setdefault(script, {})
            for fld, value in values.items():
                fields.setdefault(fld, {})[key] = value
        elif tag == "marker":
            _, script, mark = event
            if mark == "ready":
                self.ready.add(script)
            else:
                self._commit(script)
                self.periods[script] = self.periods.get(script, 0) + 1
                if mark == "final":
                    self.final.add(script)
        elif tag == "lost":
            self.lost_events += event[1]
        elif tag == "error":
            self.messages.append(event[1])
        return event

    def _commit(self, script):
        # A print holds the whole cumulative map, so it replaces the last
        # one.  bpftrace prints nothing for an empty map: a field missing
        # from this print keeps its last value (cumulative values never
        # shrink, so "empty now" can only mean "empty before").
        fields = self._pending.pop(script, {})
        committed = self._committed.setdefault(script, {})
        committed.update(fields)

    def values(self):
        """``{(pid, tid): record}`` as of the last marker of each script."""
        out = {}
        for fields in self._committed.values():
            for fld, values in fields.items():
                for key, value in values.items():
                    out.setdefault(key, empty_record())[fld] = value
        return out


def parse_output(text, fmt):
    """The last complete snapshot in a whole recorded output."""
    stream = ProbeStream(fmt)
    for line in text.splitlines():
        stream.feed(line)
    return stream.values()


def merge(*snapshots):
    """Union of snapshots of different scripts (fields add up)."""
    out = {}
    for snap in snapshots:
        for key, rec in snap.items():
            dst = out.setdefault(key, empty_record())
            for fld in FIELDS:
                dst[fld] += rec.get(fld, 0)
    return out


def delta(new, old):
    """Per-interval values: ``new - old`` thread by thread.

    A thread absent from ``old`` (new, or first seen) counts from zero.  A
    value that went down (the probe restarted) counts from zero too.
    """
    out = {}
    for key, rec in new.items():
        prev = old.get(key)
        d = {}
        for fld in FIELDS:
            now = rec.get(fld, 0)
            before = prev.get(fld, 0) if prev else 0
            d[fld] = now - before if now >= before else now
        out[key] = d
    return out


def process_totals(snapshot):
    """``{pid: record}``: the threads of each process summed."""
    out = {}
    for (pid, _tid), rec in snapshot.items():
        dst = out.setdefault(pid, empty_record())
        for fld in FIELDS:
            dst[fld] += rec.get(fld, 0)
    return out


def by_tid(snapshot, pid):
    """``{tid: record}`` for the threads of one process."""
    return dict((tid, rec) for (p, tid), rec in snapshot.items() if p == pid)
