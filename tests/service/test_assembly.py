"""The run assembly (tumbler/service/assembly.py): what each part of a run
is made of, and how a run is handed back."""

import os
import sys

import pytest

from tumbler.balance.domains import DomainChoice
from tumbler.config import Config
from tumbler.observers.runlog import RunLog
from tumbler.observers.verbose import VerboseReport
from tumbler.platform.base import NullBinder
from tumbler.service import assembly


class Backend:
    """Records which binder it was asked for."""

    def __init__(self):
        self.asked = []

    def binder(self, name=None):
        self.asked.append(name)
        return "binder %s" % name


def test_a_run_that_moves_nothing_gets_a_binder_that_binds_nothing():
    backend = Backend()
    assert isinstance(assembly.binder_for(backend, False, "cpuset"), NullBinder)
    assert backend.asked == []


def test_the_binder_is_the_backends_own_default_unless_one_is_named():
    """None reaches the backend (affinity on Linux, pset on illumos: the
    service on illumos once asked for affinity and managed nothing)."""
    backend = Backend()
    assert assembly.binder_for(backend, True) == "binder None"
    assert assembly.binder_for(backend, True, "cpuset") == "binder cpuset"
    assert backend.asked == [None, "cpuset"]


def test_the_policy_takes_what_the_file_sets_and_the_engines_defaults_elsewhere():
    config = Config(tolerance=0.3, idle_interval_ms=900, speed={"threshold": 0.5})
    policy = assembly.policy_for("tumbler", config, interval_ms=250)
    assert policy.name == "tumbler"
    assert policy.tolerance == 0.3 and policy.fixed_interval_ms == 250
    assert policy.table.idle_interval_ms == 900
    assert policy.speed_params.threshold == 0.5
    default = assembly.policy_for("tumbler", Config())
    assert default.fixed_interval_ms is None
    assert default.table.rows == policy.table.rows          # the engine's table
    assert default.tolerance != 0.3


def test_observers_are_made_only_as_asked(tmp_path):
    assert assembly.observers_for() == []
    log_path = tmp_path / "runs.jsonl"
    observers = assembly.observers_for(log_path=str(log_path), verbose=True, append=True,
                                       log_fields=lambda controller: {"pid": 7})
    try:
        assert [type(o) for o in observers] == [RunLog, VerboseReport]
        assert observers[0].extra[-1](None) == {"pid": 7}
    finally:
        for observer in observers:
            observer.close()


def test_the_unrestored_line_counts_threads():
    assert assembly.unrestored(1) == ("1 thread could not be restored; `tumbler restore` "
                                      "retries")
    assert assembly.unrestored(3).startswith("3 threads could not be restored")


class Returned:
    """A run that hands back ``failed`` threads, with a journal or not."""

    def __init__(self, failed, journal, log):
        self.failed, self.journal, self.log = failed, journal, log

    def hand_back(self):
        self.log.append("run")
        return self.failed


class Sharing:
    def __init__(self, log):
        self.log = log

    def close(self):
        self.log.append("sharing")


def test_hand_back_all_closes_sharing_first_and_says_the_unrestored_once(capsys):
    log = []
    runs = [Returned(2, object(), log), Returned(1, object(), log)]
    assert assembly.hand_back_all(runs, Sharing(log)) == 3
    assert log == ["sharing", "run", "run"]
    assert capsys.readouterr().err == ("tumbler: 3 threads could not be restored; "
                                       "`tumbler restore` retries\n")


def test_a_run_without_a_journal_says_nothing_of_what_restore_could_retry(capsys):
    assert assembly.hand_back_all([Returned(1, None, [])]) == 1
    assert capsys.readouterr().err == ""


class Journal:
    def __init__(self):
        self.attached = []

    def attach(self, binder, domains):
        self.attached.append((binder, [sorted(d) for d in domains]))

    def close(self, keep=False):
        self.attached.append(("closed", keep))


class Observer:
    def __init__(self):
        self.calls = []

    def start(self, controller):
        self.calls.append(("start", tuple(controller.targets)))

    def write_round(self, controller, plan, applied):
        pass

    def close(self):
        self.calls.append("close")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: the running system")
def test_a_run_is_a_controller_with_its_journal_attached_and_hands_back_whole():
    """A run of this process (observe: nothing moves): the journal is told
    the binder and the domains as the controller is made; observe() starts
    the observers on the targets; hand_back restores, closes the journal
    and the observers."""
    from tumbler.platform import open_backend
    backend = open_backend()
    cpus = frozenset(os.sched_getaffinity(0))
    binder, journal, observer = NullBinder(), Journal(), Observer()
    run = assembly.Run(os.getpid(), backend, assembly.policy_for("observe", Config()),
                       DomainChoice("explicit", (cpus,), "test"), binder,
                       Config(discover_ms=250), name="me", journal=journal,
                       observers=[observer])
    assert run.controller.journal is journal and run.controller.binder is binder
    assert run.controller.discover_s == 0.25          # the file's loop options
    assert journal.attached == [(binder, [sorted(cpus)])]
    run.controller.add_target(os.getpid())
    run.observe()
    assert observer.calls == [("start", (os.getpid(),))]
    assert run.hand_back() == 0
    assert journal.attached[-1] == ("closed", False)
    assert observer.calls[-1] == "close"


def test_discard_closes_what_a_run_that_never_began_opened():
    journal, observer = Journal(), Observer()

    class Summary:
        closed = False

        def close(self):
            self.closed = True
    summary = Summary()
    assembly.discard(journal, [observer], None, summary)
    assert journal.attached == [("closed", False)]
    assert observer.calls == ["close"] and summary.closed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: the running system")
def test_build_run_makes_the_policy_and_binder_each_command_s_settings_ask_for():
    """One call per run (-p, exec, --share space): the policy named, with
    --interval and the file's loop options; a binder that binds nothing
    under -n, the backend's own otherwise, or the one the command checked
    before its start (exec)."""
    from types import SimpleNamespace
    from tumbler.platform import open_backend
    backend = open_backend()
    choice = DomainChoice("explicit", (frozenset(os.sched_getaffinity(0)),), "test")

    def settings(**given):
        fields = dict(policy="tumbler", dry_run=False, binder=None, interval_ms=None,
                      capacity="cpus", config=Config(discover_ms=250))
        fields.update(given)
        return SimpleNamespace(**fields)
    runs = []
    try:
        moving = assembly.build_run(settings(interval_ms=300), 1, backend, choice)
        runs.append(moving)
        assert moving.controller.policy.name == "tumbler"
        assert moving.controller.policy.fixed_interval_ms == 300
        assert moving.controller.discover_s == 0.25
        assert type(moving.controller.binder) is type(backend.binder(None))
        assert not isinstance(moving.controller.binder, NullBinder)
        dry = assembly.build_run(settings(dry_run=True), 2, backend, choice)
        runs.append(dry)
        assert isinstance(dry.controller.binder, NullBinder) and dry.controller.dry_run
        assert moving.controller.other.capacity_meter is None       # --capacity cpus
        measured = assembly.build_run(settings(capacity="measured"), 4, backend, choice)
        runs.append(measured)
        assert measured.controller.other.capacity_meter is not None
        checked = NullBinder()
        given = assembly.build_run(settings(policy="observe"), 3, backend, choice,
                                   binder=checked, first_interval_ms=50)
        runs.append(given)
        assert given.controller.binder is checked
        assert given.controller.timings.first_interval_ms == 50 and given.key == 3
    finally:
        for run in runs:
            run.hand_back()


def test_a_service_program_counts_no_other_managed_program_as_other_work():
    """The service's counting of other work (loop.py, Service._counting):
    the file's capacity, smoothed over CAPACITY_SMOOTH_WINDOWS, and the CPU
    every *other* program received on the CPUs not counted."""
    from types import SimpleNamespace
    from tumbler.service import loop

    def program(pid, received):
        return SimpleNamespace(pid=pid, received_on=lambda cpus: received * len(cpus))
    service = SimpleNamespace(programs={7: program(7, 0.5), 8: program(8, 0.25),
                                        9: program(9, 0.125)})
    counting = loop.Service._counting(service, 7, "measured")
    assert counting.capacity == "measured"
    assert counting.smooth_windows == loop.CAPACITY_SMOOTH_WINDOWS
    assert counting.managed_elsewhere(frozenset({0, 1})) == 0.75      # 8's and 9's only
