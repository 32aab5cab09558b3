"""Space sharing's stand-ins (what SpaceSharing reads of a controller and
what it calls) and real spinning programs for it."""

import subprocess

from support.helpers import on_cpus
from tumbler.balance.domains import DomainChoice


class Thread:
    def __init__(self, load):
        self.load = load


class StandIn:
    """What SpaceSharing reads of a controller (choice, threads) and what it
    calls (reshape), recorded."""

    def __init__(self, domains, loads):
        self.choice = DomainChoice("explicit", tuple(frozenset(d) for d in domains), "")
        self.threads = {i: Thread(load) for i, load in enumerate(loads)}
        self.shapes = []

    def reshape(self, domains, confined):
        self.shapes.append((tuple(sorted(min(d) for d in domains)),
                            frozenset().union(*domains), confined))

    @property
    def cpus(self):
        return self.shapes[-1][1] if self.shapes else None


def spinners(procs, spawner, cpus, count):
    proc = procs.start([spawner, str(count), "100000", "1", "0", "0"],
                       stdout=subprocess.PIPE, text=True, preexec_fn=on_cpus(cpus))
    assert proc.stdout.readline().strip() == "spawner: ready"
    return proc
