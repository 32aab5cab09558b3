"""The service's metrics file (observers/metrics.py): the Prometheus text
format, every family with its HELP and TYPE, values and labels exact, and
the file replaced atomically."""

import os

from support.prometheus import parse_text_format
from tumbler.observers.metrics import METRICS, format_metrics, write_metrics

STATUS = {"version": "0.1.0", "pid": 42, "uptime_s": 12.5, "own_cpu_s": 0.25,
          "programs": [{"pid": 7, "name": 'we"ird\\name', "rule": "solvers", "policy": "auto",
                        "domains": ["0-3", "4-7"], "domain_load": [3.5, 3.25], "threads": 9,
                        "moves": 4, "moves_per_min": 2.0, "pins": 11, "speed": True}]}


def test_metrics_parse_back(tmp_path):
    path = tmp_path / "tumbler.prom"
    write_metrics(str(path), STATUS)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["tumbler.prom"]     # no temp file left
    samples = parse_text_format(path.read_text())
    who = {("pid", "7"), ("name", 'we\\"ird\\\\name'), ("rule", "solvers")}
    assert samples[("tumbler_cpu_seconds_total", frozenset())] == 0.25
    assert samples[("tumbler_programs", frozenset())] == 1
    assert samples[("tumbler_program_moves_total", frozenset(who))] == 4
    assert samples[("tumbler_program_speed_pins_total", frozenset(who))] == 11
    assert samples[("tumbler_program_speed_balancing", frozenset(who))] == 1
    assert samples[("tumbler_program_domain_load_cpus",
                    frozenset(who | {("domain", "4-7")}))] == 3.25
    assert format_metrics(dict(STATUS, programs=[])).count("tumbler_program_threads{") == 0


def test_the_text_of_two_programs_one_parked():
    status = {"version": "1.2", "uptime_s": 3, "own_cpu_s": 0.5, "programs": [
        {"pid": 7, "name": "solver", "rule": "hpc", "domains": ["0", "1"],
         "domain_load": [0.5, 1], "threads": 3, "moves": 2, "pins": 0, "speed": False,
         "parked": True},
        {"pid": 9, "name": "db", "rule": "x", "domains": ["0-1"], "domain_load": [1.25],
         "threads": 1, "moves": 0, "pins": 5, "speed": True}]}
    solver, db = 'pid="7",name="solver",rule="hpc"', 'pid="9",name="db",rule="x"'
    assert format_metrics(status) == "\n".join([
        "# HELP tumbler_info tumbler's version (always 1).",
        "# TYPE tumbler_info gauge",
        'tumbler_info{version="1.2"} 1',
        "# HELP tumbler_uptime_seconds Seconds since the service started.",
        "# TYPE tumbler_uptime_seconds gauge",
        "tumbler_uptime_seconds 3",
        "# HELP tumbler_cpu_seconds_total CPU time the service itself used.",
        "# TYPE tumbler_cpu_seconds_total counter",
        "tumbler_cpu_seconds_total 0.5",
        "# HELP tumbler_programs Programs the service manages.",
        "# TYPE tumbler_programs gauge",
        "tumbler_programs 2",
        "# HELP tumbler_programs_parked Of them, parked: too little CPU to imbalance a "
        "domain, not sampled.",
        "# TYPE tumbler_programs_parked gauge",
        "tumbler_programs_parked 1",
        "# HELP tumbler_program_threads Threads of a managed program.",
        "# TYPE tumbler_program_threads gauge",
        "tumbler_program_threads{%s} 3" % solver,
        "tumbler_program_threads{%s} 1" % db,
        "# HELP tumbler_program_domain_load_cpus Load of a program's threads on one domain, "
        "in CPUs (over the load window).",
        "# TYPE tumbler_program_domain_load_cpus gauge",
        'tumbler_program_domain_load_cpus{%s,domain="0"} 0.5' % solver,
        'tumbler_program_domain_load_cpus{%s,domain="1"} 1' % solver,
        'tumbler_program_domain_load_cpus{%s,domain="0-1"} 1.25' % db,
        "# HELP tumbler_program_moves_total Threads moved between domains.",
        "# TYPE tumbler_program_moves_total counter",
        "tumbler_program_moves_total{%s} 2" % solver,
        "tumbler_program_moves_total{%s} 0" % db,
        "# HELP tumbler_program_speed_pins_total Speed balancing's core changes.",
        "# TYPE tumbler_program_speed_pins_total counter",
        "tumbler_program_speed_pins_total{%s} 0" % solver,
        "tumbler_program_speed_pins_total{%s} 5" % db,
        "# HELP tumbler_program_speed_balancing 1 while speed balancing is engaged.",
        "# TYPE tumbler_program_speed_balancing gauge",
        "tumbler_program_speed_balancing{%s} 0" % solver,
        "tumbler_program_speed_balancing{%s} 1" % db,
        ""])
    assert [name for name, _, _ in METRICS] == [
        line.split()[2] for line in format_metrics(status).splitlines()
        if line.startswith("# TYPE ")]


def test_label_values_are_escaped():
    status = dict(STATUS, programs=[dict(STATUS["programs"][0], name='a"b\\c\nd')])
    text = format_metrics(status)
    assert 'tumbler_program_threads{pid="7",name="a\\"b\\\\c\\nd",rule="solvers"} 9\n' in text


def test_the_file_is_replaced_not_rewritten(tmp_path):
    """A reader that opened the old file still reads it whole: the new one
    is a new file renamed over it."""
    path = tmp_path / "tumbler.prom"
    write_metrics(str(path), STATUS)
    with open(path) as old:
        write_metrics(str(path), dict(STATUS, uptime_s=99.0))
        assert old.read() == format_metrics(STATUS)
    assert path.read_text() == format_metrics(dict(STATUS, uptime_s=99.0))
    assert sorted(os.listdir(tmp_path)) == ["tumbler.prom"]
