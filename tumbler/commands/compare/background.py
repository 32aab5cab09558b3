"""``compare --background``: commands started before every run and killed
after it, never balanced, beside every policy alike."""

import os
import shlex
import signal
import subprocess
import sys
import tempfile

from ...errors import exit_status
from .runs import replay


class Background:
    """The ``--background`` commands of one run: started before it, killed
    (SIGKILL, with whatever they started in their session) and reaped
    after it.  Their stdout goes to /dev/null (compare's own carries the
    report); their stderr is shown only when one ends before the run does.
    They are compare's children, never tumbler's: no tumbler run balances
    them."""

    def __init__(self, commands):
        self.commands = [list(c) for c in commands]
        self._running = []          # (command, Popen, stderr file)

    def start(self):
        """Start every command: None, or (status, why) when one cannot be
        started (those already started are stopped again)."""
        for command in self.commands:
            err = tempfile.TemporaryFile()
            try:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=err,
                                           start_new_session=True)
            except OSError as exc:
                err.close()
                self.stop()
                return (127 if isinstance(exc, FileNotFoundError) else 126,
                        "background command `%s` cannot be started: %s"
                        % (shlex.join(command), exc.strerror))
            self._running.append((command, process, err))
        return None

    def stop(self):
        """Kill and reap every command; return why the run fails (one had
        ended before) or None."""
        failure = None
        if not self._running:
            return None
        # Orphaned by the kill, what a command started is compare's own
        # child (the subreaper's), so it can be waited for.
        _adopt_orphans(True)
        try:
            for command, process, err in self._running:
                status = _ended(process)
                if status is not None and failure is None:
                    failure = ("background command `%s` ended during the run (exit status %d)"
                               % (shlex.join(command), exit_status(status)))
                    replay(err)
                _kill_group(process)
                err.close()
        finally:
            _adopt_orphans(False)
            self._running = []
        return failure


def _kill_group(process):
    """SIGKILL ``process``'s group and wait until every member is gone."""
    try:
        # Not reaped yet, so its PID (its session's process group) cannot
        # have been reused.
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    # SIGKILL is delivered, not done: what the command started may still
    # run for a moment.  Orphaned, those are compare's children now
    # (_adopt_orphans): wait for every one of the group.
    while True:
        try:
            os.waitpid(-process.pid, 0)
        except ChildProcessError:
            break


def _adopt_orphans(adopt):
    """Linux: make compare the subreaper of what it starts (``adopt``) while
    ``Background.stop`` kills the background commands, so their orphans
    can be waited for; then no longer.  Elsewhere, or if refused, they are
    only killed."""
    if sys.platform.startswith("linux"):
        from ...platform.linux.procfs import set_child_subreaper
        set_child_subreaper(adopt)


def _ended(process):
    """The raw return code of ``process`` (negative: the signal) if it has
    ended, else None -- without reaping it."""
    if process.returncode is not None:
        return process.returncode
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return process.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
