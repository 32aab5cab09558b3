"""A scripted backend: one process whose threads' CPU times a test sets
before each sample, so every load the controller measures is exact; with
the column reader quiet rounds use (ColumnBackend), and with thread masks
a binder sets (MaskedBackend, MaskBinder)."""

from tumbler.platform.base import Backend, Binder, NoSuchProcess, Sample, ThreadTimes


MS = 1_000_000


PID = 100


class ScriptedBackend(Backend):
    """A process whose threads' CPU times the test sets before each sample."""

    name = "scripted"

    def __init__(self):
        super().__init__("/nonexistent")
        self.now = 0
        self.threads = {}           # tid -> [start, run_ns, lat_ns]
        self.forgotten = []
        self.thread_reads = 0       # threads read by sample and sample_threads

    def run(self, tid, run_ms, lat_ms=0, start=None):
        entry = self.threads.setdefault(tid, [start or tid, 0, 0])
        entry[1] += run_ms * MS
        entry[2] += lat_ms * MS

    def thread_ids(self, pid):
        if pid != PID:
            raise NoSuchProcess(pid)
        return sorted(self.threads)

    def process_state(self, pid, fresh=False):
        if pid != PID:
            raise NoSuchProcess(pid)
        return False, None

    def sample(self, pid):
        return self.sample_threads(pid, sorted(self.threads))

    def sample_threads(self, pid, tids):
        if pid != PID:
            raise NoSuchProcess(pid)
        read = {tid: self.threads[tid] for tid in tids if tid in self.threads}
        self.thread_reads += len(read)
        return Sample(pid, self.now, {
            tid: ThreadTimes(tid, start, "t%d" % tid, run, None, None, lat)
            for tid, (start, run, lat) in read.items()})

    def allowed_cpus(self, pid, tid):
        return frozenset({0, 1})

    def forget(self, pid, tid):
        self.forgotten.append(tid)


class ColumnBackend(ScriptedBackend):
    """ScriptedBackend with the column reader quiet rounds use."""

    def __init__(self):
        super().__init__()
        self.column_reads = 0
        self.busy = {0: 0, 1: 0}        # per CPU: busy ns, as /proc/stat counts it

    def cpu_times(self):
        return {cpu: (busy, self.now) for cpu, busy in self.busy.items()}

    def columns_reader(self, pid, tids):
        tids = list(tids)

        def reader(run, lat):
            if sorted(self.threads) != sorted(tids):
                return None         # a thread was born or exited
            self.column_reads += 1
            for i, tid in enumerate(tids):
                _, run[i], lat[i] = self.threads[tid]
            return self.now
        return reader


class MaskedBackend(ScriptedBackend):
    """ScriptedBackend whose threads have masks (``cpus`` until a binder
    sets one), child processes (``children_of``: (pid, tid) -> child
    PIDs, each child's threads in ``child_threads``: pid -> {tid: mask})."""

    def __init__(self, cpus=frozenset({0, 1})):
        super().__init__()
        self.cpus = frozenset(cpus)
        self.masks = {}                 # tid -> mask, ``cpus`` until set
        self.children_of = {}           # (pid, tid) -> child PIDs
        self.child_threads = {}         # child pid -> {tid: mask}

    def allowed_cpus(self, pid, tid):
        if pid in self.child_threads:
            return self.child_threads[pid][tid]
        return self.masks.get(tid, self.cpus)

    def thread_ids(self, pid):
        if pid in self.child_threads:
            return sorted(self.child_threads[pid])
        return super().thread_ids(pid)

    def children(self, pid, tids=None):
        tids = tids if tids is not None else self.thread_ids(pid)
        return [child for tid in tids for child in self.children_of.get((pid, tid), ())]


class MaskBinder(Binder):
    """Binds by setting MaskedBackend's masks; records every call."""

    kind = "affinity"
    binds_masks = True

    def __init__(self, backend):
        self.backend = backend
        self.calls = []                 # ("bind" | "restore", pid, tid, mask)

    def save(self, pid, tid):
        return {"cpus": sorted(self.backend.allowed_cpus(pid, tid))}

    def bind(self, pid, tid, domain_index, cpus):
        self.calls.append(("bind", pid, tid, frozenset(cpus)))
        self.backend.masks[tid] = frozenset(cpus)

    def restore(self, pid, tid, saved):
        mask = frozenset(saved["cpus"])
        self.calls.append(("restore", pid, tid, mask))
        if pid in self.backend.child_threads:
            self.backend.child_threads[pid][tid] = mask
        else:
            self.backend.masks[tid] = mask
