"""Rules' patterns (tumbler/service/pattern.py): the same answers as
Python's ``re`` on what both accept, refusals for what needs
backtracking, and a bounded amount of work on hostile texts -- counted
in DFA states, not timed."""

import random
import re

import pytest

from tumbler.service.pattern import MAX_PROGRAM, MAX_TEXT, Pattern, PatternError

PATTERNS = [r"worker.*", r"^(a+)+$", r"a|b|c", r"(ab|a)*c", r"\bjava\b", r"x\d{2,4}y",
            r"[^a-c]+z", r"(?i)WoRkEr", r"^$", r"a$", r"(?m)^b", r"\Aab\Z", r"a.b", r"(?s)a.b",
            r"[\w-]+\.py", r"(a|)*b", r"a{3}", r"a{0,2}b", r"colou?r", r"a\B", r"\Bb",
            r"\s+\S", r"(?a)\w+", r"[A-Z]{2}", r"(?i)[a-c]x", r"", r"^java .* -jar", r"a*?b",
            r"(x|y|z)+?q", r"(?x) a  b  # comment", r"[.]", r"\W\d", r"(?:ab){2,}", r"a\Z",
            r"^\s*$", r"q$"]
ALPHABET = "ab\n c_-xyzq.Jj0123é"


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_answers_as_re(pattern):
    ours, theirs = Pattern(pattern), re.compile(pattern)
    rng = random.Random(pattern)
    for _ in range(1500):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
        assert ours.search(text) == bool(theirs.search(text)), (pattern, text)
        assert ours.fullmatch(text) == bool(theirs.fullmatch(text)), (pattern, text)


def test_a_non_boundary_on_the_empty_text():
    r"""Python before 3.14 says ``\B`` does not match the empty string
    (a documented quirk, gone in 3.14); here it does, as 3.14 and RE2."""
    assert Pattern(r"\B").search("")
    assert not Pattern(r"\B").search("a")


@pytest.mark.parametrize("pattern,why", [
    (r"(a)\1", "backreference"), (r"(?=a)", "lookahead"), (r"(?<=a)b", "lookahead"),
    (r"(?!a)", "lookahead"), (r"(?>a)", "atomic group"), (r"a*+", "possessive"),
    (r"(a)?(?(1)a|b)", "conditional"), ("x{%d}" % (MAX_PROGRAM + 1), "too large"),
    (r"(a{50}){50}", "too large"), ("(", "missing"), (r"(?L)a", "'L' flag")])
def test_what_needs_backtracking_is_refused(pattern, why):
    with pytest.raises(PatternError, match=why):
        Pattern(pattern)


def test_hostile_texts_cost_a_bounded_number_of_states():
    """The work per character is one lookup once a transition is known;
    new transitions are what cost.  ``^(a+)+$`` over 28 a's and a b --
    minutes for ``re`` -- builds a handful of states, and so does a text
    of MAX_TEXT characters; a pattern made to blow a DFA up stays under
    its cap while giving the right answer."""
    evil = Pattern(r"^(a+)+$")
    assert not evil.search("a" * 28 + "b")
    assert evil.search("a" * 28)
    # Only the first MAX_TEXT characters are looked at: these are all a's.
    assert evil.search("a" * 100000 + "b")
    assert len(evil._pcs) <= 8
    steps = len(evil._steps[False])
    assert steps <= 16
    blowup = Pattern(r"(a|b)*a(a|b){12}")
    text = "".join(random.Random(1).choice("ab") for _ in range(MAX_TEXT))
    assert blowup.search(text) == bool(re.search(r"(a|b)*a(a|b){12}", text))
    assert len(blowup._pcs) <= MAX_TEXT + 2


def test_a_long_command_line_is_matched_on_its_start_only():
    assert Pattern("x$").search("a" * (MAX_TEXT - 1) + "x")
    assert not Pattern("y").search("a" * MAX_TEXT + "y")


def test_escaped_names_are_matched_as_shown():
    from tumbler.escape import printable
    name = printable("x\n<3>FORGED")
    assert name == "x\\n<3>FORGED"
    assert Pattern("x.*").fullmatch(name)
    assert Pattern(r"x\\n<3>.*").fullmatch(name)
