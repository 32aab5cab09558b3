"""A balancing run's targets: which processes it may take (the CPUs they
may use, what its domains are cut down to: platform.base.allowed_union).

Looking at a process (stat, probe) needs it to exist and be a process, not
one of its threads.  Managing it (a balancing run) also refuses tumbler
itself, PID 1 and kernel threads unless forced: moving those is rarely what
an admin meant and can hurt the whole machine.  These are balancing's
rules (do no harm), so they live here; ``stat`` and ``probe`` import them
downwards, as they look at the processes a run would take.
"""

import os

from ..errors import EXIT_FAILURE, TumblerError, UsageError
from ..platform.base import NoSuchProcess


def check_process(backend, pid, manage=False, force=False):
    """ProcessInfo of ``pid``, or a one-line error (exit 1 or 2)."""
    if pid <= 0:
        raise UsageError("bad PID %d" % pid)
    if manage and pid == os.getpid():
        raise UsageError("refusing to balance tumbler itself (PID %d)" % pid)
    try:
        info = backend.process(pid)
    except NoSuchProcess:
        raise TumblerError("no such process: %d" % pid, EXIT_FAILURE) from None
    if info.tgid != pid:
        raise UsageError("%d is a thread of process %d, not a process: give -p %d"
                         % (pid, info.tgid, info.tgid))
    if info.zombie:
        raise TumblerError("process %d has exited (a zombie)" % pid, EXIT_FAILURE)
    if manage and not force:
        if info.is_kernel:
            raise UsageError("refusing kernel thread %d (%s); use --force to override"
                             % (pid, info.name))
        if pid == 1:
            raise UsageError("refusing PID 1 (%s), the init process; use --force to override"
                             % info.name)
    return info
