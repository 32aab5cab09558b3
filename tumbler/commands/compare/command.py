"""``tumbler compare``, the click command: its options checked (the
balancing options compare uses, those it forwards to tumbler runs, those
it refuses), the set-up decided once, the runs made, the report printed."""

import json
import shlex
import sys

import click

from ...balance.domains import choose_domains
from ...errors import EXIT_FAILURE, UsageError
from ...platform import open_backend
from ...platform.base import PlatformError
from ..options import balancing_options, examples, settings as make_settings, within
from ..settings import OPTION_NAMES
from .report import format_table, report
from .runs import RunSetup
from .schedule import run_all
from .variants import ALONE, DEFAULT_POLICIES, VARIANT_OPTIONS, parse_policies, split_variant

DEFAULT_RUNS = 5

#: Balancing options compare uses; the others are hidden from its --help
#: and refused (see _reject_unusable).
USED_OPTIONS = frozenset(("level", "domains_text", "interval_ms", "config_path", "binder",
                          "dry_run", "duration", "quiet", "verbose", "probe"))

#: Balancing options forwarded to tumbler-run policies: (settings key, flag).
_FORWARDED = (("level", "--level"), ("domains_text", "--domains"),
              ("interval_ms", "--interval"), ("config_path", "--config"),
              ("binder", "--binder"), ("duration", "--duration"))


def _tumbler_args(settings, options):
    args = []
    if settings.platform:
        args += ["--platform", settings.platform]
    for key, flag in _FORWARDED:
        if options.get(key) is not None:
            args += [flag, "%s" % options[key]]
    if settings.dry_run:
        args.append("--dry-run")
    if settings.verbose:
        args.append("--verbose")
    return args


def _reject_unusable(ctx, options, settings):
    """Balancing options that make no sense for compare are errors, not ignored."""
    if options.get("policy") is not None:
        raise UsageError("compare runs several policies: use --policies, not --policy")
    if options.get("log_path") is not None:
        raise UsageError("--log cannot be used with compare: every run would overwrite it")
    for name in OPTION_NAMES:
        if name not in USED_OPTIONS and options.get(name):
            flag = _flag(ctx, name)
            if flag[2:] in VARIANT_OPTIONS:
                raise UsageError("%s does not apply to compare: give it to a policy, e.g. "
                                 "--policies default,auto+%s=%s"
                                 % (flag, flag[2:], options[name]))
            raise UsageError("%s does not apply to compare" % flag)
    if settings.root != "/":
        raise UsageError("--root cannot be used with compare: it runs real programs")


def _flag(ctx, name):
    for param in ctx.command.params:
        if param.name == name:
            return max(param.opts, key=len)
    return name


def parse_commands(flag, texts):
    """Each --together/--background string, split as a shell would (no
    expansion)."""
    commands = []
    for text in texts:
        try:
            command = shlex.split(text)
        except ValueError as exc:
            raise UsageError("%s %r: %s" % (flag, text, exc)) from None
        if not command:
            raise UsageError("%s: empty command" % flag)
        commands.append(command)
    return commands


def _check_combinations(policies, together, probe):
    """What --together cannot do, and variants that need it, before any run."""
    if together:
        static = [p for p in policies if p in ("pinned", "psets")]
        if static:
            raise UsageError("--together cannot be used with %s: it places the threads of "
                             "one program" % " or ".join(static))
        if probe:
            raise UsageError("--together cannot be used with --probe: it traces one program")
        return
    for policy in policies:
        if ("share", "space") in split_variant(policy)[1]:
            raise UsageError("--policies: %r: space sharing is between several programs: "
                             "give the others with --together" % policy)


def _make_setup(ctx, options, policies, command, together=(), background=()):
    settings = make_settings(ctx, options)
    _reject_unusable(ctx, options, settings)
    _check_combinations(policies, together, settings.probe)
    backend = open_backend(settings.platform, settings.root)
    static = [p for p in policies if p in ("pinned", "psets")]
    if static:
        try:
            backend.binder("affinity")          # the binder StaticPlacer uses
        except PlatformError as exc:
            raise UsageError("policies %s: %s" % (", ".join(static), exc)) from None
    probe_kinds = ()
    if settings.probe:
        from ...tracing import session as probe
        from ...observers.probes import check_tracing
        check_tracing(backend.name)     # one clear line if it cannot
        probe_kinds = tuple(probe.KINDS)
    choice = choose_domains(backend.topology(), backend.own_allowed(),
                            settings.level, settings.domains)
    return RunSetup(command=list(command), domains=choice.domains, domain_note=choice.note,
                    tumbler_args=_tumbler_args(settings, options),
                    echo_tumbler_summary=settings.verbose, probe_kinds=probe_kinds,
                    together=[list(c) for c in together],
                    background=[list(c) for c in background], dry_run=settings.dry_run,
                    backend=backend), settings


def _print_progress(result, runs):
    elapsed = "" if result.elapsed_s is None else ", elapsed_s %.3f" % result.elapsed_s
    programs = "" if not result.programs else " (%s)" % ", ".join(
        "#%d %.3f s" % (index, p["wall_s"]) for index, p in enumerate(result.programs, 1))
    click.echo("compare: run %d/%d %-8s %.3f s%s%s%s%s" % (
        result.run, runs, result.policy, result.wall_s, programs, elapsed,
        "" if result.status == 0 else ", exit status %d" % result.status,
        "" if result.failure is None else ", FAILED: %s" % result.failure), err=True)


@click.command("compare", context_settings={"allow_interspersed_args": False},
               short_help="Time CMD alone and under each policy, and compare the times.",
               epilog=examples(
                   "tumbler compare -- ./solver input.dat      # 5 runs of each default policy",
                   "tumbler compare --runs 10 --policies default,auto -- ./app",
                   "tumbler compare --together './other' -- ./app   # beside another program"))
@click.option("--runs", type=int, callback=within(1, 10000), default=DEFAULT_RUNS, metavar="N",
              help="Runs per policy, 1 to 10000 (default: %d)." % DEFAULT_RUNS)
@click.option("--policies", "policies_text", metavar="LIST",
              default=",".join(DEFAULT_POLICIES),
              help="Comma-separated policies: default (the OS alone), pinned, psets, or "
                   "any tumbler --policy, also as a variant NAME+KEY=VALUE[+KEY=VALUE...] "
                   "(KEY: capacity, share, share-policy) (default: %s)."
                   % ",".join(DEFAULT_POLICIES))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--together", "together_texts", metavar="CMD", multiple=True,
              help="Another program to run at the same time as CMD in every run "
                   "(one string, split like a shell line; repeatable).  Adds the policy "
                   "'alone' and each program's slowdown.")
@click.option("--background", "background_texts", metavar="CMD", multiple=True,
              help="Started before every run and killed after it, never balanced "
                   "(one string, split like a shell line; repeatable).")
@balancing_options
@click.argument("command", nargs=-1, required=True, metavar="-- CMD [ARGS...]")
@click.pass_context
def compare_command(ctx, runs, policies_text, as_json, together_texts, background_texts,
                    command, **options):
    """Time CMD alone and under each policy, runs interleaved, and compare the times.

    A policy may be a variant of a tumbler-run one, NAME+KEY=VALUE[+...]
    with KEY capacity, share or share-policy (tumbler's --KEY VALUE), e.g.
    auto+capacity=measured or auto+share=space.  -q hides the per-run
    progress lines; -v shows tumbler's stderr in full.
    """
    if ctx.obj is None:
        ctx.obj = {"root": "/", "platform": None, "options": {}}
    merged = dict(ctx.obj["options"])
    merged.update({k: v for k, v in options.items() if v is not None})
    policies = parse_policies(policies_text)
    together = parse_commands("--together", together_texts)
    background = parse_commands("--background", background_texts)
    setup, settings = _make_setup(ctx, merged, policies, command, together, background)
    schedule = ([ALONE] if together else []) + policies
    results, failed = run_all(setup, schedule, runs,
                              progress=None if settings.quiet else _print_progress)
    data = report(setup, schedule, runs, results, failed)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        for line in format_table(data):
            click.echo(line)
    if failed is not None:
        if failed.failure is not None:
            click.echo("tumbler: compare: run %d of %s failed: %s"
                       % (failed.run, failed.policy, failed.failure), err=True)
        else:
            click.echo("tumbler: compare: run %d of %s exited with status %d"
                       % (failed.run, failed.policy, failed.status), err=True)
        sys.exit(EXIT_FAILURE)


for _param in compare_command.params:
    if _param.name in OPTION_NAMES and _param.name not in USED_OPTIONS:
        _param.hidden = True
