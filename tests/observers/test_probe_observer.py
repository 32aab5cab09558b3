"""The probe observer (observers/probes.py, ``--probe``) on a scripted
probe session: what it starts tracing, each round's interval of deltas
(per thread and summed), the totals, the summary, and tracing that fails
-- balancing goes on, one warning.  The real bpftrace runs are in
tests/commands/test_probe_cmd.py."""

import pytest

from support.observed import Clock, make_controller
from tumbler.engine.model import Domain
from tumbler.errors import TumblerError, UsageError
from tumbler.observers import probes as probes_module
from tumbler.observers.probes import ProbeObserver

S = 1_000_000_000
DOMAINS = [Domain(0, {0, 1}), Domain(1, {2, 3})]


class ScriptedSession:
    """ProbeSession's interface; its readings are ``READINGS``, returned
    (or raised) in turn, the last one again once they run out."""

    READINGS = []
    made = []

    def __init__(self, platform_name, period_ms):
        self.platform_name, self.period_ms = platform_name, period_ms
        self.readings = list(self.READINGS)
        self.started_with = None
        self.stopped = False
        self.kills = 0
        self.made.append(self)

    def start(self, pids, kinds, cpu_domains):
        self.started_with = (pids, kinds, cpu_domains)

    def reading(self):
        answer = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def stop(self):
        self.stopped = True

    def kill(self):
        self.kills += 1

    def tool_pids(self):
        return (4321,)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(100.0)
    monkeypatch.setattr(probes_module, "time", clock)
    return clock


@pytest.fixture
def sessions(monkeypatch):
    """ScriptedSession in place of ProbeSession, for one test: set
    ``sessions.READINGS``, find them in ``sessions.made``."""
    sessions = type("Sessions", (ScriptedSession,), {"READINGS": [], "made": []})
    monkeypatch.setattr(probes_module.probe, "ProbeSession", sessions)
    return sessions


def record(**fields):
    return dict(dict.fromkeys(("lock_ns", "lock_count", "runq_ns", "runq_count",
                               "migrations", "cross_domain"), 0), **fields)


def spans(locks_ns, migrations_ns):
    return {"locks": (0, locks_ns), "migrations": (0, migrations_ns)}


def test_kinds_are_checked_and_kept_in_their_order():
    observer = ProbeObserver(kinds=("migrations", "locks"), platform_name="linux")
    assert observer.kinds == ("locks", "migrations")
    assert observer.fields == ("lock_ns", "lock_count", "migrations", "cross_domain")
    with pytest.raises(UsageError) as caught:
        ProbeObserver(kinds=("locks", "disk"))
    assert str(caught.value) == "probe kinds are locks, latency, migrations, not disk, locks"
    with pytest.raises(UsageError):
        ProbeObserver(kinds=())


def test_rounds_totals_and_summary(clock, sessions):
    sessions.READINGS = [
        # when tracing starts
        ({(100, 1): record(lock_ns=10, lock_count=1, migrations=2)}, spans(1 * S, 1 * S)),
        # round 1: thread 100:1 waited 3 ms in 3 waits; 200:7 is new
        ({(100, 1): record(lock_ns=3_000_010, lock_count=4, migrations=2),
          (200, 7): record(migrations=5, cross_domain=2)}, spans(1.9 * S, 1.95 * S)),
        # round 2: 100:1 has left the scripts' maps, 200:7 migrated once more
        ({(200, 7): record(migrations=6, cross_domain=2)}, spans(2.9 * S, 2.95 * S)),
        # what the scripts print last, at close
        ({(200, 7): record(migrations=8, cross_domain=3)}, spans(3.9 * S, 3.95 * S))]
    observer = ProbeObserver(kinds=("locks", "migrations"), platform_name="linux",
                             period_ms=50)
    controller = make_controller(DOMAINS, targets=[100, 200])
    observer.start(controller)
    (session,) = sessions.made
    assert (session.platform_name, session.period_ms) == ("linux", 50)
    assert session.started_with == ([100, 200], ("locks", "migrations"),
                                    {0: 0, 1: 0, 2: 1, 3: 1})
    assert observer.processes() == (4321,)

    clock.now, controller.stats.intervals = 101.0, 1
    observer.write_round(controller, None, [])
    first = {"interval_s": 1.0, "traced_s": {"locks": 0.9, "migrations": 0.95},
             "lock_ns": 3_000_000, "lock_count": 3, "migrations": 5, "cross_domain": 2,
             "per_thread": {"100:1": {"lock_ns": 3_000_000, "lock_count": 3},
                            "200:7": {"migrations": 5, "cross_domain": 2}}}
    assert observer.log_fields(controller) == {"probe": first}     # read once a round

    clock.now, controller.stats.intervals = 103.0, 2
    second = {"interval_s": 2.0, "traced_s": {"locks": 1.0, "migrations": 1.0},
              "lock_ns": 0, "lock_count": 0, "migrations": 1, "cross_domain": 0,
              "per_thread": {"200:7": {"migrations": 1}}}
    assert observer.log_fields(controller) == {"probe": second}    # log first this time
    observer.write_round(controller, None, [])
    assert observer.log_fields(controller) == {"probe": second}

    clock.now = 105.0
    observer.close()
    assert session.stopped and session.kills == 1 and observer.processes() == ()
    assert observer.totals == {"lock_ns": 3_000_000, "lock_count": 3, "migrations": 8,
                               "cross_domain": 3}
    assert observer.summary_lines() == [
        "probes over 5.0 s: lock wait 0.003 s in 3 waits; "
        "8 migrations (1.6/s), 3 cross-domain (0.6/s)"]
    assert observer.summary_fields() == {"probe": {
        "traced_s": 5.0, "failure": None, "lock_ns": 3_000_000, "lock_count": 3,
        "migrations": 8, "cross_domain": 3}}
    observer.close()                                # twice is harmless
    assert session.kills == 1


def test_latency_gives_the_mean_wait(clock, sessions):
    sessions.READINGS = [({}, {}), ({(100, 1): record(runq_ns=6_000_000, runq_count=4)},
                                    {"latency": (0, 2 * S)})]
    observer = ProbeObserver(kinds=("latency",), platform_name="linux")
    controller = make_controller(DOMAINS, targets=[100])
    observer.start(controller)
    clock.now = 102.0
    observer.close()
    assert observer.summary_lines() == [
        "probes over 2.0 s: run-queue latency mean 1.500 ms over 4 waits"]
    assert observer.summary_fields()["probe"]["runq_mean_ms"] == 1.5


def test_tracing_that_fails_mid_run_stops_with_one_warning(clock, sessions):
    sessions.READINGS = [({}, {}), TumblerError("bpftrace exited with status 1")]
    observer = ProbeObserver(kinds=("locks",), platform_name="linux")
    controller = make_controller(DOMAINS, targets=[100])
    observer.start(controller)
    (session,) = sessions.made
    clock.now, controller.stats.intervals = 101.0, 1
    observer.write_round(controller, None, [])
    assert controller.warned == ["probes stopped, balancing goes on: "
                                 "bpftrace exited with status 1"]
    assert session.kills == 1 and observer.log_fields(controller) == {}
    controller.stats.intervals = 2
    observer.write_round(controller, None, [])       # no session: nothing more
    observer.close()
    assert len(controller.warned) == 1 and session.kills == 1
    assert observer.summary_lines() == [
        "probes over 0.0 s: lock wait 0.000 s in 0 waits",
        "probes stopped early: bpftrace exited with status 1"]
    assert observer.summary_fields()["probe"]["failure"] == "bpftrace exited with status 1"


def test_tracing_that_cannot_start_leaves_no_process(clock, sessions):
    sessions.READINGS = [TumblerError("bpftrace: permission denied")]
    observer = ProbeObserver(kinds=("locks",), platform_name="linux")
    with pytest.raises(TumblerError):
        observer.start(make_controller(DOMAINS, targets=[100]))
    (session,) = sessions.made
    assert session.kills == 1 and observer.session is None
    assert observer.summary_lines() == [] and observer.summary_fields() == {}
    assert observer.log_fields() == {}


def test_nothing_is_traced_without_targets(sessions):
    observer = ProbeObserver(kinds=("locks",), platform_name="linux")
    observer.start(make_controller(DOMAINS))
    assert sessions.made == [] and observer.processes() == ()
