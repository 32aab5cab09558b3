"""A scripted system for what ``tumbler restore`` and the journal do
(tests/state): processes with their threads' start times and parents,
and a binder that records what it puts back."""

from tumbler.platform.base import (Backend, Binder, NoSuchProcess, PlatformError, ProcessInfo,
                                   Sample, ThreadTimes)

TARGET, CHILD, TUMBLER = 100, 200, 99999999


class System(Backend):
    """Processes {pid: (start, {tid: start}, parent)}; ``masked``: the
    (pid, tid) carrying a mask of the dead tumbler's."""

    name = "linux"

    def __init__(self, processes, masked):
        self.processes = processes
        self.masked = set(masked)
        self.restored = []
        self.failing = set()

    def process(self, pid):
        if pid not in self.processes:
            raise NoSuchProcess(pid)
        start = self.processes[pid][0]
        return ProcessInfo(pid, "p", 0, start, False, pid)

    def sample(self, pid):
        if pid not in self.processes:
            raise NoSuchProcess(pid)
        return Sample(pid, 0, {tid: ThreadTimes(tid, start, "t", 0)
                               for tid, start in self.processes[pid][1].items()})

    def thread_ids(self, pid):
        return list(self.sample(pid).threads)

    def children(self, pid):
        return {child for child, (_, _, parent) in self.processes.items() if parent == pid}

    def binder(self, kind):
        return ScriptedBinder(self)


class ScriptedBinder(Binder):
    kind = "affinity"

    def __init__(self, system):
        self.system = system

    def placed_by_tumbler(self, pid, tid, record, state, last):
        return True

    def leftover_placement(self, pid, tid, state):
        return {"cpus": [0, 1]} if (pid, tid) in self.system.masked else None

    def restore(self, pid, tid, saved):
        if (pid, tid) in self.system.failing:
            raise PlatformError("not permitted to change thread %d" % tid)
        self.system.restored.append((pid, tid))
        self.system.masked.discard((pid, tid))
