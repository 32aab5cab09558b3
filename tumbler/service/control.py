"""The service's control socket: a UNIX stream socket, mode 0600, speaking
JSON lines.  A client sends one request line and gets one reply line:

    {"cmd": "status"}    ->  {"version": ..., "pid": ..., "programs": [...]}

Only root (and the service's own user) may ask: the peer's credentials
(SO_PEERCRED) are checked, whatever the file's mode.  A connection is
given ``REQUEST_TIMEOUT_S`` (0.25 s) from being accepted to send its
request line and take its reply, however it trickles its bytes, and one
turn of the loop accepts clients for that long at most (those left wait
in the listen backlog for the next turn): clients, stuck or many, delay
the service's loop by half a second at most.

A request is one line of at most ``MAX_REQUEST`` (4096) bytes, nested at
most ``jsonlimits.MAX_DEPTH`` (32) levels, checked before it is parsed
(``"[" * 4000`` once made json recurse past Python's limit and stopped
the service).  Whatever fails in one request -- its JSON, or ``answer``
itself -- is an ``{"error": ...}`` reply and one warning in the log; the
service goes on serving.
"""

import json
import os
import socket
import stat
import struct
import time

from ..errors import EXIT_FAILURE, TumblerError
from ..escape import one_line
from ..jsonlimits import BadJSON, loads_object
from ..safefile import UnsafePath, private_directory

#: How long one client may take, request line and reply (the loop waits
#: with it); also how long one turn of the loop accepts clients.
REQUEST_TIMEOUT_S = 0.25
#: A request line longer than this is refused, and so is one nested
#: deeper than jsonlimits.MAX_DEPTH (a request is one flat object).
MAX_REQUEST = 4096
#: The longest reply a client takes.  A status holds at most 64 programs
#: (service.max_programs), each ~20 fields (program.py ``status``) and
#: four lists of one figure per domain: with 1,024 domains, ~40 bytes a
#: domain, ~2.7 MB in all; 16 MiB leaves room and still bounds what a
#: client buffers.
MAX_REPLY = 16 << 20


class ControlSocket:
    """The listening socket of a running service."""

    def __init__(self, path):
        self.path = path
        directory = os.path.dirname(path) or "."
        # Only root may change what is in the socket's directory: a stale
        # socket is removed there, and the path bound by name.  Created
        # (0700) if missing, through directories checked on the way, never
        # through a link another user planted (tumbler.safefile).
        try:
            with private_directory(directory) as checked:
                there = checked.entry(os.path.basename(path))
        except UnsafePath as exc:
            raise UnsafePath("control socket directory %s" % exc) from None
        except OSError as exc:
            raise TumblerError("cannot create %s: %s" % (directory, exc.strerror),
                               EXIT_FAILURE) from None
        # connect() says ECONNREFUSED for a file that is no socket, too: a
        # mistyped --socket must not remove a configuration file.
        if there is not None and not stat.S_ISSOCK(there.st_mode):
            raise TumblerError("%s exists and is not a socket; tumbler does not remove it"
                               % path, EXIT_FAILURE)
        _remove_stale(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)         # the socket is made 0600
        try:
            self.sock.bind(path)
        except OSError as exc:
            self.sock.close()
            raise TumblerError("cannot listen on %s: %s" % (path, exc.strerror),
                               EXIT_FAILURE) from None
        finally:
            os.umask(old_umask)
        self.sock.listen(8)
        self.sock.setblocking(False)

    def fileno(self):
        return self.sock.fileno()

    def serve(self, answer, warn=None):
        """Answer the waiting clients, for REQUEST_TIMEOUT_S at most (the
        module doc): ``answer(request dict)`` -> reply dict.  A request
        that fails (in ``answer`` too) gets an error reply and a line for
        ``warn(message)``; the next client is served all the same."""
        turn_ends = time.monotonic() + REQUEST_TIMEOUT_S
        while time.monotonic() < turn_ends:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with conn:
                deadline = time.monotonic() + REQUEST_TIMEOUT_S
                try:
                    reply = self._reply(conn, answer, deadline, warn)
                    _time_left(conn, deadline)
                    conn.sendall(reply)
                except (OSError, socket.timeout):
                    continue

    def _reply(self, conn, answer, deadline, warn):
        """The reply's bytes; OSError or socket.timeout where the client
        is gone or too slow."""
        uid = _peer_uid(conn)
        if uid not in (0, os.geteuid()):
            return _encode({"error": "permission denied: the control socket answers root only"})
        data = b""
        while b"\n" not in data and len(data) <= MAX_REQUEST:
            _time_left(conn, deadline)
            chunk = conn.recv(MAX_REQUEST + 1 - len(data))
            if not chunk:
                break
            data += chunk
        try:
            return _encode(answer(loads_object(data.split(b"\n", 1)[0], MAX_REQUEST)))
        except BadJSON as exc:
            message = "bad request (%s): one JSON object per line" % exc
        except Exception as exc:        # one request must not stop the service
            message = "request failed: %s" % describe(exc)
        if warn is not None:
            warn("control socket: %s" % message)
        return _encode({"error": message})

    def close(self):
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _encode(reply):
    return (json.dumps(reply, sort_keys=True) + "\n").encode()


def describe(exc):
    """``Kind: message`` of an exception, on one line and escaped (a
    message may quote what a client sent)."""
    return one_line("%s: %s" % (type(exc).__name__, exc))[:MAX_REQUEST]


def _time_left(conn, deadline):
    """``conn``'s timeout: what is left until ``deadline``; socket.timeout
    if nothing is."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("out of time")
    conn.settimeout(left)


def _peer_uid(conn):
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    except (OSError, AttributeError):       # no SO_PEERCRED: refuse
        return None


def _remove_stale(path):
    """A socket file nobody listens on is left by a service that was
    killed: remove it.  One somebody answers on is another service's."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.connect(path)
    except FileNotFoundError:
        return
    except ConnectionRefusedError:
        os.unlink(path)
        return
    except OSError as exc:
        raise TumblerError("cannot use %s: %s" % (path, exc.strerror), EXIT_FAILURE) from None
    finally:
        probe.close()
    raise TumblerError("another tumbler service answers on %s" % path, EXIT_FAILURE)


def request(path, message, timeout=5.0):
    """Send one request to the service at ``path``; return its reply.
    TumblerError (exit 1) when no service answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall((json.dumps(message) + "\n").encode())
        data = b""
        while not data.endswith(b"\n") and len(data) <= MAX_REPLY:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise TumblerError("no tumbler service is running (no socket at %s)" % path,
                           EXIT_FAILURE) from None
    except PermissionError:
        raise TumblerError("permission denied: %s (needs root)" % path, EXIT_FAILURE) from None
    except OSError as exc:
        raise TumblerError("cannot reach the service at %s: %s"
                           % (path, exc.strerror or exc), EXIT_FAILURE) from None
    finally:
        sock.close()
    try:
        reply = loads_object(data, MAX_REPLY)
    except BadJSON as exc:
        raise TumblerError("the service at %s sent no valid reply (%s)" % (path, exc),
                           EXIT_FAILURE) from None
    if "error" in reply:
        raise TumblerError(one_line(str(reply["error"])), EXIT_FAILURE)
    return reply
