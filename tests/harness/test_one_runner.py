"""One way to run mslaunch in a test: :mod:`tests.harness.cli` (``run_cli`` in this process,
``run_process`` as a process, ``mslaunch_argv`` for a command the test starts and watches itself).

The check reads every Python file under tests/ (its syntax tree, not its text) and refuses:

- a command line of the CLI built outside the harness: ``"-m", "launcher"`` side by side in a list,
  tuple or call, or a ``-c`` program that runs the ``launcher`` module (``runpy.run_module``);
- a function of the harness's names, or named like a runner of its own (``mslaunch``,
  ``_mslaunch``, ``run_mslaunch``, ``mslaunch_with_...``);
- a call of the CLI's ``main()`` (``launcher.__main__``, ``launcher.cli.app``,
  ``launcher.cli.ranktable``): in this process that is :func:`tests.harness.cli.run_cli`;
- ``subprocess.run`` (or ``call``, ``check_call``, ``check_output``) of ``mslaunch_argv(...)``:
  directly, through a name bound to it in the same function, or through a function of the
  module that returns it; that is what :func:`tests.harness.cli.run_process` is for.
  ``subprocess.Popen`` of it stays allowed (a process the test signals or reads while it runs).

A module's helper that adds something (a cluster's ssh config, a plugin imported first) is a call
of the harness's functions with arguments, under a name of its own, and passes.  Not runs of the
CLI, and so not checked: typer's ``CliRunner`` on an ``app`` object (unit tests of the typer app,
which look at the exception it raised), and ``-c`` programs that check what a fresh interpreter
imports (tests/cli/test_app.py, tests/cli/test_cli_ranktable.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

import pytest

TESTS = Path(__file__).resolve().parents[1]
HARNESS = (TESTS / "harness" / "cli.py", TESTS / "harness" / "test_cli.py")  # the runners, and their own test
OWN_NAMES = {"mslaunch_argv", "run_cli", "run_process"}
RUNNER_NAME = re.compile(r"^_*(run_)?mslaunch(_with\w*)?$")
WAITING_CALLS = {"run", "call", "check_call", "check_output"}
ENTRY_MODULES = {"launcher.__main__", "launcher.cli.app", "launcher.cli.ranktable"}  # each has the CLI's main()


def _is_argv_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and (getattr(node.func, "id", None) == "mslaunch_argv" or getattr(node.func, "attr", None) == "mslaunch_argv")
    )


def _argv_expr(node: ast.AST, bound: Set[str], builders: Set[str]) -> bool:
    """Whether ``node`` is a command line of the CLI: ``mslaunch_argv(...)``, a name bound to one,
    a call of a builder of one, or a list sum that starts with one of these."""
    if _is_argv_call(node):
        return True
    if isinstance(node, ast.Name):
        return node.id in bound
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        return name in builders
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _argv_expr(node.left, bound, builders)
    return False


def _builders(tree: ast.AST) -> Set[str]:
    """Functions and methods of the module whose every ``return`` gives ``mslaunch_argv(...)``."""
    out: Set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
            if returns and all(_argv_expr(r, set(), set()) for r in returns):
                out.add(fn.name)
    return out


def _bound(scope: ast.AST, builders: Set[str]) -> Set[str]:
    names: Set[str] = set()
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and _argv_expr(n.value, names, builders):
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
    return names


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _launcher_pair(elts: List[ast.AST]) -> bool:
    values = [e.value if isinstance(e, ast.Constant) else None for e in elts]
    return any(a == "-m" and b == "launcher" for a, b in zip(values, values[1:]))


def _waiting_calls(tree: ast.AST, where: str) -> List[str]:
    """``subprocess.run`` and the other waiting calls of a command line of the CLI."""
    found: List[str] = []
    builders = _builders(tree)
    module_bound = _bound(tree, builders)
    bound: Dict[int, Set[str]] = {}  # call node -> the names bound to a command line in the functions around it
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = _bound(fn, builders)
            for inner in ast.walk(fn):
                if isinstance(inner, ast.Call):
                    bound.setdefault(id(inner), set()).update(names)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WAITING_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "subprocess"
            and node.args
            and _argv_expr(node.args[0], module_bound | bound.get(id(node), set()), builders)
        ):
            found.append(f"{where}:{node.lineno}: subprocess.{node.func.attr} of mslaunch_argv(): use run_process")
    return found


def _entry_names(tree: ast.AST) -> Set[str]:
    """Names the module binds to the CLI's ``main`` (``from launcher.cli.app import main``), or to a
    module that has one (``from launcher.cli import app``), as ``NAME`` / ``NAME.main``."""
    out: Set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module in ENTRY_MODULES:
            out.update(a.asname or a.name for a in n.names if a.name == "main")
        elif isinstance(n, ast.ImportFrom) and n.module in ("launcher", "launcher.cli"):
            out.update(f"{a.asname or a.name}.main" for a in n.names if f"{n.module}.{a.name}" in ENTRY_MODULES)
        elif isinstance(n, ast.Import):
            out.update(f"{a.asname or a.name}.main" for a in n.names if a.name in ENTRY_MODULES)
    return out


def violations(source: str, where: str) -> List[str]:
    """What in ``source`` (a test module at ``where``) runs mslaunch other than through the harness."""
    tree = ast.parse(source)
    found: List[str] = []
    entries = _entry_names(tree) if "main" in source else set()
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.List, ast.Tuple)) and _launcher_pair(node.elts):
            found.append(
                f"{line}: builds `python -m launcher` itself: use tests.harness.cli (run_process, mslaunch_argv)"
            )
        elif isinstance(node, ast.Call) and _launcher_pair(node.args):
            found.append(
                f"{line}: builds `python -m launcher` itself: use tests.harness.cli (run_process, mslaunch_argv)"
            )
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.search(r"run_module\(\s*['\"]launcher['\"]", node.value)
        ):
            found.append(f"{line}: a program that runs the launcher module: use run_process(..., imports=...)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name in OWN_NAMES or RUNNER_NAME.match(node.name)
        ):
            found.append(
                f"{line}: defines {node.name}(), a runner of its own: call tests.harness.cli's run_cli/run_process"
            )
        elif entries and isinstance(node, ast.Call) and _dotted(node.func) in entries:
            found.append(f"{line}: calls the CLI's main() itself: use run_cli (in this process) or run_process")
    if "mslaunch_argv" in source:  # (the walks below cost seconds over the whole tree)
        found += _waiting_calls(tree, where)
    return sorted(set(found))


@pytest.mark.heavy
def test_no_test_module_runs_mslaunch_but_through_the_harness():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path in HARNESS or path == Path(__file__).resolve():  # this file: its samples
            continue
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'import subprocess, sys\nr = subprocess.run([sys.executable, "-m", "launcher", "plan"], capture_output=True)\n',
        'import sys\nARGV = (sys.executable, "-m", "launcher")\n',
        'import subprocess, sys\nsubprocess.Popen(["python3", "-m", "launcher", "run"])\n',
        'import os, sys\nos.execv(sys.executable, "-m", "launcher")\n',
        "DRIVER = \"import runpy; runpy.run_module('launcher', run_name='__main__')\"\n",
        "from tests.harness.cli import run_process\ndef mslaunch(*a):\n    return run_process(*a)\n",
        "def _mslaunch(c, *a):\n    pass\n",
        "def run_mslaunch(*a):\n    pass\n",
        "def mslaunch_with_plugin(*a):\n    pass\n",
        "def run_cli(*a):\n    pass\n",
        "from launcher.cli.app import main\ndef gen(*args):\n    main(list(args))\n",
        "from launcher.__main__ import main as entry\nentry()\n",
        'from launcher.cli import app as appmod\nappmod.main(["plan", "x.py"])\n',
        'import launcher.cli.ranktable\nlauncher.cli.ranktable.main(["gen"])\n',
        "class Job:\n    def run_process(self):\n        pass\n",
        'import subprocess\nfrom tests.harness.cli import mslaunch_argv\nr = subprocess.run(mslaunch_argv("ps"), '
        "capture_output=True)\n",
        'import subprocess\nfrom tests.harness.cli import mslaunch_argv\ndef f():\n    argv = mslaunch_argv("ps")\n    '
        "return subprocess.check_output(argv)\n",
        "import subprocess\nfrom tests.harness.cli import mslaunch_argv\ndef f():\n    return "
        'subprocess.run(mslaunch_argv("ps") + ["--all"])\n',
        "import subprocess\nfrom tests.harness.cli import mslaunch_argv\nclass J:\n    def argv(self):\n        return "
        'mslaunch_argv("run")\n'
        "    def go(self):\n        return subprocess.run(self.argv(), capture_output=True)\n",
    ],
)
def test_the_check_finds_a_runner_of_a_module_own(source):
    assert violations(source, "tests/x/test_sample.py") != []


@pytest.mark.parametrize(
    "source",
    [
        "from tests.harness.cli import run_process\ndef on_cluster(c, *a):\n    return run_process(*a, "
        'env={"MSLAUNCH_SSH_CONFIG": c})\n',
        'import subprocess\nfrom tests.harness.cli import mslaunch_argv\np = subprocess.Popen(mslaunch_argv("logs", '
        '"tail", "-f"))\n',
        'from tests.harness.cli import mslaunch_argv\nline = " ".join(mslaunch_argv("run", "x.py"))\n',
        'import subprocess\nsubprocess.run(["python3", "-m", "launcher.workloads.cifar10_synth", "d"])\n',
        "def _mslaunch_home(tmp_path):\n    pass\ndef mslaunch_reads(text):\n    pass\n",
        'assert " -m launcher run " in "x -m launcher run y"\n',
        'from launcher.cli import app as appmod\nappmod._register("k8s")\nfrom launcher.workloads.x import '
        "main\nmain([])\n",
    ],
)
def test_the_check_lets_calls_of_the_harness_pass(source):
    assert violations(source, "tests/x/test_sample.py") == []
