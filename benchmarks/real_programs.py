"""Real multithreaded programs, not written here: alone against
``tumbler exec`` (issue 15).

    apt-get install -y pigz zstd xz-utils          # Debian packages
    .venv/bin/pip install numpy                    # PyPI (OpenBLAS inside)
    .venv/bin/python benchmarks/real_programs.py [--runs N] [--only NAME,...] [--settle]

Each program runs N times alone and N times as ``tumbler exec -q -- PROG``
(default policy and domains), in interleaved pairs (alone, tumbler, alone,
tumbler, ...; the order inside a pair alternates), timed by wall clock
from the outside: tumbler's own start and exit are included.  Prints per
program the median wall time of each and the ratio alone/tumbler per
pair (above 1: faster under tumbler), median and range.  Input data is
made once in a temporary directory (deterministic, compressible text).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUMBLER = os.path.join(REPO, ".venv", "bin", "tumbler")
PYTHON = os.path.join(REPO, ".venv", "bin", "python")

MATMUL = ("import numpy as n; a = n.random.default_rng(1).random((2500, 2500)); "
          "[a @ a for _ in range(6)]")


def programs(data):
    """name -> (argv, what it needs installed)."""
    return {
        "pigz": (["pigz", "-p", "2", "-6", "-c", data], "pigz"),
        "zstd": (["zstd", "-T2", "-15", "-c", "-q", data], "zstd"),
        "xz": (["xz", "-T2", "-2", "-c", data], "xz"),
        "numpy-matmul": ([PYTHON, "-c", MATMUL], None),
    }


def available(argv, tool):
    if tool is not None:
        return shutil.which(tool) is not None
    return subprocess.call([PYTHON, "-c", "import numpy"], stderr=subprocess.DEVNULL) == 0


def make_data(directory, megabytes=128):
    """Compressible, deterministic text (words of a small vocabulary)."""
    path = os.path.join(directory, "input.txt")
    words = [("%x" % (i * 2654435761 % 2 ** 32)).encode() for i in range(1 << 16)]
    with open(path, "wb") as f:
        state, written = 12345, 0
        while written < megabytes << 20:
            line = []
            for _ in range(16):
                state = (state * 1103515245 + 12345) % 2 ** 31
                line.append(words[state % len(words)])
            chunk = b" ".join(line) + b"\n"
            f.write(chunk)
            written += len(chunk)
    return path


def wall(argv):
    start = time.perf_counter()
    status = subprocess.call(argv, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - start
    if status != 0:
        sys.exit("real_programs.py: %s exited with %d" % (" ".join(argv), status))
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=None, help="comma-separated program names")
    parser.add_argument("--settle", action="store_true",
                        help="run the program once, untimed, before every timed run: on "
                             "this VM a numpy run alternates between ~1.87 s and ~2.2 s "
                             "(system time 0.07 s / 0.6 s) from one run to the next, "
                             "whatever runs it, which would make any order of pairs unfair")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tumbler-real-") as directory:
        data = make_data(directory)
        chosen = programs(data)
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        print("load average %.2f at start; %d CPUs; %d pairs each"
              % (os.getloadavg()[0], os.cpu_count(), args.runs))
        print("%-14s %12s %12s %22s" % ("program", "alone s", "tumbler s",
                                         "ratio alone/tumbler"))
        for name, (argv, tool) in chosen.items():
            if not available(argv, tool):
                print("%-14s not installed (see the module docstring)" % name)
                continue
            wall(argv)                          # warm the page cache and the binary
            alone, managed = [], []
            for i in range(args.runs):
                order = [(alone, argv), (managed, [TUMBLER, "exec", "-q", "--", *argv])]
                for times, command in (order if i % 2 == 0 else order[::-1]):
                    if args.settle:
                        wall(argv)              # untimed: see --settle
                    times.append(wall(command))
            ratios = sorted(a / t for a, t in zip(alone, managed))
            print("%-14s %12.3f %12.3f %10.3f (%.3f .. %.3f)"
                  % (name, statistics.median(alone), statistics.median(managed),
                     statistics.median(ratios), ratios[0], ratios[-1]))
        print("load average %.2f at end" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
