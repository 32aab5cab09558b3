"""The machine-wide service (``tumbler service``): rules that select
programs (config.py, their patterns in linear time in pattern.py), one
loop that finds them and balances each with a controller of its own
(loop.py), reads of other users' processes held to a deadline
(deadline.py), and the control socket ``tumbler status`` asks
(control.py).

Below the commands, above balance/, state/ and observers/: it assembles a
controller, a journal and observers for each program it manages.
"""
