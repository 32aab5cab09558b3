"""The test suite's own layout (docs/DEVELOPING.md, "Code map"): tests/ mirrors the
package, a folder per layer; no test file imports another (helpers live
in tests/support/, fixtures in conftest.py files); test file names are
unique (pytest imports them by name, each folder on sys.path)."""

import ast
import os

from support.helpers import REPO

TESTS = os.path.join(REPO, "tests")
PACKAGE = os.path.join(REPO, "tumbler")

#: Folders of tests/ that are no layer of the package.
OWN_FOLDERS = {"system", "support", "workloads", "data"}


def python_files():
    for top, dirs, names in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "workloads", "data")]
        for name in names:
            if name.endswith(".py"):
                yield os.path.join(top, name)


def imported_modules(path):
    """Every module name ``path`` imports, at any depth of its code."""
    found = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append(node.module)
    return found


def imports_a_test_file(path):
    """The imports of ``path`` that name a test file or a conftest (which
    of several conftest.py files ``import conftest`` finds depends on the
    order pytest loaded them)."""
    return [m for m in imported_modules(path)
            if m.split(".")[-1].startswith("test_") or m.split(".")[-1] == "conftest"]


def test_no_test_file_imports_another():
    wrong = ["%s: %s" % (os.path.relpath(path, TESTS), ", ".join(found))
             for path in sorted(python_files()) for found in [imports_a_test_file(path)]
             if found]
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_an_import_of_a_test_file(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("from support.helpers import REPO\nimport conftest\n\n"
                    "def test_y():\n    from test_reliability import state\n")
    assert imports_a_test_file(str(path)) == ["conftest", "test_reliability"]


def test_test_file_names_are_unique():
    seen = {}
    for path in python_files():
        name = os.path.basename(path)
        if name.startswith("test_"):
            seen.setdefault(name, []).append(os.path.relpath(path, TESTS))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_every_test_file_is_in_the_folder_of_a_layer():
    """A test file's folder is system/ or names a folder of the package
    (tests/platform/linux/ for tumbler/platform/linux/)."""
    wrong = []
    for path in python_files():
        folder = os.path.relpath(os.path.dirname(path), TESTS)
        if not os.path.basename(path).startswith("test_"):
            continue
        if folder == "." or (folder.split(os.sep)[0] not in OWN_FOLDERS
                             and not os.path.isdir(os.path.join(PACKAGE, folder))):
            wrong.append(os.path.relpath(path, TESTS))
    assert not wrong, wrong
