"""The illumos backend (backend.py: LWPs from /proc, CPUs, the binder to
use) and its parts: the /proc files' binary layouts (structs.py) and the
mapping of their read errors (oserror.py), kstat reads (kstat.py) and the
topology built from them (topology.py), prstat -mL percentages
(prstat.py), processor sets for ``--binder pset`` (pset.py) over libc's
calls (psetlibc.py), hardware counters by libcpc (counters.py) and what a
non-global zone forbids (zone.py).  Loaded only on illumos, or with
``--platform illumos`` on a captured tree; verified against the
illumos-gate sources and fixture trees only."""
