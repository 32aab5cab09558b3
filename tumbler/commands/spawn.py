"""Start ``exec``'s command: ``posix_spawnp(3)`` and ``waitpid(2)``.

Not ``subprocess``: its import alone costs as much as the spawn, and
``tumbler exec`` starts the command before anything it can do without
(commands/run.py, ``run_exec``).  Python opens its own descriptors
non-inheritable, so the command gets stdin, stdout and stderr only, as
``subprocess``' ``close_fds`` would leave it; and the signals Python
ignores for itself (SIGPIPE, SIGXFSZ) are set back to their default in the
command, as ``subprocess``' ``restore_signals`` does -- else ``tumbler exec
-- yes | head`` would never end (``yes`` would get EPIPE, not SIGPIPE).
Signals tumbler handles are reset by the exec itself; one ignored by
whoever started tumbler (``nohup``) stays ignored, as a shell leaves it.
"""

import _signal
import os

from ..errors import TumblerError

#: Signals Python ignores at start (Python/pylifecycle.c), default again
#: in the command.
PYTHON_IGNORES = tuple(getattr(_signal, name) for name in ("SIGPIPE", "SIGXFSZ")
                       if hasattr(_signal, name))


class Command:
    """A started command: ``pid``, ``poll()``, ``wait()`` and ``returncode``
    (negative -N if killed by signal N), as ``subprocess.Popen`` has them."""

    def __init__(self, argv):
        try:
            self.pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=PYTHON_IGNORES)
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

    def reap_others(self):
        """Reap tumbler's other children that exited -- orphans of the
        command's tree, re-parented to tumbler (it is their subreaper:
        ``keep_orphans``) -- once balancing, which reaps them, is over
        (--duration passed, or an error) and the command runs on: else
        each stays a zombie until tumbler exits.  The command's own
        status is left to ``poll``."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.pid:
                return
            try:
                os.waitpid(info.si_pid, os.WNOHANG)     # a zombie: at once
            except ChildProcessError:
                return

    def _reap(self, flags):
        pid, status = os.waitpid(self.pid, flags)
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)
