"""Which mechanism acted in each domain, since when, and each change as
one plain line (issue 49, item 4): what ``-v`` and ``--log`` say as the
run goes, and what the exit summary sums up.

A full round's Decision has a note per domain (engine/policy.py): "speed:
..." where speed balancing acts, "os: R runnable of T threads on C cores
[, S switches per CPU-second][, other work X CPU]" where the OS places the
threads.  Each is read here as one of four *states*:

``speed``     speed balancing acts in the domain;
``other``     left to the OS because other work uses its CPUs;
``crowded``   left to the OS with more runnable threads than cores (not a
              multiple) that show no sign of waiting at barriers -- the
              case where ``--policy speed`` may help or cost (tumbler(8),
              ``--policy``);
``judging``   such a crowd whose switches are not counted yet;
``os``        the OS places the threads, nothing crowded.

A line is made when a domain's state changes (not when its figures move)
and when the domains themselves change (merged, split, a CPU gone); the
time in each state is summed for the summary.  Quiet rounds keep the
state of the full round before them: they come only while nothing is
engaged or crowded (balance/quiet.py).  Only the last KEPT_LINES lines
(up to twice that, between trims) are kept: a service runs for months, and
a program whose domains change state every few seconds must not grow its
memory without end.
"""

from ..cpulist import format_cpulist

#: Lines kept for readers that have not taken them yet (``since_cursor``):
#: -v, --log and the service read them every round, so a reader further
#: behind than this has already missed far more than it could print.
KEPT_LINES = 256


def state_of(note):
    """(state, what the line says of it) of one domain's note.  Read with
    str methods, not ``re``: exec loads no module it can do without
    (tests/commands/test_quick.py)."""
    if note.startswith("speed"):
        why = note.split(": ", 1)[-1]
        head, _, last = why.rpartition(", ")
        if head and last.endswith(" pulls"):
            why = head
        if "switches per CPU-second" in why:
            why += ", as threads that yield at barriers do"
        return "speed", why
    parts = note[len("os: "):].split(", ") if note.startswith("os: ") else [""]
    words = parts[0].split()
    if len(words) != 8 or not (words[0] + words[3] + words[6]).isdigit():
        return "os", ""
    runnable, threads, cores = int(words[0]), int(words[3]), int(words[6])
    switching = other = None
    for part in parts[1:]:
        if part.endswith(" switches per CPU-second"):
            switching = part.split()[0]
        elif part.startswith("other work "):
            other = part.split()[2]
    if other is not None:
        return "other", "other work uses %s CPU of its CPUs" % other
    if runnable > cores and runnable % cores:
        if switching is None:       # not counted yet (or not at all: no switch counts)
            return "judging", "%d runnable threads on %d cores, watched for signs of " \
                "waiting at barriers" % (runnable, cores)
        return "crowded", "%d runnable threads on %d cores, %s switches per CPU-second, " \
            "no sign of waiting at barriers" % (runnable, cores, switching)
    return "os", "%d runnable of %d threads on %d cores" % (runnable, threads, cores)


def _line(name, state, why, was):
    if state == "speed":
        return "speed balancing on in domain %s: %s" % (name, why)
    if was == "speed":
        return "speed balancing off in domain %s, left to the OS: %s" % (name, why)
    if state == "other":
        return "domain %s left to the OS: %s" % (name, why)
    if state == "crowded":
        return "domain %s left to the OS: %s (--policy speed pins such threads; " \
            "see tumbler(8), --policy)" % (name, why)
    if state == "judging":
        return "domain %s: %s" % (name, why)
    return "domain %s placed by the OS: %s" % (name, why) if was is not None else None


class MechanismLog:
    """The states of a run's domains over time (the module doc)."""

    __slots__ = ("states", "since", "seconds", "changes", "dropped", "names", "crowded")

    def __init__(self):
        self.states = {}        # domain name (its CPUs) -> state now
        self.since = None       # monotonic s of the last full round
        self.seconds = {}       # (state, domain name) -> s spent in it
        self.changes = []       # the last lines made, in order (fewer than 2 x KEPT_LINES)
        self.dropped = 0        # lines made and no longer kept
        self.names = None       # the domains' names at the last full round
        self.crowded = {}       # domain name -> its last "crowded" description

    def follow(self, notes, domains, now, why=None):
        """One full round's ``notes`` (domain index -> note) over
        ``domains`` at ``now`` (monotonic s); ``why``: the line that says
        why the domains changed this round, if they did (a merge, a split)."""
        if self.since is not None:
            for name, state in self.states.items():
                key = (state, name)
                self.seconds[key] = self.seconds.get(key, 0.0) + now - self.since
        self.since = now
        names = [format_cpulist(d.cpus) for d in domains]
        if self.names is not None and names != self.names:
            self._say(why or "domains %s now %s" % (" / ".join(self.names), " / ".join(names)))
            self.states = {n: s for n, s in self.states.items() if n in names}
        self.names = names
        for index, name in enumerate(names):
            note = notes.get(index)
            if note is None:
                continue
            state, why = state_of(note)
            if state == "crowded":
                self.crowded[name] = why
            was = self.states.get(name)
            if state != was:
                self.states[name] = state
                line = _line(name, state, why, was)
                if line is not None:
                    self._say(line)

    def _say(self, line):
        self.changes.append(line)
        if len(self.changes) >= 2 * KEPT_LINES:
            del self.changes[:KEPT_LINES]
            self.dropped += KEPT_LINES

    def since_cursor(self, cursor):
        """(the lines made since ``cursor`` and still kept, the new cursor);
        a cursor starts at 0."""
        return self.changes[max(cursor - self.dropped, 0):], self.dropped + len(self.changes)

    def summary_lines(self, wall_s):
        """What acted, where and for how long; where a crowd showed no
        sign of barriers, what --policy speed would gain and cost."""
        lines = []
        for state, what in (("speed", "speed balancing engaged"),
                            ("other", "left to the OS for other work")):
            for (kind, name), seconds in sorted(self.seconds.items()):
                if kind == state and seconds > 0:
                    lines.append("%s in domain %s for %.1f s%s" % (
                        what, name, seconds,
                        " (%.0f%% of the run)" % (100 * seconds / wall_s) if wall_s else ""))
        for name, why in sorted(self.crowded.items()):
            if ("speed", name) in self.seconds:
                continue            # the crowd engaged at some point: it did wait
            # The figures: tumbler(8), --policy (issue 49's measurements).
            lines.append("domain %s: %s: left to the OS.  If they spin at barriers, "
                         "--policy speed may be faster (1.18x on spin barriers here); on "
                         "independent work it cost 2%% (0.981x) -- tumbler(8), --policy; "
                         "tumbler compare tells" % (name, why))
        return lines
