"""The unit subset passes on a machine without MindSpore: a test that needs it says so.

``make test`` installs MindSpore, so a unit test that imports it (often through a
``launcher.workloads`` module) without the ``mindspore`` marker passes there and fails on a
plain machine.  Here a child pytest runs with ``import mindspore`` refused (a ``sys.meta_path``
finder): it collects the whole unit subset (module-level imports), then runs the unit tests of
the modules that import MindSpore or the launcher modules importing it, at any depth (imports
inside test bodies).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.harness.paths import REPO as REPO_ROOT

UNIT = "not e2e and not mindspore and not netns and not mpi and not slurm"

#: Installs a finder that refuses mindspore (and its submodules), then runs pytest with argv.
CHILD = """
import sys

class NoMindSpore:
    def find_spec(self, name, path=None, target=None):
        if name == "mindspore" or name.startswith("mindspore."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused by tests/harness/test_markers_truthful.py)", name=name)
        return None

sys.meta_path.insert(0, NoMindSpore())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""

#: An import, at any depth, of MindSpore or of the launcher modules that import it when imported.
NAMES_MS = re.compile(
    r"^\s*(import mindspore|from mindspore|import launcher\.workloads|from launcher\.workloads"
    r"|from launcher\.execution\.probes(\.health_probe| import health_probe))",
    re.M,
)


def _child(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, CI="")  # outside CI: what needs MindSpore skips
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    return subprocess.run(
        [sys.executable, "-c", CHILD, "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-m", UNIT, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _modules_naming_mindspore() -> list:
    found = []
    for folder, dirs, files in os.walk(os.path.join(REPO_ROOT, "tests")):
        dirs[:] = [d for d in dirs if d not in ("scripts", "data", "__pycache__")]
        for name in files:
            if name.startswith("test_") and name.endswith(".py") and name != os.path.basename(__file__):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    if NAMES_MS.search(fh.read()):
                        found.append(os.path.relpath(path, REPO_ROOT))
    return sorted(found)


@pytest.mark.cost(25)
def test_the_unit_subset_collects_and_the_tests_near_mindspore_pass_without_it() -> None:
    collect = _child("--collect-only", "tests")
    assert collect.returncode == 0, collect.stdout[-4000:] + collect.stderr[-2000:]
    modules = _modules_naming_mindspore()
    assert "tests/workloads/test_resnet50.py" in modules  # the search finds what it should
    run = _child("-x", "-rf", *modules)
    assert run.returncode in (0, 5), (
        "a unit test needs MindSpore but is not marked mindspore:\n" + run.stdout[-4000:] + run.stderr[-2000:]
    )
