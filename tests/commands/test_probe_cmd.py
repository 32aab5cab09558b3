"""``tumbler probe`` and ``--probe`` (ProbeObserver), run for real.

The bpftrace tests need root, bpftrace and tracefs (the test command
installs and mounts them) and are skipped otherwise; the missing-tool and
usage-error tests run everywhere on Linux.  No assertion depends on how long
anything took: counts are compared with each other or with the moves
tumbler itself made, and waits are failure guards only.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import types

import pytest

from support.helpers import REPO, WAIT_LIMIT_S, wait_for_threads, wait_until
from support.helpers import run_in_process as run
from tumbler.tracing import check as probe_check
from tumbler.tracing import parse
from tumbler.tracing import session as probe
from tumbler.commands.main import main
from tumbler.balance.controller import Controller
from tumbler.balance.domains import choose_domains
from tumbler.engine.model import Domain, Move
from tumbler.engine.policy import TumblerPolicy
from tumbler.errors import UsageError
from tumbler.platform import open_backend
from tumbler.observers.probes import ProbeObserver
from tumbler.commands.probe import check_lines, probe_command

if "probe" not in main.commands:
    main.add_command(probe_command)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _why_no_bpftrace():
    if not sys.platform.startswith("linux"):
        return "Linux only"
    if os.geteuid() != 0:
        return "bpftrace needs root"
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed (apt-get install bpftrace)"
    return None


NO_BPFTRACE = _why_no_bpftrace()
needs_bpftrace = pytest.mark.skipif(NO_BPFTRACE is not None, reason=NO_BPFTRACE or "")

ROW_KEYS = {"tid", "name", "usr", "sys", "lck", "lat"} | set(probe.FIELDS)
TOTAL_KEYS = {"threads", "usr", "sys", "lck", "lat", "mean_runq_ns", "migrations_per_s",
              "cross_domain_per_s"} | set(probe.FIELDS)
RECORD_KEYS = {"platform", "kinds", "duration_s", "traced_s", "ended", "level", "domains",
               "lost_events", "processes"}


@pytest.fixture
def locks_workload(workloads):
    """examples/workloads/locks, 4 threads on 2 mutexes, running for long."""
    proc = subprocess.Popen([os.path.join(workloads, "locks"), "-t", "4", "-p", "1000000"],
                            stdout=subprocess.DEVNULL, start_new_session=True)
    wait_for_threads(proc.pid, 5)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


# -- without the tool ----------------------------------------------------------------

@linux_only
def test_missing_bpftrace_is_one_line_saying_how_to_get_it(tmp_path, monkeypatch, sleeper):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    status, out, err = run("probe", "locks", "-p", str(sleeper.pid))
    assert status == 1 and out == ""
    assert err.startswith("tumbler: bpftrace not found: install it")
    assert "apt-get install bpftrace" in err and err.count("\n") == 1


@linux_only
@pytest.mark.parametrize("args, words", [
    (("--root", "/tmp", "probe", "locks"), "traces the running system"),
    (("--platform", "illumos", "probe", "locks"), "traces the running system, which is linux"),
    (("probe", "locks", "--duration", "0"), "--duration must be a positive number"),
    (("probe", "locks", "--level", "llc", "--domains", "0"), "exclude each other"),
])
def test_usage_errors(sleeper, args, words):
    status, out, err = run(*args, "-p", str(sleeper.pid))
    assert status == 2 and out == ""
    assert words in err and err.count("\n") == 1, err


@linux_only
def test_same_pid_twice_and_unknown_kind(sleeper):
    status, _, err = run("probe", "locks", "-p", str(sleeper.pid), "-p", str(sleeper.pid))
    assert status == 2 and "given twice" in err
    status, _, err = run("probe", "mutexes", "-p", str(sleeper.pid))
    assert status == 2 and "mutexes" in err


@linux_only
def test_unknown_process():
    pid = 1
    while os.path.exists("/proc/%d" % pid):
        pid += 7919
    status, out, err = run("probe", "all", "-p", str(pid))
    assert status == 1 and err == "tumbler: no such process: %d\n" % pid


# -- tumbler probe, for real ------------------------------------------------------------

@needs_bpftrace
@pytest.mark.usefixtures("two_cpus")
def test_probe_all_on_contended_locks_json(locks_workload):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    status, out, err = run("probe", "all", "-p", str(locks_workload.pid), "--duration", "1.5",
                           "--domains", "%d/%d" % tuple(cpus), "--json")
    assert status == 0, err
    record = json.loads(out)
    assert set(record) == RECORD_KEYS
    assert record["kinds"] == ["locks", "latency", "migrations"]
    assert record["ended"] == "duration" and record["level"] == "explicit"
    assert record["domains"] == ["%d" % cpus[0], "%d" % cpus[1]]
    (proc,) = record["processes"]
    assert proc["pid"] == locks_workload.pid and proc["name"] == "locks"
    assert proc["exited"] is False
    rows = {row["name"]: row for row in proc["threads"]}
    workers = [rows["locks-%d" % i] for i in range(4)]
    for row in proc["threads"]:
        assert set(row) == ROW_KEYS
    # Four threads on two mutexes and a barrier: most of them are blocked
    # in the 1.5 s (lock_count counts only the waits begun in it: on a busy
    # machine a thread may wait at the barrier for a slow one all along).
    assert sum(1 for row in workers if row["lock_ns"] > 0) >= 2, workers
    assert all(row["usr"] is not None and row["lck"] is not None for row in workers)
    totals = proc["totals"]
    assert set(totals) == TOTAL_KEYS and totals["threads"] == len(proc["threads"])
    for field in probe.FIELDS:
        assert totals[field] == sum(row[field] for row in proc["threads"])
    assert totals["lock_ns"] > 0
    # Each domain is one CPU: every migration crosses domains.
    for row in proc["threads"]:
        assert row["cross_domain"] == row["migrations"], row
        # LCK is lock time as a share of the window its values cover (the
        # JSON rounds both), and never above 100%.
        share = row["lock_ns"] * 100 / (record["traced_s"]["locks"] * 1e9)
        assert abs(row["lck"] - share) < 0.01 + share * 1e-3, row
        assert row["lck"] <= 100 and row["lat"] <= 100, row


@needs_bpftrace
@pytest.mark.usefixtures("two_cpus")
def test_probe_exec_traces_the_command_from_its_start(early_locks, tmp_path):
    """``tumbler --probe exec``: the command waits until the probes are
    attached, so lock waits that are all over in its first 0.3 s are
    counted (bpftrace alone takes up to a second to attach)."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    out = tmp_path / "summary.json"
    result = subprocess.run(
        [sys.executable, "-m", "tumbler", "--probe", "--domains", "%d/%d" % tuple(cpus),
         "--summary-json", str(out), "exec", "--", early_locks, "300", "1500"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "elapsed_s=" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["probe"]["failure"] is None, summary
    assert summary["probe"]["lock_count"] > 0 and summary["probe"]["lock_ns"] > 0, summary
    assert "lock wait" in result.stderr


@needs_bpftrace
def test_probe_exec_missing_command_is_127_before_tracing():
    result = subprocess.run([sys.executable, "-m", "tumbler", "--probe", "exec", "--",
                             "/nonexistent/prog"], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 127
    assert result.stderr.startswith("tumbler: /nonexistent/prog: ")
    assert result.stderr.count("\n") == 1


@needs_bpftrace
def test_probe_locks_text_shows_untraced_columns_as_dashes(locks_workload):
    status, out, err = run("probe", "locks", "-p", str(locks_workload.pid), "--duration", "1")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("domains: ")
    assert lines[1].startswith("PID %d (locks): 5 threads, " % locks_workload.pid)
    assert lines[1].endswith(" s traced (locks)")
    assert lines[2].split() == ["TID", "NAME", "USR", "SYS", "LCK", "LAT", "MIGR", "XDOM"]
    rows = [line.split() for line in lines[3:8]]
    assert [int(r[0]) for r in rows] == sorted(int(t) for t in
                                              os.listdir("/proc/%d/task" % locks_workload.pid))
    assert all(r[-3:] == ["-", "-", "-"] for r in rows), rows
    assert lines[8].startswith("total: USR ")
    assert "blocked (LCK " in lines[8] and "migrations" not in lines[8]
    assert len(lines) == 9


@needs_bpftrace
def test_probe_check_agrees_with_the_kernel_and_the_controls(lockwait):
    """``--check``: every thread's LAT against its schedstat run delay over
    the same window, and LCK of two control threads of tumbler's own (one
    blocked on a lock from before the trace to after it, one asleep in
    read(2)); lockwait's threads blocked from before the trace show 100%,
    the one that never takes a lock 0%."""
    status, out, err = run("probe", "all", "-p", str(lockwait.pid), "--duration", "1",
                           "--check", "--json")
    assert status == 0, err
    record = json.loads(out)
    assert set(record) == RECORD_KEYS | {"check"}
    (proc,) = record["processes"]                    # tumbler's own is not shown
    rows = {row["tid"]: row for row in proc["threads"]}
    for name in ("held", "cond", "waitv"):
        assert rows[lockwait.tids[name]]["lck"] == 100.0, rows[lockwait.tids[name]]
    assert rows[lockwait.tids["never"]]["lck"] == 0.0
    check = record["check"]
    assert check["ok"], check
    assert check["tolerance"] == {"relative": 0.05, "window_percent": 0.5, "per_wait_ns": 25000}
    lat = {f["thread"] for f in check["figures"] if f["what"] == "LAT"}
    assert lat == set(rows)
    controls = {f["thread"]: f for f in check["figures"] if f["what"] == "LCK"}
    assert controls["blocked"]["probe"] == controls["blocked"]["kernel"] == 100.0
    assert controls["asleep"]["probe"] == controls["asleep"]["kernel"] == 0.0


@needs_bpftrace
def test_probe_check_failing_is_status_1_and_one_line(lockwait, monkeypatch):
    # a tolerance no measurement meets: every figure that is not exactly
    # the kernel's disagrees
    monkeypatch.setattr(probe_check, "RELATIVE_TOLERANCE", 0.0)
    monkeypatch.setattr(probe_check, "WINDOW_TOLERANCE", -1.0)
    monkeypatch.setattr(probe_check, "PER_WAIT_NS", 0)
    status, out, err = run("probe", "all", "-p", str(lockwait.pid), "--duration", "0.5",
                           "--check")
    assert status == 1
    assert err.startswith("tumbler: probe check: ") and err.count("\n") == 1, err
    assert "disagree with the kernel's" in err
    lines = out.splitlines()
    start = lines.index(next(l for l in lines if l.startswith("check against the kernel")))
    assert "within 0% of its figure or -1% of the window, LAT 0 us" in lines[start]
    assert any("control thread blocked" in l for l in lines[start:])
    assert "DISAGREES" in out and lines[-1].endswith("figures disagree")


def test_probe_check_on_illumos_against_lwpusage(tmp_path):
    """illumos keeps LCK and LAT itself (pr_ltime, pr_wtime): --check
    compares each LWP's probe figures with their change between the
    window's two samples, over the LWP's own elapsed time (pr_rtime)."""
    from support import illumos_fixtures as fx
    from tumbler.commands.probe import Window, probe_record
    from tumbler.commands.shared import Snapshot
    from tumbler.platform.illumos.backend import IllumosBackend
    S = fx.NANOSEC

    def lwps(elapsed, lck, lat):
        return [{"lwpid": lwpid, "create_ns": 500 * S + lwpid, "rtime_ns": 100 * S + elapsed,
                 "ltime_ns": lck[i], "wtime_ns": lat[i], "sname": "S"}
                for i, lwpid in enumerate((1, 2, 3))]

    fx.write_kstat(str(tmp_path), fx.machine(1, 1, 2, 1))
    backend = IllumosBackend(str(tmp_path))
    fx.write_process(str(tmp_path), 4242, {"fname": "worker"},
                     lwps(0, (0, 7 * S, 3 * S), (S, 2 * S, 0)))
    before = backend.sample(4242)
    # 2 s later: LWP 2 blocked on locks 1 s of them and waited 0.5 s for a
    # CPU; LWP 3 blocked 2 s; LWP 1 waited 0.1 s
    fx.write_process(str(tmp_path), 4242, {"fname": "worker"},
                     lwps(2 * S, (0, 8 * S, 5 * S), (S + S // 10, 2 * S + S // 2, 0)))
    after = backend.sample(4242)
    # what the DTrace scripts printed over the same 2 s: LWP 3's lock time
    # is 10% short
    stream = parse.ProbeStream("dtrace")
    for line in ("tumbler-probe locktime ready", "tumbler-probe runqlat ready",
                 "locktime pid=4242 tid=2 ns=%d count=4" % (S * 99 // 100),
                 "locktime pid=4242 tid=3 ns=%d count=1" % (S * 18 // 10),
                 "tumbler-probe locktime period",
                 "runqlat pid=4242 tid=1 ns=%d count=3" % (S // 10),
                 "runqlat pid=4242 tid=2 ns=%d count=9" % (S // 2),
                 "tumbler-probe runqlat period"):
        stream.feed(line)
    window = Window({4242: Snapshot(before, None)}, {4242: Snapshot(after, None)},
                    stream.values(), {"locks": 2.0, "latency": 2.0}, 2.0, "duration")
    info = types.SimpleNamespace(pid=4242, name="worker")
    choice = types.SimpleNamespace(level="explicit", domains=[frozenset({0, 1})])
    record = probe_record("illumos", ("locks", "latency"), [info], window, choice, 0,
                          check=True)
    figures = {(f["what"], f["thread"]): (f["probe"], f["kernel"], f["ok"])
               for f in record["check"]["figures"]}
    assert figures == {
        ("LAT", 1): (5.0, 5.0, True), ("LCK", 1): (0.0, 0.0, True),
        ("LAT", 2): (25.0, 25.0, True), ("LCK", 2): (49.5, 50.0, True),
        ("LAT", 3): (0.0, 0.0, True), ("LCK", 3): (90.0, 100.0, False),
    }
    assert record["check"]["ok"] is False
    text = "\n".join(check_lines(record["check"]))
    assert "LCK PID 4242 TID 3" in text and "DISAGREES" in text
    assert text.endswith("1 of 6 figures disagree")


@needs_bpftrace
def test_signal_ends_the_window_and_prints_what_was_traced(locks_workload):
    code = ("from tumbler.commands.main import main, entry_point; "
            "from tumbler.commands.probe import check_lines, probe_command; "
            "'probe' in main.commands or main.add_command(probe_command); entry_point()")
    cmd = subprocess.Popen([sys.executable, "-c", code, "probe", "locks", "-p",
                            str(locks_workload.pid), "--duration", "600", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        # bpftrace is started after the signal handlers are in place.
        wait_until(lambda: bpftrace_children(cmd.pid), "bpftrace to start")
        cmd.send_signal(signal.SIGINT)
        out, err = cmd.communicate(timeout=WAIT_LIMIT_S)
    finally:
        if cmd.poll() is None:
            cmd.kill()
            cmd.wait()
    assert cmd.returncode == 0, err
    record = json.loads(out)
    assert record["ended"] == "signal %d" % signal.SIGINT
    assert record["processes"][0]["pid"] == locks_workload.pid
    assert not bpftrace_children(cmd.pid)


def bpftrace_children(pid):
    """PIDs of bpftrace processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        if ppid == pid and comm == "bpftrace":
            found.append(int(entry))
    return found


# -- ProbeObserver without tracing: its arithmetic ----------------------------------------

class ScriptedSession:
    """Stands in for ProbeSession: returns given cumulative snapshots, the
    scripts printing every 0.1 s."""

    def __init__(self, snaps, final):
        self.snaps, self.final = list(snaps), final
        self.started_with = None
        self.stopped = self.killed = False
        self.prints = 0

    def start(self, pids, kinds, domain_of_cpu):
        self.started_with = (list(pids), tuple(kinds), dict(domain_of_cpu))

    def reading(self):
        if not self.stopped:
            self.prints += 1
        return (self.final if self.stopped else self.snaps.pop(0),
                {kind: (0, self.prints * 100_000_000) for kind in self.started_with[1]})

    def stop(self):
        self.stopped = True
        return self.final

    def kill(self):
        self.killed = True


def rec(**values):
    out = probe.empty_record()
    out.update(values)
    return out


def fake_controller(targets=(50,)):
    return types.SimpleNamespace(
        targets=list(targets), domains=[Domain(0, {0, 1}), Domain(1, {2, 3})],
        stats=types.SimpleNamespace(intervals=0),
        warn=lambda message: None)


def test_observer_keeps_interval_deltas_and_totals(monkeypatch):
    snaps = [
        {},                                                  # at start
        {(50, 51): rec(lock_ns=100, lock_count=1, migrations=2, cross_domain=1)},
        {(50, 51): rec(lock_ns=300, lock_count=3, migrations=2, cross_domain=1),
         (50, 52): rec(runq_ns=40, runq_count=4)},
    ]
    final = {(50, 51): rec(lock_ns=350, lock_count=4, migrations=5, cross_domain=3),
             (50, 52): rec(runq_ns=40, runq_count=4)}
    session = ScriptedSession(snaps, final)
    monkeypatch.setattr(probe, "ProbeSession", lambda *a, **k: session)
    observer = ProbeObserver()
    controller = fake_controller()
    assert observer.log_fields(controller) == {}            # not started: nothing
    observer.start(controller)
    assert session.started_with == ([50], ("locks", "latency", "migrations"),
                                    {0: 0, 1: 0, 2: 1, 3: 1})

    controller.stats.intervals = 1
    first = observer.log_fields(controller)                  # before write_round
    observer.write_round(controller, None, [])               # same round: no new reading
    assert first["probe"]["lock_ns"] == 100 and first["probe"]["migrations"] == 2
    assert first["probe"]["traced_s"] == {"locks": 0.1, "latency": 0.1, "migrations": 0.1}
    assert first["probe"]["per_thread"] == {"50:51": {"lock_ns": 100, "lock_count": 1,
                                                      "migrations": 2, "cross_domain": 1}}
    controller.stats.intervals = 2
    observer.write_round(controller, None, [])
    second = observer.log_fields(controller)["probe"]
    assert {k: second[k] for k in probe.FIELDS} == {
        "lock_ns": 200, "lock_count": 2, "runq_ns": 40, "runq_count": 4, "migrations": 0,
        "cross_domain": 0}
    assert second["per_thread"] == {"50:51": {"lock_ns": 200, "lock_count": 2},
                                    "50:52": {"runq_ns": 40, "runq_count": 4}}
    observer.close()
    assert session.stopped and session.killed
    assert observer.totals == {"lock_ns": 350, "lock_count": 4, "runq_ns": 40,
                               "runq_count": 4, "migrations": 5, "cross_domain": 3}
    (line,) = observer.summary_lines()
    assert "lock wait 0.000 s in 4 waits" in line
    assert "run-queue latency mean 0.000 ms over 4 waits" in line
    assert "5 migrations" in line and "3 cross-domain" in line
    observer.close()                                         # twice is harmless


def test_observer_only_reports_the_kinds_it_traces(monkeypatch):
    session = ScriptedSession([{}, {(50, 51): rec(migrations=3, cross_domain=2)}], {})
    monkeypatch.setattr(probe, "ProbeSession", lambda *a, **k: session)
    observer = ProbeObserver(kinds=("migrations",))
    controller = fake_controller()
    observer.start(controller)
    controller.stats.intervals = 1
    fields = observer.log_fields(controller)["probe"]
    assert set(fields) == {"interval_s", "traced_s", "migrations", "cross_domain",
                           "per_thread"}
    observer.close()
    (line,) = observer.summary_lines()
    assert "lock" not in line and "run-queue" not in line and "3 migrations" in line


def test_observer_rejects_unknown_kinds():
    with pytest.raises(UsageError, match="probe kinds are"):
        ProbeObserver(kinds=("locks", "cache"))


def test_observer_without_targets_does_nothing(monkeypatch):
    monkeypatch.setattr(probe, "ProbeSession", lambda *a, **k: pytest.fail("started"))
    observer = ProbeObserver()
    observer.start(fake_controller(targets=()))
    observer.close()
    assert observer.summary_lines() == []


# -- ProbeObserver in a real balancing run ------------------------------------------------

class FlipPolicy(TumblerPolicy):
    """The tumbler policy's numbers, but every round moves each of
    ``workers`` to the other of two domains."""

    def __init__(self, workers):
        super().__init__()
        self.workers = set(workers)

    def plan(self, threads, domains):
        plan = super().plan(threads, domains)
        moves = [Move(t.tid, t.domain, 1 - t.domain) for t in threads
                 if t.tid in self.workers and t.domain is not None]
        assignment = dict(plan.assignment)
        assignment.update((m.tid, m.dst) for m in moves)
        return plan.replace(moves=moves, assignment=assignment,
                            reason="test: flip the workers")


def last_cpu(pid, tid):
    with open("/proc/%d/task/%d/stat" % (pid, tid)) as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def wait_on_their_domains(controller, pid, workers):
    """Wait until every worker has run on a CPU of the domain it is bound to."""
    for tid in workers:
        cpus = controller.domains[controller.threads[(pid, tid)].domain].cpus
        wait_until(lambda: last_cpu(pid, tid) in cpus, "thread %d to run on %s" % (tid, cpus))


def wind_down(observer, controller, proc):
    """The end of a test that balanced ``proc`` with ``controller`` and
    ``observer``: probes stopped, threads put back, the program gone."""
    observer.close()
    if controller is not None:
        controller.restore_all()
    proc.kill()
    proc.wait()


ROUNDS = 4


@needs_bpftrace
def test_observer_counts_tumbler_moves_as_cross_domain_migrations(duty, two_cpus):
    cpu_a, cpu_b = two_cpus
    proc = subprocess.Popen([duty, "600", "30", "30"])
    backend = open_backend()
    controller = None
    observer = ProbeObserver(kinds=("migrations", "latency"))
    try:
        wait_for_threads(proc.pid, 3)
        workers = [t for t in backend.thread_ids(proc.pid) if t != proc.pid]
        choice = choose_domains(backend.topology(), {cpu_a, cpu_b}, "auto",
                                [frozenset([cpu_a]), frozenset([cpu_b])])
        warnings = []
        controller = Controller(backend, backend.binder("affinity"), FlipPolicy(workers),
                                choice, observers=[observer], warn=warnings.append)
        # FlipPolicy moves every thread every round; the loop would hold a
        # regrouping for a load window after the last one (rounds here come
        # as fast as the test makes them).
        controller.regroup_hold_ns = 0
        observer.check()
        controller.add_target(proc.pid)          # places every thread in a domain
        wait_on_their_domains(controller, proc.pid, workers)
        observer.start(controller)
        session = observer.session
        logged = []
        for _ in range(ROUNDS):
            controller.round()
            logged.append(observer.log_fields(controller)["probe"])
            wait_on_their_domains(controller, proc.pid, workers)
        moves = {tid: controller.threads[(proc.pid, tid)].migrations for tid in workers}
        observer.close()
        assert all(c.proc.poll() is not None for c in session._children)
    finally:
        wind_down(observer, controller, proc)

    assert moves == {tid: ROUNDS for tid in workers}
    assert warnings == []
    # Bound to single CPUs, a thread migrates only when tumbler moves it,
    # and each move between the two domains is one cross-domain migration.
    assert observer.totals["cross_domain"] == sum(moves.values())
    assert observer.totals["migrations"] == observer.totals["cross_domain"]
    # The per-round log lines add up to no more than the total (the rest
    # arrives with the final print at close).
    assert sum(entry["cross_domain"] for entry in logged) <= observer.totals["cross_domain"]
    keys = {key for entry in logged for key in entry["per_thread"]}
    assert keys <= {"%d:%d" % (proc.pid, tid) for tid in [proc.pid] + workers}
    assert observer.totals["runq_count"] > 0
    (line,) = observer.summary_lines()
    assert "%d migrations" % sum(moves.values()) in line
    assert "%d cross-domain" % sum(moves.values()) in line


@needs_bpftrace
def test_observer_puts_lock_time_in_the_round_it_happens(lockwait, two_cpus):
    """--probe while tumbler moves every thread each round: a wait shows in
    each round it spans, as far as it went -- blocked all round is 100% of
    the round's traced time, never more -- starting and ending in the
    rounds where it starts and ends, not in one lump when it ends."""
    cpu_a, cpu_b = two_cpus
    backend = open_backend()
    observer = ProbeObserver(kinds=("locks",))
    controller = None
    logged = []
    try:
        choice = choose_domains(backend.topology(), {cpu_a, cpu_b}, "auto",
                                [frozenset([cpu_a]), frozenset([cpu_b])])
        warnings = []
        controller = Controller(backend, backend.binder("affinity"),
                                FlipPolicy(lockwait.tids.values()), choice,
                                observers=[observer], warn=warnings.append)
        controller.regroup_hold_ns = 0
        observer.check()
        controller.add_target(lockwait.pid)
        observer.start(controller)
        session = observer.session

        def rounds(count):
            for _ in range(count):
                session.next_reading()          # every round spans a print
                controller.round()
                logged.append(observer.log_fields(controller)["probe"])

        rounds(3)
        lockwait.tell("block late")
        lockwait.wait_blocked("late")
        rounds(3)
        lockwait.tell("release held")
        lockwait.times("held")
        rounds(3)
    finally:
        observer.close()
        if controller is not None:
            controller.restore_all()
        backend.close()
    assert warnings == []

    def lock_ns(entry, name):
        return entry["per_thread"].get("%d:%d" % lockwait.key(name), {}).get("lock_ns", 0)

    rounding = 1e5                  # traced_s is given to 0.1 ms
    for i, entry in enumerate(logged):
        span = entry["traced_s"]["locks"] * 1e9
        assert span > 0
        for rec in entry["per_thread"].values():
            assert rec["lock_ns"] <= span + rounding, (i, entry)
        for name in ("cond", "waitv"):                       # blocked all along
            assert abs(lock_ns(entry, name) - span) <= rounding, (i, name, entry)
        assert lock_ns(entry, "never") == 0
        late, held = lock_ns(entry, "late"), lock_ns(entry, "held")
        if i < 3:
            assert late == 0
        if i in (4, 5, 7, 8):
            assert abs(late - span) <= rounding, (i, entry)
        if i < 6:
            assert abs(held - span) <= rounding, (i, entry)
        if i in (6,):
            assert 0 < held < span, (i, entry)          # released in this round
        if i > 6:
            assert held == 0, (i, entry)
    assert 0 < lock_ns(logged[3], "late") < logged[3]["traced_s"]["locks"] * 1e9


@needs_bpftrace
def test_observer_survives_the_death_of_bpftrace(duty, two_cpus):
    cpu_a, cpu_b = two_cpus
    proc = subprocess.Popen([duty, "600", "10"])
    backend = open_backend()
    observer = ProbeObserver(kinds=("migrations",))
    controller = None
    try:
        wait_for_threads(proc.pid, 2)
        choice = choose_domains(backend.topology(), {cpu_a, cpu_b}, "auto",
                                [frozenset([cpu_a]), frozenset([cpu_b])])
        warnings = []
        controller = Controller(backend, backend.binder("affinity"), TumblerPolicy(), choice,
                                observers=[observer], warn=warnings.append)
        controller.add_target(proc.pid)
        observer.start(controller)
        (child,) = observer.session._children
        os.kill(child.proc.pid, signal.SIGKILL)
        wait_until(child.eof.is_set, "bpftrace to die")
        controller.round()
        controller.round()                       # balancing goes on
        assert observer.session is None and child.proc.poll() is not None
    finally:
        wind_down(observer, controller, proc)
    assert len(warnings) == 1 and warnings[0].startswith("probes stopped, balancing goes on:")
    assert "killed by signal 9" in warnings[0]
    assert controller.stats.intervals == 2
    lines = observer.summary_lines()
    assert lines[-1].startswith("probes stopped early: ")
