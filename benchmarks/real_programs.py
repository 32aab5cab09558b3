"""Real multithreaded programs, alone against ``tumbler exec`` (issues 15
and 27).

    sh benchmarks/suite.sh [OPTIONS]        # installs what is missing, then runs this
    .venv/bin/python benchmarks/real_programs.py [OPTIONS]

The programs (``--list`` prints them with their commands), each sized to
run 2-10 s alone on a 2-CPU VM:

* OpenMP, each at threads = cores and threads > cores (half as many again:
  3 on 2 CPUs), with ``OMP_WAIT_POLICY`` active and passive: ImageMagick's
  ``convert`` (Debian builds it with OpenMP) blurring a picture, and two
  kernels of ``benchmarks/kernels/`` built here with ``gcc -O2 -fopenmp``:
  ``ep`` (independent equal work, one barrier at the end, like NAS EP) and
  ``stencil`` (a Jacobi sweep loop, a barrier every few ms, like NAS MG);
* the bundled barrier program ``examples/workloads/spmd``, 3 threads on 2
  CPUs with yield barriers, spin barriers, and none (one 4 s phase);
* pigz, zstd and xz compressing generated text, numpy's matrix product
  (OpenBLAS), and ``goroutines`` (``benchmarks/kernels/goroutines.go``,
  built with ``go build``): Go's runtime and its own threads.

Each program runs alone and as ``tumbler [--tumbler-args] exec -q -- PROG``
(default policy and domains unless --tumbler-args says otherwise), in
interleaved pairs (alone, tumbler, alone, tumbler, ...; the order inside a
pair alternates), timed by wall clock from the outside: tumbler's own start
and exit are included.  One untimed run first warms the page cache.  With
``--baseline TREE`` each pair is a triple: the same tumbler command again
with another work tree's tumbler first on PYTHONPATH (before and after a
change, measured in one interleaving; the order turns by one each triple).
With ``--python-parent`` the program also runs behind a Python parent that
does nothing but start it and wait (this interpreter's start, a
posix_spawn, a wait, its exit; ``--parent-burn-ms MS``: and MS of CPU burnt
right after the start): the floor any tool in Python that is the command's
parent pays, in the same interleaving (a row 'python parent').

Pairs: with --runs N, N per program.  Otherwise as many as the median
ratio's 95% interval needs (6), then more while that interval is wider
than --ci-width, up to --max-runs: a program whose runs spread by more than
10% gets pairs until its interval is narrow or the cap is reached.

The interval is distribution-free, from the sign test: the median ratio
lies between the k-th smallest and the k-th largest of n ratios with
probability 1 - 2 P(B < k), B ~ Binomial(n, 1/2), whatever their
distribution; k is the largest that keeps this at 95% or more, and the
exact level is printed.  Pairs are assumed independent, which the
interleaving serves.

Prints per program: pairs; median wall time alone and under tumbler; the
per-pair ratio tumbler/alone (below 1: faster under tumbler), median and
range; its 95% interval; tumbler's thread moves per second (cross-domain
migrations plus speed balancing's core changes) and its own CPU seconds,
medians over the tumbler runs, from its ``--summary-json``.  ``--json
FILE`` writes the same, one record per program, with every run's figures.
"""

import argparse
import compileall
import contextlib
import fcntl
import itertools
import json
import math
import os
import random
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "kernels")
# The tumbler of the interpreter that runs this script (the repository's
# venv), so that ``PYTHONPATH=TREE`` measures a work tree's tumbler.
TUMBLER = os.path.join(os.path.dirname(sys.executable), "tumbler")

CORES = os.cpu_count()
# Half as many threads again as cores: the 3 threads on 2 CPUs of issue 27.
OVERSUBSCRIBED = CORES + (CORES + 1) // 2

LEVEL = 0.95                   # of the median ratio's interval
HOG_CPU = 1                    # --background-hog's CPU
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

MATMUL = ("import numpy as n; a = n.random.default_rng(1).random((2500, 2500)); "
          "[a @ a for _ in range(10)]")


class Program(NamedTuple):
    """A command; an argument ``{NAME}`` is replaced by input NAME's path
    (see Inputs).  ``module``: a Python module the command imports."""
    argv: list
    env: dict = {}
    module: Optional[str] = None


def programs():
    """name -> Program, in the order they run."""
    table = {
        # The text four times over: once is about a second's work for pigz.
        "pigz": Program(["pigz", "-p", str(CORES), "-9", "-c", *["{text}"] * 4]),
        "zstd": Program(["zstd", "-T%d" % CORES, "-15", "-c", "-q", "{text}"]),
        "xz": Program(["xz", "-T%d" % CORES, "-1", "-c", "{text}"]),
        "numpy-matmul": Program([sys.executable, "-c", MATMUL], module="numpy"),
        "go-goroutines": Program(["{goroutines}", "110", "256"]),
    }
    # The bundled barrier program (examples/workloads/spmd.c), 3 threads on 2
    # CPUs as in the speed balancing paper: phases of 100 ms between
    # barriers that yield or spin, and one phase of 4 s (no barrier).
    for barrier, shape in (("yield", ["-p", "40", "-w", "100"]),
                           ("spin", ["-p", "40", "-w", "100"]),
                           ("none", ["-p", "1", "-w", "4000"])):
        table["spmd-%s-t%d" % (barrier, OVERSUBSCRIBED)] = Program(
            ["{spmd}", "-t", str(OVERSUBSCRIBED), "-b", "spin" if barrier == "none" else barrier,
             *shape])
    for kind, argv in (("im-blur", ["convert", "{image}", "-blur", "0x30", "null:"]),
                       ("omp-ep", ["{ep}", "550"]),
                       ("omp-stencil", ["{stencil}", "2048", "1500"])):
        for threads in (CORES, OVERSUBSCRIBED):
            for wait in ("active", "passive"):
                table["%s-t%d-%s" % (kind, threads, wait)] = Program(
                    argv, {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": wait})
    return table


class Missing(Exception):
    """Something a program needs is not installed (the message says what)."""


def run_quietly(argv):
    """Run a preparation step; Missing with its error output if it fails."""
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise Missing("%s failed: %s" % (argv[0], done.stderr.strip()[-300:]))


def make_text(path, megabytes=64):
    """Compressible, deterministic text: lines of 16 words drawn from 65,536
    (about 3:1 for the compressors, which find no long repeats in it)."""
    words = [("%x" % (i * 2654435761 % 2 ** 32)).encode() for i in range(1 << 16)]
    rng = random.Random(1)
    with open(path, "wb") as f:
        written = 0
        while written < megabytes << 20:
            picked = rng.choices(words, k=16 * 4096)
            chunk = b"\n".join(b" ".join(picked[i:i + 16])
                               for i in range(0, len(picked), 16)) + b"\n"
            f.write(chunk)
            written += len(chunk)


def make_image(path):
    """A tall colour picture: ImageMagick 6 gives its blur of R rows fewer
    threads than OMP_NUM_THREADS until R reaches 8,192
    (GetMagickNumberThreads in its thread-private.h; 2,000 rows got one
    thread), so 9,000 rows."""
    version = subprocess.run(["convert", "-version"], capture_output=True, text=True)
    if "OpenMP" not in version.stdout:
        raise Missing("convert -version lists no OpenMP: not ImageMagick built with it")
    run_quietly(["convert", "-size", "800x9000", "-seed", "1", "plasma:red-blue",
                 "-type", "TrueColor", "miff:" + path])


def build_openmp(name):
    def build(path):
        run_quietly(["gcc", "-O2", "-fopenmp", "-o", path,
                     os.path.join(KERNELS, name + ".c"), "-lm"])
    return build


def build_spmd(path):
    """examples/workloads/spmd, built by its Makefile, copied to ``path``."""
    workloads = os.path.join(os.path.dirname(HERE), "examples", "workloads")
    run_quietly(["make", "-s", "-C", workloads, "spmd"])
    shutil.copy(os.path.join(workloads, "spmd"), path)


def build_go(path):
    run_quietly(["go", "build", "-o", path, os.path.join(KERNELS, "goroutines.go")])


#: input name -> (the command it needs, the function that makes it at a path)
INPUTS = {
    "text": (None, make_text),
    "image": ("convert", make_image),
    "ep": ("gcc", build_openmp("ep")),
    "stencil": ("gcc", build_openmp("stencil")),
    "goroutines": ("go", build_go),
    "spmd": ("make", build_spmd),
}
PLACEHOLDER = re.compile(r"^\{(\w+)\}$")


class Inputs:
    """Inputs made once, when a chosen program first needs them, in a
    temporary directory."""

    def __init__(self, directory):
        self.directory = directory
        self.made = {}              # name -> path, or the Missing it raised

    def path(self, name):
        if name not in self.made:
            tool, make = INPUTS[name]
            path = os.path.join(self.directory, name)
            try:
                if tool is not None and shutil.which(tool) is None:
                    raise Missing("%s is not installed" % tool)
                make(path)
                self.made[name] = path
            except Missing as missing:
                self.made[name] = missing
        if isinstance(self.made[name], Missing):
            raise self.made[name]
        return self.made[name]

    def command(self, program):
        """The program's argv, its inputs made; Missing if it cannot run here."""
        if not PLACEHOLDER.match(program.argv[0]) and shutil.which(program.argv[0]) is None:
            raise Missing("%s is not installed" % program.argv[0])
        if program.module is not None and subprocess.call(
                [sys.executable, "-c", "import " + program.module],
                stderr=subprocess.DEVNULL) != 0:
            raise Missing("Python module %s is not installed" % program.module)
        argv = []
        for arg in program.argv:
            match = PLACEHOLDER.match(arg)
            argv.append(self.path(match.group(1)) if match else arg)
        return argv


def median_interval(values, level=LEVEL):
    """(low, high, exact level) of the sign test's interval for the median
    of values, the narrowest at `level` or above; None when there are too
    few values for `level` (fewer than 6 at 95%)."""
    ordered, n = sorted(values), len(values)
    found, below = None, 0.0            # below: P(B <= k)
    for k in range(n // 2):
        below += math.comb(n, k) / 2 ** n
        if 1 - 2 * below < level:
            break
        found = (ordered[k], ordered[n - 1 - k], 1 - 2 * below)
    return found


FEWEST_PAIRS = next(n for n in itertools.count(1) if median_interval([0.0] * n))


def enough_pairs(ratios, args):
    """--runs pairs; without it, the adaptive rule of the module docstring."""
    if args.runs is not None:
        return len(ratios) >= args.runs
    interval = median_interval(ratios)
    return len(ratios) >= args.max_runs or (
        interval is not None and interval[1] - interval[0] <= args.ci_width)


def wall(argv, env):
    start = time.perf_counter()
    status = subprocess.call(argv, stdout=subprocess.DEVNULL, env=env)
    took = time.perf_counter() - start
    if status != 0:
        sys.exit("real_programs.py: %s exited with %d" % (" ".join(argv), status))
    return took


def process_cpu_s(pid):
    """utime + stime of a live process, seconds (0 once it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class OtherWork:
    """The CPU the machine spent on something other than the runs being
    timed (their commands, this script, the --background-* neighbours):
    every CPU's busy time from /proc/stat less those, and the time the
    hypervisor stole.  A pair during which another process (a test run, a
    compiler, a cron job) took more than the limit is thrown away and run
    again: its ratio would measure the neighbour, not tumbler."""

    def __init__(self, limit, background=()):
        self.limit = limit                  # CPU-seconds per second of wall
        self.background = background        # Popen objects started here

    def reading(self):
        with open("/proc/stat") as f:
            ticks = [int(field) for field in f.readline().split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = resource.getrusage(resource.RUSAGE_SELF)
        ours = (children.ru_utime + children.ru_stime + own.ru_utime + own.ru_stime
                + sum(process_cpu_s(p.pid) for p in self.background))
        return (time.perf_counter(), (user + nice + system + irq + softirq) / CLOCK_TICKS,
                steal / CLOCK_TICKS, ours)

    def since(self, before):
        """Other work's share of one CPU since ``before`` (a reading)."""
        now = self.reading()
        seconds = now[0] - before[0]
        other = (now[1] - before[1]) - (now[3] - before[3]) + (now[2] - before[2])
        return max(other, 0.0) / seconds if seconds > 0 else 0.0

    def wait_quiet(self, window_s=1.0, most_s=600.0):
        """Sleep until one window of ``window_s`` sees other work under the
        limit; False if none did within ``most_s``."""
        deadline = time.monotonic() + most_s
        while time.monotonic() < deadline:
            before = self.reading()
            time.sleep(window_s)
            if self.since(before) <= self.limit:
                return True
        return False


def read_summary(path):
    """(moves per second, own CPU s while balancing, the whole process's CPU
    s or None from a tumbler before it was given) from tumbler's
    --summary-json (keys of tumbler/observers/summary.py's summary_record)."""
    with open(path) as f:
        summary = json.load(f)
    os.remove(path)             # so that a run that writes none cannot pass for one
    moves = summary["migrations"] + summary["core_changes"]
    rate = moves / summary["wall_s"] if summary["wall_s"] > 0 else 0.0
    return rate, summary["own_cpu_s"], summary.get("process_cpu_s")


def measure(argv, env, args, scratch, other_work):
    """Interleaved pairs (triples with --baseline) until enough_pairs; the
    program's record.  A pair during which other work took more than its
    limit is run again (see OtherWork); with --lock each pair holds that
    lock, so that test runs sharing the machine wait between pairs."""
    summary_path = os.path.join(scratch, "summary.json")
    managed_argv = [TUMBLER, *shlex.split(args.tumbler_args), "exec", "-q",
                    "--summary-json", summary_path, "--", *argv]
    alone, managed, rates, cpus, process_cpus, baseline_cpus = [], [], [], [], [], []
    runs = [(alone, argv, env), (managed, managed_argv, env)]
    extras = {}                 # row name -> its wall times, beside alone's
    if args.baseline:
        # The same command line under another tree's tumbler (its modules
        # first on the path): before and after measured in one interleaving.
        extras["baseline"] = []
        runs.append((extras["baseline"], managed_argv, {**env, "PYTHONPATH": args.baseline}))
    if args.python_parent:
        extras["python parent"] = []
        runs.append((extras["python parent"], python_parent_argv(argv, args.parent_burn_ms),
                     env))
    wall(argv, env)                              # warm the page cache and the binary
    discarded, busiest = 0, []
    while not enough_pairs([t / a for a, t in zip(alone, managed)], args):
        # The order turns by one each time: every variant runs first,
        # second (and third) equally often.
        turn = len(alone) % len(runs)
        took, shares, summary, baseline_summary = {}, [], None, None
        with held(args.lock):
            for times, command, command_env in runs[turn:] + runs[:turn]:
                if args.settle:
                    wall(argv, env)              # untimed: see --settle
                before = other_work.reading()
                took[id(times)] = wall(command, command_env)
                shares.append(other_work.since(before))
                if times is managed:
                    summary = read_summary(summary_path)
                elif times is extras.get("baseline") and os.path.exists(summary_path):
                    baseline_summary = read_summary(summary_path)
        worst = max(shares)
        if worst > other_work.limit:
            discarded += 1
            if discarded > args.max_discards:
                sys.exit("real_programs.py: other work took more than %.1f%% of a CPU "
                         "during %d pairs: the machine is not quiet enough to time on"
                         % (100 * other_work.limit, discarded))
            other_work.wait_quiet()
            continue
        busiest.append(worst)
        for times, _, _ in runs:
            times.append(took[id(times)])
        rates.append(summary[0])
        cpus.append(summary[1])
        process_cpus.append(summary[2])
        if baseline_summary is not None:
            baseline_cpus.append(baseline_summary[1])
    ratios = [t / a for a, t in zip(alone, managed)]
    interval = median_interval(ratios)
    record = {
        "pairs": len(ratios),
        "alone_median_s": statistics.median(alone),
        "tumbler_median_s": statistics.median(managed),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios), "ratio_max": max(ratios),
        "ratio_ci": None if interval is None else list(interval[:2]),
        "ratio_ci_level": None if interval is None else interval[2],
        "moves_per_s_median": statistics.median(rates),
        "tumbler_cpu_s_median": statistics.median(cpus),
        "alone_s": alone, "tumbler_s": managed, "ratios": ratios,
        "moves_per_s": rates, "tumbler_cpu_s": cpus,
        "tumbler_process_cpu_s": process_cpus,
        "tumbler_process_cpu_s_median": (statistics.median(process_cpus)
                                         if None not in process_cpus else None),
        "pairs_discarded": discarded, "other_work_max": max(busiest),
    }
    for row, times in extras.items():
        ratios = [b / a for a, b in zip(alone, times)]
        interval = median_interval(ratios)
        record[row.replace(" ", "_")] = {
            "row": row, "wall_s": times, "ratios": ratios,
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratio_ci": None if interval is None else list(interval[:2]),
            "ratio_ci_level": None if interval is None else interval[2]}
    if baseline_cpus:
        record["baseline"].update(tumbler_cpu_s=baseline_cpus,
                                  tumbler_cpu_s_median=statistics.median(baseline_cpus))
    return record


def python_parent_argv(argv, burn_ms=0):
    """``argv`` behind a Python parent (this interpreter) that starts it with
    posix_spawn, burns ``burn_ms`` of its own CPU, waits for it and exits
    with its status: what a tool in Python costs a command it is the parent
    of before it does anything (--python-parent)."""
    code = ("import os, sys, time\n"
            "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)\n"
            "end = time.process_time() + %r\n"
            "while time.process_time() < end:\n"
            "    pass\n"
            "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n" % (burn_ms / 1000.0))
    return [sys.executable, "-c", code, shutil.which(argv[0]) or argv[0], *argv[1:]]


@contextlib.contextmanager
def held(path):
    """An exclusive flock(2) on ``path`` while the block runs (nothing
    without a path)."""
    if path is None:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start_hog():
    """A busy loop pinned to HOG_CPU at nice 0: other work beside the program."""
    def pin():
        os.sched_setaffinity(0, {HOG_CPU})
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)


BURSTY = """
import os, random, time
rng = random.Random(os.getpid())
while True:
    end = time.monotonic() + rng.uniform(0.05, 0.25)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.05, 0.25))
"""


def start_bursty():
    """Two neighbours, one per CPU's worth, each busy for 50-250 ms then
    idle for 50-250 ms (half a CPU each on average), unpinned at nice 0:
    other work that comes and goes."""
    return [subprocess.Popen([sys.executable, "-c", BURSTY]) for _ in range(2)]


def start_waker(directory):
    """A neighbour that sleeps 0.3 ms in a loop (tests/workloads/waker.c,
    3-5% of a CPU, under the dead band of other work), unpinned at nice 0:
    it preempts the program's threads thousands of times a second."""
    path = os.path.join(directory, "waker")
    run_quietly(["gcc", "-O2", "-o", path,
                 os.path.join(HERE, "..", "tests", "workloads", "waker.c")])
    return subprocess.Popen([path, "300"])


def chosen_programs(only):
    """Names picked by --only: a name, or its family (``omp-ep`` is every
    omp-ep-...)."""
    table = programs()
    if only is None:
        return table
    picked = {}
    for want in only.split(","):
        family = {name: p for name, p in table.items()
                  if name == want or name.startswith(want + "-")}
        if not family:
            sys.exit("real_programs.py: no program %r (--list shows them)" % want)
        picked.update(family)
    return {name: p for name, p in table.items() if name in picked}


def print_row(name, r):
    interval = ("n/a (<%d pairs)" % FEWEST_PAIRS if r["ratio_ci"] is None
                else "%.3f-%.3f (%.1f%%)" % (*r["ratio_ci"], 100 * r["ratio_ci_level"]))
    whole = r["tumbler_process_cpu_s_median"]
    print("%-24s %5d %8.3f %8.3f %7.3f %13s %22s %7.1f %7.3f %7s"
          % (name, r["pairs"], r["alone_median_s"], r["tumbler_median_s"], r["ratio_median"],
             "%.3f-%.3f" % (r["ratio_min"], r["ratio_max"]), interval,
             r["moves_per_s_median"], r["tumbler_cpu_s_median"],
             "n/a" if whole is None else "%.3f" % whole))
    if r["pairs_discarded"]:
        print("%-24s %d pairs run again: other work took over the limit during them"
              % ("", r["pairs_discarded"]))
    for extra in (r.get("baseline"), r.get("python_parent")):
        if extra is None:
            continue
        interval = ("n/a" if extra["ratio_ci"] is None
                    else "%.3f-%.3f (%.1f%%)" % (*extra["ratio_ci"], 100 * extra["ratio_ci_level"]))
        cpu = extra.get("tumbler_cpu_s_median")
        print("%-24s %5s %8s %8.3f %7.3f %13s %22s %7s %7s"
              % ("  " + extra["row"], "", "", statistics.median(extra["wall_s"]),
                 extra["ratio_median"], "%.3f-%.3f" % (extra["ratio_min"], extra["ratio_max"]),
                 interval, "", "" if cpu is None else "%.3f" % cpu))


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Programs: see --list; the rules for the pairs and the interval: the "
               "docstring of benchmarks/real_programs.py and benchmarks/README.md.")
    parser.add_argument("--runs", type=int, default=None,
                        help="exactly N pairs per program (default: adaptive, see "
                             "--ci-width)")
    parser.add_argument("--ci-width", type=float, default=0.05,
                        help="without --runs: add pairs until the median ratio's 95%% "
                             "interval is at most this wide (default 0.05)")
    parser.add_argument("--max-runs", type=int, default=24,
                        help="without --runs: at most this many pairs (default 24)")
    parser.add_argument("--only", default=None,
                        help="comma-separated program names or families (im-blur, omp-ep, "
                             "omp-stencil, ...)")
    parser.add_argument("--list", action="store_true", help="print the programs and exit")
    parser.add_argument("--tumbler-args", default="", metavar="ARGS",
                        help="tumbler options before exec, e.g. \"--policy speed\" or "
                             "\"--domains 0/1\"")
    parser.add_argument("--background-hog", action="store_true",
                        help="a busy loop pinned to CPU %d at nice 0 from the first run "
                             "to the last (the program beside other work)" % HOG_CPU)
    parser.add_argument("--background-bursty", action="store_true",
                        help="two unpinned neighbours at nice 0, each busy 50-250 ms then "
                             "idle 50-250 ms, from the first run to the last")
    parser.add_argument("--baseline", metavar="TREE", default=None,
                        help="also time the same tumbler command with TREE (another work "
                             "tree of tumbler, its C modules built in place) first on "
                             "PYTHONPATH, in the same interleaving: a before/after "
                             "comparison in one run (a row 'baseline' under each program)")
    parser.add_argument("--python-parent", action="store_true",
                        help="also time the program behind a Python parent that only "
                             "starts it and waits, in the same interleaving: the floor of "
                             "any tool in Python that is its parent (a row 'python "
                             "parent' under each program)")
    parser.add_argument("--parent-burn-ms", type=float, default=0.0, metavar="MS",
                        help="with --python-parent: that parent also burns MS of its own "
                             "CPU right after starting the program (default 0)")
    parser.add_argument("--background-waker", action="store_true",
                        help="a neighbour waking every 0.3 ms (3-5%% of a CPU) from the "
                             "first run to the last")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="also write the results as JSON, one record per program")
    parser.add_argument("--settle", action="store_true",
                        help="run the program once, untimed, before every timed run: on "
                             "this VM a numpy run alternates between ~1.87 s and ~2.2 s "
                             "(system time 0.07 s / 0.6 s) from one run to the next, "
                             "whatever runs it, which would make any order of pairs unfair")
    parser.add_argument("--other-limit", type=float, default=0.03, metavar="SHARE",
                        help="throw a pair away and run it again when something else "
                             "(another process, the hypervisor's steal) took more than this "
                             "share of one CPU during one of its runs (default 0.03; an idle "
                             "machine here shows 0.003-0.01)")
    parser.add_argument("--max-discards", type=int, default=50,
                        help="give up on a program after this many pairs thrown away "
                             "(default 50)")
    parser.add_argument("--lock", metavar="FILE", default=None,
                        help="hold an exclusive flock on FILE while each pair runs (test "
                             "runs sharing the machine take the same lock and wait)")
    args = parser.parse_args()
    if args.runs is not None and args.runs < 1 or args.max_runs < 1:
        parser.error("--runs and --max-runs take a positive count")
    return args


def main():
    args = parse_args()
    chosen = chosen_programs(args.only)
    if args.list:
        for name, program in chosen.items():
            env = " ".join("%s=%s" % item for item in program.env.items())
            print("%-24s %s" % (name, " ".join(filter(None, [env, *program.argv]))))
        return
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "tumbler")):
        sys.exit("real_programs.py: --baseline %s: no tumbler package there" % args.baseline)
    if not os.path.exists(TUMBLER):
        sys.exit("real_programs.py: no %s: run this with the venv's python "
                 "(.venv/bin/python), or through benchmarks/suite.sh" % TUMBLER)
    # Byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (this VM),
    # a module edited since the last compile is compiled at every start.
    import tumbler
    for tree in filter(None, [os.path.dirname(os.path.dirname(tumbler.__file__)),
                              args.baseline]):
        compileall.compile_dir(os.path.join(tree, "tumbler"), quiet=1)
    tumbler_args = shlex.split(args.tumbler_args)
    # tumbler's own costs follow its interpreter's: Debian's python3 (built
    # with PGO and LTO, its extension modules linked in) starts and imports
    # ~20% cheaper than a pyenv build here (BENCHMARKS.md).
    python = "%s %s" % (os.path.realpath(sys.executable), sys.version.split()[0])
    header = {"cpus": CORES, "kernel": os.uname().release, "python": python,
              "load_average_start": os.getloadavg()[0], "tumbler_args": tumbler_args,
              "background_hog_cpu": HOG_CPU if args.background_hog else None,
              "background_bursty": args.background_bursty,
              "background_waker": args.background_waker,
              "runs": args.runs, "ci_width": args.ci_width, "max_runs": args.max_runs,
              "settle": args.settle, "baseline": args.baseline,
              "python_parent": args.python_parent, "parent_burn_ms": args.parent_burn_ms,
              "other_limit": args.other_limit,
              "ratio_ci_method": "sign test"}
    print("load average %.2f at start; %d CPUs; %s; tumbler %s; pairs: %s%s"
          % (header["load_average_start"], CORES, python,
             " ".join(tumbler_args) or "(defaults)",
             args.runs if args.runs is not None
             else "%d to %d, until the interval is <= %.3f wide"
             % (FEWEST_PAIRS, args.max_runs, args.ci_width),
             ("; hog on CPU %d" % HOG_CPU if args.background_hog else "")
             + ("; bursty neighbours" if args.background_bursty else "")
             + ("; a waker" if args.background_waker else "")))
    print("%-24s %5s %8s %8s %7s %13s %22s %7s %7s %7s"
          % ("program", "pairs", "alone s", "tumbl s", "ratio", "min-max",
             "95% CI (sign test)", "moves/s", "cpu s", "all s"))
    records = []
    hog = waker = None
    neighbours = []
    with tempfile.TemporaryDirectory(prefix="tumbler-real-") as directory:
        inputs = Inputs(directory)
        try:
            for name, program in chosen.items():
                try:
                    argv = inputs.command(program)
                except Missing as missing:
                    print("%-24s not run: %s (sh benchmarks/suite.sh installs what is "
                          "missing)" % (name, missing))
                    records.append({"program": name, "missing": str(missing)})
                    continue
                if args.background_hog and hog is None:
                    hog = start_hog()
                if args.background_bursty and not neighbours:
                    neighbours = start_bursty()
                if args.background_waker and waker is None:
                    waker = start_waker(directory)
                other_work = OtherWork(args.other_limit,
                                       [p for p in [hog, waker, *neighbours] if p is not None])
                record = measure(argv, {**os.environ, **program.env}, args, directory,
                                 other_work)
                print_row(name, record)
                sys.stdout.flush()
                records.append({"program": name, "command": program.argv, "env": program.env,
                                **record})
        finally:
            for process in [hog, waker, *neighbours]:
                if process is not None:
                    process.kill()
                    process.wait()
    header["load_average_end"] = os.getloadavg()[0]
    print("load average %.2f at end" % header["load_average_end"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**header, "programs": records}, f, indent=1)


if __name__ == "__main__":
    main()
