"""Start a command held at a gate, so that it can be traced from its first
instruction (``--probe`` of ``tumbler exec`` and ``compare``).

A tracer (bpftrace, dtrace -p) attaches to a PID that exists, and takes up to
about a second to do so: a command started plainly runs that long unprobed,
and a short one may be over before the probes are in.  So the command is
started as::

    sh -c 'read _ < "$0"; exec "$@"' FIFO CMD [ARGS...]

The shell blocks reading a FIFO; the tracer attaches to its PID; ``open()``
then writes one line into the FIFO and the shell execs CMD in the same
process, so the PID the tracer follows is CMD's from its first instruction
on.  A FIFO and not an inherited pipe: ``tumbler exec`` closes the
descriptors it does not know of, and compare's tumbler-run policies start
CMD through it.  ``check_command`` resolves CMD first, so that a missing
command is still reported by tumbler (127/126), not by the shell.
"""

import errno
import os
import shutil
import time

from ..safefile import private_tempdir

#: The gate: waits for one line on the FIFO ($0), then becomes CMD.
GATE_SCRIPT = 'read _ < "$0"; exec "$@"'

#: How often ``open`` tries again while the shell has not opened the FIFO.
_RETRY_S = 0.002


def check_command(name):
    """None if ``name`` can be executed, else (status, why): 127 not found,
    126 found but not executable -- what exec would say."""
    if "/" not in name:
        return None if shutil.which(name) else (127, "command not found")
    if not os.path.exists(name):
        return 127, os.strerror(errno.ENOENT)
    if os.path.isdir(name) or not os.access(name, os.X_OK):
        return 126, os.strerror(errno.EACCES)
    return None


class Gate:
    """One FIFO in a private directory; ``argv(command)`` wraps a command
    in the gate, ``open(alive)`` lets it go, ``close()`` removes the FIFO.

    ``open`` is ``connect`` then ``release``: several gates are connected
    first, then released one right after the other, so that programs held
    at them start at (nearly) the same instant (``compare --together``)."""

    def __init__(self):
        self._dir = private_tempdir("tumbler-gate-")
        self.path = os.path.join(self._dir, "gate")
        os.mkfifo(self.path, 0o600)
        self.opened = False
        self.released = None        # monotonic time of the release, once opened
        self._fd = None             # the FIFO's write end, once connected

    def argv(self, command):
        return ["/bin/sh", "-c", GATE_SCRIPT, self.path, *command]

    def open(self, alive):
        """Let the command go.  Waits for the shell to open the FIFO while
        ``alive()`` is true; returns whether the line was written (False:
        the gate's process ended first).  ``released``: the monotonic time
        just before the line was written."""
        if self.opened:
            return True
        if not self.connect(alive):
            return False
        self.release()
        return True

    def connect(self, alive):
        """Open the FIFO's write end once the shell waits on it, while
        ``alive()`` is true; whether it was opened.  The write end stays
        open until ``release`` or ``close``: a shell whose FIFO is closed
        unwritten reads EOF and runs the command all the same."""
        while self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:    # ENXIO: no reader yet
                    raise
                if not alive():
                    return False
                time.sleep(_RETRY_S)
        return True

    def release(self):
        """Write the line (after ``connect``); returns ``released``."""
        fd, self._fd = self._fd, None
        try:
            # Read before the write: once written, CMD may run (and
            # start its own clocks) before this thread is back.
            self.released = time.monotonic()
            os.write(fd, b"\n")
        finally:
            os.close(fd)
        self.opened = True
        return self.released

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
