"""Shared fixtures: an isolated MSLAUNCH_HOME per test; the namespace-cluster fixtures."""
from __future__ import annotations

import os
import sys

import pytest

pytest_plugins = ["tests.harness.conftest_netns", "tests.harness.conftest_slurm"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def _cpu_probe_cache(tmp_path_factory):
    """One CPU-probe cache for the session: the probe (a few seconds) runs once, not per test."""
    return tmp_path_factory.mktemp("cpu-probe")


@pytest.fixture(autouse=True)
def _mslaunch_home(tmp_path_factory, monkeypatch, _cpu_probe_cache):
    home = tmp_path_factory.mktemp("mslaunch-home")
    os.symlink(_cpu_probe_cache, home / "cpu-probe")
    monkeypatch.setenv("MSLAUNCH_HOME", str(home))
    return home


def mslaunch_argv(*args: str):
    """argv that runs the CLI under this interpreter."""
    return [sys.executable, "-m", "launcher", *args]


_E2E_DIRS = ("integration", "docs")


def pytest_collection_modifyitems(config, items):
    """Tests under tests/integration and tests/docs run whole jobs: mark them ``e2e``
    (``make test-fast`` leaves them out)."""
    for item in items:
        parts = item.nodeid.split("/")
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in _E2E_DIRS:
            item.add_marker(pytest.mark.e2e)
