"""Rules' regular expressions (``match: {comm, cmdline}``), matched in time
linear in the text.

Python's ``re`` backtracks: ``^(a+)+$`` against a command line of 28
``a``s and a ``b`` takes it minutes, in one call that no signal
interrupts (Python runs signal handlers between bytecodes).  A command
line is any user's to choose, so the root service cannot run ``re`` on
it.  Here a pattern is parsed by Python's own parser (the syntax admins
know), compiled to a Thompson NFA and run as a lazily built DFA, RE2's
method: each character of the text is one dictionary lookup once its
transition is known, and a transition not yet known costs one pass over
the NFA.  A text of n characters costs O(n * m) at worst for a pattern
of m NFA instructions, whatever the text holds; the text is capped at
``MAX_TEXT`` characters and the NFA at ``MAX_PROGRAM`` instructions, so
one match is bounded (about 10 ms at the very worst on a small VM, tens
of microseconds for ordinary patterns: tests/service/test_pattern.py).

The syntax is Python's (tumbler.yaml(5)), without what needs
backtracking: backreferences, lookahead and lookbehind, conditionals,
atomic groups and possessive repeats are refused when the configuration
is read.  Lazy repeats are accepted (whether there is a match does not
depend on greediness).  Flags: ``(?i)``, ``(?m)``, ``(?s)``, ``(?x)``,
``(?a)``.
"""

from ..platform.base import MAX_CMDLINE

try:                                    # Python 3.11+
    from re import _constants as _c, _parser as _sre_parse
except ImportError:                     # Python 3.9, 3.10
    import sre_constants as _c
    import sre_parse as _sre_parse

#: Characters of a text looked at: a longer command line is matched on
#: its first MAX_TEXT characters (tumbler.yaml(5)); backends read no more.
MAX_TEXT = MAX_CMDLINE
#: NFA instructions a pattern may compile to (``x{1000}`` is 1,000).
MAX_PROGRAM = 2000
#: Transitions kept per pattern; past it the table starts again.
MAX_CACHE = 20000

_CHAR, _SPLIT, _JMP, _ASSERT, _MATCH = range(5)
_IGNORECASE, _MULTILINE, _DOTALL, _ASCII = (_c.SRE_FLAG_IGNORECASE, _c.SRE_FLAG_MULTILINE,
                                            _c.SRE_FLAG_DOTALL, _c.SRE_FLAG_ASCII)
#: What comes before a position: nothing (the start), a word character,
#: a newline, anything else.
_START, _WORD, _NEWLINE, _OTHER = range(4)


class PatternError(ValueError):
    """A pattern that cannot be matched in linear time, or not parsed."""


def _kind(ch):
    if ch == "\n":
        return _NEWLINE
    return _WORD if ch.isalnum() or ch == "_" else _OTHER


class Pattern:
    """A compiled pattern: ``search(text)`` (anywhere, as ``re.search``)
    or ``fullmatch(text)``; both return a bool."""

    def __init__(self, pattern):
        self.pattern = pattern
        try:
            tree = _sre_parse.parse(pattern, 0)
        except _c.error as exc:
            raise PatternError(str(exc)) from None
        self._program = []
        self._compile(tree, tree.state.flags)
        self._program.append((_MATCH,))
        self._states = {}           # frozenset of pcs -> state id
        self._pcs = []              # state id -> frozenset of pcs
        self._steps = ({}, {})      # (search, full) -> {key: (next id, matched)}
        self._ends = ({}, {})

    def __repr__(self):
        return "Pattern(%r)" % self.pattern

    # -- compiling ---------------------------------------------------------

    def _compile(self, items, flags):
        program = self._program
        for op, av in items:
            if op is _c.LITERAL or op is _c.NOT_LITERAL:
                test = _literal(av, flags)
                program.append((_CHAR, test if op is _c.LITERAL
                                else (lambda code, t=test: not t(code))))
            elif op is _c.ANY:
                program.append((_CHAR, (lambda code: True) if flags & _DOTALL
                                else (lambda code: code != 10)))
            elif op is _c.IN:
                program.append((_CHAR, _charset(av, flags)))
            elif op is _c.BRANCH:
                self._branch(av[1], flags)
            elif op is _c.SUBPATTERN:
                _group, add, remove, sub = av
                self._compile(sub, (flags | add) & ~remove)
            elif op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
                self._repeat(*av, flags)
            elif op is _c.AT:
                program.append((_ASSERT, av, bool(flags & _MULTILINE)))
            else:
                raise PatternError("%s is not supported: rules match in linear time, "
                                   "without backtracking" % _describe(op))
            if len(program) > MAX_PROGRAM:
                raise PatternError("too large: more than %d states once compiled "
                                   "(repeat counts multiply)" % MAX_PROGRAM)

    def _branch(self, alternatives, flags):
        program = self._program
        jumps = []
        for alternative in alternatives[:-1]:
            split = len(program)
            program.append(None)
            self._compile(alternative, flags)
            jumps.append(len(program))
            program.append(None)
            program[split] = (_SPLIT, split + 1, len(program))
        self._compile(alternatives[-1], flags)
        for jump in jumps:
            program[jump] = (_JMP, len(program))

    def _repeat(self, low, high, item, flags):
        program = self._program
        for _ in range(low):
            self._compile(item, flags)
        if high == _c.MAXREPEAT:
            loop = len(program)
            program.append(None)
            self._compile(item, flags)
            program.append((_JMP, loop))
            program[loop] = (_SPLIT, loop + 1, len(program))
            return
        splits = []
        for _ in range(high - low):
            splits.append(len(program))
            program.append(None)
            self._compile(item, flags)
            if len(program) > MAX_PROGRAM:
                break               # _compile's caller says so
        for split in splits:
            program[split] = (_SPLIT, split + 1, len(program))

    # -- matching ------------------------------------------------------------

    def search(self, text):
        return self._run(text, False)

    def fullmatch(self, text):
        return self._run(text, True)

    def _run(self, text, full):
        text = text[:MAX_TEXT]
        steps, ends = self._steps[full], self._ends[full]
        if len(steps) > MAX_CACHE:
            steps.clear()
            ends.clear()
        state = self._state_id(frozenset((0,)))
        before = _START
        last = len(text) - 1
        for i, ch in enumerate(text):
            key = (state, before, ch, i == last)
            hit = steps.get(key)
            if hit is None:
                hit = steps[key] = self._step(state, before, ch, i == last, full)
            state, matched = hit
            if matched:
                return True
            before = _kind(ch)
        key = (state, before)
        matched = ends.get(key)
        if matched is None:
            matched = ends[key] = _MATCH_PC in self._closure(state, before, None, True)[1]
        return matched

    def _state_id(self, pcs):
        found = self._states.get(pcs)
        if found is None:
            if len(self._pcs) > MAX_CACHE:
                self._states.clear()
                del self._pcs[:]
                for table in self._steps + self._ends:
                    table.clear()
            found = self._states[pcs] = len(self._pcs)
            self._pcs.append(pcs)
        return found

    def _step(self, state, before, ch, last, full):
        """(the state after ``ch``, whether a search has matched before it)."""
        chars, reached = self._closure(state, before, ch, last)
        code = ord(ch)
        program = self._program
        after = frozenset(pc + 1 for pc in chars if program[pc][1](code))
        if not full:
            after |= {0}             # a match may start at the next position too
        return self._state_id(after), (not full and _MATCH_PC in reached)

    def _closure(self, state, before, ch, last):
        """(the character tests reachable from ``state`` without consuming,
        every instruction reached) at a position after ``before``, before
        ``ch`` (None: the end of the text)."""
        program = self._program
        todo = list(self._pcs[state])
        seen = set()
        chars = []
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = program[pc]
            kind = op[0]
            if kind == _CHAR:
                chars.append(pc)
            elif kind == _SPLIT:
                todo.append(op[1])
                todo.append(op[2])
            elif kind == _JMP:
                todo.append(op[1])
            elif kind == _ASSERT:
                if _holds(op[1], op[2], before, ch, last):
                    todo.append(pc + 1)
            elif kind == _MATCH:
                seen.add(_MATCH_PC)
        return chars, seen


#: Stands for the match instruction in a closure's set.
_MATCH_PC = -1


def _holds(at, multiline, before, ch, last):
    """Whether the assertion ``at`` holds between ``before`` and ``ch``."""
    end = ch is None
    if at is _c.AT_BEGINNING_STRING:
        return before == _START
    if at is _c.AT_BEGINNING or at is _c.AT_BEGINNING_LINE:
        return before == _START or (multiline and before == _NEWLINE)
    if at is _c.AT_END_STRING:
        return end
    if at is _c.AT_END or at is _c.AT_END_LINE:
        # $: the end, or a newline that ends the text (or any newline
        # with MULTILINE), as Python's re.
        return end or (ch == "\n" and (last or multiline))
    word_before = before == _WORD
    word_after = not end and _kind(ch) == _WORD
    if at is _c.AT_BOUNDARY:
        return word_before != word_after
    if at is _c.AT_NON_BOUNDARY:
        return word_before == word_after
    raise PatternError("assertion %s is not supported" % at)


def _literal(code, flags):
    if flags & _IGNORECASE:
        folded = _folds(code)
        return lambda c: bool(_folds(c) & folded)
    return lambda c: c == code


def _folds(code):
    ch = chr(code)
    return {code, ord(ch.lower()[0]), ord(ch.upper()[0])}


def _charset(items, flags):
    negate = False
    tests = []
    for op, av in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            tests.append(lambda c, x=av: c == x)
        elif op is _c.RANGE:
            tests.append(lambda c, lo=av[0], hi=av[1]: lo <= c <= hi)
        elif op is _c.CATEGORY:
            tests.append(_category(av, flags))
        else:
            raise PatternError("%s in a character set is not supported" % _describe(op))
    ignore = bool(flags & _IGNORECASE)

    def test(code):
        codes = _folds(code) if ignore else (code,)
        found = any(t(c) for t in tests for c in codes)
        return found != negate
    return test


def _category(category, flags):
    ascii_only = bool(flags & _ASCII)

    def word(c):
        ch = chr(c)
        return (ch.isalnum() or ch == "_") and (c < 128 or not ascii_only)

    def digit(c):
        return chr(c).isdecimal() and (c < 128 or not ascii_only)

    def space(c):
        return chr(c).isspace() and (c < 128 or not ascii_only)
    tests = {_c.CATEGORY_WORD: word, _c.CATEGORY_DIGIT: digit, _c.CATEGORY_SPACE: space}
    negated = {_c.CATEGORY_NOT_WORD: word, _c.CATEGORY_NOT_DIGIT: digit,
               _c.CATEGORY_NOT_SPACE: space}
    if category in tests:
        return tests[category]
    if category in negated:
        base = negated[category]
        return lambda c: not base(c)
    raise PatternError("character class %s is not supported" % category)


_NAMES = {"GROUPREF": "a backreference", "GROUPREF_EXISTS": "a conditional group",
          "ASSERT": "a lookahead or lookbehind", "ASSERT_NOT": "a lookahead or lookbehind",
          "ATOMIC_GROUP": "an atomic group", "POSSESSIVE_REPEAT": "a possessive repeat"}


def _describe(op):
    return _NAMES.get(str(op), str(op).lower())

