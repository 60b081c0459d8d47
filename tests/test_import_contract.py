"""The import contract (``[importlinter]`` in setup.cfg) holds, and breaks when it should; no module is over 500 lines.

``lint-imports`` runs on the real tree, then on copies of the package with one forbidden import
added per contract (to a new module or appended to an existing one): each copy must fail naming the contract and the
offending import.
"""

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(root: str) -> subprocess.CompletedProcess:
    """``lint-imports`` in ``root`` with ``root``'s ``launcher`` package first on the path."""
    assert os.path.isfile(LINT), f"{LINT} missing: install the dev extra (pip install -e '.[dev]')"
    env = dict(os.environ, PYTHONPATH=root)
    return subprocess.run(
        [LINT, "--no-cache", "--no-logo"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def copy_tree(tmp_path) -> str:
    root = str(tmp_path / "repo")
    shutil.copytree(
        os.path.join(REPO, "launcher"), os.path.join(root, "launcher"), ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(os.path.join(REPO, "setup.cfg"), root)
    return root


WORKLOADS = "Workloads import only launcher.workloads"
ACYCLIC = "No import cycles between sibling modules"
MAX_LINES = 500


@pytest.mark.e2e
@pytest.mark.needs("import-linter")
def test_the_real_tree_keeps_every_contract():
    r = lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 kept, 0 broken" in r.stdout


#: (module, line appended, the contract it breaks): one forbidden import per contract (and more)
FORBIDDEN = [
    (
        "launcher/planning/_forbidden.py",
        "from launcher.execution import ports\n",
        "Layers: cli -> execution | jobs | logs -> planning -> errors",
    ),
    (
        "launcher/errors.py",
        "import launcher.planning.build\n",
        "Layers: cli -> execution | jobs | logs -> planning -> errors",
    ),
    ("launcher/workloads/_forbidden.py", "def f():\n    from launcher.execution.ssh import settings\n", WORKLOADS),
    ("launcher/workloads/_forbidden2.py", "from launcher.errors import MsLaunchError\n", WORKLOADS),
    ("launcher/workloads/cluster.py", "def f():\n    from launcher.jobs import files\n", WORKLOADS),
    (
        "launcher/jobs/_forbidden.py",
        "from launcher.cli import options\n",
        "Nothing imports cli (but the entry point)",
    ),
]


def _imported(line: str) -> str:
    """The module a forbidden line imports, as the report names it."""
    line = line.strip().splitlines()[-1].strip()
    if line.startswith("import "):
        return line.split("import ")[-1].strip()
    return line.split("from ")[-1].split(" import")[0]


@pytest.mark.e2e
@pytest.mark.needs("import-linter")
def test_each_forbidden_import_breaks_its_contract_and_is_named(tmp_path):
    """All the forbidden imports in one copy, one ``lint-imports`` run (each run costs most of a
    second): every contract they break is reported broken, and each import is named in the
    report (so each one broke its contract, not only one of them; one per contract is shown
    alone in test_one_forbidden_import_alone_breaks_its_contract)."""
    root = copy_tree(tmp_path)
    for module, line, _ in FORBIDDEN:
        with open(os.path.join(root, module), "a", encoding="utf-8") as fh:  # a new module, or one more line
            fh.write(line)
    r = lint(root)
    assert r.returncode != 0, r.stdout
    for module, line, contract in FORBIDDEN:
        assert f"{contract} BROKEN" in r.stdout, (module, r.stdout)
        importer = module[: -len(".py")].replace("/", ".")
        assert f"{importer} -> {_imported(line)}" in r.stdout, (module, line, r.stdout)  # names the import
    assert "4 kept" not in r.stdout


@pytest.mark.e2e
@pytest.mark.needs("import-linter")
def test_one_forbidden_import_alone_breaks_its_contract(tmp_path):
    """The copy is clean as copied; one line in one module is enough to break a contract."""
    root = copy_tree(tmp_path)
    assert lint(root).returncode == 0  # the copy is clean before the edit
    module, line, contract = FORBIDDEN[0]
    with open(os.path.join(root, module), "a", encoding="utf-8") as fh:
        fh.write(line)
    r = lint(root)
    assert r.returncode != 0 and f"{contract} BROKEN" in r.stdout, r.stdout
    assert f"{module[: -len('.py')].replace('/', '.')} -> {_imported(line)}" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "module,line",
    [
        # a lazy import inside a function that closes a cycle (kinds is imported by the plan builder)
        ("launcher/planning/job/kinds.py", "def f():\n    from launcher.planning import build\n"),
        # between two groups of planning (backends read the job's values)
        ("launcher/planning/job/spec.py", "def f():\n    from launcher.planning.backends import mpirun\n"),
        # an import under TYPE_CHECKING counts too
        (
            "launcher/planning/job/layout.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from launcher.planning.job.spec import Plan\n",
        ),
        # between two subpackages' modules of execution
        ("launcher/execution/backend.py", "def f():\n    from launcher.execution.supervision import supervisor\n"),
    ],
)
@pytest.mark.e2e
@pytest.mark.needs("import-linter")
def test_an_import_cycle_breaks_the_acyclic_contract(tmp_path, module, line):
    root = copy_tree(tmp_path)
    with open(os.path.join(root, module), "a", encoding="utf-8") as fh:
        fh.write(line)
    r = lint(root)
    assert r.returncode != 0, r.stdout
    assert f"{ACYCLIC} BROKEN" in r.stdout


def test_no_module_is_over_500_lines():
    big = []
    for folder, _dirs, files in os.walk(os.path.join(REPO, "launcher")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_LINES:
                    big.append(f"{os.path.relpath(path, REPO)} ({n} lines)")
    assert big == [], "split these by responsibility: " + ", ".join(big)
