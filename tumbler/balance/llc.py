"""LLC misses per cycle of each space-shared program, from hardware counters.

Space sharing's model (engine/share.py, the paper's section 4) predicts
how a program slows down beside others from how hard it presses on
memory: its last-level-cache misses per cycle.  The meter reads them
from the platform's per-program counters (``Backend.program_counters``:
on Linux a perf_event_open group of cycles and LLC misses per thread)
and answers, for each program, the rate over the interval since it was
last asked -- the pool's checks (``sharing.CHECK_S``) and its
re-partitions.

Counting starts when space sharing first asks about a program (so a
program's first partition stands on demand alone: there is no interval
yet), follows the program's threads as its controller tracks them (new
threads added, gone ones forgotten, their counts kept), and stops when
the program leaves its pool or tumbler exits (``close``: every fd).

Off, said once, and the model stands on demand alone, as it does on
this VM:

* the platform has no counters to offer: the machine has no PMU (a VM
  without a virtual one: perf_event_open of a hardware event fails
  ENOENT), or it cannot count one program without stopping it (illumos:
  libcpc reaches another process's LWPs only through libpctx, which
  stops it -- platform/illumos/counters.py);
* tumbler may not count (AccessDenied: the privilege is named).

A program whose counters fail otherwise goes on without them, said
once; the others keep theirs.  Counters take two fds per thread, and a
program of thousands of threads could exhaust the file limit, which
sampling needs too (a schedstat fd per thread): counters stop short of
FD_SHARE of RLIMIT_NOFILE, as if the open had failed (EMFILE, should
something else take the rest, fails the same way).
"""

import resource

from ..engine.share import llc_rate
from ..platform.base import AccessDenied, PlatformError, Unsupported

#: The share of the file limit (RLIMIT_NOFILE) counters may hold.
FD_SHARE = 0.25


class _Counted:
    __slots__ = ("counters", "tids", "last")

    def __init__(self, counters):
        self.counters = counters    # the platform's ProgramCounters, None: failed
        self.tids = set()           # threads being counted
        self.last = None            # (misses, cycles) at the last answer


class LlcMeter:
    """``rate(key, controller)``: the program's LLC misses per cycle since
    the last call, or None (no counters, or no interval yet).  ``key`` is
    the program's PID."""

    def __init__(self, backend, log=None, fd_budget=None):
        self.backend = backend
        self.log = log or (lambda message: None)
        self.fd_budget = _fd_budget() if fd_budget is None else fd_budget
        self.off = None             # why counters are off for every program, None: on
        self.rates = {}             # key -> the last rate answered (kept after forget)
        self._programs = {}         # key -> _Counted

    def rate(self, key, controller):
        if self.off is not None:
            return None
        program = self._programs.get(key)
        try:
            if program is None:
                program = self._programs[key] = _Counted(self.backend.program_counters(key))
            if program.counters is None:
                return None
            self._follow(program, controller)
            misses, cycles = program.counters.read()
        except (Unsupported, AccessDenied) as exc:
            self._turn_off(exc)
            return None
        except PlatformError as exc:
            self._fail(key, exc)
            return None
        last, program.last = program.last, (misses, cycles)
        if last is None:
            return None
        rate = self.rates[key] = llc_rate(misses - last[0], cycles - last[1])
        return rate

    def forget(self, key):
        """The program left: close its counters."""
        program = self._programs.pop(key, None)
        if program is not None and program.counters is not None:
            program.counters.close()

    def close(self):
        for key in list(self._programs):
            self.forget(key)

    def _follow(self, program, controller):
        """Count the threads the controller tracks, and only those."""
        tids = {tid for _, tid in controller.threads}
        for tid in program.tids - tids:
            program.counters.forget(tid)
            program.tids.discard(tid)
        new = tids - program.tids
        if not new:
            return
        fds = 2 * sum(len(p.tids) for p in self._programs.values())
        for tid in new:
            if fds + 2 > self.fd_budget:
                raise PlatformError("counting %d more threads would take more than %d file "
                                    "descriptors, %d%% of the file limit (RLIMIT_NOFILE)"
                                    % (len(tids - program.tids), self.fd_budget,
                                       100 * FD_SHARE))
            if program.counters.add(tid):
                program.tids.add(tid)
                fds += 2

    def _turn_off(self, exc):
        self.close()
        if isinstance(exc, AccessDenied):
            self.off = "%s (needs %s)" % (exc, exc.privilege)
        else:
            self.off = str(exc)
        self.log("space sharing: LLC counters off, the model stands on demand alone: %s"
                 % self.off)

    def _fail(self, key, exc):
        self.forget(key)
        self._programs[key] = _Counted(None)
        self.rates.pop(key, None)
        self.log("space sharing: PID %s: LLC counters off, its model stands on demand "
                 "alone: %s" % (key, exc))


def _fd_budget():
    """FD_SHARE of the soft file limit (unlimited: no bound)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return float("inf")
    return int(soft * FD_SHARE)
