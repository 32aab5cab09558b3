"""What reaches the user: exceptions, each with its documented exit
status, and the lines tumbler says on stderr as it goes on.

Backends raise the platform exceptions in ``tumbler.platform.base``; the CLI
maps every one of them, once, to a line on stderr and an exit status.
``tell`` and ``warn`` print the lines tumbler says on stderr as it goes on
(``tumbler: ...``, ``tumbler: warning: ...``), for every layer: this module
is loaded on every path, so they cost ``tumbler exec`` no import.
"""

import sys

EXIT_OK = 0
EXIT_FAILURE = 1      # runtime failure: unknown PID, missing privilege
EXIT_USAGE = 2        # bad command line, bad CPU list, bad config


def exit_status(returncode):
    """A child's return code as a shell reports it: 128 + N for a process
    killed by signal N (Popen's and spawn.Command's ``returncode`` is -N),
    so that ``exec`` and ``compare`` pass on what the command did."""
    return 128 - returncode if returncode < 0 else returncode


def tell(message):
    """``tumbler: MESSAGE`` on stderr: what a run says as it goes on."""
    print("tumbler: " + message, file=sys.stderr)


def warn(message):
    """``tumbler: warning: MESSAGE`` on stderr: something went wrong and
    tumbler goes on."""
    print("tumbler: warning: " + message, file=sys.stderr)


class TumblerError(Exception):
    """An error reported as one line on stderr; ``status`` is the exit code."""

    status = EXIT_FAILURE

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status


class UsageError(TumblerError):
    """Bad input from the user: options, CPU lists, config files."""

    status = EXIT_USAGE
