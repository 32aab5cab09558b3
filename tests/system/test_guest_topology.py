"""Topology in real guests (scripts/guest): sockets, NUMA nodes, a node of
memory only, a socket taken off-line, as tumbler topology and auto see them.

One boot per shape and kernel (tests/support/guest.py); the facts come from
tests/support/guest_checks.py's "topology" plan.
"""

import pytest

from support import guest


@pytest.fixture(scope="module", params=guest.KERNELS)
def two_by_eight(request):
    """2 sockets x 8 cores, a NUMA node each; socket 1 off-line and back."""
    return guest.plan(request.param, ["--sockets", "2", "--cores", "8"], "topology", "1")


@pytest.fixture(scope="module", params=guest.KERNELS)
def four_by_four(request):
    """4 sockets x 4 cores, a NUMA node each, and node 4 of memory only."""
    shape = ["--sockets", "4", "--cores", "4", "--memory", "2560"]
    for lo in range(0, 16, 4):
        shape += ["--node", "%d-%d" % (lo, lo + 3)]
    return guest.plan(request.param, shape + ["--node", "-"], "topology")


def test_two_sockets_are_two_packages_nodes_and_llcs(two_by_eight):
    levels = two_by_eight["topology"]["levels"]
    assert levels["package"] == ["0-7", "8-15"]
    assert levels["numa"] == ["0-7", "8-15"]
    assert levels["llc"] == ["0-7", "8-15"]
    assert len(levels["core"]) == 16


def test_auto_groups_across_the_two_sockets(two_by_eight):
    auto = two_by_eight["topology"]["auto"]
    assert (auto["level"], auto["domains"]) == ("package", ["0-7", "8-15"]), auto


def test_a_socket_offline_leaves_one_domain_and_back_two(two_by_eight):
    assert two_by_eight["offline_cpus"] == list(range(8, 16))
    off = two_by_eight["topology_offline"]
    assert off["online"] == "0-7"
    assert off["levels"]["package"] == ["0-7"]
    assert off["auto"]["domains"] == ["0-7"], off["auto"]
    again = two_by_eight["topology_online_again"]
    assert again["online"] == "0-15"
    assert again["auto"]["domains"] == ["0-7", "8-15"], again["auto"]


def test_four_sockets_are_four_packages_and_nodes(four_by_four):
    levels = four_by_four["topology"]["levels"]
    quarters = ["0-3", "4-7", "8-11", "12-15"]
    assert levels["package"] == quarters
    assert levels["numa"] == quarters
    auto = four_by_four["topology"]["auto"]
    assert (auto["level"], auto["domains"]) == ("package", quarters), auto


def test_a_node_of_memory_only_is_no_domain(four_by_four):
    nodes = four_by_four["nodes"]
    assert nodes["4"]["cpus"] == "" and nodes["4"]["memory_kb"] > 0, nodes
    assert len(four_by_four["topology"]["levels"]["numa"]) == 4
