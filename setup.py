"""Only for the optional C part; everything else is in setup.cfg.

``tumbler.platform.linux._steady`` reads the Linux backend's usual sample in
one call and ``tumbler.engine._window`` sums a quiet round's loads (see
their sources).  ``optional=True``: without a C compiler or
Python's headers the build says so and tumbler installs without it, using
the same steps in Python (slower, same results).
"""

import sys

from setuptools import Extension, setup

extensions = [Extension("tumbler.engine._window", ["tumbler/engine/_window.c"],
                        extra_compile_args=["-O2", "-Wall"], optional=True)]
if sys.platform.startswith("linux"):
    extensions.append(Extension("tumbler.platform.linux._steady",
                                ["tumbler/platform/linux/_steady.c"],
                                extra_compile_args=["-O2", "-Wall"],
                                optional=True))

setup(ext_modules=extensions)
