"""Shared fixtures: an isolated MSLAUNCH_HOME per test; the namespace-cluster fixtures."""
from __future__ import annotations

import os
import sys

import pytest

pytest_plugins = ["tests.conftest_netns"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _mslaunch_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("mslaunch-home")
    monkeypatch.setenv("MSLAUNCH_HOME", str(home))
    return home


def mslaunch_argv(*args: str):
    """argv that runs the CLI under this interpreter."""
    return [sys.executable, "-m", "launcher", *args]
