"""The illumos backend's fakes: LWP rows for fixture trees
(support/illumos_fixtures.py) and a libc whose pset_* calls follow the
kernel's rules."""

import errno

from support import illumos_fixtures as fx


S = fx.NANOSEC
PID = 4242


def lwp(lwpid, **fields):
    row = {"lwpid": lwpid, "create_ns": 500 * S + lwpid, "sname": "S", "onpro": 0}
    row.update(fields)
    return row


class FakeLibc:
    """pset_* with the kernel's rules; ``fail[(call, arg)] = errno`` injects errors."""

    def __init__(self, cpus=range(15), psets=None):
        self.psets = {k: set(v) for k, v in (psets or {}).items()}
        self.default = set(cpus).difference(*self.psets.values())
        self.next_id = max(self.psets, default=0) + 1
        self.bound = {}             # (pid, lwpid) -> pset
        self.cpu_bound = {}         # cpu -> who is processor-bound to it
        self.sticky = set()         # CPUs whose bindings unbind_cpu cannot lift
        self.calls = []
        self.fail = {}

    def _maybe_fail(self, call, arg=None):
        self.calls.append((call, arg))
        code = self.fail.get((call, arg), self.fail.get((call, None)))
        if code:
            raise OSError(code, "%s failed" % call)

    def pset_create(self):
        self._maybe_fail("pset_create")
        pset = self.next_id
        self.next_id += 1
        self.psets[pset] = set()
        return pset

    def pset_assign(self, pset, cpu):
        self._maybe_fail("pset_assign", (pset, cpu))
        owner = next((p for p, c in self.psets.items() if cpu in c), -1)
        source = self.default if owner == -1 else self.psets[owner]
        if owner == -1 and len(self.default) == 1:
            raise OSError(errno.EBUSY, "last CPU")
        source.discard(cpu)
        self.psets[pset].add(cpu)
        return owner

    def pset_destroy(self, pset):
        """cpupart_destroy: unbind the set's LWPs, then move its CPUs out one
        by one, giving up (EBUSY) at one an LWP is processor-bound to."""
        self._maybe_fail("pset_destroy", pset)
        if pset not in self.psets:
            raise OSError(errno.EINVAL, "no such set")
        for key in [k for k, v in self.bound.items() if v == pset]:
            del self.bound[key]
        for cpu in sorted(self.psets[pset]):
            if self.cpu_bound.get(cpu):
                raise OSError(errno.EBUSY, "CPU %d has bound threads" % cpu)
            self.psets[pset].discard(cpu)
            self.default.add(cpu)
        del self.psets[pset]

    def unbind_cpu(self, cpu):
        self._maybe_fail("unbind_cpu", cpu)
        if cpu not in self.sticky:
            self.cpu_bound.pop(cpu, None)

    def pset_bind_lwp(self, pset, lwpid, pid):
        self._maybe_fail("pset_bind_lwp", (pset, lwpid))
        if pset != -1 and pset not in self.psets:
            raise OSError(errno.EINVAL, "no such set")
        target = self.default if pset == -1 else self.psets[pset]
        if any((pid, lwpid) in who and cpu not in target for cpu, who in self.cpu_bound.items()):
            raise OSError(errno.EBUSY, "bound to a CPU outside the set")  # cpupart_movable_thread
        old = self.bound.get((pid, lwpid), -1)
        if pset == -1:
            self.bound.pop((pid, lwpid), None)
        else:
            self.bound[(pid, lwpid)] = pset
        return old

    def pset_info(self, pset):
        self._maybe_fail("pset_info", pset)
        if pset == -1:
            return frozenset(self.default)
        if pset not in self.psets:
            raise OSError(errno.EINVAL, "no such set")
        return frozenset(self.psets[pset])

    def names(self):
        return [c for c, _ in self.calls]
