"""``tumbler compare``: run one command under several placement policies.

Whether balancing helps a program is an empirical question, and one run
under each policy answers it badly: a noisy machine makes any single
timing meaningless.  ``compare`` runs CMD ``--runs`` times under each
policy, *interleaved* (run 1 of every policy, then run 2 of every policy,
...) so that slow drift in machine noise hits every policy alike, and
reports the spread of the wall times next to their means.

Policies (``--policies``, comma-separated, in the order to run them):

``default``  CMD run plainly; the OS places its threads.
``pinned``   static one-thread-per-CPU pinning (PBind in the Tumbler
             paper): each thread of CMD, in order of appearance, is bound
             to the next CPU of the domains' CPUs, round robin.
``psets``    static equal split over the domains, never regrouped (PSets
             in the paper): thread i, in order of appearance, is bound to
             all CPUs of domain i mod K.
any policy of ``tumbler --policy`` (``auto``, ``tumbler``, ``speed``,
``observe``)  CMD run as ``tumbler --policy NAME exec -- CMD``, in a
             separate process so that tumbler's work is measured apart.

Variants: a tumbler-run policy may carry tumbler options, as
``NAME+KEY=VALUE[+KEY=VALUE...]`` with KEY ``capacity`` (measured or
cpus), ``share`` (time or space) or ``share-policy`` (equal-qos or
max-qos), each passed to that policy's tumbler run as ``--KEY VALUE``:
``--policies default,auto+capacity=cpus,auto+capacity=measured``, or
``auto+share=time,auto+share=space``.  The variant's whole text is its
name, in the table and the JSON.  A key given twice, an unknown key or
value, a variant of default/pinned/psets, the same variant twice (in any
order of its keys) and ``share=space`` without ``--together`` are usage
errors.  The three options themselves are refused: they belong to a policy.

``pinned`` and ``psets`` are done by compare itself: it watches
``/proc/PID/task`` (polling every millisecond while threads keep
appearing, backing off to 64 ms when none do) and binds each new thread
through the platform's binder (``backend.binder("affinity")``:
sched_setaffinity on Linux; where it does not exist the two policies are
a usage error).  Only the threads of CMD's own process are placed,
as with ``tumbler exec``.  The balancing options (``--domains``,
``--level``, ``--interval``, ``--config``, ``--binder``, ``--dry-run``,
``--duration``) are passed to every tumbler-run policy; ``--domains`` and
``--level`` also choose the domains of ``pinned`` and ``psets``.  ``-q``
hides compare's per-run progress lines on stderr; ``-v`` also shows each
tumbler run's per-interval lines and exit summary.  The other balancing
options (``--policy``, ``--log``, ``--force``, ...) do not apply: they are
hidden from ``compare --help`` and refused.

Measured per run:

* wall time, by compare, from just before CMD (or tumbler) is started to
  just after it is reaped -- so it includes process start-up, and, for the
  tumbler policies, the start-up of Python and tumbler (0.1 to 0.4 s,
  depending on the machine).  With ``--probe``, from the opening of CMD's
  gate (once its tracer is attached, see tracer.RunTracer) to the reaping: the
  attach wait is not counted, nor, for the tumbler policies, tumbler's
  start-up.  With ``--together``, each program's from its release to its
  reaping (tumbler's start-up and attach are not counted), and the run's
  from the release of the programs to the reaping of the last (for
  ``alone``: the sum of the programs' wall times, run one after the
  other);
* ``elapsed_s`` when CMD prints ``elapsed_s=SECONDS`` on stdout (the
  example workloads do): the program's own timing, without start-up
  (with ``--together``, per program only);
* agent CPU: the CPU time of whatever placed the threads.  For tumbler
  policies it is ``own_cpu_s`` of tumbler's JSON summary, which each
  tumbler run writes to a file of compare's (``--summary-json``; from the
  start of balancing to the restore; the start-up, 0.1 to 0.3 s of CPU,
  is not included).  tumbler runs with ``--quiet`` unless ``-v``: its
  human summary is for people.  tumbler's rusage cannot be used: it
  includes CMD, its child.  For ``pinned`` and ``psets`` it is compare's
  own CPU time while following the run.  ``default`` has none.  A
  ``--together`` tumbler run's is ``own_cpu_s`` of its summary too (at the
  top level of a ``--share space`` summary as of a single one).

``--background CMD`` (repeatable; one string, split as a shell would,
without expansion): started before every run of every policy alike, in a
session of its own, and killed with SIGKILL (with whatever it started in
its process group; what made a group of its own escapes) and reaped
after the run, on Linux with all the group (compare is their subreaper
while it kills them: PR_SET_CHILD_SUBREAPER, so the next run never
starts beside a dying one) -- e.g. ``--background "taskset -c
1 sh -c 'while :; do :; done'"``, a CPU hog pinned on CPU 1.  It is never
balanced: tumbler runs attach to or start only compare's programs.  Its
stdout goes to /dev/null; its stderr is shown if it ends early.  A
background command that cannot be started, or that ends before the run
does, fails the run (with a message saying so).

``--together CMD`` (repeatable; split the same way): more programs that
run at the same time as CMD in every run.  Every run then starts all the
programs: ``default`` plainly; a tumbler-run policy as ``tumbler
[balancing options] [variant options] --summary-json F -p PID -p PID
...`` attached to them (tumbler ends by itself once they have all exited:
"target exited", or "targets exited" with ``share=space``; ``--children``
is not passed, so only the programs' own processes are balanced).
``pinned``, ``psets`` and ``--probe`` place or trace one program: with
``--together`` they are usage errors.  Each round
first runs every program by itself, plainly, one after the other, as the
policy ``alone`` (round k: the alone runs, then every policy), so that a
program's *slowdown* under a policy is its mean wall time there over its
mean wall time alone.  Per policy compare reports each program's wall time
figures and slowdown, and the spread of the slowdowns: their population
standard deviation and max/min, as the space-sharing paper reports its
programs' QoS (``--share space`` with equal-qos should make the slowdowns
equal: a small spread).

The programs are started held at a gate (``gate.Gate``, as for
``--probe``) and released all at the same instant once everything is
ready: for a tumbler run, once tumbler has attached to every one of them
(``together._attached``: a run that moves threads has claimed each -- its state
file names that tumbler --; one that moves none, observe or ``--dry-run``,
has logged its first round to a ``--log`` file of compare's).  So tumbler
balances them from their first instruction, as ``exec`` would, and a
program shorter than tumbler's start-up (0.1 to 0.4 s) cannot be over
before tumbler has seen it.

With ``--probe`` (root; bpftrace or DTrace) every run's CMD is traced with
the probes, by compare itself for every policy alike (see tracer.RunTracer), from
CMD's first instruction:
lock waits, run-queue latency and (cross-domain) migrations, per run and
as means per policy.

Per policy: mean, median, min, max and CV of the wall times (CV = sample
standard deviation / mean, 0 for a single run), the same for ``elapsed_s``
when every run printed it, mean agent CPU, and the speedup vs default =
default's mean / this policy's mean: above 1 is faster than default.

A *verdict* against the OS default, from the runs paired as they were
interleaved (run k of the policy with run k of ``default``): the median
of the per-pair ratios policy wall / default wall and a distribution-free
confidence interval of that median (order statistics of the ratios, the
sign test's: 95% where there are 6 pairs or more, the level [min, max]
reaches with fewer, stated).  ``faster`` if the whole interval is below
1, ``slower`` if above, ``no difference`` if it holds 1 -- with 5 pairs
or fewer an interval is wide, and a 2% gain or loss is found only with
more pairs (``--runs``).

``--json`` prints one object (keys stable for scripts)::

    command        CMD as a list of strings
    runs           runs requested per policy
    domains        the domains of pinned/psets, as CPU lists
    domain_note    how those domains were chosen
    results        one object per policy, in --policies order:
      policy                      its name
      runs                        runs that exited 0 (the figures below
                                  are over these)
      statuses                    exit status of every run made
      wall_s                      {mean, median, min, max, cv}
      elapsed_s                   the same for elapsed_s, or null
      agent_cpu_s                 mean agent CPU seconds, or null
      speedup_vs_default          default's mean wall / this mean wall, or null
      elapsed_speedup_vs_default  the same on elapsed_s, or null
      verdict                     against default, from the paired runs:
                                  {pairs, ratio_median, ratio_low,
                                  ratio_high, confidence, verdict: faster,
                                  no difference or slower}, or null
                                  (default itself, or no pairs)
      probe                       --probe: {runs traced, and the means of
                                  lock_s, lock_waits, runq_s, runq_waits,
                                  runq_mean_ms, migrations, cross_domain},
                                  or null
    run_results    one object per run, in the order run:
      run, policy, status, wall_s, elapsed_s, agent_cpu_s,
      threads_placed (pinned/psets: threads bound; otherwise null),
      probe (--probe: that run's figures and "failure", why tracing
      stopped early or null; otherwise null)
    failed         null, or {run, policy, status} of the run that failed

Keys added by ``--together`` and ``--background``, present only when they
are given (the keys above never change)::

    programs       --together: every program as a list of strings, CMD
                   first, in the order of the per-program lists below
    background     --background: every background command, as lists
    results[]:     (--together; the first result is policy "alone")
      programs         one object per program:
        wall_s             {mean, median, min, max, cv} of its wall times
        elapsed_s          the same for its elapsed_s, or null
        slowdown           its mean wall_s / its mean wall_s alone, or null
        elapsed_slowdown   the same on elapsed_s, or null
      slowdown_spread  {mean, stdev, max_over_min} of the programs'
                       slowdowns (stdev: population standard deviation),
                       or null when a slowdown is unknown
    run_results[]:
      programs         (--together) one {status, wall_s, elapsed_s} per
                       program, fewer if the run failed before they started
      failure          why the run failed when its status does not say (a
                       background command ended early or could not start,
                       tumbler exited or did not attach), else null
    failed.failure     the same for the run that failed

Exit status: 0 when every run exited 0; 1 when a run failed (compare then
stops, prints what it has and says which run failed; a command that cannot
be started counts as a failed run with status 127 or 126; with
``--together`` a run fails when a program exits non-zero, or tumbler
does); 2 on bad input.

The package, a module per job: ``variants`` (the policy names),
``runs`` (one run of CMD and what a run is), ``tracer`` (``--probe``),
``background`` (``--background``), ``together`` (``--together``),
``schedule`` (the interleaved runs), ``stats`` and ``report`` (the
figures, the table and the JSON), ``command`` (the click command).  The
static placer of ``pinned`` and ``psets`` is a balancer:
``tumbler.balance.static``.
"""

from .command import compare_command

__all__ = ["compare_command"]
