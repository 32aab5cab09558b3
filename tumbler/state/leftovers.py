"""What tumblers that are gone left, put back: every state file (or those
of some PIDs), then what they created (cgroups, processor sets) once no
state file of theirs is left, then what no state file names.

Shared by ``tumbler restore`` (commands/restore.py) and the service, which
puts back what a killed service or tumbler left before it starts
(commands/service.py); each state file is restored by restore.py.  Lines
for the user: ``say`` (stdout: what was restored) and ``errors.tell``
(stderr: what could not be).
"""

import os

from ..errors import TumblerError, tell
from ..platform.base import PlatformError
from .paths import StateError, checked_dir, state_dir
from .restore import remove_resources_of, restore_state
from .store import Lock, list_states, read_state


def restore_left(backend, pids=(), directory=None, say=print):
    """Restore state files (all, or of ``pids``) through ``backend``;
    returns whether anything failed."""
    # $TUMBLER_STATE_DIR is honoured only where it passes the checks every
    # state directory does (tumbler.safefile): restore moves threads on
    # what the files there say.
    directory = checked_dir(directory or state_dir())
    files = []
    for pid in pids or [None]:
        files += list_states(directory, pid)
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
        say(lines[0])
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
            say("removed %d %s left by tumbler %d" % (
                len(removed), "cgroups" if kind == "cpuset" else "resources", owner_pid))
    if not pids:
        done, ok = _remove_orphans(backend, still_on_disk | set(finished), say)
        done_anything |= done
        failed |= not ok
    if not done_anything and not failed:
        if pids:
            say("nothing to restore for process%s %s" % (
                "es" if len(pids) > 1 else "", ", ".join(map(str, pids))))
        else:
            say("nothing to restore")
    return failed


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


def _remove_orphans(backend, known_owners, say):
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
            say("removed %d %s left by tumbler %d" % (len(removed), removed[0][0], owner))
    return done, ok
