"""tumbler: balance the load of multithreaded programs across CPU domains.

Data flows one way: platform (samples) -> engine (plan) -> platform (bind).
"""

__version__ = "0.1.0"
