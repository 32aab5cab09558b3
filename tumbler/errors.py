"""Exceptions that reach the user, each with its documented exit status.

Backends raise the platform exceptions in ``tumbler.platform.base``; the CLI
maps every one of them, once, to a line on stderr and an exit status.
"""

EXIT_OK = 0
EXIT_FAILURE = 1      # runtime failure: unknown PID, missing privilege
EXIT_USAGE = 2        # bad command line, bad CPU list, bad config


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
