"""The exit summary (observers/summary.py): its lines on stderr, the same
figures for ``--summary-json``, and a space-shared run's summary."""

from types import SimpleNamespace

from support.observed import make_controller
from tumbler.engine.model import Domain
from tumbler.observers.summary import shared_summary_lines, summary_lines, summary_record


def finished(**changes):
    """A run of 40 rounds (10 quiet) over domains 0 and 1 (other work left
    0.5 of CPU 1), its spread falling from 0.8 to 0.2, speed balancing and
    an outsider, a slow start."""
    fields = dict(intervals=40, quiet=10, threads_seen=5, processes_seen={7, 8}, migrations=6,
                  threads_moved=4, pins=3,
                  outsiders=1, priority=lambda: "nice -5, balancing at nice 0",
                  startup_s=1.5, policy="auto", note="explicit domains 0/1")
    fields.update(changes)
    controller = make_controller([Domain(0, {0}), Domain(1, {1}, measured=0.5)], **fields)
    for spread in (0.8, 0.8, 0.6, 0.6, 0.4, 0.4, 0.2, 0.2):
        controller.stats.spreads.append(spread)
    return controller


def test_every_line_of_a_full_summary():
    assert summary_lines(finished(), 10.0, 0.06, "command exited") == [
        "ran 10 s (command exited), policy auto",
        "grouped 5 threads of 2 processes into 2 domains; moved 4 threads between them, "
        "6 moves in all (0.6 a second)",
        "speed balancing: 3 changes of a thread's core (0.3 a second)",
        "explicit domains 0/1",
        "40 rounds, 10 of them quiet (nothing to change)",
        "measured capacity at the end (CPUs other work leaves): 1.00 / 0.50",
        "1 thread allowed only CPUs outside the domains: left alone",
        "domain loads differed by 80% (CV) early in the run, 20% late",
        "priority: nice -5, balancing at nice 0",
        "start-up took 1.5 s of it (an overloaded machine delays the start before tumbler "
        "can raise its priority)",
        "own CPU time 0.060 s (0.6% of one CPU)"]


def test_a_run_that_ends_with_its_domains_merged_still_grouped_over_them():
    """Merged at the end (auto, engine/merging.py), the run grouped over
    its two domains until then: it says so, not that it watched one."""
    controller = finished()
    controller.domains = [Domain(0, {0, 1})]
    assert summary_lines(controller, 10.0, 0.06, "command exited")[1] == (
        "grouped 5 threads of 2 processes into 2 domains; moved 4 threads between them, "
        "6 moves in all (0.6 a second)")


def test_a_quiet_run_says_only_what_happened():
    """No measured capacity, outsider, pin, round, priority or slow start:
    none of their lines; a run of no time has no rates."""
    controller = make_controller([Domain(0, {0}), Domain(1, {1})], dry_run=True,
                                 note="explicit domains 0/1", outsiders=2)
    assert summary_lines(controller, 0.0, 0.0, "SIGTERM") == [
        "ran 0.0 s (SIGTERM), policy tumbler, dry run: nothing was moved",
        "grouped 0 threads into 2 domains; moved no thread between them",
        "explicit domains 0/1",
        "0 rounds, 0 of them quiet (nothing to change)",
        "2 threads allowed only CPUs outside the domains: left alone",
        "own CPU time 0.000 s (0% of one CPU)"]


def test_one_domain_says_what_was_watched_and_that_speed_balancing_did_not_engage():
    """The threads of several processes (exec's sh -c and what it starts)
    are counted apart from the processes; with one domain there is no
    grouping to report, and auto's speed balancing says it never engaged."""
    controller = make_controller([Domain(0, {0, 1})], policy="auto", intervals=12,
                                 threads_seen=9, processes_seen={10, 11, 12, 13},
                                 note="single domain (CPUs 0-1)")
    assert summary_lines(controller, 125.4, 0.0123, "command exited")[:5] == [
        "ran 2 min 5 s (command exited), policy auto",
        "watched 9 threads of 4 processes on one domain",
        "speed balancing never engaged: it acts when more runnable threads than cores meet "
        "at barriers",
        "single domain (CPUs 0-1)",
        "12 rounds, 0 of them quiet (nothing to change)"]


def test_the_json_summary_has_the_same_figures():
    assert summary_record(finished(), 10.0, 0.06, "command exited") == {
        "wall_s": 10.0, "end_reason": "command exited", "intervals": 40,
        "quiet_intervals": 10, "threads_seen": 5, "processes_seen": 2, "migrations": 6,
        "threads_moved": 4, "core_changes": 3,
        "policy": "auto", "dry_run": False, "domain_note": "explicit domains 0/1",
        "spread_early": 0.8, "spread_late": 0.2, "own_cpu_s": 0.06, "process_cpu_s": None,
        "capacity": [1, 0.5]}
    empty = summary_record(make_controller([Domain(0, {0, 1})]), 1.0, 0.0, "SIGINT")
    assert (empty["spread_early"], empty["spread_late"], empty["capacity"]) == (None, None, [2])
    assert summary_record(finished(), 10.0, 0.06, "command exited", 0.11)["process_cpu_s"] == 0.11


def test_the_json_summary_rounds_to_what_is_measured():
    record = summary_record(finished(), 10.000123456, 0.010331999999999997, "SIGINT",
                            0.0712345678)
    assert (record["wall_s"], record["own_cpu_s"], record["process_cpu_s"]) == \
        (10.0, 0.0103, 0.0712)


def test_the_cpu_line_adds_the_whole_process_when_known():
    """Balancing's CPU leaves out Python's start and the set-up, often as
    much again: the line says the whole process's when it is known."""
    assert summary_lines(finished(), 10.0, 0.06, "command exited", 0.1234)[-1] == \
        "own CPU time 0.060 s (0.6% of one CPU), 0.123 s with its start-up"


def test_a_space_shared_run_names_each_program_and_its_own_cost_once():
    first, second = finished(), finished(intervals=8, quiet=0, migrations=1, pins=0,
                                         outsiders=0, note="explicit domains 1")
    sharing = SimpleNamespace(policy="llc", repartitions=2,
                              counters=SimpleNamespace(rates={101: 0.01234}))
    assert shared_summary_lines([(101, first), (102, second)], sharing, 10.0, 0.06,
                                "SIGTERM") == [
        "ran 10 s (SIGTERM): 2 programs sharing in space (llc), 2 partitions",
        "PID 101: policy auto",
        "PID 101: grouped 5 threads of 2 processes into 2 domains; moved 4 threads between "
        "them, 6 moves in all (0.6 a second)",
        "PID 101: speed balancing: 3 changes of a thread's core (0.3 a second)",
        "PID 101: explicit domains 0/1",
        "PID 101: 40 rounds, 10 of them quiet (nothing to change)",
        "PID 101: measured capacity at the end (CPUs other work leaves): 1.00 / 0.50",
        "PID 101: 1 thread allowed only CPUs outside the domains: left alone",
        "PID 101: domain loads differed by 80% (CV) early in the run, 20% late",
        "PID 101: LLC misses per cycle 0.0123 at the last check",
        "PID 102: policy auto",
        "PID 102: grouped 5 threads of 2 processes into 2 domains; moved 4 threads between "
        "them, 1 move in all (0.1 a second)",
        "PID 102: speed balancing never engaged: it acts when more runnable threads than "
        "cores meet at barriers",
        "PID 102: explicit domains 1",
        "PID 102: 8 rounds, 0 of them quiet (nothing to change)",
        "PID 102: measured capacity at the end (CPUs other work leaves): 1.00 / 0.50",
        "PID 102: domain loads differed by 80% (CV) early in the run, 20% late",
        "priority: nice -5, balancing at nice 0",
        "start-up took 1.5 s of it (an overloaded machine delays the start before tumbler "
        "can raise its priority)",
        "own CPU time 0.060 s (0.6% of one CPU)"]
    without_counters = SimpleNamespace(policy="balance", repartitions=0, counters=None)
    lines = shared_summary_lines([(101, first)], without_counters, 10.0, 0.06, "SIGTERM")
    assert not any("LLC" in line for line in lines)


def test_a_space_shared_dry_run_says_so_for_each_program():
    """Under --share space each program's policy line carries the dry run,
    as one program's first line does."""
    dry = make_controller([Domain(0, {0}), Domain(1, {1})], dry_run=True,
                          note="explicit domains 0/1")
    sharing = SimpleNamespace(policy="llc", repartitions=0, counters=None)
    lines = shared_summary_lines([(101, dry)], sharing, 1.0, 0.0, "SIGTERM")
    assert lines[1] == "PID 101: policy tumbler, dry run: nothing was moved"


def test_the_cpu_line_shows_what_the_json_summary_gives():
    """0.00953 s is 0.0095 in --summary-json, which shows as 0.009 (%.3f of
    the binary 0.0095); the line shows the same, not 0.010 (the raw
    figure's): scripts and people read one number."""
    from tumbler.observers.summary import summary_record
    record = summary_record(finished(), 1.0, 0.00953, "SIGINT", 0.06253)
    line = summary_lines(finished(), 1.0, 0.00953, "SIGINT", 0.06253)[-1]
    assert "own CPU time %.3f s" % record["own_cpu_s"] in line
    assert "%.3f s with its start-up" % record["process_cpu_s"] in line
