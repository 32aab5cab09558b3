"""tumbler-auto(7): the procedure a user follows to predict what auto
does (issue 49, item 3).  Every number the procedure states is a value
of its THRESHOLDS table, every value there is what the code's constant
is, and the procedure fits in 30 lines."""

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from support.helpers import REPO
from tumbler.balance import capacity, controller, merged, speedstep, timings
from tumbler.engine import grouping, merging, policy, speed, swaps, variation

PAGE = os.path.join(REPO, "man", "tumbler-auto.7")
#: The procedure's lines at most (the issue's goal).
MAX_PROCEDURE_LINES = 30
#: Text width of a list item on an 80-column terminal: man's indent of 7
#: and the items' 4.
ITEM_WIDTH = 80 - 7 - 4

#: A number, and the unit written after it if any.
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s*(%|ms\b|s\b|CPU\b))?")


def section(text, name):
    return text.split("\n.SH %s\n" % name, 1)[1].split("\n.SH ", 1)[0]


def plain(line):
    """A roff line's words: font requests dropped, escapes as text."""
    line = re.sub(r"^\.(B|I|BR|IR|RB|RI)\s+", "", line)
    return line.replace("\\ ", " ").replace("\\-", "-")


def procedure_items():
    """The procedure's paragraphs (the lead-in, then each numbered step),
    as plain text."""
    items, current = [], []
    for line in section(open(PAGE).read(), "PROCEDURE").splitlines():
        if line.startswith(".IP"):
            items.append(" ".join(current))
            current = []
        elif line.startswith(".PP"):
            items.append(" ".join(current))
            current = []
        else:
            current.append(plain(line))
    items.append(" ".join(current))
    return [item for item in items if item]


def code_values():
    """Every name the table's expressions may use: the constants of the
    modules auto decides in, SpeedParams, and the loop's timings' defaults."""
    names = {}
    for module in (policy, speed, merging, grouping, swaps, variation, controller, capacity,
                   merged, speedstep):
        names.update({name: value for name, value in vars(module).items()
                      if name.isupper() and not name.startswith("_")})
    names["SpeedParams"] = speed.SpeedParams
    names.update(timings.Timings._field_defaults)
    return names


def table_rows():
    """(step, value, expression) of each entry of the THRESHOLDS list:
    ``.TP``, then ``.B "value \\(em expression"``, then ``(step N) origin``."""
    lines = section(open(PAGE).read(), "THRESHOLDS").splitlines()
    rows = []
    for i, line in enumerate(lines):
        if line != ".TP":
            continue
        tag = re.fullmatch(r'\.B "(.+) \\\(em (.+)"', lines[i + 1])
        step = re.match(r"\(steps? ([^)]+)\)", lines[i + 2])
        assert tag and step, lines[i:i + 3]
        rows.append((step.group(1), tag.group(1).replace("\\ ", " "), tag.group(2)))
    return rows


def stated(text):
    """The (number, unit) pairs ``text`` states."""
    return {(float(number), unit or "") for number, unit in NUMBER.findall(text)}


def test_each_threshold_in_the_table_is_the_codes_value():
    names = code_values()
    rows = table_rows()
    assert len(rows) >= 20, rows
    for step, value, expression in rows:
        match = NUMBER.fullmatch(value)
        assert match, value
        in_code = eval(expression, {"__builtins__": {}}, names)  # the page's, trusted
        assert float(match.group(1)) == pytest.approx(in_code, rel=1e-9), \
            "step %s: the page says %s, %s is %r" % (step, value, expression, in_code)


def test_every_number_the_procedure_states_is_a_threshold_of_the_table():
    table = set()
    for _, value, _ in table_rows():
        table |= stated(value)
    for item in procedure_items():
        unknown = stated(item) - table
        assert not unknown, "not in THRESHOLDS: %s in %r" % (sorted(unknown), item)


def test_the_procedure_fits_in_thirty_lines():
    lines = sum(len(textwrap.wrap(item, ITEM_WIDTH)) for item in procedure_items())
    assert lines <= MAX_PROCEDURE_LINES, lines
    assert len(procedure_items()) >= 8         # the lead-in and the steps


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db not installed")
def test_the_page_renders_without_warnings_and_its_procedure_in_thirty_lines():
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    result = subprocess.run(["man", "--warnings", "-l", PAGE], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rendered = result.stdout.split("\nPROCEDURE\n", 1)[1].split("\nTHRESHOLDS\n", 1)[0]
    lines = [line for line in rendered.splitlines() if line.strip()]
    assert len(lines) <= MAX_PROCEDURE_LINES, "\n".join(lines)
