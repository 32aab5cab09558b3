#!/usr/bin/env python3
"""Where tumbler's CPU goes in place: CPU time per call of each round phase.

    .venv/bin/python benchmarks/round_profile.py [OPTIONS] TUMBLER-ARGS...
    .venv/bin/python benchmarks/round_profile.py --wakeup-floor
    .venv/bin/python benchmarks/round_profile.py --cold-cost

The first form runs ``tumbler TUMBLER-ARGS`` in this process with the
controller's and the Linux backend's round phases wrapped, and prints, at
exit, calls and CPU microseconds per call of each (the calling thread's CPU
time; nested phases are included in their callers), then the process's CPU
time per interval from the 21st round on (the steady state: every file
open, the first placements done).  Example:

    .venv/bin/python benchmarks/round_profile.py --interval 100 --domains 0/1 \\
        exec -- /tmp/threads duty 64 20 1 2 3

(the ``threads`` helper is what ``benchmarks/overhead.py`` builds).  The
wrappers cost ~1 us per call themselves.  Micro-benchmarks run a phase hot,
in a loop; here it runs as it does for real, once per interval, after the
program has had the CPUs.

Options (before TUMBLER-ARGS):

``--python-sampler``  no optional C module (``tumbler/platform/linux/_steady.c``,
                      ``tumbler/engine/_window.c``): the
                      same steps in Python, as when they were not built.
``--no-quiet``        every round a full one (no quiet rounds).
``--bare``            no phase wrappers: only the CPU time per interval.
``--floor loop``      (implies ``--bare``) from the 21st round on, rounds do nothing: what the
                      main loop's wake-ups cost per interval.
``--floor sample``    from the 21st round on, rounds only sample (and
                      drop exited targets): the loop plus sampling.

``--wakeup-floor`` measures what a process that does nothing but wake up
every 20 ms (select with a timeout) costs per wake-up on this machine.

``--cold-cost`` times two pieces of work in a loop and right after a
100 ms sleep (median CPU time): twenty passes over 64 floats, and the auto
policy's decision for 64 threads on 2 domains (the usual round: spread
within the tolerance, nothing moves).
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


#: Rounds before the steady state is measured (files opened, threads placed).
WARM_ROUNDS = 20


def steady_cpu(controller, floor):
    """Count rounds; from round WARM_ROUNDS + 1 on, measure the process's
    CPU time per interval (and, with ``floor``, cut the rounds short)."""
    original = controller.Controller.round
    state = {"rounds": 0, "cpu_ns": None}

    def counted(self):
        state["rounds"] += 1
        if state["rounds"] == WARM_ROUNDS + 1:
            state["cpu_ns"] = time.process_time_ns()
        if floor is None or state["rounds"] <= WARM_ROUNDS:
            return original(self)
        if floor == "sample":
            self.tracker.sample_all()
        self.stats.intervals += 1
        return self.last_decision

    def report_steady():
        intervals = state["rounds"] - WARM_ROUNDS
        if state["cpu_ns"] is not None and intervals > 0:
            print("steady state%s: %.1f us of CPU per interval over %d intervals" % (
                "" if floor is None else " (floor: %s)" % floor,
                (time.process_time_ns() - state["cpu_ns"]) / intervals / 1000, intervals),
                file=sys.stderr)
    controller.Controller.round = counted
    atexit.register(report_steady)


def profile(args, python_sampler=False, bare=False, floor=None, no_quiet=False):
    from tumbler.balance import controller, machine, merged, otherwork, placer, quiet, \
        speedstep, threads
    from tumbler.engine import policy, speed, window
    from tumbler.platform.linux import backend as linux, threads as sampler
    if python_sampler:
        sampler._c_steady_times = sampler._c_read_columns = None
        window._c_summarize_window = None
    if no_quiet:
        init = controller.Controller.__init__

        def full_rounds_only(self, *parts, timings=controller.Timings(), **options):
            init(self, *parts, timings=timings._replace(quiet_rounds=False), **options)
        controller.Controller.__init__ = full_rounds_only
    steady_cpu(controller, floor)
    if bare or floor is not None:
        return run_tumbler(args)
    totals = {}
    for owner, names in ((controller.Controller, ("round",)),
                         (threads.ThreadTracker, ("sample_all", "update_loads",
                                                  "look_at_new_processes")),
                         (machine.MachineWatch, ("replan",)),
                         (otherwork.OtherWork, ("measure",)),
                         (merged.DomainMerger, ("judge",)),
                         (speedstep.SpeedSteps, ("step", "measured_views", "pin")),
                         (placer.Placer, ("apply",)),
                         (quiet.QuietRounds, ("round", "leave", "rosters_for")),
                         (policy.TumblerPolicy, ("plan",))):
        for name in names:
            wrap(owner, name, "%s.%s" % (owner.__name__, name), totals)
    for name in ("process_state", "context_switches", "cpu_switches", "newest_pid"):
        wrap(linux.LinuxBackend, name, "linux." + name, totals)
    for name in ("sample", "_steady_sample", "thread_ids", "thread_run_ns"):
        wrap(sampler.ThreadSampler, name, "linux." + name, totals)
    wrap(sampler.os, "pread", "os.pread", totals)     # the kernel's share of sampling
    wrap(speed.SpeedBalancer, "step", "SpeedBalancer.step", totals)
    for cls in (policy.AutoPolicy, policy.TumblerPolicy, policy.SpeedPolicy):
        wrap(cls, "decide", cls.__name__ + ".decide", totals)
    atexit.register(report, totals)
    return run_tumbler(args)


def run_tumbler(args):
    from tumbler.commands.main import entry_point
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


def cold_cost():
    import math
    import statistics
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tumbler.engine.model import Domain
    from tumbler.engine.model import ThreadView
    from tumbler.engine.policy import AutoPolicy
    values = [float(i) for i in range(64)]

    def passes():
        for _ in range(20):
            mean = math.fsum(values) / len(values)
            [value - mean for value in values]
    domains = [Domain(0, frozenset({0})), Domain(1, frozenset({1}))]
    everywhere = frozenset({0, 1})
    views = [ThreadView(1000 + i, 0.01 * (i % 3 + 1), i % 2, everywhere, None,
                        1000000, 100000000, 0.02, 3.0) for i in range(64)]
    policy = AutoPolicy()

    def decide():
        policy.decide(views, domains)

    def median_us(work, sleep_s, count):
        times = []
        for _ in range(count):
            if sleep_s:
                time.sleep(sleep_s)
            start = time.thread_time_ns()
            work()
            times.append(time.thread_time_ns() - start)
        return statistics.median(times) / 1000
    for label, work in (("20 passes over 64 floats", passes),
                        ("auto decide, 64 threads", decide)):
        print("%-26s in a loop %7.1f us, after a 100 ms sleep %7.1f us" % (
            label, median_us(work, 0, 2000), median_us(work, 0.1, 50)))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--cold-cost"]:
        sys.exit(cold_cost())
    if sys.argv[1:] == ["--wakeup-floor"]:
        sys.exit(wakeup_floor())
    options, rest = {}, sys.argv[1:]
    while rest and rest[0] in ("--python-sampler", "--bare", "--floor", "--no-quiet"):
        option = rest.pop(0)
        if option == "--floor":
            if not rest or rest[0] not in ("loop", "sample"):
                sys.exit("round_profile: --floor takes loop or sample")
            options["floor"] = rest.pop(0)
        else:
            options[option[2:].replace("-", "_")] = True
    sys.exit(profile(rest, **options))
