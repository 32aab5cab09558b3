"""The ``tumbler`` command: raise the priority, then import the rest.

Importing the CLI costs tens of ms of CPU; on a machine overloaded by the
program tumbler is to balance, at nice 0, that is seconds to minutes of
wall time (``platform/priority.py``).  So the priority is raised first --
except for ``exec``, whose command is not running yet: it starts at the
priority it was given, and tumbler raises its own right after
(``commands/run.py``, ``run_exec``).  ``--version`` answers before any
import, and an ``exec`` line takes the quick path (``commands/quick.py``)
when it can: the command starts before click is imported.
"""

import os
import sys


def entry_point():
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):
        from . import __version__
        print("tumbler, version %s" % __version__)
        return
    if "exec" in args:
        from .commands.quick import quick_exec
        status = quick_exec(args)
        if status is not None:
            # Everything tumbler changed is put back and its files are
            # closed: skip the interpreter's teardown (~10 ms of tearing
            # down modules, after the command has exited).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    else:
        from .platform.priority import raise_priority
        raise_priority()
    from .commands.main import entry_point as cli_entry_point
    cli_entry_point()
