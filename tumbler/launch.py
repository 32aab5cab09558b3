"""The ``tumbler`` command: raise the priority, then import the rest.

Importing the CLI costs ~0.15 s of CPU; on a machine overloaded by the
program tumbler is to balance, at nice 0, that is seconds to minutes of
wall time (``platform/priority.py``).  So the priority is raised first.
"""


def entry_point():
    from .platform.priority import raise_priority
    raise_priority()
    from .commands.main import entry_point as cli_entry_point
    cli_entry_point()
