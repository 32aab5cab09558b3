"""Text any user controls, made safe to print: process and thread names,
command lines.

Any user can name a thread ``x\\n<3>FORGED`` (``/proc/self/comm``) or put
terminal escape sequences in a command line.  Printed raw, such a name
starts a forged journal entry (journald reads a ``<N>`` priority at the
start of each stderr line) or rewrites an admin's terminal.  The
platform backends pass every name and command line through
``printable`` as they read them, so nothing above them -- logs,
``status``, ``stat``, summaries, state files -- ever holds a control
character from outside.  Formats with quoting of their own (JSON,
Prometheus labels, SVG) still escape their quotes themselves.
"""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def printable(text):
    """``text`` with control characters (C0, DEL, C1, and anything else
    ``str.isprintable`` refuses but a plain space) written as ``\\n``,
    ``\\t``, ``\\xNN``, ``\\uNNNN``, and backslashes doubled so that an
    escape cannot be forged: one line, nothing a terminal acts on."""
    if text.isprintable() and "\\" not in text:
        return text                 # the common case: one C-level scan
    out = []
    for ch in text:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append("\\u%04x" % ord(ch) if ord(ch) < 0x10000 else "\\U%08x" % ord(ch))
    return "".join(out)


#: C0 controls, DEL and C1 controls, as ``\xNN``.
_CONTROLS = {code: "\\x%02x" % code for code in list(range(0x20)) + list(range(0x7f, 0xa0))}
_CONTROLS.update({ord(ch): text for ch, text in _NAMED.items() if ch != "\\"})


def one_line(text):
    """``text`` with its control characters escaped (backslashes kept):
    for a whole message of tumbler's own that may quote something from
    outside (an OS error, a path), so that it stays one line."""
    return text.translate(_CONTROLS)
