"""Parsers for the output of the probe scripts in ``probes/``.

Pure code, no I/O: the runner in ``tumbler.tracing.session`` feeds lines in, tests feed
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

      locktime pid=4242 tid=3 ns=1520003399 count=517 seen=25013101442
      runqlat pid=4242 tid=3 ns=331052774 count=84
      migrations pid=4242 tid=3 count=12 cross=4

  and marker lines ``tumbler-probe <script> ready|period|final`` (the same
  text as the bpftrace ``printf`` markers).

Every script prints CUMULATIVE values since it started, all of them, then a
``period`` marker (``final`` at exit).  :class:`ProbeStream` collects a
script's values until its marker and only then makes them visible, so a
snapshot never mixes two prints of one script.

The scripts end each marker with the kernel's CLOCK_MONOTONIC ns when
they printed (``tumbler-probe locktime period 27012377812``; the ``ready``
one is when counting started; DTrace's ``timestamp`` is gethrtime(), which
is illumos's CLOCK_MONOTONIC), and locktime and runqlat print times in a form that includes the waits still in progress (see
:func:`as_of`, :func:`locks_as_of`).  With those times a stream turns each
print into the values as of that moment, and keeps every thread's values
going up by no more than the time between two prints
(:meth:`ProbeStream._commit`): no interval ever shows a thread blocked or
waiting for longer than it lasted.
A marker without a time (DTrace scripts before issue 32) leaves the
values as printed.
"""

import re

from ..jsonlimits import BadJSON, loads_object

#: Script names, one per kind of measurement.
SCRIPTS = ("locktime", "runqlat", "migrations")

#: User-facing kind -> script name.
SCRIPT_OF_KIND = {"locks": "locktime", "latency": "runqlat",
                  "migrations": "migrations"}
KINDS = tuple(SCRIPT_OF_KIND)
KIND_OF_SCRIPT = {script: kind for kind, script in SCRIPT_OF_KIND.items()}

#: Fields of one thread's record, in display order.
FIELDS = ("lock_ns", "lock_count", "runq_ns", "runq_count",
          "migrations", "cross_domain")

#: The fields each script fills.
FIELDS_OF_SCRIPT = {
    "locktime": ("lock_ns", "lock_count"),
    "runqlat": ("runq_ns", "runq_count"),
    "migrations": ("migrations", "cross_domain"),
}

#: Fields measured in time (ns): what no interval may hold more of than it lasted.
TIME_FIELDS = ("lock_ns", "runq_ns")

#: bpftrace map name -> (script, field), or (script, (field, ...)) for a map
#: whose values are tuples: fields that must change together, which one
#: map entry keeps consistent in a print (two maps are read one after the
#: other while the kernel goes on).  ``lock_seen`` and ``lock_pre`` are
#: locktime.bt's raw inputs of ``lock_ns`` (see :func:`locks_as_of`), not
#: record fields.
MAP_FIELD = {
    "@lock_ns": ("locktime", "lock_ns"),
    "@lock_count": ("locktime", "lock_count"),
    "@lock_seen": ("locktime", "lock_seen"),
    "@lock_pre": ("locktime", "lock_pre"),
    "@runq_ns": ("runqlat", "runq_ns"),
    "@runq_count": ("runqlat", "runq_count"),
    "@migrations": ("migrations", ("migrations", "cross_domain")),
}

#: DTrace record: script -> {printed name: field}.
DTRACE_NAMES = {
    "locktime": {"ns": "lock_ns", "count": "lock_count"},
    "runqlat": {"ns": "runq_ns", "count": "runq_count"},
    "migrations": {"count": "migrations", "cross": "cross_domain"},
}
#: Names a record may hold too: locktime.d's ``seen``, the raw input of
#: ``lock_ns`` that locktime.bt prints as ``@lock_seen`` (:func:`locks_as_of`).
DTRACE_OPTIONAL_NAMES = {"locktime": {"seen": "lock_seen"}}

MARKER = "tumbler-probe"
MARKS = ("ready", "period", "final")

_MARKER_RE = re.compile(r"^%s (%s) (%s)(?: (\d+))?$" % (
    MARKER, "|".join(SCRIPTS), "|".join(MARKS)))
_RECORD_RE = re.compile(r"^(%s)((?:\s+[a-z_]+=-?\d+)+)$" % "|".join(SCRIPTS))
_PAIR_RE = re.compile(r"([a-z_]+)=(-?\d+)")


class ParseError(ValueError):
    """A line that claims to be probe output but is malformed."""


def empty_record():
    return dict.fromkeys(FIELDS, 0)


def parse_marker(text):
    """``"tumbler-probe runqlat period 1234"`` -> ``("runqlat", "period", 1234)``;
    the time is None on a marker without one (DTrace)."""
    m = _MARKER_RE.match(text.strip())
    if not m:
        return None
    return m.group(1), m.group(2), int(m.group(3)) if m.group(3) else None


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
        ("map", script, {field: {(pid, tid): value}})
        ("marker", script, mark, ns)          mark in MARKS, ns the kernel's
                                              CLOCK_MONOTONIC time or None
        ("attached", nprobes)
        ("lost", nevents)
        ("error", text)                       a bpftrace error/warning message

    Raises :class:`ParseError` for a map of ours that is malformed.
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        msg = loads_object(line)
    except BadJSON:
        return None
    kind, data = msg.get("type"), msg.get("data")
    if kind == "map" and isinstance(data, dict):
        for name, values in data.items():
            if name not in MAP_FIELD:
                continue
            if not isinstance(values, dict):
                raise ParseError("map %s is not keyed by [pid, tid]" % name)
            script, fields = MAP_FIELD[name]
            width = len(fields) if isinstance(fields, tuple) else None
            out = {}
            for key, value in values.items():
                parts = value if width else [value]
                if (not isinstance(parts, list) or len(parts) != (width or 1)
                        or not all(isinstance(v, int) and not isinstance(v, bool)
                                   for v in parts)):
                    raise ParseError("map %s has a malformed value %r" % (name, value))
                pid_tid = _parse_key(key)
                if pid_tid[0] != 0:     # [0, 0] keeps the map printed: skip it
                    out[pid_tid] = parts
            names = fields if width else (fields,)
            return ("map", script, {f: {k: v[i] for k, v in out.items()}
                                    for i, f in enumerate(names)})
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

    Returns ``None``, ``("marker", script, mark, None)`` or
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
    values.update((fld, pairs[name]) for name, fld in DTRACE_OPTIONAL_NAMES.get(script, {}).items()
                  if name in pairs)
    return ("record", script, (pairs["pid"], pairs["tid"]), values)


def as_of(value, at_ns):
    """A time printed with the wait in progress taken off (locktime.bt,
    runqlat.bt): the total up to ``at_ns``."""
    return value if value >= 0 else max(0, value + at_ns)


def locks_as_of(raw, at_ns, start_ns, blocked_since_start):
    """locktime.bt's and locktime.d's totals as printed at ``at_ns``:
    ``{(pid, tid): {"lock_ns", "lock_count"}}``.

    ``raw`` holds the printed maps (``{field: {(pid, tid): value}}``).
    ``lock_ns`` is the blocked time of the ended waits, minus the time the
    current wait began if the thread is blocked: v >= 0 is the total, v < 0
    makes ``v + at_ns`` the total up to the print.  ``lock_pre`` is what the
    script found, at their end, of waits already in progress at the start.

    ``blocked_since_start`` (``{(pid, tid): checked_ns}``, updated here)
    lists threads the reader saw asleep in a lock wait after the start, at
    ``checked_ns`` (Linux: a futex wait; illumos: a user-lock sleep).  One
    that ``lock_seen`` shows no event of before then has been blocked since
    ``start_ns``: it counts as blocked from there up to its first event
    (``lock_seen``: Linux its wakeup, illumos its enqueue) or the print,
    until the script counts that wait itself in ``lock_pre`` (locktime.bt;
    locktime.d has none, and ``lock_seen`` ends the wait for good).  One
    with an earlier event, or gone (no longer in ``lock_seen``), is dropped.
    """
    open_ns, counts = raw.get("lock_ns", {}), raw.get("lock_count", {})
    seen, pre = raw.get("lock_seen", {}), raw.get("lock_pre", {})
    out = {}
    for key in set(open_ns) | set(counts) | set(seen) | set(pre):
        out[key] = {"lock_ns": as_of(open_ns.get(key, 0), at_ns) + pre.get(key, 0),
                    "lock_count": counts.get(key, 0)}
    for key, checked_ns in list(blocked_since_start.items()):
        first = seen.get(key)
        if first is None or pre.get(key) or 0 < first <= checked_ns:
            del blocked_since_start[key]
            continue
        end = min(at_ns, first) if first else at_ns
        out[key]["lock_ns"] += max(0, end - start_ns)
        out[key]["lock_count"] += 1
    return out


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
        self.start_ns = {}         # script -> when it started counting
        self.at_ns = {}            # script -> when its committed values were printed
        self._pending = {}         # script -> field -> {(pid, tid): value}
        self._raw = {}             # same, as of the last marker
        self._records = {}         # script -> {(pid, tid): {field: value}}
        self._blocked = {}         # see locks_as_of
        self._stop_ns = None       # see stop_at

    def stop_at(self, ns):
        """Ignore the prints made after ``ns`` (CLOCK_MONOTONIC) by a script
        that says when it prints: the tool was told to stop then, and its
        later prints may be made with probes already gone."""
        self._stop_ns = ns

    def expect_blocked(self, waiters):
        """Threads seen asleep in a lock wait after the start:
        ``{(pid, tid): monotonic ns when seen}`` (see :func:`locks_as_of`)."""
        self._blocked.update(waiters)

    def feed(self, line, received_ns=None):
        """Consume one line; returns the parsed event (see the parsers).

        ``received_ns`` (CLOCK_MONOTONIC) stands for the time of a marker
        that carries none (DTrace)."""
        if self.fmt == "json":
            event = parse_bpftrace_line(line)
        else:
            event = parse_dtrace_line(line)
        if event is None:
            return None
        tag = event[0]
        if tag == "map":
            _, script, fields = event
            self._pending.setdefault(script, {}).update(fields)
        elif tag == "record":
            _, script, key, values = event
            fields = self._pending.setdefault(script, {})
            for fld, value in values.items():
                fields.setdefault(fld, {})[key] = value
        elif tag == "marker":
            _, script, mark, ns = event
            if mark == "ready":
                self.ready.add(script)
                self.start_ns[script] = ns if ns is not None else received_ns
            else:
                self._commit(script, ns, received_ns)
                self.periods[script] = self.periods.get(script, 0) + 1
                if mark == "final":
                    self.final.add(script)
        elif tag == "lost":
            self.lost_events += event[1]
        elif tag == "error":
            self.messages.append(event[1])
        return event

    def _commit(self, script, at_ns, received_ns):
        # A print holds the whole cumulative map, so it replaces the last
        # one.  bpftrace prints nothing for an empty map: a field missing
        # from this print keeps its last value (cumulative values never
        # shrink, so "empty now" can only mean "empty before").
        pending = self._pending.pop(script, {})
        start = self.start_ns.get(script)
        if None not in (at_ns, start, self._stop_ns) and at_ns > self._stop_ns:
            return
        raw = self._raw.setdefault(script, {})
        raw.update(pending)
        if at_ns is None or start is None:
            # a marker without a time: totals of ended waits, as printed
            self._records[script] = _as_records(raw, FIELDS_OF_SCRIPT[script])
            self.at_ns[script] = at_ns if at_ns is not None else received_ns
            return
        if script == "locktime":
            now = locks_as_of(raw, at_ns, start, self._blocked)
        else:
            now = _as_records(raw, FIELDS_OF_SCRIPT[script])
            for rec in now.values():
                if "runq_ns" in rec:
                    rec["runq_ns"] = as_of(rec["runq_ns"], at_ns)
        # The maps are read after the marker's time, one by one, while the
        # kernel goes on: a value may hold up to that delay more or less
        # than at the marker.  Keep every value from going down, and a
        # time from growing by more than the time between the prints; the
        # rest shows in the next interval.
        before = self._records.get(script, {})
        span = max(0, at_ns - self.at_ns.get(script, start))
        records = {}
        for key, rec in now.items():
            last = before.get(key)
            if last is not None:
                rec = {f: max(v, last[f]) for f, v in rec.items()}
            for f in TIME_FIELDS:
                if f in rec:
                    rec[f] = min(rec[f], (last[f] if last is not None else 0) + span)
            records[key] = rec
        self._records[script] = records
        self.at_ns[script] = at_ns

    def values(self):
        """``{(pid, tid): record}`` as of the last marker of each script."""
        out = {}
        for records in self._records.values():
            for key, rec in records.items():
                out.setdefault(key, empty_record()).update(rec)
        return out

    def spans(self):
        """``{script: (start ns, ns of the values)}``, CLOCK_MONOTONIC, for
        each script that has printed values."""
        return {script: (self.start_ns.get(script), at)
                for script, at in self.at_ns.items()}


def _as_records(raw, fields):
    out = {}
    for fld in fields:
        for key, value in raw.get(fld, {}).items():
            out.setdefault(key, dict.fromkeys(fields, 0))[fld] = value
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
