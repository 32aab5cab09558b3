"""Only for the optional C part; everything else is in setup.cfg.

``tumbler.platform.linux._steady`` reads the Linux backend's usual sample in
one call, ``tumbler.engine._window`` sums a quiet round's loads (and
merging's figures of a full round), ``tumbler.engine._columns`` makes the
engine's checks and sums of a full round in one pass over its threads'
columns, and ``tumbler.balance._rounds`` does a full round's per-thread
passes (see their sources).  ``optional=True``: without a C compiler or
Python's headers the build says so and tumbler installs without it, using
the same steps in Python (slower, same results).
"""

import sys

from setuptools import Extension, setup

#: Read by _rounds.c and _steady.c (listed so that a change rebuilds them
#: and sdist ships it).
SLOTS_H = ["tumbler/platform/_slots.h"]
#: Read by _rounds.c only (listed likewise).
TRACKED_H = ["tumbler/balance/_tracked.h"]

#: -ffp-contract=off: no product fused into a sum (_columns.c's sums must be
#: math.fsum's, bit for bit).
extensions = [Extension("tumbler.engine._window", ["tumbler/engine/_window.c"],
                        extra_compile_args=["-O2", "-Wall"], optional=True),
              Extension("tumbler.engine._columns", ["tumbler/engine/_columns.c"],
                        extra_compile_args=["-O2", "-Wall", "-ffp-contract=off"],
                        optional=True),
              Extension("tumbler.balance._rounds", ["tumbler/balance/_rounds.c"],
                        depends=SLOTS_H + TRACKED_H, extra_compile_args=["-O2", "-Wall"],
                        optional=True)]
if sys.platform.startswith("linux"):
    extensions.append(Extension("tumbler.platform.linux._steady",
                                ["tumbler/platform/linux/_steady.c"], depends=SLOTS_H,
                                extra_compile_args=["-O2", "-Wall"],
                                optional=True))

setup(ext_modules=extensions)
