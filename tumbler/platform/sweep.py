"""The exit's and ``tumbler restore``'s repeated look for what bound
threads created (``sweep``), written once for every backend; re-exported
by platform/base.py, where it was first."""

import time


#: Threads and child processes born of bound threads carry tumbler's
#: masks; at exit and in ``tumbler restore`` they are looked for until a
#: pass finds none, at most this many passes.
SWEEP_PASSES = 20
#: A thread or process whose creation began before its creator was put
#: back copies the old mask, and may show in a listing only after the
#: pass that found none: the last pass comes this long after it.
SWEEP_SETTLE_S = 0.02


def sweep(one_pass):
    """Run ``one_pass()`` (true when it put something back) until a pass
    finds nothing and a second one SWEEP_SETTLE_S later finds nothing
    either, at most SWEEP_PASSES passes (the exit's and ``tumbler
    restore``'s look for what bound threads created).  Returns False when
    cut at SWEEP_PASSES."""
    settled = False
    for _ in range(SWEEP_PASSES):
        if one_pass():
            settled = False
        elif settled:
            return True
        else:
            time.sleep(SWEEP_SETTLE_S)      # creations begun before their creator's restore
            settled = True
    return False
