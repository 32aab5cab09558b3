"""``tumbler -p`` and ``exec`` across the real sockets of a guest
(scripts/guest: 2 sockets x 2 cores, 4 vCPUs -- sized to a 2-CPU host, where
tumbler's start-up stays workable, issue 48), with every thread handed back
on each way a run ends, and a socket taken off-line and back mid-run.

One boot per kernel runs every case (tests/support/guest_checks.py's
"balance" plan); the tests assert on what it saw.  --policy tumbler: these
are the mechanics, not auto's judgement.
"""

import json

import pytest

from support import guest

WAYS = ("sigterm", "sigint", "duration", "program", "offline")


@pytest.fixture(scope="module", params=guest.KERNELS)
def seen(request, duty):
    return guest.plan(request.param, ["--sockets", "2", "--cores", "2"], "balance", duty)


def workers(masks):
    return {k: v for k, v in masks.items() if k.startswith("duty-")}


def assert_split(run, masks):
    """Every worker bound to one socket's CPUs, both sockets used."""
    assert run["packages"] == [[0, 1], [2, 3]]
    bound = workers(masks)
    assert len(bound) == 4 and all(m in run["packages"] for m in bound.values()), masks
    assert len({tuple(m) for m in bound.values()}) == 2, masks


@pytest.mark.parametrize("way", WAYS)
def test_attach_binds_each_thread_to_one_socket(seen, way):
    run = seen["attach_" + way]
    assert run["split"], run
    assert_split(run, run["during"])


@pytest.mark.parametrize("way", ("sigterm", "sigint", "duration", "offline"))
def test_attach_hands_every_thread_back(seen, way):
    run = seen["attach_" + way]
    assert run["status"] == 0, run["stderr"]
    assert "Traceback" not in run["stderr"], run["stderr"]
    assert run["after"] == run["before"], run


def test_attach_ends_quietly_when_the_program_exits(seen):
    run = seen["attach_program"]
    assert run["status"] == 0, run["stderr"]
    assert "Traceback" not in run["stderr"], run["stderr"]


def test_a_socket_offline_mid_run_then_back(seen):
    """Linux 6.1 (before 6.2, which keeps the mask a thread asked for) cuts
    the mask tumbler hands back while a socket is off-line (0-3 becomes
    0-1, for good): tumbler takes that for the kernel's doing, not an
    admin's (Backend.keeps_asked_mask, balance/machine.py), so the threads
    are split over both sockets again and get 0-3 back at the end (this
    test found it: before, they were left on one socket, never restored)."""
    run = seen["attach_offline"]
    assert run["offline_cpus"] == [2, 3]
    assert run["offline_alive"], run["stderr"]
    assert run["offline_seen"], run["stderr"]
    assert all(set(m) <= {0, 1} for m in run["during_offline"].values()), run
    assert run["online_seen"], run["stderr"]
    # Whole, not as pytest cuts a dict short: the masks at each step and
    # tumbler's lines (this failed now and then on 6.1 until tumbler knew
    # CPUs on-line but not active: docs/guests.md).
    assert run["split_again"], json.dumps(run, indent=1)
    assert_split(run, run["during_online_again"])


def test_exec_binds_across_sockets_and_returns_the_programs_status(seen):
    run = seen["exec"]
    assert run["split"], run
    assert_split(run, run["during"])
    assert run["status"] == 0, run["stderr"]
