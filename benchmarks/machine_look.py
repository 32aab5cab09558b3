"""What following the machine costs a round (balance/machine.py): one
look -- the on-line CPUs and one target's cgroup cpuset -- timed on this
process (run as root, or as any user where /proc/PID/cgroup is readable).

    PYTHONPATH=. python3 benchmarks/machine_look.py

Prints the median, min and max over 9 batches of 2000 calls each, in
microseconds per call."""

import os
import statistics
import time

from tumbler.balance import machine
from tumbler.platform.linux.backend import LinuxBackend


def per_call_us(function, calls=2000, batches=9):
    times = []
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(calls):
            function()
        times.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(times), min(times), max(times)


def main():
    machine.CHECK_INTERVAL_S = 0.0          # every call a look
    backend = LinuxBackend()
    pid = os.getpid()
    watch = machine.MachineWatch(backend)
    print("cpuset of this process: %s" % (backend.cpuset_cpus(pid),))
    for name, function in (("online_cpus", backend.online_cpus),
                           ("cpuset_cpus", lambda: backend.cpuset_cpus(pid)),
                           ("look, 1 target", lambda: watch.look([pid]))):
        print("%-16s median %6.2f us  (min %.2f, max %.2f)" % ((name,) + per_call_us(function)))


if __name__ == "__main__":
    main()
