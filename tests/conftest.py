"""Shared fixtures: an isolated MSLAUNCH_HOME per test; the namespace-cluster fixtures."""

from __future__ import annotations

import os

import pytest

from tests.harness.artifacts import pytest_runtest_makereport  # noqa: F401 - the hook, registered by its name here
from tests.harness.budget import BudgetPlugin
from tests.harness.hypo import FAST
from tests.harness.mindspore import require_mindspore
from tests.harness.needs import check_names
from tests.harness.needs import require as require_needs

pytest_plugins = ["tests.harness.conftest_netns", "tests.harness.conftest_slurm"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    """The suite's time budget (:mod:`tests.harness.budget`); Hypothesis's tables built first."""
    config.pluginmanager.register(BudgetPlugin(), "mslaunch-budget")
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # once, before pytest-xdist starts its workers
        _warm_hypothesis()


def _warm_hypothesis():
    """Hypothesis builds its tables of unicode characters the first time a test draws text (about
    2.5 CPU-s here), then keeps them under ``.hypothesis/``: on a fresh clone that cost would fall
    on whichever property test comes first and fail ``make test-fast``'s CPU limit for a test
    (:mod:`tests.harness.budget`). Drawing one text here builds them before any test is measured."""
    import warnings

    from hypothesis import find, settings
    from hypothesis import strategies as st
    from hypothesis.errors import HypothesisSideeffectWarning

    with warnings.catch_warnings():  # it warns of slow work at start-up: this is that work, on purpose
        warnings.simplefilter("ignore", HypothesisSideeffectWarning)
        find(st.text(min_size=1), lambda text: True, settings=settings(database=None))


if FAST:  # make test-fast: property tests without their own count try 20 inputs (see tests/harness/hypo.py)
    from hypothesis import settings

    settings.register_profile("fast", max_examples=20)
    settings.load_profile("fast")


@pytest.fixture(scope="session")
def _cpu_probe_cache(tmp_path_factory):
    """One CPU-probe cache for the session: the probe (a few seconds of CPU) runs once, not per
    test, nor per pytest-xdist worker (the workers' temp folders share a parent; the cache's
    writes are atomic)."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cpu-probe"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def _build_cache(_cpu_probe_cache):
    """One cache of built helpers for the session (the zygote's fastjoin shim,
    launcher.execution.process.fastjoin: compiled once, not per test; its writes are atomic)."""
    path = _cpu_probe_cache.parent / "mslaunch-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def _mslaunch_home(tmp_path_factory, monkeypatch, _cpu_probe_cache, _build_cache):
    home = tmp_path_factory.mktemp("mslaunch-home")
    os.symlink(_cpu_probe_cache, home / "cpu-probe")
    os.symlink(_build_cache, home / "cache")
    monkeypatch.setenv("MSLAUNCH_HOME", str(home))
    return home


_E2E_DIRS = ("integration", "docs")
#: Modules whose tests run whole jobs or the CLI as processes, many times over (each start of
#: ``python -m launcher`` costs about half a second of CPU): end to end, not unit tests.
_E2E_MODULES = {
    "tests/cli/test_cli_ranktable.py",
    "tests/cli/test_msrun_compat.py",
    "tests/cli/test_parser_cli.py",
    "tests/cli/test_plan_cli.py",
    "tests/cli/test_sbatch.py",
    "tests/cli/test_top.py",
    "tests/execution/local/test_faults_local.py",
    "tests/execution/local/test_run_local.py",
    "tests/execution/local/test_hang_local.py",
    "tests/execution/local/test_zygote.py",
    "tests/execution/test_toy_backend.py",
    "tests/execution/test_stopsignals.py",
    "tests/execution/test_junit.py",
    "tests/execution/checks/test_health.py",
    "tests/cli/test_doctor_health.py",
    "tests/jobs/test_jobdir_corrupt.py",
    "tests/jobs/test_jobdir_paths.py",
    "tests/logs/test_logs_bad_refs.py",
    "tests/logs/test_logs_tail_files.py",
    "tests/execution/local/test_causes_local.py",
    "tests/planning/test_parser_bounds.py",
    "tests/harness/test_markers_truthful.py",
}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked ``mindspore`` needs MindSpore: without it the test is skipped, or in CI failed
    (:func:`tests.harness.mindspore.require_mindspore`, called with the marker's keyword arguments,
    e.g. ``pytest.mark.mindspore(also=..., what=...)``), before any of its fixtures runs."""
    marker = item.get_closest_marker("mindspore")
    if marker is not None:
        require_mindspore(**marker.kwargs)
    for marker in item.iter_markers("needs"):  # tests/harness/needs.py
        require_needs(*marker.args)


def pytest_collection_modifyitems(config, items):
    """Tests under tests/integration and tests/docs, and those of :data:`_E2E_MODULES`, run whole
    jobs: mark them ``e2e`` (``make test-fast`` leaves them out).  Under pytest-xdist the longest
    tests go first, one group per worker (:func:`tests.harness.order.spread`, by their
    ``pytest.mark.cost`` markers)."""
    for item in items:
        try:
            check_names((n for m in item.iter_markers("needs") for n in m.args), item.nodeid)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        path = item.nodeid.split("::", 1)[0]
        parts = path.split("/")
        if (len(parts) > 1 and parts[0] == "tests" and parts[1] in _E2E_DIRS) or path in _E2E_MODULES:
            item.add_marker(pytest.mark.e2e)
    from tests.harness.order import spread

    try:
        items[:] = spread(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError as exc:  # a malformed pytest.mark.cost: say which test, stop the run
        raise pytest.UsageError(str(exc)) from None
