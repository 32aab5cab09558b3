"""Limits of tumbler's own process: as many open files as it may have.

The Linux backend keeps one fd per target thread (``linux/threads.py``), so
a run of a program with thousands of threads needs more than the usual
soft limit of 1,024.
"""

import resource


def raise_file_limit():
    """Raise the soft limit on open files to the hard one (a no-op where
    they are equal or the change is refused)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
