"""``mslaunch run`` (``--dry-run`` too) refuses a missing program before it starts anything."""

from __future__ import annotations

import os

import pytest

from tests.harness.cli import run_cli


def _main(monkeypatch, capsys, tmp_path, *args: str):
    """``mslaunch ARGS`` in this process (tests/harness/cli.py): ``(exit code, stdout, stderr)``."""
    r = run_cli(*args, cwd=str(tmp_path))
    return r.returncode, r.stdout, r.stderr


def _setup(tmp_path) -> None:
    (tmp_path / "ok.py").write_text("")
    (tmp_path / "pkgdir").mkdir()
    (tmp_path / "pkgdir" / "__main__.py").write_text("")
    (tmp_path / "plain_dir").mkdir()
    (tmp_path / "tool.sh").write_text("#!/bin/sh\n")
    (tmp_path / "tool.sh").chmod(0o755)
    (tmp_path / "data.txt").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mytool").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "mytool").chmod(0o755)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["ok.py"], None),
        (["pkgdir"], None),  # python DIR runs DIR/__main__.py
        (["no_such.py"], "SCRIPT: no such file 'no_such.py'"),
        (["plain_dir"], "'plain_dir' is a directory without __main__.py"),
        (["-m", "json.tool"], None),
        (["-m", "not_installed_anywhere.train"], None),  # a module need not be a file here
        (["-m", "pkg/train.py"], "-m: 'pkg/train.py' is not a module name"),
        (["--no-python", "./tool.sh"], None),
        (["--no-python", "true"], None),  # found on PATH
        (["--no-python", "./data.txt"], "'./data.txt' is not executable"),
        (["--no-python", "./nope.sh"], "no such file './nope.sh'"),
        (["--no-python", "no-such-program-here"], "no program 'no-such-program-here' on the ranks' PATH"),
        (["--no-python", "-e", "PATH=/nonexistent", "true"], "no program 'true'"),  # the ranks' PATH, not mslaunch's
        (["--no-python", "--env", "PATH=bin", "mytool"], None),
    ],
)
def test_run_checks_the_program(args, needle, monkeypatch, capsys, tmp_path) -> None:
    _setup(tmp_path)
    before = sorted(os.listdir(tmp_path))
    code, out, err = _main(monkeypatch, capsys, tmp_path, "run", "--dry-run", "--np", "1", "--cpu-tune", "off", *args)
    if needle is None:
        assert code == 0, err
    else:
        assert code == 2 and err.strip() == err.strip().splitlines()[0] and needle in err and out == "", (code, err)
    assert sorted(os.listdir(tmp_path)) == before


def test_a_real_run_checks_before_writing_anything(monkeypatch, capsys, tmp_path) -> None:
    code, _out, err = _main(monkeypatch, capsys, tmp_path, "run", "--np", "1", "--cpu-tune", "off", "no_such.py")
    assert code == 2 and "no such file 'no_such.py'" in err
    assert os.listdir(tmp_path) == []
