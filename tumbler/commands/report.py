"""Errors reach the user here, once: one line on stderr, the documented
exit status (tumbler(8), EXIT STATUS).  Shared by the click command line
(main.py) and exec's quick path (quick.py)."""

import sys

from ..errors import EXIT_FAILURE, TumblerError, tell


def die(exc):
    """Print a TumblerError or PlatformError as one line and exit."""
    from ..platform.base import AccessDenied
    if isinstance(exc, TumblerError):
        message, status = str(exc), exc.status
    elif isinstance(exc, AccessDenied):
        message, status = "permission denied: %s (needs %s)" % (exc, exc.privilege), EXIT_FAILURE
    else:
        message, status = str(exc), EXIT_FAILURE
    tell(message)
    sys.exit(status)
