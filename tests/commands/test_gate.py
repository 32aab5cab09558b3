"""The gate that holds a command until its tracer is attached (commands/gate.py)."""

import os
import subprocess
import time

from tumbler.commands.gate import Gate, check_command


def test_command_runs_only_once_the_gate_opens_in_the_same_process(tmp_path):
    marker = tmp_path / "ran"
    with Gate() as gate:
        process = subprocess.Popen(gate.argv(["sh", "-c", 'echo $$ > "$0"', str(marker)]))
        try:
            # Held: the shell waits on the FIFO (it is blocked, not exited).
            assert process.poll() is None and not marker.exists()
            assert gate.open(lambda: process.poll() is None)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert not os.path.exists(gate.path) or gate.opened
    # exec: the PID a tracer attached to before the gate opened is the command's.
    assert int(marker.read_text()) == process.pid
    assert not os.path.exists(os.path.dirname(gate.path))


def test_open_gives_up_when_the_process_is_gone():
    with Gate() as gate:
        process = subprocess.Popen(["true"])
        process.wait()
        assert gate.open(lambda: process.poll() is None) is False


def test_check_command_says_what_exec_would(tmp_path):
    assert check_command("sh") is None
    assert check_command("/bin/sh") is None
    assert check_command("no-such-command-here")[0] == 127
    assert check_command(str(tmp_path / "missing"))[0] == 127
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    assert check_command(str(script))[0] == 126
    assert check_command(str(tmp_path))[0] == 126


def test_a_connected_gate_holds_its_command_until_released(tmp_path):
    """``connect`` then ``release``, as compare --together releases several
    programs at once: connected, the command is still held; released, it
    runs, and ``released`` is when."""
    marker = tmp_path / "ran"
    with Gate() as gate:
        process = subprocess.Popen(gate.argv(["touch", str(marker)]))
        try:
            assert gate.connect(lambda: process.poll() is None)
            time.sleep(0.2)
            assert process.poll() is None and not marker.exists()
            before = time.monotonic()
            assert before <= gate.release() <= time.monotonic()
            assert process.wait(timeout=30) == 0 and marker.exists()
            assert gate.opened and gate.open(lambda: False)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
