"""``mslaunch --version``: the installed distribution's version, exit 0, without the imports of
any command (``launcher/cli/version.py``)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os

import pytest

from tests.harness.cli import imported_by, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_prints_the_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.8.7rc1" if name == "mslaunch" else real(name))
    r = run_cli("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, "mslaunch 9.8.7rc1\n", "")


def test_without_an_installed_distribution_the_source_trees_version() -> None:
    from launcher import __version__
    from launcher.cli import version as versionmod

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.metadata, "version", missing)
        assert versionmod.version_line() == f"mslaunch {__version__}"


@pytest.mark.needs("installed")
def test_version_in_the_commands_parser_and_its_help() -> None:
    """``--version`` reached through the parser (not first on the line) answers the same, and
    ``mslaunch --help`` lists it."""
    from launcher.cli import app as appmod

    r = run_cli("--help")
    assert r.returncode == 0 and "--version" in r.stdout
    out = run_cli("--version").stdout
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = appmod._command(["plan"]).main(args=["--version", "plan"], prog_name="mslaunch", standalone_mode=False)
    assert code == 0 and buf.getvalue() == out == f"mslaunch {importlib.metadata.version('mslaunch')}\n"


@pytest.mark.needs("installed")
def test_version_as_a_process_imports_no_command() -> None:
    r, modules = imported_by("--version")
    assert (r.returncode, r.stdout) == (0, f"mslaunch {importlib.metadata.version('mslaunch')}\n"), r.stderr
    libraries = ("typer", "click", "rich", "yaml", "psutil", "paramiko")
    layers = ("launcher.execution", "launcher.planning", "launcher.jobs", "launcher.logs")
    assert [m for m in modules if m.split(".")[0] in libraries or m.startswith(layers) or m == "launcher.cli.app"] == []
