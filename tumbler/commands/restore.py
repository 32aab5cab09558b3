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

import os
import sys

import click

from ..errors import EXIT_FAILURE, TumblerError, UsageError, tell
from ..platform import open_backend
from ..platform.base import PlatformError
from ..state import (Lock, StateError, checked_dir, list_states, read_state,
                    remove_resources_of, restore_state, state_dir)
from .options import pid_option


@click.command("restore")
@pid_option("Restore what was left of this process; repeat for several.")
@click.option("--all", "restore_all", is_flag=True,
              help="Restore everything tumblers that are gone left (the default).")
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


def _say(line):
    click.echo(line)


def run_restore(pids, platform=None, directory=None):
    """Restore state files (all, or of ``pids``); return the exit status."""
    # $TUMBLER_STATE_DIR is honoured only where it passes the checks every
    # state directory does (tumbler.safefile): restore moves threads on
    # what the files there say.
    directory = checked_dir(directory or state_dir())
    files = []
    for pid in pids or [None]:
        files += list_states(directory, pid)
    backend = open_backend(platform, "/")
    failed = False
    done_anything = False
    finished = {}       # owner key -> (kind, resources, owner pid) of restored files
    blocked = set()     # owner keys with a state file left on disk
    for state_file in files:
        try:
            data = read_state(state_file.path)
        except FileNotFoundError:
            continue                # restored meanwhile by someone else
        except StateError as exc:
            tell(str(exc))
            failed = True
            continue
        owner = data["tumbler"]
        key = (owner.get("pid"), owner.get("start"))
        lock = Lock(state_file.directory, state_file.pid, state_file.start)
        holder = lock.acquire()
        if holder is not None:
            blocked.add(key)
            message = ("process %d is managed by running tumbler PID %d; it restores its "
                       "threads when it stops" % (state_file.pid, holder or owner.get("pid")))
            if pids:
                tell(message)
                failed = True
            else:
                tell(message + ": left alone")
            continue
        try:
            report = restore_state(state_file, backend, locked=True, remove_resources=False)
        except (StateError, PlatformError) as exc:
            tell(str(exc))
            failed = True
            blocked.add(key)
            continue
        finally:
            lock.release()
        done_anything = True
        lines = report.lines()
        _say(lines[0])
        for line in lines[1:]:
            tell(line)
        if report.failed:
            failed = True
            blocked.add(key)
            tell("state of process %d kept in %s; fix the cause and run tumbler "
                 "restore again" % (state_file.pid, state_file.path))
        entry = finished.setdefault(key, (data.get("binder"), {}, owner.get("pid")))
        _merge_resources(entry[1], data.get("resources"))

    # Resources go once the last state file of their tumbler is gone.
    still_on_disk = _owners_on_disk(directory)
    for key, (kind, resources, owner_pid) in finished.items():
        if key in blocked or key in still_on_disk or kind is None:
            continue
        removed, ok = _remove(backend, kind, resources, owner_pid)
        failed |= not ok
        if removed:
            done_anything = True
            _say("removed %d %s left by tumbler %d" % (
                len(removed), "cgroups" if kind == "cpuset" else "resources", owner_pid))
    if not pids:
        done, ok = _remove_orphans(backend, still_on_disk | set(finished))
        done_anything |= done
        failed |= not ok
    if not done_anything and not failed:
        if pids:
            _say("nothing to restore for process%s %s" % (
                "es" if len(pids) > 1 else "", ", ".join(map(str, pids))))
        else:
            _say("nothing to restore")
    return EXIT_FAILURE if failed else 0


def _merge_resources(into, resources):
    """Add one state file's resources to its tumbler's: lists joined, and
    mappings (what the binder recorded per resource, e.g. a processor set's
    CPUs and creation time) merged, so the binder's checks see them."""
    for name, items in (resources or {}).items():
        if isinstance(items, list):
            known = into.setdefault(name, [])
            known += [item for item in items if item not in known]
        elif isinstance(items, dict):
            into.setdefault(name, {}).update(items)


def _owners_on_disk(directory):
    owners = set()
    for state_file in list_states(directory):
        try:
            owner = read_state(state_file.path)["tumbler"]
        except (OSError, StateError):
            continue
        owners.add((owner.get("pid"), owner.get("start")))
    return owners


def _remove(backend, kind, resources, owner_pid):
    try:
        binder = backend.binder(kind)
        return remove_resources_of(binder, resources, owner_pid), True
    except (PlatformError, TumblerError) as exc:
        tell("could not remove what tumbler %d created: %s" % (owner_pid, exc))
        return [], False


def _remove_orphans(backend, known_owners):
    """What tumblers that are gone created and no state file names (one
    killed before it wrote any): ``Backend.remove_orphans``."""
    known_pids = {pid for pid, _ in known_owners} | {os.getpid()}
    done, ok = False, True
    for owner, removed, error in backend.remove_orphans(known_pids):
        if error:
            tell(error)
            ok = False
        if removed:
            done = True
            _say("removed %d %s left by tumbler %d" % (len(removed), removed[0][0], owner))
    return done, ok
