"""The two ways to run the CLI (tests/harness/cli.py) answer alike, and run_process passes on
what it is given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.cli import mslaunch_argv, run_cli, run_process


def test_the_command_line_is_python_m_launcher_under_this_interpreter():
    assert mslaunch_argv("ps", "--all") == [sys.executable, "-m", "launcher", "ps", "--all"]
    argv = mslaunch_argv("ps", imports=("a.b", "c"))
    assert argv[:2] == [sys.executable, "-c"] and argv[3:] == ["ps"]
    assert argv[2].index("import a.b; import c; ") < argv[2].index(
        "runpy.run_module("
    )  # then the CLI, as python -m launcher


@pytest.mark.parametrize(
    "args", [("plan", "--np", "0", "train.py"), ("run", "--np", "2", "--bogus", "x.py"), ("status", "no-such-job")]
)
@pytest.mark.e2e
def test_in_this_process_and_as_a_process_the_cli_answers_alike(args, tmp_path):
    inside, outside = run_cli(*args, cwd=str(tmp_path)), run_process(*args, cwd=str(tmp_path))
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)
    assert outside.returncode == 2 and outside.stderr.startswith("mslaunch: error: ")


@pytest.mark.e2e
def test_imports_come_before_the_cli_and_popen_arguments_replace_the_captures(tmp_path):
    r = run_process("--help", imports=("this",), cwd=str(tmp_path))  # importing `this` prints the Zen of Python
    assert r.returncode == 0 and r.stdout.startswith("The Zen of Python") and "Usage: mslaunch" in r.stdout
    r = run_process("status", "no-such-job", stderr=subprocess.STDOUT, cwd=str(tmp_path))
    assert r.stderr is None and r.stdout.startswith("mslaunch: error: no job 'no-such-job'")
