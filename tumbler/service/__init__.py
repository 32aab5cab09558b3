"""Running balancing, and the machine-wide service (``tumbler service``).

Every balancing run -- ``tumbler -p``, ``exec``, ``--share space``, each
program the service manages -- is assembled in one place (assembly.py:
its controller, binder, policy, observers, journal, and how it is handed
back) and driven by one loop of named deadlines (driver.py).  The service
itself: rules that select programs (config.py, their patterns in linear
time in pattern.py), the loop's scans that find them and balance each as
a run of its own (loop.py, program.py), reads of other users' processes
held to a deadline (deadline.py), and the control socket ``tumbler
status`` asks (control.py).

Below the commands, above balance/, state/ and observers/: a run needs all
three (assembly.py says why it lives here).
"""
