"""Tracing what sampling cannot see: lock waits, run-queue latency and
migrations, per thread, from the bpftrace (Linux) and DTrace (illumos)
scripts of ``probes/``.

Owns running the scripts (session.py, with scripts.py, tool.py and
process.py), reading their output (parse.py, pure) and checking them
against the kernel's own accounting (check.py).  Imports only the
platform layer and the leaves; ``observers/probes.py`` (``--probe``)
and ``tumbler probe`` use it.
"""
