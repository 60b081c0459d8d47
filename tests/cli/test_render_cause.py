"""The end of ``mslaunch run``'s output: the cause and its hint just before the exit code line."""

from __future__ import annotations

from launcher.cli.render import print_result
from launcher.execution.results import JobResult, ProcResult, RootCause
from launcher.logs.causes import Cause

T0 = 1_700_000_000.0


def _result(cause):
    bad = ProcResult("rank 1", 1, "h2", 1, T0, T0 + 1, "/j/worker_1.log")
    return JobResult(
        "j1",
        "/j",
        "failed",
        1,
        T0,
        T0 + 2,
        1,
        (bad,),
        root_cause=RootCause(bad, ("x",), cause),
        message="rank 1 on h2 failed: exit code 1",
    )


def test_the_cause_and_hint_come_just_before_the_exit_code(capsys):
    cause = Cause(
        "missing_module", "ModuleNotFoundError: No module named 'x' (on h2)", "install x on h2 (or set --python)"
    )
    print_result(_result(cause))
    lines = capsys.readouterr().err.rstrip("\n").splitlines()
    assert lines[-4:] == [
        "mslaunch: rank 1 on h2 failed: exit code 1",
        "mslaunch: cause: missing_module: ModuleNotFoundError: No module named 'x' (on h2)",
        "mslaunch: hint: install x on h2 (or set --python)",
        "mslaunch: exit code 1; summary: /j/summary.json",
    ]


def test_no_cause_no_lines(capsys):
    print_result(_result(None))
    err = capsys.readouterr().err
    assert "mslaunch: cause:" not in err and "mslaunch: hint:" not in err
    assert err.rstrip("\n").splitlines()[-1] == "mslaunch: exit code 1; summary: /j/summary.json"
