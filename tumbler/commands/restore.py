"""``tumbler restore [-p PID ... | --all]``: undo what a killed tumbler left.

A tumbler that exits in any ordinary way (end of ``--duration``, the
targets exit, SIGINT/SIGTERM/SIGHUP/SIGQUIT, an error) restores every thread
itself.  One killed by SIGKILL, the OOM killer or a crash cannot; its state
files (``tumbler.state``) say what it changed.  For each state file this
command, holding the file's lock:

* restores every recorded thread that is still alive with the same start
  time (threads that exited, or whose TID was reused, are skipped), and
  threads created later that inherited a placement of the dead tumbler;
* removes the cgroups (or processor sets) that tumbler created, once no
  other state file of the same tumbler is left, and on cgroup v2 disables
  the cpuset controller where it had enabled it (unless another cgroup
  relies on it now);
* deletes the state file -- kept, with a message, if anything failed.

State owned by a running tumbler (its lock is held) is never touched: that
tumbler restores its threads when it stops.  With ``--all`` (the default)
``tumbler.<pid>`` cgroups of tumblers that are gone are removed even when no
state file names them.

Output: one line on stdout per process restored (``nothing to restore`` if
there was nothing); errors on stderr.  Exit 0, or 1 if something could not
be restored or ``-p PID`` names a process a running tumbler manages.
"""

import sys

import click

from ..errors import EXIT_FAILURE, UsageError
from ..platform import open_backend
from ..state.leftovers import restore_left
from .options import examples, pid_option


@click.command("restore", short_help="Put back what a killed tumbler left behind.",
               epilog=examples("tumbler restore          # all that tumblers now gone left",
                               "tumbler restore -p 1234  # what was left of process 1234"))
@pid_option("Restore what was left of this process; repeat for several.")
@click.option("--all", "restore_all", is_flag=True,
              help="Restore everything tumblers that are gone left (default: yes, "
                   "unless -p is given).")
@click.pass_context
def restore_command(ctx, pids, restore_all):
    """Put back threads and remove cgroups a killed tumbler left behind."""
    if pids and restore_all:
        raise UsageError("restore: -p/--pid and --all exclude each other")
    for pid in pids:
        if pid <= 0:
            raise UsageError("bad PID %d" % pid)
    platform = (ctx.obj or {}).get("platform")
    status = run_restore(list(pids), platform)
    sys.exit(status)


def run_restore(pids, platform=None, directory=None):
    """Restore state files (all, or of ``pids``); return the exit status."""
    failed = restore_left(open_backend(platform, "/"), pids, directory, say=click.echo)
    return EXIT_FAILURE if failed else 0
