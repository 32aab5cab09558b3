"""``tumbler plot``: the SVG is rendered to a PNG (rsvg-convert, Debian's
librsvg2-bin, which scripts/test.sh installs) and what was drawn is
checked: axes with ticks and units, a legend that covers no data, moves
and speed balancing's periods marked."""

import json
import re
import shutil
import subprocess
import zlib

import pytest

from support.helpers import run_tumbler
from tumbler.commands import plot

pytestmark = pytest.mark.skipif(shutil.which("rsvg-convert") is None,
                                reason="rsvg-convert (librsvg2-bin) is not installed")


def a_run():
    """Two domains over 6 s: domain 0 loaded more at first, 2 moves at
    1.5 s, speed balancing engaged from 3 s to 4.5 s with pins."""
    rounds = []
    for i in range(31):
        t = 0.2 * i
        speed = 3.0 <= t <= 4.5
        rounds.append({
            "t": t, "round": i + 1, "policy": "auto", "reason": "tolerance 0.10",
            "thread_cv": 0.8 if t < 1.5 else 0.3, "interval_ms": 200 if t < 1.5 else 400,
            "domains": ["0", "1"], "domain_loads": [1.6, 0.4] if t < 1.5 else [1.1, 0.9],
            "moves": [{"tid": 7, "from": 0, "to": 1}, {"tid": 8, "from": 0, "to": 1}]
            if abs(t - 1.6) < 1e-9 else [],
            "mechanisms": {"0": "speed: 3 threads on 1 cores, 2 pulls" if speed else "os"},
            "pins": [{"tid": 7, "cpu": 0}] if speed else []})
    return rounds


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """(svg text, PNG pixels as rows of (r, g, b)) of a_run's plot."""
    tmp = tmp_path_factory.mktemp("plot")
    log, svg, png = tmp / "run.jsonl", tmp / "run.svg", tmp / "run.png"
    log.write_text("".join(json.dumps(r) + "\n" for r in a_run()))
    result = run_tumbler("plot", "-o", str(svg), str(log))
    assert result.returncode == 0, result.stderr
    subprocess.run(["rsvg-convert", "-b", "white", "-o", str(png), str(svg)], check=True)
    return svg.read_text(), read_png(png.read_bytes())


def read_png(data):
    """The pixels of an 8-bit RGB or RGBA PNG (rsvg-convert's), no library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height = int.from_bytes(header[:4], "big"), int.from_bytes(header[4:8], "big")
    depth, colour = header[8], header[9]
    assert depth == 8 and colour in (2, 6), (depth, colour)
    channels = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], None
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        prev = prev or bytearray(stride)
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return rows


def colour(hex_text):
    return tuple(int(hex_text[i:i + 2], 16) for i in (1, 3, 5))


def near(pixel, want, slack=12):
    return all(abs(a - b) <= slack for a, b in zip(pixel, want))


def where(rows, want, x_range=None):
    return {(x, y) for y, row in enumerate(rows) for x, pixel in enumerate(row)
            if (x_range is None or x_range[0] <= x < x_range[1]) and near(pixel, want)}


def test_the_domain_lines_are_drawn_inside_the_panels_and_not_under_the_legend(drawn):
    _, rows = drawn
    right = plot.WIDTH - plot.RIGHT
    for index in (0, 1):
        want = colour(plot.COLOURS[index])
        data = where(rows, want, (plot.LEFT + 2, right))
        assert len(data) > 400, index              # a line across the panel
        legend = where(rows, want, (plot.LEGEND_X - 5, plot.WIDTH))
        assert legend, index                       # its legend entry is drawn ...
        assert max(x for x, _ in data) < min(x for x, _ in legend)   # ... right of the data


def test_speed_balancing_is_shaded_where_it_was_engaged(drawn):
    svg, rows = drawn
    shaded = where(rows, colour(plot.SPEED_SHADE), (plot.LEFT, plot.WIDTH - plot.RIGHT))
    xs = sorted({x for x, _ in shaded})
    span = plot.WIDTH - plot.RIGHT - plot.LEFT
    # 3 s to 4.6 s of a 6 s run
    assert plot.LEFT + 0.45 * span < xs[0] and xs[-1] < plot.LEFT + 0.8 * span, (xs[0], xs[-1])
    assert svg.count('class="move"') == 1 and svg.count('class="pin"') == 8


def test_both_axes_have_ticks_with_units(drawn):
    svg, _ = drawn
    labels = re.findall(r'class="tick-label"[^>]*>([^<]+)<', svg)
    times = [l for l in labels if l.endswith(" s")]
    assert {"0 s", "1 s", "2 s", "3 s", "4 s", "5 s", "6 s"} <= set(times), labels
    assert {"0%", "20%", "40%", "60%", "80%"} <= set(labels), labels
    assert "400 ms" in labels and "1.5" in labels, labels
    assert "load per CPU" in svg


@pytest.mark.parametrize("high, ticks", [(6.0, [0, 1, 2, 3, 4, 5, 6]),
                                         (0.9, [0, 0.2, 0.4, 0.6, 0.8]),
                                         (440, [0, 100, 200, 300, 400])])
def test_ticks_fall_on_round_numbers(high, ticks):
    assert [round(t, 6) for t in plot.nice_ticks(high)] == ticks
