"""Crash-safe state: what tumbler changed, on disk before it changes it.

A tumbler that is killed by SIGKILL, the OOM killer or a crash cannot put
threads back itself.  So before the first change of a thread its original
placement is written to a state file, one per managed process, and
``tumbler restore`` (``tumbler.commands.restore``) puts back whatever a dead
tumbler left.

Modules: paths.py (the directory and atomic writes: all ``exec`` needs
before its command starts), store.py (locks and state files), journal.py
(what a running tumbler writes), restore.py (what a dead one's files are
put back from), leftovers.py (every state file dead tumblers left, then
what they created: ``tumbler restore`` and the service's start).
Imports the platform layer (to put threads back) and the leaves only.

Where: ``/run/tumbler`` for root (``/var/run/tumbler`` on illumos), ``$XDG_RUNTIME_DIR/tumbler`` otherwise
(``/tmp/tumbler-UID`` if that is unset, or ``~/.local/state/tumbler`` if
another user has taken that name or that directory exists:
paths.fallback_dir); ``$TUMBLER_STATE_DIR`` overrides all of them.  The
directory is created mode 0700 and must belong to the user.

Files, for a target process PID whose start-time token is START (the pair
survives PID reuse)::

    PID-START.lock   flock(2)ed by the tumbler managing the process; holds its PID
    PID-START.json   the state, replaced atomically (temp file, rename)
    PID-START.masks  the log: records, drops and the masks tumbler set, appended

The state only has to survive the tumbler, not the machine: after a reboot
every thread it recorded is gone.  So files are not fsync(2)ed (that costs
milliseconds per write where /run is on disk); the boot id in each file
makes ``tumbler restore`` discard state written before a reboot, whose
PIDs, TIDs and start times may belong to other processes now.

The lock is the liveness test: the kernel drops an flock when its holder
dies, however it dies, so a lock that can be taken belongs to no running
tumbler, and its state file (if any) is stale.  A second tumbler on a
process that a running one manages is refused (exit 1, naming the other's
PID).  A tumbler that finds a stale state file for its target restores it
first, before it looks at the target's threads: otherwise it would take the
placements the dead tumbler left for the originals.

The state file (JSON)::

    {"version": 1, "boot": "0c5f...",
     "tumbler": {"pid": 4711, "start": 123456},
     "platform": "linux", "binder": "affinity",
     "target": {"pid": 1234, "start": 120000, "name": "app", "allowed": [0, 1, 2, 3]},
     "domains": [[0, 1], [2, 3]],
     "resources": {"cgroups": ["/sys/fs/cgroup/cpuset/tumbler.4711", ...],
                   "subtree_control": [...]},   # cgroup v2: dirs given +cpuset
     "masks": [[0, 1], [2, 3], [1]],            # every mask tumbler set
     "threads": [{"tid": 1235, "start": 120001, "binder": "affinity",
                  "saved": {"cpus": [0, 1, 2, 3]},
                  "set": [[0, 1], [1]]},         # the last masks it set
                 {"pid": 1300, "tid": 1300, ...}, ...]}   # a child's thread

A thread's record reaches the disk before the thread is first changed, as
one line appended to the log (``r`` and the record as JSON; one write(2)
per ``batch()``), not a rewrite of the state file: what is written follows
what changes, not how many threads are recorded (issue 47: the file of
8,000 threads is 667 KB).  A dropped record (the thread was restored, or
exited) is a line ``d PID TID`` appended with the next line.  The state
file is rewritten from what tumbler holds -- a compaction -- once the log
is as long as the file (and LOG_COMPACT_MIN_BYTES), and the log is
emptied after; ``tumbler restore`` replays the log over the file in order
(a record line sets that thread's record, a drop line removes it), so a
tumbler killed at any moment, between the rewrite and the emptying too,
leaves files that restore to the same records.  An older tumbler's
restore passes over the record lines (not mask lines to it): the threads
recorded only there are still put back, by the masks logged, to the
target's CPUs (``Binder.leftover_placement``).  A record with a ``pid`` is a
thread of a child process born of a thread tumbler had bound: it inherited
tumbler's mask, and is tumbler's to put back (``pid`` defaults to the
target's).

What tumbler set, not only what it found, is on disk before it is set, so
``tumbler restore`` can tell tumbler's masks from an admin's later change:
before a round's binds, one line per thread (``PID TID START CPULIST``) is
appended to the ``.masks`` log in one write(2), and after them a line
``.`` -- a few bytes, not a rewrite of the state file, as speed balancing
re-pins threads every 20 ms.  A thread's mask is then the last mask logged
for it before a ``.`` line, or one logged after the last ``.`` (killed
during the binds); anything else was set by someone else and is left
alone.  Threads tumbler never saw (born of a
bound thread after the last round: they inherit its mask, on Linux and on
illumos alike) are put back when their mask is one tumbler set.  Each
rewrite of the state file carries the logged masks (``masks``, ``set``).
Dropping a record is only remembered and logged with the next line: a
stale record restores a thread to where it already is.  Records of
threads that exited are pruned at a compaction when the file has grown to
twice the threads alive at the last pruning, so thread churn cannot grow
it without bound.
"""

#: name -> submodule, loaded on first use: ``tumbler exec`` checks the state
#: directory (``store``) before the command starts and needs the journal
#: only after (commands/run.py).
_EXPORTS = {"Journal": "journal", "RestoreReport": "restore",
            "remove_resources_of": "restore", "restore_state": "restore",
            "STATE_VERSION": "store", "Busy": "store", "Lock": "store",
            "StateError": "paths", "StateFile": "store", "list_states": "store",
            "read_state": "store", "state_dir": "paths", "checked_dir": "paths",
            "write_json": "paths"}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    # __import__, not importlib: importing importlib (and its warnings)
    # would add ~1 ms to the start of every ``tumbler exec``.
    module = __import__(__name__ + "." + _EXPORTS[name], fromlist=[name])
    return getattr(module, name)
