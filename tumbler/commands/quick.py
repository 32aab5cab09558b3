"""``tumbler exec``'s quick path: the command starts in milliseconds.

Importing click costs ~35 ms of CPU here, more than Python's own start;
``tumbler exec -- CMD`` would make CMD wait for it.  So the ``tumbler``
command (launch.py) first offers an ``exec`` command line to ``parse``,
which reads the common options only (``QUICK_OPTIONS``), without click,
into the dict click would have made.  The settings are then made, checked
and run by the same code as on the click path (settings.py, run.py); what
``parse`` does not take (any other option, combined short flags, --help,
a value it cannot convert) goes to click unchanged, so every error
message and exit status is click's or run.py's, never this module's.
tests/commands/test_quick.py checks that both paths make the same settings.
"""

import gc
import sys

from ..config import CAPACITY_CHOICES, LEVEL_CHOICES, POLICY_CHOICES
from ..errors import TumblerError
from .report import die
from .settings import make_settings

#: Option -> (name in the options dict, kind): True/False for a flag,
#: int or float for a number, str for text, or a tuple of choices.  The
#: names and meanings are options.py's (the test compares them).
QUICK_OPTIONS = {
    "-q": ("quiet", True), "--quiet": ("quiet", True),
    "-v": ("verbose", True), "--verbose": ("verbose", True),
    "-n": ("dry_run", True), "--dry-run": ("dry_run", True),
    "--children": ("children", True), "--no-children": ("children", False),
    "--policy": ("policy", POLICY_CHOICES),
    "--level": ("level", LEVEL_CHOICES),
    "--capacity": ("capacity", CAPACITY_CHOICES),
    "--domains": ("domains_text", str),
    "--interval": ("interval_ms", int),
    "--duration": ("duration", float),
    # Opened and checked by run.py on either path, without heavy imports: a
    # benchmark's --summary-json must not make its command wait for click.
    # (--log is not here: its observer's imports come before the command.)
    "--summary-json": ("summary_json", str),
}


def parse(args):
    """(options, command) from ``tumbler [OPTIONS] exec [OPTIONS] [--] CMD
    [ARGS...]`` as click would read it, or None if this is not such a line
    or has anything ``QUICK_OPTIONS`` does not take."""
    options = {}
    in_exec = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "exec" and not in_exec:
            in_exec = True
            i += 1
            continue
        if in_exec and arg == "--":
            command = args[i + 1:]
            break
        if not arg.startswith("-") or arg == "-":
            if not in_exec:
                return None         # another subcommand, or a stray argument
            command = args[i:]      # exec takes no arguments after its command
            break
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = QUICK_OPTIONS.get(name)
        if spec is None:
            return None
        key, kind = spec
        if kind is True or kind is False:
            if equals:
                return None
            options[key] = kind
        else:
            if not equals:
                i += 1
                if i == len(args):
                    return None
                value = args[i]
            value = _convert(kind, value)
            if value is None:
                return None
            options[key] = value
        i += 1
    else:
        return None
    return (options, command) if command else None


def _convert(kind, value):
    if isinstance(kind, tuple):
        return value if value in kind else None
    try:
        return kind(value)
    except ValueError:
        return None


def quick_exec(args):
    """Run ``tumbler ARGS`` if it is an exec line ``parse`` takes and whose
    settings are valid; returns the exit status, or None to leave it to
    click."""
    parsed = parse(args)
    if parsed is None:
        return None
    options, command = parsed
    try:
        settings = make_settings(options, "/", None)
    except TumblerError:
        return None                 # click says what is wrong, as always
    # The set-up's imports and objects live as long as tumbler: the cyclic
    # GC's young collections over them cost ~2 ms of CPU beside the
    # command (BENCHMARKS.md); the loop turns it on again (service/driver.py).
    gc.disable()
    from .run import run_exec
    try:
        return run_exec(settings, command)
    except TumblerError as exc:
        die(exc)
    except KeyboardInterrupt:       # before the signal handlers (click: Abort)
        print(file=sys.stderr)
        return 130
    except Exception as exc:
        from ..platform.base import PlatformError
        if isinstance(exc, PlatformError):
            die(exc)
        raise
