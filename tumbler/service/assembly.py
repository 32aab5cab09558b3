"""One balancing run, assembled in one place: ``tumbler -p``, ``exec``,
``--share space`` (commands/run.py) and the service (loop.py) all build
their runs here, and hand them back here.

A run (``Run``) is a controller over its targets with what it owns beside
it: the backend it reads through, the binder (the backend's own default
unless an option names one; none for a run that moves nothing), the
policy (the engine's, with what the configuration file sets), its
observers (--probe, --log, -v), its journal (crash-safe state, on the
running system only), and how it is handed back: every thread restored,
the observers closed, one line if threads could not be restored.  The
controller is given what it owns -- its timings (balance/timings.py:
the file's, the command's, the defaults) and how it counts other work
(balance/otherwork.py: --capacity, the service's other programs) -- and
lent the run's journal, observers and warn.  The loop that drives runs
is driver.py.

Why here, in service/: a run needs balance/ (the controller), state/ (the
journal) and observers/, so it sits above all three, and below the
commands, which use it.  service/ is that layer already, and the service
is the run assembly's largest user; a layer of its own for two modules
would add an arrow to the map and nothing else.

Everything is imported where it is used: ``exec`` makes its observers
(and checks the binder, the domains) before its command starts, and the
rest -- the engine, the controller, the journal -- while it runs
(commands/run.py).
"""

from ..errors import tell


def policy_for(name, config, interval_ms=None):
    """The engine's policy ``name``, with what the configuration ``config``
    (tumbler.config.Config: a --config file, the service's ``balancing``)
    sets and the engine's defaults elsewhere; ``interval_ms``: --interval."""
    from ..engine.policy import make_policy
    from ..engine.speed import SpeedParams
    from ..engine.variation import VariationTable
    table = VariationTable(**{key: value for key, value in (
        ("rows", config.variation_table), ("idle_interval_ms", config.idle_interval_ms))
        if value is not None})
    tolerance = {} if config.tolerance is None else {"tolerance": config.tolerance}
    return make_policy(name, table, fixed_interval_ms=interval_ms,
                       speed=SpeedParams(**config.speed), **tolerance)


def binder_for(backend, moves_threads, name=None):
    """How the run binds threads: ``backend.binder(name)`` -- None: the
    backend's own default (affinity on Linux, processor sets on illumos)
    -- or, for a run that moves nothing, a binder that binds nothing."""
    if not moves_threads:
        from ..platform.base import NullBinder
        return NullBinder()
    return backend.binder(name)


def journal_for(backend, keeps_state, warn=None):
    """The run's crash-safe record (tumbler.state), None if it keeps none."""
    if not keeps_state:
        return None
    from ..state import Journal
    return Journal(backend, warn=warn)


def observers_for(probe=False, log_path=None, verbose=False, log_fields=None, append=False,
                  started=None, warn=None):
    """A run's observers: ``--probe``'s tracer (checked now: a missing
    bpftrace or dtrace is an error before anything changes), ``--log``'s
    run log, ``-v``'s report.  ``append``: the log is shared with other
    runs (the service, ``--share space``): a line per round of each,
    with ``log_fields(controller)``'s keys, ``t`` counted from
    ``started``."""
    observers, tracer = [], None
    if probe:
        from ..observers.probes import ProbeObserver
        tracer = ProbeObserver()
        tracer.check()
        observers.append(tracer)
    if log_path:
        from ..observers.runlog import open_run_log
        log = open_run_log(log_path, warn=warn, append=append, started=started)
        if tracer is not None:
            log.extra.append(tracer.log_fields)
        if log_fields is not None:
            log.extra.append(log_fields)
        observers.append(log)
    if verbose:
        from ..observers.verbose import VerboseReport
        observers.append(VerboseReport())
    return observers


def build_run(settings, key, backend, choice, *, binder=None, journal=None, observers=(),
              **timings):
    """The run of a command's ``settings`` (commands/options.py: -p, exec,
    --share space) over ``choice``'s domains, in one call: the policy and
    (unless the command checked one already: ``binder``) the binder from
    the settings, capacity and -n from them, the loop's timings from their
    configuration.  What the command opened and checked -- the backend,
    the journal (claimed in its own order), the observers -- it passes in;
    ``timings``: the command's own (exec: first_interval_ms; Run)."""
    from ..balance.otherwork import OtherWorkCounting
    if binder is None:
        from ..config import moves_threads
        binder = binder_for(backend, moves_threads(settings.policy, settings.dry_run),
                            settings.binder)
    return Run(key, backend, policy_for(settings.policy, settings.config, settings.interval_ms),
               choice, binder, settings.config, counting=OtherWorkCounting(settings.capacity),
               dry_run=settings.dry_run, journal=journal, observers=observers, **timings)


def unrestored(failed):
    """The line for threads a run could not put back."""
    return ("%d thread%s could not be restored; `tumbler restore` retries"
            % (failed, "" if failed == 1 else "s"))


class Run:
    """A balancing run: its controller and what it owns beside it (the
    module doc).  ``key`` names it among the runs a loop drives (a
    target's PID), ``name`` in what is said of it; ``parked``: why the
    loop leaves it alone for now (the service), or None."""

    __slots__ = ("key", "name", "controller", "journal", "observers", "parked")

    def __init__(self, key, backend, policy, choice, binder, config, *, name=None,
                 counting=None, dry_run=False, journal=None, observers=(), warn=None,
                 **timings):
        """The controller over ``choice``'s domains (balance/domains.py),
        with the timings (balance/timings.py) that ``config``
        (tumbler.config.Config) sets and ``timings`` the caller's own
        (exec: first_interval_ms), the defaults elsewhere; other work
        counted as ``counting`` says (balance/otherwork.py; None: capacity
        in CPUs); then the journal told the binder's resources and the
        domains.  The targets are the caller's to add (``controller.add_target``)."""
        from ..balance.controller import Controller
        from ..balance.otherwork import OtherWorkCounting
        from ..balance.timings import Timings
        self.key = key
        self.name = name
        self.journal = journal
        self.observers = list(observers)
        self.parked = None
        self.controller = Controller(
            backend, binder, policy, choice, timings=Timings(**config.loop_options(), **timings),
            counting=OtherWorkCounting() if counting is None else counting,
            journal=journal, observers=self.observers, warn=warn, dry_run=dry_run)
        if journal is not None:
            journal.attach(binder, choice.domains)

    def observe(self):
        """Balancing begins: the targets are added, the observers start
        (--probe attaches to them)."""
        for observer in self.observers:
            observer.start(self.controller)

    def hand_back(self):
        """Put back every thread the run touched and close its observers;
        returns how many threads could not be restored (said by the caller,
        with ``unrestored``, once for all its runs)."""
        failed = self.controller.restore_all()
        for observer in self.observers:
            observer.close()
        return failed


def hand_back_all(runs, sharing=None):
    """Hand every run back (``--share space``): the LLC counters first --
    a CPU's counting LWP is bound to it, and a processor set with a bound
    CPU cannot be destroyed (platform/illumos/pset.py).  Says how many
    threads could not be restored, if any; returns that number."""
    if sharing is not None:
        sharing.close()
    failed = sum(run.hand_back() for run in runs)
    if failed and any(run.journal is not None for run in runs):
        tell(unrestored(failed))
    return failed


def discard(journal=None, observers=(), *others):
    """A run that failed before balancing began: nothing was moved; close
    what it opened (its journal, observers, and ``others``: a summary
    file, a gate, anything with ``close``)."""
    if journal is not None:
        journal.close()
    for observer in observers:
        observer.close()
    for other in others:
        if other is not None:
            other.close()
