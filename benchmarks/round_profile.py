#!/usr/bin/env python3
"""Where tumbler's CPU goes in place: CPU time per call of each round phase.

    .venv/bin/python benchmarks/round_profile.py TUMBLER-ARGS...
    .venv/bin/python benchmarks/round_profile.py --wakeup-floor

The first form runs ``tumbler TUMBLER-ARGS`` in this process with the
controller's and the Linux backend's round phases wrapped, and prints, at
exit, calls and CPU microseconds per call of each (the calling thread's CPU
time; nested phases are included in their callers).  Example:

    .venv/bin/python benchmarks/round_profile.py --interval 100 --domains 0/1 \\
        exec -- /tmp/threads duty 64 20 1 2 3

(the ``threads`` helper is what ``benchmarks/overhead.py`` builds).  The
wrappers cost ~1 us per call themselves.  Micro-benchmarks run a phase hot,
in a loop; here it runs as it does for real, once per interval, after the
program has had the CPUs.

``--wakeup-floor`` measures what a process that does nothing but wake up
every 20 ms (select with a timeout) costs per wake-up on this machine.
"""

import atexit
import functools
import os
import select
import sys
import time


def wrap(owner, name, label, totals):
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            entry = totals.setdefault(label, [0, 0])
            entry[0] += time.thread_time_ns() - start
            entry[1] += 1
    setattr(owner, name, timed)


def report(totals):
    for label, (ns, calls) in sorted(totals.items(), key=lambda item: -item[1][0]):
        print("%-28s %6d calls %9.1f us/call" % (label, calls, ns / calls / 1000),
              file=sys.stderr)


def profile(args):
    from tumbler import controller
    from tumbler.engine import grouping, policy, speed
    from tumbler.platform import linux
    totals = {}
    for name in ("round", "speed_step", "sample_all", "update_loads", "discover",
                 "_crowded_domains", "_views", "_apply", "_pin"):
        wrap(controller.Controller, name, name, totals)
    for name in ("process_state", "sample", "_steady_sample", "thread_ids", "thread_run_ns"):
        wrap(linux.LinuxBackend, name, "linux." + name, totals)
    wrap(linux.os, "pread", "os.pread", totals)     # the kernel's share of sampling
    wrap(policy, "plan_tumbler", "plan_tumbler", totals)
    wrap(speed.SpeedBalancer, "step", "SpeedBalancer.step", totals)
    for cls in (policy.AutoPolicy, policy.TumblerPolicy, policy.SpeedPolicy):
        wrap(cls, "decide", cls.__name__ + ".decide", totals)
    atexit.register(report, totals)
    from tumbler.cli import entry_point
    sys.argv = ["tumbler"] + args
    return entry_point()


def wakeup_floor(seconds=3.0, period_s=0.02):
    read_fd, _ = os.pipe()
    wakeups = 0
    cpu, start = time.process_time(), time.monotonic()
    while time.monotonic() - start < seconds:
        select.select([read_fd], [], [], period_s)
        wakeups += 1
    print("%d wake-ups, %.1f us of CPU each" % (
        wakeups, (time.process_time() - cpu) / wakeups * 1e6))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--wakeup-floor"]:
        sys.exit(wakeup_floor())
    sys.exit(profile(sys.argv[1:]))
