"""The Linux backend (backend.py: processes, CPUs, the binder to use) and
its parts: the threads' kept files and sampling (threads.py; _steady.c,
optional, a round's schedstat reads in one call), the /proc formats
(procfs.py), topology from /sys (topology.py), hardware counters
(counters.py, perf_event_open), threads bound with sched_setaffinity
(affinity.py) or cgroup cpusets (cpuset_binder.py, on the hierarchy that
cpuset.py finds, reads and changes), and every OSError turned into
``platform.base``'s exceptions at this edge (oserror.py).  Loaded only on
Linux, or with ``--platform linux`` on a captured tree."""
