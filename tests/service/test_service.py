"""``tumbler service`` on real processes: rules pick programs up and bind
them across emulated domains (real masks), leave the rest alone, follow
reloads, and every exit path -- SIGTERM, SIGKILL and a restart -- hands
every thread back.  Each test runs its own service with its own socket and
state directory."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from support.helpers import REPO, on_cpus, run_tumbler, thread_masks, thread_names, tumbler_cmd
from support.processes import env_for, wait_bound, wait_until
from support.service import Service, config, spinners
from tumbler.service.config import load_service_config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="Linux, as root")


def test_rules_pick_programs_up_and_bind_them(spawner, domains, procs, state, tmp_path,
                                              two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    tag = "tag-%d" % os.getpid()
    by_name = spinners(procs, spawner, both, 2)
    small = spinners(procs, spawner, both, 1, tag)      # 2 threads: under min_threads
    big = spinners(procs, spawner, both, 3, tag)        # 4 threads
    # The tumbler policy: six spinners on two CPUs, one of them unmanaged
    # (small), are other work auto rightly leaves the CPUs to.
    rules = ('  - name: by-name\n    match: {comm: "spawn.*", cmdline: " 0 0 x$"}\n'
             '    domains: "%s"\n    policy: tumbler\n'
             '  - name: by-threads\n    match: {cmdline: "%s"}\n    min_threads: 3\n'
             '    domains: "%s"\n    policy: tumbler\n' % (spec, tag, spec))
    service = Service(procs, state, tmp_path, config(rules))
    wait_bound(by_name.pid, doms, count=3)
    wait_bound(big.pid, doms, count=4)
    status = {p["pid"]: p for p in service.status()["programs"]}
    assert status[by_name.pid]["rule"] == "by-name"
    assert status[big.pid]["rule"] == "by-threads"
    assert small.pid not in status
    assert all(mask == both for mask in thread_masks(small.pid).values())
    # How it runs: nice 0 once balancing, -20 only while its wake-ups run
    # late (platform/priority.py), in the JSON and the text.
    priority = service.status()["priority"]
    assert re.match(r"nice (0 \(|-20 for the last )", priority), priority
    text = run_tumbler("status", "--socket", service.socket).stdout
    assert re.search(r"^priority: nice (0 \(|-20 for the last )", text, re.M), text
    assert service.stop() == 0
    for proc in (by_name, big):
        masks = thread_masks(proc.pid)
        assert all(mask == both for mask in masks.values()), masks


def test_no_rule_and_foreign_masks_are_left_alone(spawner, domains, procs, state, tmp_path,
                                                   two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    other = spinners(procs, spawner, both, 2, "other")
    narrow = spinners(procs, spawner, frozenset(two_cpus[:1]), 2)   # taskset by someone
    marker = spinners(procs, spawner, both, 2)                        # proves a scan ran
    # The tumbler policy: six spinners on two CPUs, four of them unmanaged,
    # are other work auto rightly leaves the CPUs to (it binds nothing).
    rules = ('  - name: mine\n    match: {cmdline: " 0 0 x$"}\n    domains: "%s"\n'
             '    policy: tumbler\n' % spec)
    service = Service(procs, state, tmp_path, config(rules))
    wait_bound(marker.pid, doms, count=3)
    wait_until(lambda: "left alone" in service.log(), what="the narrow program's log line")
    time.sleep(0.5)         # a few more scans: the line is said once
    assert service.log().count("PID %d " % narrow.pid) == 1, service.log()
    assert set(service.managed()) == {marker.pid}
    assert all(m == both for m in thread_masks(other.pid).values())
    assert all(m == frozenset(two_cpus[:1]) for m in thread_masks(narrow.pid).values())
    assert service.stop() == 0


def test_override_manages_a_narrowed_program(spawner, procs, state, tmp_path, two_cpus):
    one = frozenset(two_cpus[:1])
    narrow = spinners(procs, spawner, one, 2)
    rules = ('  - name: mine\n    match: {cmdline: " 0 0 x$"}\n    domains: "%d"\n'
             '    override: true\n' % two_cpus[0])
    service = Service(procs, state, tmp_path, config(rules))
    wait_until(lambda: narrow.pid in service.managed(), what="the override")
    assert service.stop() == 0
    assert all(m == one for m in thread_masks(narrow.pid).values())     # never widened


def test_an_exiting_program_is_dropped(spawner, domains, procs, state, tmp_path, two_cpus):
    spec, doms = domains
    short = procs.start([spawner, "2", "100000", "1", "2", "0", "x"], stdout=subprocess.PIPE,
                        text=True, preexec_fn=on_cpus(frozenset(two_cpus)))
    rules = '  - name: mine\n    match: {cmdline: " 0 x$"}\n    domains: "%s"\n' % spec
    service = Service(procs, state, tmp_path, config(rules))
    wait_until(lambda: short.pid in service.managed(), what="pick-up")
    short.wait(timeout=30)
    wait_until(lambda: "PID %d (spawner): dropped (exited)" % short.pid in service.log(),
               what="the drop")
    assert service.managed() == set()
    assert service.stop() == 0


def test_sighup_reloads_and_a_broken_file_keeps_the_rules(spawner, domains, procs, state,
                                                          tmp_path, two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    first = spinners(procs, spawner, both, 2, "first")
    second = spinners(procs, spawner, both, 2, "second")
    # policy tumbler: until the reload, "second" is other work beside
    # "first", and where the OS stacks its spinners on one CPU auto rightly
    # hands "first" back (engine/merging.py), which this test is not about.
    rule = ('  - name: %s\n    match: {cmdline: " %s$"}\n    domains: "%s"\n'
            '    policy: tumbler\n')
    service = Service(procs, state, tmp_path, config(rule % ("one", "first", spec)))
    wait_bound(first.pid, doms, count=3)
    service.write(config(rule % ("one", "first", spec) + rule % ("two", "second", spec)))
    service.proc.send_signal(signal.SIGHUP)
    wait_bound(second.pid, doms, count=3)
    service.write("programs: [\n")
    service.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in service.log(), what="the refusal")
    assert "tumbler.yaml:" in service.log().split("reload refused")[1]
    assert service.status()["rules"] == ["one", "two"]
    assert service.stop() == 0
    for proc in (first, second):
        assert all(m == both for m in thread_masks(proc.pid).values())


def test_sigkill_then_restart_restores_leftovers(spawner, domains, procs, state, tmp_path,
                                                  two_cpus):
    spec, doms = domains
    both = frozenset(two_cpus)
    target = spinners(procs, spawner, both, 2)
    rules = ('  - name: mine\n    match: {cmdline: " 0 0 x$"}\n    domains: "%s"\n'
             '    policy: tumbler\n' % spec)
    service = Service(procs, state, tmp_path, config(rules))
    wait_bound(target.pid, doms, count=3)
    service.stop(signal.SIGKILL)
    assert any(m != both for m in thread_masks(target.pid).values())    # left bound
    again = Service(procs, state, tmp_path, config(
        '  - name: none\n    match: {comm: "no-such-program"}\n'))
    wait_until(lambda: all(m == both for m in thread_masks(target.pid).values()),
               what="the restart to restore the leftovers")
    assert again.stop() == 0


def test_status_without_a_service_and_from_a_non_root_user(procs, state, tmp_path, spawner):
    result = run_tumbler("status", "--socket", str(tmp_path / "none.sock"))
    assert result.returncode == 1
    assert result.stderr.startswith("tumbler: no tumbler service is running")
    service = Service(procs, state, tmp_path, config(
        '  - name: none\n    match: {comm: "no-such-program"}\n'))
    assert oct(os.stat(service.socket).st_mode & 0o777) == "0o600"
    # Refused: the socket is 0600 (and its directory here root-only).
    os.chmod(tmp_path, 0o755)
    client = ("import socket, sys; s = socket.socket(socket.AF_UNIX); "
              "s.connect(sys.argv[1]); s.sendall(b'{\"cmd\": \"status\"}\\n'); "
              "print(s.recv(4096).decode())")
    nobody = subprocess.run(["/usr/bin/python3", "-c", client, service.socket],
                            capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    assert nobody.returncode != 0
    assert "PermissionError" in nobody.stderr and '"programs"' not in nobody.stdout
    assert service.stop() == 0


@pytest.mark.parametrize("text, where", [
    ("programs:\n  - name: a\n    match: {comm: \"(\"}\n", ":3:"),
    ("programs:\n  - name: a\n    level: sideways\n", ":3:"),
    ("service:\n  scan_interval: -1\n", ":2:"),
    ("programs:\n  - name: a\n    match: {user: no-such-user-here}\n", ":3:"),
    ("balancing:\n  tolerance: 99\n", ":2:"),
    ("programs: [\n", ":"),
])
def test_check_names_file_and_line(tmp_path, text, where):
    path = tmp_path / "tumbler.yaml"
    path.write_text(text)
    result = run_tumbler("service", "--check", str(path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("tumbler: bad config %s%s" % (path, where)), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_drop_ins_replace_rules_by_name_and_append_new_ones(tmp_path):
    (tmp_path / "tumbler.yaml").write_text(
        "service: {scan_interval: 5}\nprograms:\n  - {name: a, match: {comm: x}}\n"
        "  - {name: b, match: {comm: y}}\n")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "20-more.yaml").write_text(
        "programs:\n  - {name: c, match: {comm: z}}\n")
    (tmp_path / "conf.d" / "10-change.yaml").write_text(
        "service: {scan_interval: 1}\nprograms:\n  - {name: a, match: {comm: w}, "
        "policy: speed}\n")
    (tmp_path / "conf.d" / "ignored.txt").write_text("not yaml: [")
    config = load_service_config(str(tmp_path / "tumbler.yaml"))
    assert [r.name for r in config.rules] == ["a", "b", "c"]
    assert config.rules[0].comm.pattern == "w" and config.rules[0].policy == "speed"
    assert config.scan_interval == 1


def test_metrics_file(spawner, domains, procs, state, tmp_path, two_cpus):
    from support.prometheus import parse_text_format
    spec, doms = domains
    target = spinners(procs, spawner, frozenset(two_cpus), 2)
    metrics = tmp_path / "tumbler.prom"
    service = Service(procs, state, tmp_path, config(
        '  - name: mine\n    match: {cmdline: " 0 0 x$"}\n    domains: "%s"\n'
        '    policy: tumbler\n' % spec)
        .replace("service:\n", "service:\n  metrics_file: %s\n" % metrics))
    wait_bound(target.pid, doms, count=3)
    wait_until(lambda: metrics.exists() and "pid=\"%d\"" % target.pid in metrics.read_text(),
               what="the metrics file to list the program")
    samples = parse_text_format(metrics.read_text())
    assert samples[("tumbler_programs", frozenset())] == 1
    assert service.stop() == 0


@pytest.mark.parametrize("who", ["leader", "thread"])
def test_a_program_that_execs_is_shown_by_its_new_name(churn, duty, domains, procs, state,
                                                        tmp_path, two_cpus, who):
    """churn execs duty (from its main thread, or from another, which
    takes over the main thread's ID): ``status``, the metrics file and
    the rounds of ``--log`` name the program duty, not churn, from the
    service's next look (issue 47)."""
    from support.prometheus import parse_text_format
    spec, doms = domains
    target = procs.start([churn, "-x", who, duty, "60", "50", "50", "50", "50"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=on_cpus(frozenset(two_cpus)))
    assert target.stdout.readline().strip() == "churn: ready"
    metrics, log = tmp_path / "tumbler.prom", tmp_path / "rounds.jsonl"
    service = Service(procs, state, tmp_path, config(
        '  - name: execs\n    match: {comm: "^churn$", user: root}\n    domains: "%s"\n'
        '    policy: tumbler\n' % spec)
        .replace("service:\n", "service:\n  metrics_file: %s\n" % metrics),
        args=("--log", str(log)))

    def logged():
        """Names in the rounds of the target in the log; whole lines only
        (the service may be writing the last)."""
        lines = log.read_text().split("\n")[:-1] if log.exists() else []
        return [r["name"] for r in map(json.loads, lines) if r["pid"] == target.pid]

    def named():
        return {p["pid"]: p["name"] for p in service.status()["programs"]}

    def in_metrics():
        return {dict(labels).get("name") for (metric, labels) in
                parse_text_format(metrics.read_text()) if dict(labels).get("pid")
                == str(target.pid)} if metrics.exists() else set()
    wait_until(lambda: named().get(target.pid) == "churn", what="the service to manage churn")
    wait_bound(target.pid, doms, count=5)
    target.stdin.write("1\n")
    target.stdin.flush()
    wait_until(lambda: sorted(thread_names(target.pid).values())
               == ["duty", "duty-0", "duty-1", "duty-2", "duty-3"], what="churn to exec duty")
    wait_until(lambda: named().get(target.pid) == "duty", what="status to name duty")
    wait_until(lambda: in_metrics() == {"duty"}, what="the metrics to name duty")
    wait_until(lambda: logged()[-1:] == ["duty"], what="a round of duty in the log")
    assert service.stop() == 0
    assert logged()[0] == "churn"


def test_a_silent_client_does_not_stop_the_service(procs, state, tmp_path):
    import socket
    service = Service(procs, state, tmp_path, config(
        '  - name: none\n    match: {comm: "no-such-program"}\n'))
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(service.socket)          # and never sends a request
    try:
        assert service.status()["programs"] == []
        garbage = socket.socket(socket.AF_UNIX)
        garbage.connect(service.socket)
        garbage.sendall(b"not json\n")
        assert b"bad request" in garbage.recv(4096)
        garbage.close()
    finally:
        silent.close()
    assert service.stop() == 0


def test_service_log_draws_one_program(spawner, domains, procs, state, tmp_path, two_cpus):
    """``tumbler service --log``: a line per round of each program, with its
    pid; ``tumbler plot --pid`` draws one (and asks which when there are
    several)."""
    spec, doms = domains
    both = frozenset(two_cpus)
    first, second = (spinners(procs, spawner, both, 2, tag) for tag in ("x", "y"))
    log = tmp_path / "service.jsonl"
    config_file = tmp_path / "tumbler.yaml"
    config_file.write_text(config('  - name: mine\n    match: {cmdline: " 0 0 [xy]$"}\n'
                                  '    domains: "%s"\n    policy: tumbler\n' % spec)
                           .replace("SOCKET", str(tmp_path / "tumbler.sock")))
    stderr = open(tmp_path / "service.log", "a+")      # (see support.service.Service)
    proc = procs.start(tumbler_cmd("service", "--config", str(config_file), "--log", str(log)),
                       env=env_for(state), cwd=REPO, stderr=stderr)
    wait_bound(first.pid, doms, count=3)
    wait_bound(second.pid, doms, count=3)
    wait_until(lambda: log.exists() and len({json.loads(line)["pid"]
                                             for line in open(log)}) == 2,
               what="rounds of both programs in the log")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    both_pids = run_tumbler("plot", str(log), "-o", str(tmp_path / "x.svg"))
    assert both_pids.returncode == 2 and "choose one with --pid" in both_pids.stderr
    one = run_tumbler("plot", str(log), "--pid", str(first.pid), "-o", str(tmp_path / "x.svg"))
    assert one.returncode == 0, one.stderr
    assert "PID %d" % first.pid in (tmp_path / "x.svg").read_text()
