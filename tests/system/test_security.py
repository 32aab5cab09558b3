"""Attacks on a root tumbler by an unprivileged user, run for real
(SECURITY.md, tumbler(8) SECURITY): the attacker is ``nobody``, working
in a sticky directory anyone may write (as /tmp is), and every attack
must leave its target untouched and get one line on stderr, never a
traceback.

Symbolic links planted on every path tumbler writes (metrics, state,
lock, --log, --summary-json, plot -o); directories and environment
variables that name them; a crafted state directory for ``restore``; a
followed child's PID reused by another process; a catastrophic regular
expression against a hostile command line; a process name that forges
journal lines; a configuration drop-in others may write; more matching
processes and threads than the caps allow; the control socket fuzzed.
"""

import json
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from unittest import mock

import pytest

from support.helpers import REPO, run_tumbler, thread_masks, thread_names, tumbler_cmd
from support.processes import descendants, env_for, wait_bound, wait_until
from support.service import Service, config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root (the attacker is nobody)")

#: A Python anyone can run (the test's own may live under /root).
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def nobody():
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody")


def as_nobody(*argv, **kwargs):
    """Run ``argv`` as nobody; assert it worked."""
    result = subprocess.run(list(argv), user="nobody", group="nogroup", capture_output=True,
                            text=True, timeout=30, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def public():
    """A sticky directory anyone may write, as /tmp (not under pytest's
    0700 tmp_path: nobody must reach it)."""
    path = tempfile.mkdtemp(prefix="tumbler-public-", dir="/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def victim(tmp_path):
    """A root-only file the attacker wants overwritten."""
    path = tmp_path / "victim"
    path.write_text("root's secret\n")
    os.chmod(path, 0o600)
    return path


def assert_untouched(victim):
    info = os.stat(victim)
    assert victim.read_text() == "root's secret\n"
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# -- files tumbler writes ------------------------------------------------------

@pytest.mark.parametrize("option", ["--log", "--summary-json"])
def test_a_link_planted_where_tumbler_writes_is_refused(option, public, victim, nobody):
    planted = os.path.join(public, "out.json")
    as_nobody("ln", "-s", str(victim), planted)
    result = run_tumbler(option, planted, "--policy", "observe", "-q", "exec", "--", "true")
    assert result.returncode == 2
    line = one_line(result)
    assert planted in line and "symbolic link" in line, line
    assert_untouched(victim)


def test_plot_output_link_is_refused(public, victim, nobody, tmp_path):
    log = tmp_path / "run.jsonl"
    result = run_tumbler("--log", str(log), "--policy", "observe", "-q", "exec", "--",
                         "sleep", "0.3")
    assert result.returncode == 0, result.stderr
    planted = os.path.join(public, "plot.svg")
    as_nobody("ln", "-s", str(victim), planted)
    result = run_tumbler("plot", str(log), "-o", planted)
    assert result.returncode == 1
    assert "symbolic link" in one_line(result)
    assert_untouched(victim)
    # Not a link: a file of the attacker's own in the shared directory.
    os.unlink(planted)
    as_nobody("touch", planted)
    result = run_tumbler("plot", str(log), "-o", planted)
    assert result.returncode == 1 and "belongs to uid %d" % nobody in one_line(result)
    assert os.path.getsize(planted) == 0


def test_outputs_in_a_directory_others_may_write_without_sticky_bit(tmp_path, victim):
    shared = tmp_path / "textfile"
    shared.mkdir()
    os.chmod(shared, 0o777)             # a group or world writable directory, not sticky
    result = run_tumbler("--log", str(shared / "log"), "--policy", "observe", "-q",
                         "exec", "--", "true")
    assert result.returncode == 2
    assert "not sticky" in one_line(result)
    assert not os.listdir(shared)


def test_metrics_file_in_a_shared_directory_cannot_be_turned_on_root(public, victim, nobody):
    from tumbler.observers.metrics import write_metrics
    from tumbler.safefile import UnsafePath
    status = {"version": "1", "uptime_s": 1.0, "own_cpu_s": 0.1, "programs": []}
    target = os.path.join(public, "m.prom")
    as_nobody("ln", "-s", str(victim), target)
    # The temporary name is random now; the attacker plants the final name.
    with pytest.raises(UnsafePath, match="belongs to uid %d" % nobody):
        write_metrics(target, status)
    assert_untouched(victim)
    assert os.listdir(public) == ["m.prom"]         # no temporary left
    os.unlink(target)
    write_metrics(target, status)                    # the directory is fine otherwise
    info = os.lstat(target)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == 0
    assert stat.S_IMODE(info.st_mode) == 0o644
    assert "tumbler_programs 0" in open(target).read()


def test_a_refused_metrics_file_is_said_once(procs, state, tmp_path):
    """The service writes its metrics every 5 s: a directory a group may
    write is refused in one line, not one line every 5 s, and said again
    only once a write has worked and failed anew."""
    shared = tmp_path / "textfile"
    shared.mkdir()
    os.chmod(shared, 0o777)             # a collector's directory others may write
    metrics = shared / "tumbler.prom"
    text = ("service:\n  scan_interval: 0.2\n  cpu_budget: 1\n  socket: SOCKET\n  metrics_file: %s\n"
            "programs: []\n" % metrics)
    service = Service(procs, state, tmp_path, text)
    wait_until(lambda: "cannot write metrics" in service.log(), what="the refusal")
    assert "not sticky" in service.log()
    time.sleep(5.5)                     # another write is tried (every 5 s)
    os.chmod(shared, 0o755)
    wait_until(metrics.exists, what="the metrics written once the directory is fixed")
    assert service.log().count("cannot write metrics") == 1, service.log()
    assert "metrics written to %s again" % metrics in service.log()
    assert stat.S_IMODE(os.stat(metrics).st_mode) == 0o644
    assert service.stop() == 0


def test_a_directory_on_the_way_owned_by_another_user_is_refused(public, nobody, tmp_path):
    """nobody's own directory (inside the sticky one): nobody could swap
    anything in it, so root writes nothing there -- nor through a link
    nobody made that points at root's directories."""
    theirs = os.path.join(public, "theirs")
    as_nobody("mkdir", theirs)
    result = run_tumbler("--log", os.path.join(theirs, "log"), "--policy", "observe", "-q",
                         "exec", "--", "true")
    assert result.returncode == 2 and "belongs to uid %d" % nobody in one_line(result)
    assert os.listdir(theirs) == []
    link = os.path.join(public, "etc")
    as_nobody("ln", "-s", str(tmp_path), link)
    result = run_tumbler("--log", os.path.join(link, "planted.log"), "--policy", "observe",
                         "-q", "exec", "--", "true")
    assert result.returncode == 2 and "symbolic link of uid %d" % nobody in one_line(result)
    assert not (tmp_path / "planted.log").exists()


def test_dev_stdout_and_dev_null_still_work():
    result = run_tumbler("--summary-json", "/dev/stdout", "--policy", "observe", "-q",
                         "exec", "--", "true")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["end_reason"] == "command exited"
    result = run_tumbler("--log", "/dev/null", "--policy", "observe", "-q", "exec", "--", "true")
    assert result.returncode == 0, result.stderr


# -- the state directory and restore -------------------------------------------

def test_a_state_directory_another_user_controls_is_refused(public, nobody, victim):
    theirs = os.path.join(public, "state")
    as_nobody("mkdir", "-m", "700", theirs)
    env = dict(os.environ, TUMBLER_STATE_DIR=theirs)
    result = run_tumbler("exec", "--", "true", env=env)
    assert result.returncode == 1
    assert "state directory" in one_line(result) and "uid %d" % nobody in result.stderr
    # A state directory reached through nobody's link.
    link = os.path.join(public, "state-link")
    as_nobody("ln", "-s", "/run", link)
    result = run_tumbler("exec", "--", "true", env=dict(os.environ, TUMBLER_STATE_DIR=link))
    assert result.returncode == 1 and "symbolic link of uid" in one_line(result)


@pytest.fixture
def stranger():
    """(uid, home) of a user with no password entry and nothing in /tmp,
    whose ``/tmp/tumbler-UID`` the test may squat: a uid of its own, so
    no other run or user of the machine is touched."""
    rng = random.SystemRandom()
    for _ in range(100):
        uid = rng.randrange(2000000, 3000000)
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        if not os.path.lexists("/tmp/tumbler-%d" % uid):
            break
    else:
        pytest.skip("no free uid found")
    home = tempfile.mkdtemp(prefix="tumbler-home-", dir="/tmp")
    os.chown(home, uid, uid)
    yield uid, home
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree("/tmp/tumbler-%d" % uid, ignore_errors=True)


def as_user(uid, home, args, popen=False, **kwargs):
    """Run tumbler ``args`` as ``uid`` with ``home`` for $HOME and no
    $XDG_RUNTIME_DIR or $TUMBLER_STATE_DIR (a cron job's, a su's
    environment): the system's Python (the test's may live under /root),
    this tree and the test's click and PyYAML."""
    import click
    site = os.path.dirname(os.path.dirname(click.__file__))
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "PYTHONPATH": REPO + os.pathsep + site}
    argv = [SYSTEM_PYTHON, "-m", "tumbler", *args]
    kwargs.update(user=uid, group=uid, extra_groups=[], env=env, cwd="/", text=True)
    if popen:
        return subprocess.Popen(argv, **kwargs)
    return subprocess.run(argv, capture_output=True, timeout=60, **kwargs)


def test_a_squatted_fallback_state_directory_is_passed_over(stranger, nobody, procs, domains):
    """nobody makes /tmp/tumbler-UID first (issue 47): the user's
    tumbler still runs, with its state under the user's home, and
    ``tumbler restore`` finds it there after a crash -- also once nobody
    has removed the squatted name."""
    uid, home = stranger
    squatted = "/tmp/tumbler-%d" % uid
    as_nobody("mkdir", "-m", "777", squatted)
    result = as_user(uid, home, ["exec", "--", "/bin/true"])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    spec, doms = domains
    script = ("import os, threading, time\n"
              "for _ in range(3): threading.Thread(target=time.sleep, args=(600,)).start()\n"
              "print(os.getpid(), flush=True)\n"
              "time.sleep(600)\n")
    tumbler = as_user(uid, home, ["--policy", "tumbler", "--domains", spec, "exec", "--",
                                  SYSTEM_PYTHON, "-c", script],
                      popen=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.procs.append(tumbler)
    target = int(tumbler.stdout.readline())
    try:
        wait_bound(target, doms, count=4)
        tumbler.kill()
        tumbler.wait()
        state = os.path.join(home, ".local", "state", "tumbler")
        assert any(name.endswith(".json") for name in os.listdir(state))
        as_nobody("rmdir", squatted)
        result = as_user(uid, home, ["restore"])
        assert result.returncode == 0, result.stderr
        assert "restored 4 threads of process %d" % target in result.stdout
        allowed = frozenset(os.sched_getaffinity(0))          # what the target started with
        assert all(mask == allowed for mask in thread_masks(target).values())
        assert not any(name.endswith(".json") for name in os.listdir(state))
    finally:
        os.kill(target, signal.SIGKILL)


def test_restore_refuses_a_crafted_state_directory(public, nobody, spawner, procs):
    """nobody writes a state file that would move root's threads and
    truncate a root file through the lock: restore reads nothing there."""
    victim_proc = procs.start([spawner, "2", "100000", "1", "0", "0"], stdout=subprocess.PIPE,
                              text=True)
    assert victim_proc.stdout.readline().strip() == "spawner: ready"
    before = thread_masks(victim_proc.pid)
    start = int(open("/proc/%d/stat" % victim_proc.pid).read().rsplit(")", 1)[1].split()[19])
    theirs = os.path.join(public, "crafted")
    as_nobody("mkdir", "-m", "700", theirs)
    crafted = {"version": 1, "tumbler": {"pid": 999999, "start": 1},
               "target": {"pid": victim_proc.pid, "start": start},
               "binder": "affinity",
               "threads": [{"tid": tid, "start": None, "saved": {"cpus": [0]}}
                           for tid in before]}
    as_nobody(SYSTEM_PYTHON, "-c", "import json,sys; json.dump(json.loads(sys.argv[1]), "
              "open(sys.argv[2], 'w'))", json.dumps(crafted),
              os.path.join(theirs, "%d-%d.json" % (victim_proc.pid, start)))
    env = dict(os.environ, TUMBLER_STATE_DIR=theirs)
    result = run_tumbler("restore", "--all", env=env)
    assert result.returncode == 1
    assert "uid %d" % nobody in one_line(result)
    assert thread_masks(victim_proc.pid) == before


def test_state_files_must_be_tumblers_own(tmp_path, spawner, procs):
    """Content is checked before anything moves: a state file in a good
    directory with a record naming CPUs that are not CPUs is refused."""
    from tumbler.state.store import read_state
    from tumbler.state.paths import StateError
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    path = directory / "5-7.json"
    good = {"version": 1, "tumbler": {"pid": 1, "start": 1}, "target": {"pid": 5, "start": 7},
            "threads": [{"tid": 5, "start": 7, "saved": {"cpus": [0, 1]}}]}
    path.write_text(json.dumps(good))
    os.chmod(path, 0o600)
    assert read_state(str(path))["threads"][0]["saved"] == {"cpus": [0, 1]}
    for bad in ({"cpus": [-1]}, {"cpus": "0-3"}, {"cgroup": "/../../etc"}, {"cpus": [True]}):
        path.write_text(json.dumps(dict(good, threads=[dict(good["threads"][0], saved=bad)])))
        with pytest.raises(StateError, match="bad thread record"):
            read_state(str(path))
    path.write_text(json.dumps(good))
    os.chmod(path, 0o666)
    with pytest.raises(StateError, match="writable by others"):
        read_state(str(path))
    os.unlink(path)
    os.symlink("/etc/passwd", path)
    with pytest.raises(StateError, match="symbolic link"):
        read_state(str(path))


def test_a_lock_file_replaced_by_a_link_is_not_followed(tmp_path, victim):
    from tumbler.state.paths import StateError
    from tumbler.state.store import Lock
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    os.symlink(str(victim), directory / "42-7.lock")
    with pytest.raises(StateError, match="cannot open"):
        Lock(str(directory), 42, 7).acquire()
    assert_untouched(victim)


def test_environment_directories_are_checked(public, nobody, tmp_path):
    from tumbler.safefile import UnsafePath, private_tempdir
    theirs = os.path.join(public, "tmp")
    as_nobody("mkdir", theirs)
    import tempfile as tempfile_module
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = theirs
    tempfile_module.tempdir = None          # gettempdir() reads TMPDIR again
    try:
        with pytest.raises(UnsafePath, match="TMPDIR"):
            private_tempdir("tumbler-test-")
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
        tempfile_module.tempdir = None
    # Probe scripts from a directory nobody may write: refused before
    # bpftrace runs them as root.
    probes = os.path.join(public, "probes")
    as_nobody("mkdir", "-p", probes + "/linux")
    for name in ("locktime.bt", "runqlat.bt", "migrations.bt"):
        as_nobody("cp", os.path.join(REPO, "probes", "linux", name), probes + "/linux/")
    result = run_tumbler("probe", "locks", "-p", str(os.getpid()), "--duration", "0.1",
                         env=dict(os.environ, TUMBLER_PROBES=probes))
    assert result.returncode == 1
    assert "untrusted probe script" in one_line(result)


# -- the service ------------------------------------------------------------------

def test_config_and_drop_ins_others_may_write_are_refused(tmp_path):
    main = tmp_path / "tumbler.yaml"
    main.write_text("programs: []\n")
    drop_ins = tmp_path / "conf.d"
    drop_ins.mkdir()
    hostile = drop_ins / "10-x.yaml"
    hostile.write_text("programs:\n  - name: all\n")
    os.chmod(hostile, 0o666)
    result = run_tumbler("service", "--check", str(main))
    assert result.returncode == 2
    assert one_line(result) == "tumbler: untrusted config %s: writable by others (mode 666)" \
        % hostile
    os.chmod(hostile, 0o644)
    os.chown(hostile, pwd.getpwnam("nobody").pw_uid, -1)
    result = run_tumbler("service", "--check", str(main))
    assert result.returncode == 2 and "belongs to uid" in one_line(result)
    os.chown(hostile, 0, -1)
    os.chmod(drop_ins, 0o777)
    result = run_tumbler("service", "--check", str(main))
    assert result.returncode == 2 and "not sticky" in one_line(result)
    os.chmod(drop_ins, 0o755)
    result = run_tumbler("service", "--check", str(main))
    assert result.returncode == 0, result.stderr
    # A rule of no match, or on a name alone: any user can opt in.
    assert "rule all matches every process: any user can opt in" in result.stderr
    hostile.write_text('programs:\n  - name: all\n    match: {comm: "w.*"}\n')
    result = run_tumbler("service", "--check", str(main))
    assert result.returncode == 0
    assert "rule all matches on name or command line only: any user can opt in" \
        in result.stderr


def test_catastrophic_regex_against_a_hostile_command_line(procs, state, tmp_path, nobody,
                                                           spawner, domains, two_cpus):
    """``^(a+)+$`` against 28 a's and a b: Python's re would spin for
    minutes in one call no signal interrupts; the service answers status,
    goes on balancing the program it manages beside it, and on SIGTERM
    hands that program's threads back."""
    from support.service import spinners
    spec, doms = domains
    both = frozenset(two_cpus)
    hostile = procs.start(["a" * 28 + "b", "-c", "import time; time.sleep(60)"],
                          executable=SYSTEM_PYTHON, user="nobody", group="nogroup")
    tag = "tag-%d" % os.getpid()
    managed = spinners(procs, spawner, both, 2, tag)
    rules = ('  - name: evil\n    match: {cmdline: "^(a+)+$"}\n'
             '  - name: also\n    match: {cmdline: "(x+x+)+y"}\n'
             '  - name: mine\n    match: {cmdline: " 0 0 %s$", user: root}\n'
             '    domains: "%s"\n    policy: tumbler\n' % (tag, spec))
    service = Service(procs, state, tmp_path, config(rules, scan=0.1))
    wait_until(lambda: "aaaa" in open("/proc/%d/cmdline" % hostile.pid).read(),
               what="the hostile process")
    # The hostile process is matched against both patterns at every
    # rematch; the managed program is bound meanwhile.
    wait_bound(managed.pid, doms, count=2)
    time.sleep(0.5)                     # several scans over it
    status = service.status()
    assert [p["pid"] for p in status["programs"]] == [managed.pid]
    started = time.monotonic()
    service.proc.send_signal(signal.SIGTERM)
    service.proc.wait(timeout=30)
    took = time.monotonic() - started
    assert service.proc.returncode == 0, service.log()
    assert "Traceback" not in service.log()
    assert "every thread handed back" in service.log()
    masks = thread_masks(managed.pid)
    assert all(mask == both for mask in masks.values()), masks
    # (Not a timing assertion: the pattern engine is linear by
    # construction, test_pattern.py counts its states; this only says the
    # stop was not stuck behind a match, which took minutes with re.)
    assert took < 30


def test_a_name_with_newlines_stays_one_log_line(procs, state, tmp_path, nobody):
    forged = procs.start([SYSTEM_PYTHON, "-c",
                          "import threading, time\n"
                          "open('/proc/self/comm', 'w').write('x\\n<3>FORGED')\n"
                          "threading.Thread(target=time.sleep, args=(60,)).start()\n"
                          "time.sleep(60)\n"], user="nobody", group="nogroup")
    wait_until(lambda: "FORGED" in open("/proc/%d/comm" % forged.pid).read(),
               what="the forged name")
    rules = '  - name: by-name\n    match: {comm: "x.*", user: nobody}\n    policy: observe\n'
    service = Service(procs, state, tmp_path, config(rules, scan=0.1))
    wait_until(lambda: "managed by rule by-name" in service.log(), what="the program managed")
    assert service.stop() == 0
    lines = service.log().splitlines()
    assert all(line.startswith(("<6>tumbler: ", "<4>tumbler: ", "<3>tumbler: "))
               for line in lines), lines
    managed = [line for line in lines if "managed by rule by-name" in line]
    assert managed == ["<6>tumbler: PID %d (x\\n<3>FORGED): managed by rule by-name, "
                       "policy observe, %s" % (forged.pid, managed[0].split(", ", 2)[2])]


def test_caps_hold_against_many_matching_processes(procs, state, tmp_path, nobody):
    """200 idle two-thread processes and one of 3,000 threads, all of
    nobody's and all selected by one rule: the caps hold, and the service,
    scanning ten times a second, stays well under a CPU (without caps it
    took 62% of one managing them all)."""
    many = [procs.start([SYSTEM_PYTHON, "-S", "-c",
                         "import threading, time\n"
                         "threading.Thread(target=time.sleep, args=(60,)).start()\n"
                         "time.sleep(60)\n"], user="nobody", group="nogroup")
            for _ in range(200)]
    big = procs.start([SYSTEM_PYTHON, "-c",
                       "import threading, time\n"
                       "for _ in range(3000): threading.Thread(target=time.sleep, args=(60,)).start()\n"
                       "time.sleep(60)\n"], user="nobody", group="nogroup")
    text = ("service:\n  scan_interval: 0.1\n  cpu_budget: 1\n  socket: SOCKET\n  max_programs: 10\n"
            "  max_threads: 200\nprograms:\n"
            "  - name: any-python\n    match: {comm: \"python3.*\", user: nobody}\n"
            "    policy: observe\n")
    service = Service(procs, state, tmp_path, text)
    wait_until(lambda: len(service.managed()) == 10, what="ten programs managed")
    wait_until(lambda: "wait: the caps are reached" in service.log(), what="the caps' line")
    wait_until(lambda: len(os.listdir("/proc/%d/task" % big.pid)) == 3001,
               what="3,000 threads")
    first, since = service.status(), time.monotonic()
    time.sleep(2.0)
    status = service.status()
    used = (status["own_cpu_s"] - first["own_cpu_s"]) / (time.monotonic() - since)
    assert used < 0.5, "the service used %.2f CPUs" % used
    managed = {p["pid"] for p in status["programs"]}
    assert len(managed) == 10 and big.pid not in managed
    assert sum(p["threads"] for p in status["programs"]) <= 200
    # A managed program leaves: one waiting takes its place.
    leaving = next(p for p in many if p.pid in managed)
    leaving.kill()
    leaving.wait()
    wait_until(lambda: leaving.pid not in service.managed() and len(service.managed()) == 10,
               what="another program to take its place")
    assert service.log().count("wait: the caps are reached") <= 3, service.log()
    assert service.stop() == 0


def test_control_socket_fuzzed(procs, state, tmp_path):
    service = Service(procs, state, tmp_path, config('  - name: none\n    match: '
                                                     '{comm: "^$", user: root}\n'))
    rng = random.Random(26)
    deadline = time.monotonic() + 3.0

    def client():
        while time.monotonic() < deadline:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(2)
                sock.connect(service.socket)
                kind = rng.randrange(5)
                if kind == 0:
                    sock.sendall(os.urandom(rng.randrange(1, 20000)))
                elif kind == 1:
                    sock.sendall(b"{" * 5000 + b"\n")
                elif kind == 2:
                    sock.sendall(b'["status"]\n{"cmd": 1}\n')
                elif kind == 3:
                    sock.sendall(b'{"cmd": "status", "x": "' + b"\xff" * 100 + b'"}\n')
                # kind 4: connect and say nothing
                sock.shutdown(socket.SHUT_WR)
                sock.recv(65536)
            except OSError:
                pass
            finally:
                sock.close()
    clients = [threading.Thread(target=client) for _ in range(6)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    assert service.proc.poll() is None, service.log()
    assert service.status()["pid"] == service.proc.pid
    assert service.stop() == 0


def test_a_request_nested_deep_does_not_stop_the_service(procs, state, tmp_path):
    """``"[" * 4000`` made json recurse past Python's limit and the
    service stop ("service stopped (error)", issue 47): now it is refused
    before parsing, with an error reply and a log line, and the service
    answers the next client."""
    service = Service(procs, state, tmp_path, config('  - name: none\n    match: '
                                                     '{comm: "^$", user: root}\n'))
    for payload in (b"[" * 4000 + b"\n", b'{"a": ' * 600 + b"\n"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(service.socket)
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            reply = json.loads(sock.recv(65536))
        finally:
            sock.close()
        assert "nested deeper than" in reply["error"], reply
    assert service.proc.poll() is None, service.log()
    assert service.status()["pid"] == service.proc.pid
    assert service.log().count("control socket: bad request (nested deeper than") == 2
    assert service.stop() == 0


def test_a_client_trickling_its_request_is_cut_off(procs, state, tmp_path):
    """A client gets 0.25 s for its request line in all, not per byte: one
    that sends a byte every 50 ms (never a newline) would otherwise hold the
    service's loop -- its signals, its programs' rounds -- for as long as
    it likes.  Cut off, it finds the connection closed long before its
    200 bytes (10 s) are sent."""
    service = Service(procs, state, tmp_path, config('  - name: none\n    match: '
                                                     '{comm: "^$", user: root}\n'))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sent = 0
    try:
        sock.connect(service.socket)
        sock.sendall(b'{"cmd": ')
        for sent in range(1, 201):
            time.sleep(0.05)
            sock.sendall(b" ")
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert sent < 200, "the service kept reading a trickling client for 10 s"
    assert service.status()["pid"] == service.proc.pid
    assert service.stop() == 0


def test_the_socket_directory_is_not_made_through_a_planted_link(public, nobody, state,
                                                                  tmp_path):
    """``--socket`` in a directory to be made under a sticky one: nobody's
    link there pointing into root's directories makes root create nothing
    anywhere (it made the directories first and checked them after)."""
    roots = tmp_path / "roots"
    roots.mkdir(mode=0o700)
    link = os.path.join(public, "run")
    as_nobody("ln", "-s", str(roots), link)
    (tmp_path / "tumbler.yaml").write_text("programs: []\n")
    result = run_tumbler("service", "--config", str(tmp_path / "tumbler.yaml"), "--socket",
                         os.path.join(link, "new", "tumbler.sock"), env=env_for(state))
    assert os.listdir(roots) == []
    assert result.returncode == 1
    line = one_line(result)
    assert "control socket directory" in line and "symbolic link of uid %d" % nobody in line


def test_a_socket_path_naming_a_file_leaves_it_alone(state, tmp_path):
    """connect() refuses a file that is not a socket as it refuses a stale
    socket: a mistyped --socket removed the file it named."""
    (tmp_path / "tumbler.yaml").write_text("programs: []\n")
    os.chmod(tmp_path, 0o700)
    result = run_tumbler("service", "--config", str(tmp_path / "tumbler.yaml"), "--socket",
                         str(tmp_path / "tumbler.yaml"), env=env_for(state), timeout=20)
    assert (tmp_path / "tumbler.yaml").read_text() == "programs: []\n"
    assert result.returncode == 1
    assert one_line(result) == ("tumbler: %s exists and is not a socket; tumbler does not "
                                "remove it" % (tmp_path / "tumbler.yaml"))


# -- identity --------------------------------------------------------------------

def test_a_reused_pid_of_a_followed_child_is_not_adopted(spawner, domains, procs, state,
                                                        tmp_path):
    """exec follows its command's children.  A child exits; an unrelated
    process of root's takes its PID (ns_last_pid) and forks children of
    its own: tumbler adopts none of them."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("ns_last_pid is not writable here")
    spec, doms = domains
    marker = tmp_path / "child.pid"
    script = "%s 2 100000 1 0 0 & echo $! > %s; while :; do sleep 0.1; done" % (spawner, marker)
    err = open(tmp_path / "stderr", "a+")     # shared offset: see support.service.Service
    # Rounds every 3 s: the PID is taken between two (discovery looks every 0.1 s).
    run = procs.start(tumbler_cmd("--policy", "tumbler",
                                  "--domains", spec, "--interval", "3000", "exec", "--",
                                  "sh", "-c", script),
                      env=env_for(state), cwd=REPO, stderr=err, start_new_session=True)
    try:
        _reused_pid(spawner, doms, procs, run, err, marker)
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)      # the wrapper and its child, whatever happened
        except ProcessLookupError:
            pass


def _reused_pid(spawner, doms, procs, run, err, marker):
    wait_until(lambda: marker.exists() and marker.read_text().strip(), what="the child")
    child = int(marker.read_text())
    wait_bound(child, doms, count=2)            # followed and balanced
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: not os.path.exists("/proc/%d" % child), what="the child reaped")
    impostor = None
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(child - 1))
        # Forks a child every 50 ms (each lives 5 s), from a spinning thread.
        proc = subprocess.Popen([spawner, "1", "50", "5", "0", "0", "fork"],
                                stdout=subprocess.PIPE, text=True)
        if proc.pid == child:
            impostor = proc
            break
        proc.kill()
        proc.wait()
    if impostor is None:
        pytest.skip("could not take PID %d: other processes took it first" % child)
    procs.procs.append(impostor)
    assert impostor.stdout.readline().strip() == "spawner: ready"
    everything = frozenset(os.sched_getaffinity(0))
    time.sleep(1.0)             # ten looks for new processes, ~20 forks
    grandchildren = descendants(impostor.pid)
    assert grandchildren
    for pid in [impostor.pid] + grandchildren:
        try:
            masks = thread_masks(pid)
        except FileNotFoundError:
            continue
        assert all(mask == everything for mask in masks.values()), (pid, masks)
    assert run.poll() is None
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=30)
    err.seek(0)
    stderr = err.read()
    assert run.returncode == 128 + signal.SIGTERM, stderr     # the command's status
    assert "Traceback" not in stderr, stderr


def _take_pid(pid, argv):
    """Start ``argv`` as PID ``pid`` (ns_last_pid), or skip."""
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.skip("could not take PID %d: other processes took it first" % pid)


def test_a_pid_taken_after_a_failed_read_does_not_answer_for_the_process():
    """The backend read a process, then a read found it gone (closing the
    files it kept on it); another process takes the PID.  Asked again, the
    backend must not read the newcomer as the process it knew -- until told
    the PID is a new process to read (``forget_process``, as add_target
    does)."""
    from tumbler.platform.base import NoSuchProcess
    from tumbler.platform.linux.backend import LinuxBackend
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("ns_last_pid is not writable here")
    backend = LinuxBackend()
    first = subprocess.Popen(["sleep", "30"])
    try:
        backend.sample(first.pid)
        assert backend.process_state(first.pid, fresh=True) == (False, mock.ANY)
        first.kill()
        first.wait()
        with pytest.raises(NoSuchProcess):
            backend.process_state(first.pid, fresh=True)        # closes what it kept
        impostor = _take_pid(first.pid, ["sleep", "30"])
        try:
            with pytest.raises(NoSuchProcess):
                backend.process_state(first.pid, fresh=True)
            backend.forget_process(first.pid)
            assert backend.process_state(first.pid, fresh=True)[0] is False
        finally:
            impostor.kill()
            impostor.wait()
    finally:
        first.kill()
        first.wait()
        backend.close()


def test_check_thread_tells_an_exited_thread_from_a_live_one():
    from tumbler.platform.base import NoSuchProcess
    from tumbler.platform.linux.backend import LinuxBackend
    backend = LinuxBackend()
    stop = threading.Event()
    tids = []

    def worker():
        tids.append(threading.get_native_id())
        stop.wait()
    thread = threading.Thread(target=worker)
    thread.start()
    wait_until(lambda: tids, what="the thread")
    pid = os.getpid()
    backend.sample(pid)
    backend.check_thread(pid, tids[0])          # alive: no error
    stop.set()
    thread.join()
    wait_until(lambda: not os.path.exists("/proc/%d/task/%d" % (pid, tids[0])),
               what="the thread gone")
    with pytest.raises(NoSuchProcess):
        backend.check_thread(pid, tids[0])
    backend.close()


# -- the pieces -------------------------------------------------------------------

def test_printable_escapes_what_a_log_or_terminal_would_act_on():
    from tumbler.escape import one_line, printable
    assert printable("worker-3") == "worker-3"
    assert printable("x\n<3>FORGED") == "x\\n<3>FORGED"
    assert printable("\x1b[2J\x7f\x9b") == "\\x1b[2J\\x7f\\x9b"
    assert printable("a\\nb") == "a\\\\nb"           # a literal backslash-n stays told apart
    assert printable("é \u200b") == "é \\u200b"
    assert one_line("cannot write /tmp/a\nb: \\ kept") == "cannot write /tmp/a\\nb: \\ kept"


def test_metrics_labels_are_escaped_as_the_text_format_asks():
    from tumbler.observers.metrics import format_metrics
    program = {"pid": 7, "name": 'x\\n"q"', "rule": "r", "threads": 2, "domains": ["0"],
               "domain_load": [0.5], "moves": 0, "pins": 0, "speed": False}
    text = format_metrics({"version": "1", "uptime_s": 1, "own_cpu_s": 0, "programs": [program]})
    assert 'tumbler_program_threads{pid="7",name="x\\\\n\\"q\\"",rule="r"} 2' in text
    assert all(not line or line.startswith(("#", "tumbler_")) for line in text.split("\n"))


def test_a_stalled_read_misses_its_deadline_and_the_next_one_works():
    from tumbler.service.deadline import MAX_STUCK, DeadlineReader, Refused, Stalled
    def workers():
        return sum(t.name == "tumbler-reader" for t in threading.enumerate())
    others = workers()                  # other tests' readers, if any
    reader = DeadlineReader(deadline=0.05)
    never = threading.Event()
    try:
        with pytest.raises(Stalled):
            reader(never.wait)
        assert reader(lambda x: x + 1, 1) == 2          # a new worker took over
        with pytest.raises(KeyError):
            reader({}.__getitem__, "x")                 # exceptions reach the caller
        for _ in range(MAX_STUCK - 1):
            with pytest.raises(Stalled):
                reader(never.wait)
        with pytest.raises(Refused, match="stuck already"):
            reader(lambda: 1)
        # The stuck reads end (the process let go): their workers exit and
        # reads work again -- a read that was only slow costs nothing for good.
        never.set()
        wait_until(lambda: reader.stuck == 0, what="the stuck workers to finish")
        assert reader(lambda x: x * 2, 21) == 42
        wait_until(lambda: workers() == others + 1, what="the workers left to exit")
    finally:
        never.set()


def test_reads_refused_decline_no_process(tmp_path, monkeypatch, nobody):
    """While MAX_STUCK reads are stuck, command lines are not read: that is
    said once, and the processes are looked at again once reads work --
    not declined for good, one warning each, as before."""
    from tumbler.service import loop
    from tumbler.service.config import load_service_config
    from tumbler.service.deadline import Refused
    monkeypatch.setenv("TUMBLER_STATE_DIR", str(tmp_path / "state"))
    parent = subprocess.Popen(["sh", "-c", "for i in $(seq 5); do sleep 60 & done; wait"],
                              user="nobody", group="nogroup", start_new_session=True)
    try:
        wait_until(lambda: len(descendants(parent.pid)) == 5, what="five sleepers")
        sleepers = set(descendants(parent.pid))
        (tmp_path / "tumbler.yaml").write_text(
            'programs:\n  - name: none\n    match: {cmdline: "^no such command line$"}\n')
        lines = []
        service = loop.Service(load_service_config(str(tmp_path / "tumbler.yaml")),
                               str(tmp_path / "tumbler.yaml"),
                               lambda priority, message: lines.append(message))

        def refused(function, pid):
            raise Refused("8 reads are stuck already")
        service.reader = refused
        service.scan(cpu_budget=60)
        service.scan(cpu_budget=60)
        assert not sleepers & set(service.declined)
        assert lines == ["command lines are not read while 8 reads are stuck; processes a "
                         "rule selects by command line wait"], lines
        read = []

        def reading(function, pid):       # no deadline: a loaded machine is no stall here
            read.append(pid)
            return function(pid)
        service.reader = reading
        service.scan(cpu_budget=60)
        assert sleepers <= set(read) and sleepers <= set(service.unselected)
        assert lines.count("command lines are read again") == 1, lines
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_a_scan_keeps_to_its_cpu_budget_and_goes_on_where_it_stopped(tmp_path, monkeypatch,
                                                                    nobody):
    """A user who starts thousands of processes, or keeps renaming them so
    that their long command lines are matched again, makes a scan long: a
    scan stops once it has used its CPU budget, and the next one starts at
    the PID it stopped at, so the service's CPU stays bounded and every
    process is still looked at.  Reading a command line here burns 3 ms of
    CPU (a slow match); each scan may use 30 ms."""
    from tumbler.service import loop
    from tumbler.service.config import load_service_config
    monkeypatch.setenv("TUMBLER_STATE_DIR", str(tmp_path / "state"))
    # Not the test's children (the service never looks at its own).
    parent = subprocess.Popen(["sh", "-c", "for i in $(seq 30); do sleep 60 & done; wait"],
                              user="nobody", group="nogroup", start_new_session=True)
    try:
        wait_until(lambda: len(descendants(parent.pid)) == 30
                   and set(thread_names(parent.pid).values()) == {"sh"}
                   and all(set(thread_names(pid).values()) == {"sleep"}
                           for pid in descendants(parent.pid)), what="thirty sleepers")
        (tmp_path / "tumbler.yaml").write_text(
            'programs:\n  - name: none\n    match: {cmdline: "^no such command line$"}\n')
        service = loop.Service(load_service_config(str(tmp_path / "tumbler.yaml")),
                               str(tmp_path / "tumbler.yaml"), lambda priority, message: None)
        read = []

        def slow_reader(function, pid):
            start = time.process_time()
            while time.process_time() - start < 0.003:
                pass
            read.append(pid)
            return function(pid)
        service.reader = slow_reader
        budget, per_item = 0.03, 0.003
        scans = []
        wanted = set(descendants(parent.pid))
        while not wanted <= set(read):
            assert len(scans) < 200, "processes never looked at: %s" % (wanted - set(read))
            before, spent = len(read), time.process_time()
            service.scan(cpu_budget=budget)
            spent = time.process_time() - spent
            scans.append(len(read) - before)
            # Past the budget by at most the processes between two checks
            # (and the scan's own bookkeeping).
            assert spent < budget + loop.SCAN_CHECK_EVERY * per_item + 0.05, (spent, scans)
        # The first scan stopped short of the thirty sleepers and the rest.
        assert len(scans) > 1 and scans[0] < len(wanted), scans
        # (Processes of others may be read again: a rename, an exec.)
        mine = [pid for pid in read if pid in wanted]
        assert len(mine) == len(wanted), "a sleeper read twice before all were read"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
