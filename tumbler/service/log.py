"""The service's log (service/loop.py): one line per event that matters,
with the syslog priority prefix journald reads (``<6>`` info, ``<4>``
warning, ``<3>`` error) when stderr is the journal (``$JOURNAL_STREAM``)
or not a terminal; a steady machine logs nothing.

Lines about one process (``Events``: managed, dropped, left alone, not
managed...) come as fast as users start processes: 200 short-lived
processes a rule selects made 133 lines a second (issue 47), ~1.9 GB a
day, and past journald's per-service limit the service's own lines would
be dropped with them.  So for each rule and kind of event at most
KIND_BURST lines at once and KIND_PER_S a second after, and ALL_BURST /
ALL_PER_S for all of them together; what is not written is counted, and
one line says how many, SUMMARY_S after the first one held back ("rule
hog: 312 more programs left alone in the last 60 s").  The service's own
lines (start, stop, reloads, errors of its own) are not counted against
anything: they are never held back."""

import os
import sys
import time

from ..escape import one_line

INFO, WARNING, ERROR = 6, 4, 3

#: Lines about processes, for each rule and kind of event: a burst of this
#: many at once (a job's few ranks, a test suite's programs starting
#: together, each named), then KIND_PER_S a second.
KIND_BURST = 5
KIND_PER_S = 1.0
#: For all rules and kinds together: the issue's goal is 5 lines a second
#: or fewer sustained, summaries included (issue 47); 3 leaves one kind's
#: flood (KIND_PER_S) room for two others'.  journald drops a service's
#: lines past 10,000 in 30 s by default (RateLimitBurst=, 333 a second):
#: this is 1% of that, so the service's own lines always get through.
#: At once, two kinds' bursts (2 x KIND_BURST: a job starting beside
#: another's end, each program named).
ALL_BURST = 10
ALL_PER_S = 3.0
#: Lines held back are counted and said in one line this long (seconds)
#: after the first of them: at most one summary a minute for each rule and
#: kind, and a count an admin reads as a rate ("in the last 60 s").
SUMMARY_S = 60.0


class Log:
    """One line per event on stderr, with a syslog priority prefix where
    journald reads it.  A message is one line whatever it quotes
    (escape.one_line): names are printable already (the backends), and
    nothing else from outside may start a forged entry."""

    def __init__(self, stream=None, prefixed=None):
        self.stream = stream or sys.stderr
        if prefixed is None:
            prefixed = bool(os.environ.get("JOURNAL_STREAM")) or not self.stream.isatty()
        self.prefixed = prefixed

    def __call__(self, priority, message):
        prefix = "<%d>" % priority if self.prefixed else ""
        try:
            self.stream.write("%stumbler: %s\n" % (prefix, one_line(message)))
            self.stream.flush()
        except OSError:
            pass


class _Bucket:
    """``burst`` lines at once, refilled at ``per_s`` a second."""

    def __init__(self, burst, per_s, now):
        self.burst, self.per_s = burst, per_s
        self.tokens, self.at = float(burst), now

    def has(self, now):
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        return self.tokens >= 1.0

    def take(self):
        self.tokens -= 1.0


class Events:
    """Lines about processes, written to ``log`` (a ``Log``, or any
    ``log(priority, message)``) at a bounded rate: the module docstring.
    ``events(rule, kind, priority, message)``: ``rule`` is the rule's name
    (None before one is known), ``kind`` what happened as it reads after a
    count ("programs left alone").  ``flush()`` writes the summaries due
    (the service's loop calls it every scan); ``flush(everything=True)``
    every count held, at the end."""

    def __init__(self, log, clock=time.monotonic):
        self.log = log
        self.clock = clock
        self.kinds = {}             # (rule, kind) -> _Bucket
        self.all = _Bucket(ALL_BURST, ALL_PER_S, clock())
        self.held = {}              # (rule, kind) -> [first held at, count, worst priority]

    def __call__(self, rule, kind, priority, message):
        now = self.clock()
        self.flush(now=now)
        key = (rule, kind)
        bucket = self.kinds.get(key)
        if bucket is None:
            bucket = self.kinds[key] = _Bucket(KIND_BURST, KIND_PER_S, now)
        if bucket.has(now) and self.all.has(now):
            bucket.take()
            self.all.take()
            self.log(priority, message)
            return
        held = self.held.setdefault(key, [now, 0, priority])
        held[1] += 1
        held[2] = min(held[2], priority)        # the most severe (ERROR is 3)

    def flush(self, everything=False, now=None):
        """Write a summary for each rule and kind whose first line held
        back is SUMMARY_S old (every one with ``everything``)."""
        now = self.clock() if now is None else now
        for key in [k for k, held in self.held.items()
                    if everything or now - held[0] >= SUMMARY_S]:
            (rule, kind), (since, count, priority) = key, self.held.pop(key)
            self.log(priority, "%s%d more %s in the last %.0f s (held back: at most %g line "
                     "a second for each rule and kind, %g in all)"
                     % ("" if rule is None else "rule %s: " % rule, count, kind,
                        max(now - since, 1.0), KIND_PER_S, ALL_PER_S))
