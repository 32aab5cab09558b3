"""The Linux backend: /proc and /sys read (backend.py, topology.py;
_steady.c, optional, a round's schedstat reads in one call), hardware
counters (counters.py, perf_event_open),
threads bound with sched_setaffinity (affinity.py) or cgroup cpusets
(cpuset.py), and every OSError turned into ``platform.base``'s exceptions
at this edge (oserror.py).  Loaded only on Linux, or with ``--platform
linux`` on a captured tree."""
