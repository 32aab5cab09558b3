"""Hostile JSON in every place tumbler reads JSON (tumbler/jsonlimits.py):
nesting deeper than Python's decoder recurses, text past the size
limits, bytes that are not UTF-8, top levels that are not objects, FIFOs
-- each one clear error or a refusal, never a traceback and never a hang.

The places: the control socket (served here on a real socket; a real
service gets the same request in tests/system/test_security.py), state
files (``tumbler restore`` reads them as root), ``tumbler plot``'s log,
compare's run summaries, bpftrace's output lines.
"""

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from support.helpers import REPO, WAIT_LIMIT_S, assert_no_traceback, tumbler_cmd
from support.processes import env_for, wait_bound
from tumbler.jsonlimits import MAX_DEPTH, BadJSON, depth_of, loads, loads_object

DEEP = b"[" * 4000 + b"\n"          # RecursionError in json.loads (issue 47)
DEEP_OBJECT = b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"\n"


# -- the parser itself ---------------------------------------------------------

def test_depth_is_counted_outside_strings():
    assert depth_of(b'{"threads": [{"set": [[0, 1]]}]}') == 5
    # A process may be named "[[[[": a name is no nesting.
    assert depth_of(b'{"name": "[[[[{{{{\\"[[["}') == 1
    assert loads_object(b'{"name": "' + b"[" * 100 + b'"}', 1000) == {"name": "[" * 100}
    # An unterminated string runs to the end: its brackets are no nesting
    # either, and it is passed over in one step, not retried from each of
    # its quotes (64 KiB of \" took 12.5 s so: a request, a log to plot).
    assert depth_of(b'["\\"[[[') == 1
    assert depth_of(b'"' + b'\\"' * 32768) == 0


@pytest.mark.parametrize("data, words", [
    (DEEP, "nested deeper than %d levels" % MAX_DEPTH),
    (DEEP_OBJECT, "nested deeper than %d levels" % MAX_DEPTH),
    (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper"),
    (b'{"x": "' + b"a" * 200000 + b'"}', "longer than 100000 bytes"),
    (b'{"x": "\xff"}', "not UTF-8"),
    (b'{"x": 1', "not valid JSON (line 1, column 8"),
    (b'{"x": ' + b"9" * 5000 + b"}", "cannot read a value"),
])
def test_what_is_refused_and_why(data, words):
    with pytest.raises(BadJSON) as raised:
        loads(data, 100000)
    assert words in str(raised.value)


@pytest.mark.parametrize("text, kind", [("[]", "an array"), ('"x"', "a string"),
                                        ("1", "a number"), ("null", "null"),
                                        ("true", "true or false")])
def test_a_top_level_that_is_no_object(text, kind):
    with pytest.raises(BadJSON, match="%s, not an object" % kind):
        loads_object(text)


def test_max_depth_sits_between_what_tumbler_writes_and_what_python_parses(state_file):
    """The bound's evidence (jsonlimits.MAX_DEPTH): a real state file
    passes with room to spare -- one whose threads' records are still lines
    of its log (3 levels), or folded into it (5: ``threads``, a record, its
    saved placement, a CPU list) -- and the decoder's recursion limit is
    far above."""
    written = depth_of(open(state_file, "rb").read())
    assert 3 <= written and 5 <= MAX_DEPTH // 4, written
    assert MAX_DEPTH * 10 <= sys.getrecursionlimit()
    # ... and at the limit the decoder itself is still far from failing.
    assert loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None


@pytest.fixture
def state_file(tmp_path, procs, spawner, domains):
    """A state file a real tumbler wrote (two domains: it binds threads)."""
    target = procs.start([spawner, "2", "100000", "1", "0", "0"], stdout=subprocess.PIPE,
                         text=True)
    assert target.stdout.readline().strip() == "spawner: ready"
    spec, doms = domains
    state = tmp_path / "state"
    tumbler = procs.tumbler("--policy", "tumbler", "--domains", spec, "-p", str(target.pid),
                            state_dir=state)
    wait_bound(target.pid, doms, count=2)
    found = [name for name in os.listdir(state) if name.endswith(".json")]
    assert found
    copy = tmp_path / "copy.json"
    copy.write_bytes((state / found[0]).read_bytes())
    tumbler.terminate()
    tumbler.wait()
    return str(copy)


# -- the places tumbler reads JSON ---------------------------------------------

@pytest.mark.parametrize("data, words", [
    (DEEP, "nested deeper than"), (DEEP_OBJECT, "nested deeper than"),
    (b"\xff\xfe", "not UTF-8"), (b"[1, 2]", "not a mapping")])
def test_a_hostile_state_file_is_one_error(tmp_path, data, words):
    """``tumbler restore`` reads state files as root: a StateError naming
    the file, not a RecursionError out of json."""
    from tumbler.state.paths import StateError
    from tumbler.state.store import read_state
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    path = directory / "5-7.json"
    path.write_bytes(data)
    os.chmod(path, 0o600)
    with pytest.raises(StateError, match=words) as raised:
        read_state(str(path))
    assert str(path) in str(raised.value)


def test_restore_with_a_hostile_state_file_says_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    path = state / "5-7.json"
    path.write_bytes(DEEP)
    os.chmod(path, 0o600)
    result = subprocess.run(tumbler_cmd("restore"), capture_output=True, text=True,
                            timeout=60, cwd=REPO, env=env_for(state))
    assert_no_traceback(result.stderr)
    assert result.returncode == 1
    assert "nested deeper than %d levels" % MAX_DEPTH in result.stderr


def plot(path, tmp_path):
    result = subprocess.run(tumbler_cmd("plot", str(path), "-o", str(tmp_path / "out.svg")),
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert_no_traceback(result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return result.returncode, lines[0]


GOOD_ROUND = json.dumps({"t": 1.0, "domains": ["0"], "domain_loads": [0.5]}).encode()


@pytest.mark.parametrize("line, words", [
    (DEEP, "nested deeper than"),
    (DEEP_OBJECT, "nested deeper than"),
    (b"\xff\xfe garbage\n", "not UTF-8"),
    (b'[{"t": 1}]\n', "an array, not an object"),
    (b'{"t": 1, "domains": ["0"], "domain_loads": [1e999]}\n', "domain_loads is not a number"),
    (b'{"t": 1, "domains": ["0-99999999999"], "domain_loads": [1]}\n', "domains"),
    (b'{"t": 1, "domains": ["0"], "domain_loads": [1], "moves": 5}\n', "moves is not a list"),
    (b'{"t": 1, "domains": ["0"], "domain_loads": [1], "pins": 5}\n', "pins is not a list"),
    (b'{"t": 1, "domains": ["0"], "domain_loads": [1], "thread_cv": "x"}\n',
     "thread_cv is not a number"),
    (b'{"t": 1, "domains": ["0"], "domain_loads": [1], "mechanisms": [1]}\n',
     "mechanisms is not a dict"),
])
def test_plot_of_a_hostile_log_is_one_line(tmp_path, line, words):
    path = tmp_path / "run.jsonl"
    path.write_bytes(GOOD_ROUND + b"\n" + line + GOOD_ROUND + b"\n")
    status, message = plot(path, tmp_path)
    assert status == 2
    assert "run.jsonl:2: not a tumbler --log record" in message and words in message


def test_plot_of_a_fifo_is_refused_unread(tmp_path):
    """Nothing ever writes to this FIFO: opened for reading as it was, it
    would block for good."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    status, message = plot(path, tmp_path)
    assert status == 1 and "not a regular file" in message


@pytest.mark.parametrize("absent", [b"", b', "reason": null', b', "moves": null',
                                    b', "pins": null', b', "mechanisms": null'])
def test_plot_still_draws_a_good_log(tmp_path, absent):
    """A key that is null reads as one that is absent (no traceback)."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(GOOD_ROUND[:-1] + absent + b"}\n" + GOOD_ROUND.replace(b"1.0", b"2.0")
                     + b"\n")
    result = subprocess.run(tumbler_cmd("plot", str(path), "-o", str(tmp_path / "out.svg")),
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("data", [DEEP, DEEP_OBJECT, b"[1]", b"\xff"])
def test_compare_reads_a_hostile_summary_as_none(tmp_path, data):
    from tumbler.commands.compare.runs import read_summary
    path = tmp_path / "summary.json"
    path.write_bytes(data)
    assert read_summary(str(path)) is None


def test_compare_refuses_a_fifo_for_a_summary(tmp_path):
    """Nothing writes to the FIFO: a reader that opens it as a file waits
    for good (WAIT_LIMIT_S is only the guard that fails the test)."""
    from tumbler.commands.compare.runs import read_summary
    path = tmp_path / "summary.json"
    os.mkfifo(path, 0o600)
    got = []
    reader = threading.Thread(target=lambda: got.append(read_summary(str(path))), daemon=True)
    reader.start()
    reader.join(WAIT_LIMIT_S)
    assert got == [None]


@pytest.mark.parametrize("line", [DEEP_OBJECT.decode(),
                                  '{"type": "map", "data": ' + "[" * 2000 + "]" * 2000 + "}"])
def test_a_bpftrace_line_nested_deep_is_of_no_interest(line):
    from tumbler.tracing.parse import parse_bpftrace_line
    assert parse_bpftrace_line(line) is None


# -- the control socket --------------------------------------------------------

@pytest.fixture
def served(tmp_path):
    """A real ControlSocket, served in a thread of the test by
    ``answer``: ask(bytes) -> the reply (None if the service closed the
    connection with the request unread: the kernel resets it and the
    reply is lost); ``warnings`` what it logged."""
    from tumbler.service.control import ControlSocket
    control = ControlSocket(str(tmp_path / "sock" / "tumbler.sock"))
    warnings = []
    answers = []

    def answer(request):
        answers.append(request)
        if request.get("cmd") == "fail":
            raise RuntimeError("a bug in answer()")
        return {"ok": request.get("cmd")}

    def ask(payload):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(control.path)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        done = threading.Event()

        def serve():
            while not done.is_set():
                control.serve(answer, warn=warnings.append)
        server = threading.Thread(target=serve)
        server.start()
        try:
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            return None
        finally:
            done.set()
            server.join()
            sock.close()
        return json.loads(data)

    yield ask, warnings, answers
    control.close()


def test_a_request_nested_deep_gets_an_error_and_the_next_is_served(served):
    ask, warnings, answers = served
    reply = ask(DEEP)
    assert "nested deeper than %d levels" % MAX_DEPTH in reply["error"]
    assert warnings == ["control socket: " + reply["error"]]
    assert answers == []                    # refused before answer() saw it
    assert ask(b'{"cmd": "status"}\n') == {"ok": "status"}


@pytest.mark.parametrize("payload, words", [
    (b'{"cmd": "' + b"x" * 5000 + b'"}\n', "longer than 4096 bytes"),
    (b'{"cmd": "' + b"x" * 9000, "longer than 4096 bytes"),         # and no newline
    (b'["status"]\n', "an array, not an object"),
    (b'{"cmd": "\xff"}\n', "not UTF-8"),
])
def test_bad_requests_are_refused_with_the_reason(served, payload, words):
    ask, warnings, answers = served
    reply = ask(payload)
    assert len(warnings) == 1 and words in warnings[0]
    assert reply is None or words in reply["error"]
    assert answers == []
    assert ask(b'{"cmd": "status"}\n') == {"ok": "status"}


def test_a_failure_inside_answer_is_an_error_reply_and_a_log_line(served):
    ask, warnings, _ = served
    reply = ask(b'{"cmd": "fail"}\n')
    assert reply == {"error": "request failed: RuntimeError: a bug in answer()"}
    assert warnings == ["control socket: request failed: RuntimeError: a bug in answer()"]
    assert ask(b'{"cmd": "status"}\n') == {"ok": "status"}
