"""The package's layers, read from its import statements (ast, no tool).

Layer order, one way only (docs/DEVELOPING.md, "Code map")::

    commands  ->  service  ->  balance, state, tracing, observers
              ->  engine, platform  ->  errors, cpulist, config, safefile, escape, jsonlimits

``engine`` imports nothing outside itself but ``tumbler.records`` (pure
Python, no OS: the ``@record`` decorator for named tuples, which every
layer may use); ``platform`` never imports the
engine or anything above it; among the middle layer only ``observers``
may use ``tracing`` (the probe observer runs a probe session).  No cycle
anywhere: a module imported inside a function counts as much as one at
the top.
"""

import ast
import os
import subprocess
import sys

import pytest

from support.helpers import REPO

PACKAGE = os.path.join(REPO, "tumbler")

#: Each layer and the layers it may import (besides itself).
LAYERS = {
    "pure": set(),
    "leaf": {"pure"},
    "engine": {"pure"},
    "platform": {"leaf", "pure"},
    "balance": {"leaf", "pure", "engine", "platform"},
    "state": {"leaf", "pure", "platform"},
    "tracing": {"leaf", "pure", "platform"},
    "observers": {"leaf", "pure", "engine", "platform", "tracing"},
    "service": {"leaf", "pure", "engine", "platform", "balance", "state", "observers"},
    "commands": {"leaf", "pure", "engine", "platform", "balance", "state", "tracing",
                 "observers", "service"},
    "top": {"commands", "platform", "leaf"},
}
LEAVES = {"tumbler.errors", "tumbler.cpulist", "tumbler.config", "tumbler.safefile",
          "tumbler.escape", "tumbler.jsonlimits"}


def layer_of(module):
    if module == "tumbler.records":
        return "pure"
    if module in LEAVES:
        return "leaf"
    if module in ("tumbler", "tumbler.__main__", "tumbler.launch"):
        return "top"
    return module.split(".")[1]


def modules():
    found = {}
    for top, dirs, names in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                module = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
                found[module] = path
    return found


def imports(module, path, known):
    """The tumbler modules ``module`` imports (from any depth of its code)."""
    is_package = path.endswith("__init__.py")
    tree = ast.parse(open(path).read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from pkg import name": name may be a module of its own.
            names = [prefix + "." + alias.name if prefix + "." + alias.name in known
                     else prefix for alias in node.names]
        else:
            continue
        # Names not in ``known`` are C extension modules (no Python source).
        found |= {name for name in names if name in known and name != module}
    return found


def graph():
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_layers_import_one_way_only():
    wrong = []
    for module, targets in sorted(graph().items()):
        mine = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs == mine or target == "tumbler":
                continue
            if theirs not in LAYERS[mine]:
                wrong.append("%s (%s) imports %s (%s)" % (module, mine, target, theirs))
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    edges = graph()
    cycles = []
    state = {}

    def visit(module, stack):
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if target not in edges:
                continue
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


#: Packages split into a module per job, and the size none of their modules
#: may grow past (issue 28: "no module above 550 lines").
SPLIT_PACKAGES = ("tumbler.commands", "tumbler.engine", "tumbler.balance", "tumbler.platform",
                  "tumbler.tracing", "tumbler.observers", "tumbler.state", "tumbler.service")
MAX_MODULE_LINES = 550


@pytest.mark.parametrize("package", SPLIT_PACKAGES)
def test_split_packages_have_no_module_above_the_limit(package):
    found = {module: path for module, path in modules().items()
             if module == package or module.startswith(package + ".")}
    assert len(found) > 1, "%s is not a package of several modules" % package
    long = ["%s: %d lines" % (module, count) for module, count in sorted(
        (module, sum(1 for _ in open(path))) for module, path in found.items())
        if count > MAX_MODULE_LINES]
    assert not long, "\n".join(long)


#: The one module that builds a Controller: every run is assembled there
#: (-p, exec, --share space, the service; issue 28).
RUN_ASSEMBLY = "tumbler.service.assembly"


def controller_calls(path):
    """Lines of ``path`` that call ``Controller(...)`` (by name or attribute)."""
    tree = ast.parse(open(path).read(), path)
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        getattr(node.func, "id", None) == "Controller"
        or getattr(node.func, "attr", None) == "Controller"))


def test_the_run_assembly_is_the_only_caller_of_controller():
    callers = {module: lines for module, path in modules().items()
               for lines in [controller_calls(path)] if lines}
    assert set(callers) == {RUN_ASSEMBLY}, callers


def test_the_controller_check_sees_a_call(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from tumbler.balance import controller\n"
                    "def f():\n    return controller.Controller(1, 2)\n"
                    "c = Controller()\n")
    assert controller_calls(str(path)) == [3, 4]


def test_the_checker_sees_a_violation(tmp_path):
    """A test over imports that cannot fail is no test: a platform module
    importing the engine, and a cycle, are both found."""
    known = {"tumbler.platform.x": "", "tumbler.engine.y": "", "tumbler.engine.z": ""}
    path = tmp_path / "x.py"
    path.write_text("from ..engine import y\n\ndef f():\n    from ..engine.z import g\n")
    assert imports("tumbler.platform.x", str(path), known) == {"tumbler.engine.y",
                                                               "tumbler.engine.z"}
    assert "engine" not in LAYERS[layer_of("tumbler.platform.x")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
@pytest.mark.parametrize("args", [["--version"], ["stat", "--help"], ["exec", "--help"],
                                  ["--help"]])
def test_linux_runs_load_no_illumos_module_and_no_ctypes(args):
    code = ("import sys\n"
            "from tumbler.commands.main import main\n"
            "try:\n"
            "    main(%r, prog_name='tumbler')\n"
            "except SystemExit:\n"
            "    pass\n"
            "bad = sorted(m for m in sys.modules if 'illumos' in m or m == 'ctypes')\n"
            "print('LOADED:' + ','.join(bad))\n" % (args,))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "LOADED:", result.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_linux_stat_loads_no_illumos_module(duty):
    proc = subprocess.Popen([duty, "30", "20", "20"])
    try:
        code = ("import sys\n"
                "from tumbler.commands.main import main\n"
                "try:\n"
                "    main(['stat', '-p', '%d', '--interval', '200'], prog_name='tumbler')\n"
                "except SystemExit as exc:\n"
                "    assert not exc.code, exc.code\n"
                "bad = sorted(m for m in sys.modules if 'illumos' in m or m == 'ctypes')\n"
                "print('LOADED:' + ','.join(bad))\n" % proc.pid)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=REPO, timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "LOADED:", result.stdout
