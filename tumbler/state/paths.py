"""Where state files live, and writing them: what ``tumbler exec`` checks
before its command starts (commands/run.py), kept free of heavier imports
(see ``tumbler.state`` for the files themselves)."""

import os
import sys

from .. import safefile
from ..errors import EXIT_FAILURE, TumblerError
from ..safefile import UnsafePath, private_directory

ENV_STATE_DIR = "TUMBLER_STATE_DIR"


def run_dir(platform):
    """Where root's runtime files go: /run on Linux; illumos has /var/run
    (a tmpfs) and no /run."""
    return "/var/run" if platform.startswith("sunos") else "/run"


RUN_DIR = run_dir(sys.platform)


class StateError(TumblerError):
    """The state directory or a state file cannot be used."""

    status = EXIT_FAILURE


def state_dir():
    """The directory of state files for this user (see the module doc)."""
    override = os.environ.get(ENV_STATE_DIR)
    if override:
        return override
    if os.geteuid() == 0:
        return RUN_DIR + "/tumbler"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "tumbler")
    return fallback_dir()


#: Where a user without $XDG_RUNTIME_DIR keeps state: the same name in
#: /tmp every time, so ``tumbler restore`` finds it after a crash.
FALLBACK_FORMAT = "/tmp/tumbler-%d"


def home_state_dir():
    """``$XDG_STATE_HOME/tumbler`` (``~/.local/state/tumbler``), or None
    where the user has no home to name."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):         # unset, or relative: ignored (XDG)
        home = os.path.expanduser("~")
        if not os.path.isabs(home):     # no $HOME and no password entry
            return None
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "tumbler")


def fallback_dir():
    """The state directory of a user without $XDG_RUNTIME_DIR.

    ``/tmp/tumbler-UID`` is a name anyone can predict, and in /tmp anyone
    may create it first: a directory of another user's there would make
    every ``exec`` and ``-p`` of this user fail.  So a name another user
    has taken is passed over for ``home_state_dir()``, a directory only
    this user can write -- and once that exists it is used from then on,
    even where the name in /tmp is free again (its owner removed it), so
    that the state of one user is never split over two directories and
    ``tumbler restore`` looks where the last tumbler wrote.  Nothing is
    created here (``ensure_dir`` creates and checks what is returned): a
    name taken between this look and that mkdir fails that one run, and
    the next passes it over for good."""
    home = home_state_dir()
    if home is not None and os.path.lexists(home):
        return home
    path = FALLBACK_FORMAT % os.geteuid()
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return path                     # free: ensure_dir makes it
    if home is None or owner == os.geteuid():
        return path
    return home


def ensure_dir(path):
    """Create ``path`` (0700) if missing; refuse one another user could
    write, or one reached through a directory another user could change
    (tumbler.safefile: also what makes $TUMBLER_STATE_DIR safe to honour
    as root)."""
    try:
        directory = private_directory(path)
    except UnsafePath as exc:
        raise StateError("state directory: %s" % exc) from None
    except OSError as exc:
        raise StateError("cannot create state directory %s: %s"
                         % (path, exc.strerror)) from None
    # A state that cannot be written is no crash safety: find out now,
    # before anything is changed or a command started (a full file system
    # still lets a file be created, not written).  Through the directory
    # just checked: its path is not walked again.
    with directory:
        probe = ".probe.%d" % os.getpid()
        try:
            directory.write_atomic(probe, b"{}")
        except OSError as exc:
            raise StateError("cannot write in state directory %s: %s"
                             % (path, exc.strerror)) from None
        directory.unlink(probe)
    return path


def checked_dir(path):
    """``path``, an existing state directory, once it passes ensure_dir's
    checks (``tumbler restore`` reads what is there; it creates nothing);
    None if it does not exist."""
    try:
        private_directory(path, create=False).close()
    except FileNotFoundError:
        return None
    except UnsafePath as exc:
        raise StateError("state directory: %s" % exc) from None
    except OSError as exc:
        raise StateError("cannot open state directory %s: %s" % (path, exc.strerror)) from None
    return path


def write_json(path, data):
    """Replace ``path`` atomically: a reader sees the old file or the new one."""
    write_atomic(path, dumps(data).encode())


def dumps(data):
    """``json.dumps(data, separators=(",", ":"), sort_keys=True)``, the same
    text, for what a state file or ``--summary-json`` holds (dicts with
    string keys, lists, tuples, strings, ints, bools, None; finite
    floats).  Not ``json`` itself: its import (with ``re``) is ~4 ms of
    CPU, and every ``tumbler exec`` writes a state file while its command
    starts."""
    try:
        from _json import encode_basestring_ascii as quote
    except ImportError:                 # not CPython
        import json
        return json.dumps(data, separators=(",", ":"), sort_keys=True)
    parts = []
    _dump(data, parts.append, quote)
    return "".join(parts)


def _dump(value, put, quote):
    if value is None:
        put("null")
    elif value is True:
        put("true")
    elif value is False:
        put("false")
    elif isinstance(value, str):
        put(quote(value))
    elif isinstance(value, int):
        put(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("JSON here holds finite numbers only, not %r" % value)
        put(float.__repr__(value))
    elif isinstance(value, dict):
        put("{")
        for i, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise TypeError("JSON keys here are strings, not %r" % (key,))
            if i:
                put(",")
            put(quote(key) + ":")
            _dump(value[key], put, quote)
        put("}")
    elif isinstance(value, (list, tuple)):
        put("[")
        for i, item in enumerate(value):
            if i:
                put(",")
            _dump(item, put, quote)
        put("]")
    else:
        raise TypeError("%r cannot be written as JSON here" % (value,))


def write_atomic(path, payload):
    """Replace ``path`` with the bytes ``payload`` (a temporary made with
    O_EXCL, renamed: tumbler.safefile)."""
    try:
        safefile.write_atomic(path, payload, mode=0o600)
    except UnsafePath as exc:
        raise StateError(str(exc)) from None


def unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
