"""A scripted backend: one process whose threads' CPU times a test sets
before each sample, so every load the controller measures is exact."""

from tumbler.platform.base import Backend, NoSuchProcess, Sample, ThreadTimes


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
        if pid != PID:
            raise NoSuchProcess(pid)
        return Sample(pid, self.now, {
            tid: ThreadTimes(tid, start, "t%d" % tid, run, None, None, lat)
            for tid, (start, run, lat) in sorted(self.threads.items())})

    def allowed_cpus(self, pid, tid):
        return frozenset({0, 1})

    def forget(self, pid, tid):
        self.forgotten.append(tid)
