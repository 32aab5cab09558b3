"""The service's log (service/loop.py): one line per event that matters,
with the syslog priority prefix journald reads (``<6>`` info, ``<4>``
warning, ``<3>`` error) when stderr is the journal (``$JOURNAL_STREAM``)
or not a terminal; a steady machine logs nothing."""

import os
import sys

from ..escape import one_line

INFO, WARNING, ERROR = 6, 4, 3


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
