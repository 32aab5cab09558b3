"""``tumbler plot LOG.jsonl -o FILE.svg``: a picture of a ``--log`` file.

Two panels over the run's time (seconds, ticked, with a light grid):

* each domain's load per CPU (its summed thread load / its CPUs: 1 is
  every CPU of it busy), one line per domain, inside the tolerance band
  around their mean (no regrouping while every domain stays in it);
  threads moved between domains as marks along the top, speed balancing's
  pins as marks along the bottom, the rounds where speed balancing was
  engaged shaded;
* how unevenly the threads load the CPUs (CV, in percent: what picks the
  interval) and the interval chosen (ms, on the right-hand axis).

The legend is to the right of the panels, never over the data.

Plain SVG written by hand: no plotting library (it must work wherever
tumbler does, illumos included).
"""

import math
import sys
from collections import Counter

import click

from ..cpulist import parse_cpulist
from ..engine.grouping import DEFAULT_TOLERANCE     # the tolerance band's default
from ..errors import EXIT_FAILURE, UsageError, TumblerError
from ..jsonlimits import loads_object
from .options import examples

#: Colours of the domain lines, in turn.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf")
#: The panels span x from LEFT to WIDTH - RIGHT; the legend is right of them.
WIDTH, LEFT, RIGHT = 1000, 70, 260
LEGEND_X = WIDTH - RIGHT + 50
TOP_PANEL = (50, 270)           # y of the first panel's top and bottom
BOTTOM_PANEL = (340, 460)
HEIGHT = 500
SPEED_SHADE = "#ffe8cc"         # rounds with speed balancing engaged
BAND_SHADE = "#dddddd"          # the tolerance band: groups kept
PIN_COLOUR = "#ff7f0e"          # ticks of rounds that pinned threads
CV_COLOUR = "#555555"
INTERVAL_COLOUR = "#17becf"
GRID_COLOUR = "#eeeeee"
HEADROOM = 1.1                  # the value axes reach this much above the highest value


@click.command("plot", short_help="Draw a --log file as an SVG chart.",
               epilog=examples(
                   "tumbler --log run.jsonl exec -- ./app && tumbler plot -o run.svg run.jsonl",
                   "tumbler plot --pid 1234 -o one.svg service.jsonl  # one program of a "
                   "service's log"))
@click.argument("log_path", metavar="LOG.jsonl")
@click.option("-o", "--output", "output", required=True, metavar="FILE.svg",
              help="Where to write the SVG.")
@click.option("--tolerance", type=float, default=None,
              help="Band around the mean (default: the log's, else %.2f)." % DEFAULT_TOLERANCE)
@click.option("--pid", type=int, default=None, metavar="PID",
              help="The program to draw, in a service's log of several.")
def plot_command(log_path, output, tolerance, pid):
    """Draw a --log file as an SVG chart: each domain's load over time,
    moves and speed balancing's periods, how unevenly threads load the CPUs
    (CV) and the time between rounds."""
    rounds = one_program(read_log(log_path), pid, log_path)
    svg = render(rounds, tolerance, title=log_path if pid is None else
                 "%s, PID %d" % (log_path, pid))
    from ..safefile import UnsafePath, open_output
    try:
        with open_output(output) as f:
            f.write(svg)
    except UnsafePath as exc:
        raise TumblerError("cannot write: %s" % exc, EXIT_FAILURE) from None
    except OSError as exc:
        raise TumblerError("cannot write %s: %s" % (output, exc.strerror), EXIT_FAILURE)
    sys.exit(0)


#: The longest line read: a round that moves every thread of a program of
#: 100,000 threads writes ~10 MB (a move is ~100 bytes: tid, name, from,
#: to; observers/runlog.py).
MAX_LINE = 64 << 20


def read_log(path):
    """The rounds of a --log file; UsageError naming FILE:LINE on a bad
    line, TumblerError (exit 1) on a file that cannot be read (a FIFO or
    a device is refused: it would block or never end)."""
    import os
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TumblerError("cannot read %s: %s" % (path, exc.strerror), EXIT_FAILURE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TumblerError("cannot read %s: not a regular file" % path, EXIT_FAILURE)
    rounds = []
    with open(fd, "rb") as f:
        for number, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
            if not line.strip():
                continue
            try:
                record = _check_record(loads_object(line, MAX_LINE))
            except ValueError as exc:       # BadJSON too
                if not line.endswith(b"\n") and len(line) <= MAX_LINE:
                    break           # the last line of a run still being written
                raise UsageError("%s:%d: not a tumbler --log record (%s)"
                                 % (path, number, exc)) from None
            rounds.append(record)
    if not rounds:
        raise UsageError("%s: no rounds to plot" % path)
    return rounds


def _check_record(record):
    """``record`` if it holds what render() reads, of the types it reads
    them as; ValueError saying what is wrong otherwise."""
    def number(value, key):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError("%s is not a number" % key)

    def optional(key, kind):
        if record.get(key) is not None and not isinstance(record[key], kind):
            raise ValueError("%s is not a %s" % (key, kind.__name__))

    for key in ("t", "domains", "domain_loads"):
        if key not in record:
            raise ValueError("no %s" % key)
    number(record["t"], "t")
    domains, loads = record["domains"], record["domain_loads"]
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        raise ValueError("domains is not a list of CPU lists")
    for domain in domains:
        try:
            parse_cpulist(domain)
        except UsageError as exc:
            raise ValueError("domains: %s" % exc) from None
    if not isinstance(loads, list) or len(loads) != len(domains):
        raise ValueError("domain_loads is not one load per domain")
    for load in loads:
        number(load, "domain_loads")
    optional("pid", int)
    optional("reason", str)
    optional("moves", list)
    optional("pins", list)
    optional("mechanisms", dict)
    if not all(isinstance(move, dict) for move in record.get("moves") or ()):
        raise ValueError("moves is not a list of objects")
    for key in ("thread_cv", "interval_ms"):
        if record.get(key) is not None:
            number(record[key], key)
    return record


def one_program(rounds, pid, path):
    """The rounds of one program: a service's log (``tumbler service
    --log``) has a ``pid`` in each line and may hold several."""
    pids = sorted({r["pid"] for r in rounds if "pid" in r})
    if pid is None:
        if len(pids) > 1:
            raise UsageError("%s holds rounds of %d programs (PIDs %s): choose one with --pid"
                             % (path, len(pids), ", ".join(map(str, pids))))
        return rounds
    chosen = [r for r in rounds if r.get("pid") == pid]
    if not chosen:
        raise UsageError("%s has no rounds of PID %d" % (path, pid))
    return chosen


def _tolerance(rounds):
    import re
    for record in rounds:
        found = re.search(r"tolerance (\d+(?:\.\d+)?)", record.get("reason") or "")
        if found:
            return float(found.group(1))
    return DEFAULT_TOLERANCE


def nice_ticks(high, count=6):
    """Tick values from 0 to ``high``: steps of 1, 2 or 5 times a power of ten."""
    if high <= 0:
        return [0.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(high / step + 1e-9) + 1)]


def _label(value):
    return ("%.0f" % value) if value == int(value) else ("%g" % round(value, 3))


def speed_engaged(record):
    """Whether speed balancing ran in a domain this round (its log note)."""
    return any(str(note).startswith("speed") for note in
               (record.get("mechanisms") or {}).values()) or bool(record.get("pins"))


def render(rounds, tolerance=None, title=""):
    """The SVG text for ``rounds``."""
    tolerance = _tolerance(rounds) if tolerance is None else tolerance
    # The domains most rounds had: auto merges domains for a while when a
    # program outnumbers their CPUs, space sharing changes them; rounds
    # with others leave a gap in the lines.
    counts = Counter(tuple(r["domains"]) for r in rounds)
    names = list(max(counts, key=counts.get))
    capacities = [max(len(parse_cpulist(name)), 1) for name in names]
    t0, t1 = rounds[0]["t"], rounds[-1]["t"]
    span = (t1 - t0) or 1.0

    def x(t):
        return LEFT + (t - t0) / span * (WIDTH - LEFT - RIGHT)

    per_cpu = [[load / capacities[i] for i, load in enumerate(r["domain_loads"])]
               if r["domains"] == names else None for r in rounds]
    top = max([max(v) for v in per_cpu if v] + [1.0]) * HEADROOM

    def y1(value):
        high, low = TOP_PANEL
        return low - value / top * (low - high)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (WIDTH, HEIGHT),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">tumbler: %s (%d rounds, %.1f s)</text>'
           % (LEFT, _xml(title), len(rounds), span)]
    time_ticks = nice_ticks(t1 - t0)
    out += _speed_periods(rounds, x)
    out += _time_grid(t0, time_ticks, x)
    # The tolerance band around the mean of the domains' per-CPU loads.
    band_top, band_bottom = [], []
    for record, values in zip(rounds, per_cpu):
        if values:
            mean = sum(values) / len(values)
            band_top.append("%.1f,%.1f" % (x(record["t"]), y1(mean * (1 + tolerance))))
            band_bottom.append("%.1f,%.1f" % (x(record["t"]), y1(mean * (1 - tolerance))))
    if band_top:
        out.append('<polygon class="band" points="%s" fill="%s" stroke="none">'
                   '<title>mean +- %.0f%%</title></polygon>'
                   % (" ".join(band_top + band_bottom[::-1]), BAND_SHADE, tolerance * 100))
    legend = []
    for i, name in enumerate(names):
        points = " ".join("%.1f,%.1f" % (x(r["t"]), y1(v[i]))
                          for r, v in zip(rounds, per_cpu) if v)
        colour = COLOURS[i % len(COLOURS)]
        out.append('<polyline class="domain" data-domain="%s" points="%s" fill="none" '
                   'stroke="%s" stroke-width="1.5"/>' % (_xml(name), points, colour))
        legend.append(("line", colour, "domain %s (CPUs)" % name))
    legend += [("rect", BAND_SHADE, "mean +- %.0f%%: groups kept" % (tolerance * 100)),
               ("tick", "black", "threads moved (ticks on top)"),
               ("tick", PIN_COLOUR, "threads pinned (ticks below)"),
               ("rect", SPEED_SHADE, "speed balancing engaged")]
    for record in rounds:
        moved = [m for m in record.get("moves") or () if m.get("from") is not None]
        if moved:
            out.append('<line class="move" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black">'
                       '<title>%.2f s: %d moved</title></line>'
                       % (x(record["t"]), x(record["t"]), TOP_PANEL[0] - 8, TOP_PANEL[0],
                          record["t"], len(moved)))
        if record.get("pins"):
            out.append('<line class="pin" x1="%.1f" x2="%.1f" y1="%d" y2="%d" '
                       'stroke="%s"><title>%.2f s: %d pinned</title></line>'
                       % (x(record["t"]), x(record["t"]), TOP_PANEL[1], TOP_PANEL[1] + 8,
                          PIN_COLOUR, record["t"], len(record["pins"])))
    out += _value_axis(TOP_PANEL, top, LEFT, "end", -4)
    out.append('<text x="%d" y="%d">load per CPU (1 = all its CPUs busy)</text>'
               % (LEFT, TOP_PANEL[0] - 12))
    # Thread CV and the interval it chose.
    cvs = [(r["t"], 100 * r["thread_cv"]) for r in rounds if r.get("thread_cv") is not None]
    intervals = [(r["t"], r.get("interval_ms")) for r in rounds if r.get("interval_ms")]
    cv_top = max([v for _, v in cvs] + [50]) * HEADROOM
    ms_top = max([v for _, v in intervals] + [100]) * HEADROOM

    def y2(value, scale):
        high, low = BOTTOM_PANEL
        return low - value / scale * (low - high)

    if cvs:
        out.append('<polyline class="cv" points="%s" fill="none" stroke="%s"/>'
                   % (" ".join("%.1f,%.1f" % (x(t), y2(v, cv_top)) for t, v in cvs), CV_COLOUR))
    if intervals:
        out.append('<polyline class="interval" points="%s" fill="none" stroke="%s" '
                   'stroke-dasharray="4 2"/>'
                   % (" ".join("%.1f,%.1f" % (x(t), y2(v, ms_top)) for t, v in intervals),
                      INTERVAL_COLOUR))
    legend += [("line", CV_COLOUR, "thread loads' CV (%, left axis)"),
               ("dash", INTERVAL_COLOUR, "next round in (ms, right axis)")]
    out += _value_axis(BOTTOM_PANEL, cv_top, LEFT, "end", -4, unit="%")
    out += _value_axis(BOTTOM_PANEL, ms_top, WIDTH - RIGHT, "start", 4, unit=" ms")
    out.append('<text x="%d" y="%d">how unevenly threads load the CPUs, and the interval '
               'it sets</text>' % (LEFT, BOTTOM_PANEL[0] - 12))
    for panel in (TOP_PANEL, BOTTOM_PANEL):
        out += _time_axis(panel, t0, time_ticks, x)
    out += _legend(legend)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _speed_periods(rounds, x):
    """Shade, over both panels, each span of rounds with speed balancing engaged."""
    out, start = [], None
    for record, after in zip(rounds, rounds[1:] + [None]):
        engaged = speed_engaged(record)
        if engaged and start is None:
            start = record["t"]
        if start is not None and (not engaged or after is None):
            end = record["t"]
            for high, low in (TOP_PANEL, BOTTOM_PANEL):
                out.append('<rect class="speed" x="%.1f" y="%d" width="%.1f" height="%d" '
                           'fill="%s"/>' % (x(start), high, max(x(end) - x(start), 1.0),
                                            low - high, SPEED_SHADE))
            start = None
    return out


def _time_grid(t0, ticks, x):
    out = []
    for tick in ticks:
        for high, low in (TOP_PANEL, BOTTOM_PANEL):
            out.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d" '
                       'stroke="%s"/>' % (x(t0 + tick), x(t0 + tick), high, low, GRID_COLOUR))
    return out


def _time_axis(panel, t0, ticks, x):
    high, low = panel
    out = ['<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>'
           % (LEFT, WIDTH - RIGHT, low, low)]
    for tick in ticks:
        at = x(t0 + tick)
        out.append('<line class="tick" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>'
                   % (at, at, low, low + 4))
        out.append('<text class="tick-label" x="%.1f" y="%d" text-anchor="middle">%s s</text>'
                   % (at, low + 15, _label(round(t0 + tick, 3))))
    return out


def _value_axis(panel, top, at, anchor, offset, unit=""):
    high, low = panel
    out = ['<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (at, at, high, low)]
    for tick in nice_ticks(top / HEADROOM):
        y = low - tick / top * (low - high)
        out.append('<line class="tick" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>'
                   % (at, at + (4 if offset > 0 else -4), y, y))
        out.append('<text class="tick-label" x="%d" y="%.1f" text-anchor="%s">%s%s</text>'
                   % (at + offset * 2, y + 4, anchor, _label(tick), unit))
    return out


def _legend(entries):
    """The legend, right of the panels: ``(kind, colour, text)`` per entry."""
    out = ['<g class="legend">']
    for i, (kind, colour, text) in enumerate(entries):
        y = TOP_PANEL[0] + 18 * i + 6
        if kind == "rect":
            out.append('<rect x="%d" y="%d" width="18" height="10" fill="%s"/>'
                       % (LEGEND_X, y - 8, colour))
        elif kind == "tick":
            out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                       % (LEGEND_X + 9, LEGEND_X + 9, y - 9, y + 1, colour))
        elif kind == "dash":
            out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="1.5" '
                       'stroke-dasharray="4 2"/>' % (LEGEND_X, LEGEND_X + 18, y - 3, y - 3,
                                                     colour))
        else:       # a line's colour as a crisp bar, on whole pixels
            out.append('<rect x="%d" y="%d" width="18" height="3" fill="%s"/>'
                       % (LEGEND_X, y - 5, colour))
        out.append('<text x="%d" y="%d">%s</text>' % (LEGEND_X + 24, y, _xml(text)))
    out.append("</g>")
    return out


def _xml(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))
