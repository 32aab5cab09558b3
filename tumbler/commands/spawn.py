"""Start ``exec``'s command: ``posix_spawnp(3)`` and ``waitpid(2)``.

Not ``subprocess``: its import alone costs as much as the spawn, and
``tumbler exec`` starts the command before anything it can do without
(commands/run.py, ``run_exec``).  Python opens its own descriptors
non-inheritable, so the command gets stdin, stdout and stderr only, as
``subprocess``' ``close_fds`` would leave it.
"""

import os

from ..errors import TumblerError


class Command:
    """A started command: ``pid``, ``poll()``, ``wait()`` and ``returncode``
    (negative -N if killed by signal N), as ``subprocess.Popen`` has them."""

    def __init__(self, argv):
        try:
            self.pid = os.posix_spawnp(argv[0], argv, os.environ)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise TumblerError("%s: command not found" % argv[0], 127) from None
            raise TumblerError("%s: cannot execute: %s" % (argv[0], exc.strerror),
                               126) from None
        self.returncode = None

    def poll(self):
        """The status if the command has exited (reaping it), else None."""
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self):
        while self.returncode is None:
            self._reap(0)
        return self.returncode

    def _reap(self, flags):
        pid, status = os.waitpid(self.pid, flags)
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)
