"""JSON that comes from outside this process, parsed within limits.

What tumbler reads as JSON -- a request on the control socket, a state
file ``tumbler restore`` reads as root, a ``--log`` file to plot, a run's
summary, bpftrace's output -- may have been written by someone else, or
by no one sane.  Python's ``json`` recurses once per level of nesting:
``"[" * 4000`` raises RecursionError (not the ValueError callers catch),
and a top level that is not an object breaks whoever indexes it.  So
``loads`` checks the size and the nesting depth before parsing (outside
strings: a process named ``[[[[`` in a state file is no nesting), and
raises one exception, BadJSON (a ValueError), whose message says what was
wrong.  NaN and Infinity are read as json reads them (a run's summary may
hold a NaN): a reader that computes with a number checks it.
"""

import itertools

#: Levels of nesting a document may have.  The deepest tumbler writes is a
#: state file's, 5 (object, "threads" list, record, "set" list, mask);
#: Python's json decoder fails near 1,000 (the recursion limit), and what
#: reads the data walks it again: 32 keeps far from both
#: (tests/system/test_hostile_json.py checks the two bounds).
MAX_DEPTH = 32

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(_BRACKETS)))
#: +1 for an opening bracket, -1 for a closing one (bytes.translate keeps
#: only brackets; each byte indexes this table).
_DEPTH_STEP = [0] * 256
for _byte in b"[{":
    _DEPTH_STEP[_byte] = 1
for _byte in b"]}":
    _DEPTH_STEP[_byte] = -1
_strings = None


class BadJSON(ValueError):
    """Data that is not JSON tumbler will take; the message says why."""


def _string_pattern():
    global _strings
    if _strings is None:
        import re       # here: ~1 ms of import that most runs never need
        # A string runs to its closing quote or, unterminated, to the end:
        # always a match where it starts, never a retry from each quote
        # inside it (quadratic: 64 KiB of \" took 12.5 s).
        _strings = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.S)
    return _strings


def depth_of(data):
    """How deeply the JSON text ``data`` (bytes) nests, counted outside
    its strings."""
    brackets = _string_pattern().sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def loads(data, max_bytes=None, max_depth=MAX_DEPTH):
    """The value of the JSON text ``data`` (bytes or str); BadJSON if it
    is longer than ``max_bytes`` (None: data already read whole, as a
    line from a pipe), nested deeper than ``max_depth``, not UTF-8 or not
    valid JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if max_bytes is not None and len(raw) > max_bytes:
        raise BadJSON("longer than %d bytes" % max_bytes)
    if depth_of(raw) > max_depth:
        raise BadJSON("nested deeper than %d levels" % max_depth)
    import json
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadJSON("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadJSON("not valid JSON (line %d, column %d: %s)"
                      % (exc.lineno, exc.colno, exc.msg)) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        # ValueError: an integer of more digits than int() converts (4,300).
        raise BadJSON("cannot read a value (%s)" % (str(exc).split(":")[0]
                                                    or type(exc).__name__)) from None


def loads_object(data, max_bytes=None, max_depth=MAX_DEPTH):
    """``loads``, where the top level must be an object (a dict)."""
    value = loads(data, max_bytes, max_depth)
    if not isinstance(value, dict):
        raise BadJSON("%s, not an object" % _KINDS[type(value)])
    return value


_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
          bool: "true or false", type(None): "null"}
