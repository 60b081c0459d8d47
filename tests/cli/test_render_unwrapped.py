"""Output that is not a terminal (CI logs, ``| tee``): tables print paths whole, never folded at
80 columns, and the root cause names its log in full."""

from __future__ import annotations

import os

import pytest

from tests.harness.cli import run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")


@pytest.mark.e2e
def test_summary_and_ps_print_long_paths_whole_when_not_a_terminal(tmp_path) -> None:
    env = dict(os.environ, MSLAUNCH_HOME=str(tmp_path / "home"), COLUMNS="80")
    job = tmp_path / ("a_log_directory_whose_name_alone_is_longer_than" + "_x" * 30) / "job"
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        PROG,
        "fail",
        "0.1",
        "1",
        "3",
        env=env,
        timeout=120,
    )
    assert r.returncode == 3, r.stderr
    lines = r.stderr.splitlines()
    for name, log in (("scheduler", "scheduler.log"), ("rank 0", "worker_0.log"), ("rank 1", "worker_1.log")):
        row = [line for line in lines if line.startswith(f"│ {name} ")]
        assert len(row) == 1 and f" {job / log} " in row[0], r.stderr  # one line each, the path whole
    assert f"job {r.stderr.split('mslaunch: job ')[1].split(':')[0]}: failed in " in r.stderr
    assert f"root cause log: {job / 'worker_1.log'}" in lines
    assert [line for line in lines if line != line.rstrip()] == []  # no padding to a terminal's width
    ps = run_process("ps", "--all", env=env, timeout=60)
    assert ps.returncode == 0 and any(f" {job} " in line for line in ps.stdout.splitlines()), ps.stdout
