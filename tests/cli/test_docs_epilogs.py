"""``--help`` points to the docs page of a command, and every page it can name exists."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from launcher.cli.app import _register, app
from launcher.cli.docs import PAGES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(set(PAGES.values())))
def test_every_epilog_page_exists(page):
    assert (ROOT / "docs" / page).is_file()


@pytest.mark.parametrize(
    "argv, page",
    [
        (["run", "--help"], "running.md"),
        (["plan", "--help"], "running.md"),
        (["logs", "tail", "--help"], "watching.md"),
        (["top", "--help"], "watching.md"),
        (["ranktable", "--help"], "ranktables.md"),
        (["hostfile", "gen", "--help"], "inventories.md"),
        (["doctor", "--help"], "ssh.md"),
    ],
)
def test_help_names_the_docs_page(argv, page):
    if "run" not in {c.name for c in app.registered_commands}:
        _register()  # what mslaunch's main() does before it parses
    result = CliRunner().invoke(app, argv, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"docs/{page}" in result.output
