"""The packaged systemd unit (platform/systemd/tumbler.service) for real:
systemd as PID 1 in a guest (scripts/guest --init systemd, cgroup v2 only),
the service started, asked over its socket (tumbler status), reloaded
(SIGHUP through ExecReload), stopped, killed with SIGKILL and restarted by
systemd (Restart=on-failure) -- every thread handed back at each stop.

One boot per kernel (tests/support/guest_checks.py's "systemd" plan).
"""

import pytest

from support import guest


@pytest.fixture(scope="module", params=guest.KERNELS)
def seen(request, duty):
    facts = guest.plan(request.param, ["--init", "systemd", "--sockets", "2", "--cores", "2"],
                       "systemd", duty)
    if "unit_failed" in facts:      # the plan stopped early: nothing later was seen
        pytest.fail("the unit failed to start: %s\n%s" % (facts["unit_failed"],
                                                            facts["journal"]))
    return facts


def split(masks):
    workers = [tuple(m) for k, m in masks.items() if k.startswith("duty-")]
    return len(workers) == 4 and set(workers) == {(0, 1), (2, 3)}


def test_systemd_is_pid_1(seen):
    assert seen["pid1"] == "systemd"


def test_the_unit_starts_and_status_answers_over_its_socket(seen):
    assert seen["start"][0] == 0, seen["start"]
    assert seen["status_lists"], seen["journal"]
    assert seen["split"] and split(seen["during"]), seen["during"]


def test_reload_reads_the_configuration_again_in_the_same_process(seen):
    assert seen["reload"][0] == 0, seen["reload"]
    assert seen["reloaded"], seen["journal"]
    assert seen["same_pid_after_reload"]
    assert seen["status_lists_after_reload"]


def test_stop_hands_every_thread_back(seen):
    assert seen["stop"][0] == 0, seen["stop"]
    assert seen["after_stop"] == seen["before"], seen["journal"]


def test_kill_9_then_systemds_restart_restores(seen):
    assert seen["split_restarted"]
    assert seen["kill9"][0] == 0, seen["kill9"]
    assert seen["restarted_by_systemd"], seen["journal"]
    assert seen["status_lists_after_restart"], seen["journal"]
    assert seen["split_after_restart"], seen["journal"]
    assert seen["stop_after_restart"][0] == 0
    assert seen["after_restart_stop"] == seen["before"], seen["journal"]
