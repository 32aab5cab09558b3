"""The machine-wide service (``tumbler service``): rules that select
programs (config.py), one loop that balances each (loop.py), and the
control socket ``tumbler status`` asks (control.py)."""
