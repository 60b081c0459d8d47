"""The mpirun backend's lost host: the rsh agent wrapper's records (a real wrapper around a real
command) and how they type the ranks of a host whose daemon session failed first."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher.execution.mpirun.backend import lost_host, report_outcomes, watched_agent
from launcher.execution.mpirun.rshwatch import record_path
from launcher.execution.results import ProcResult, earliest_failure
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.spec import JobSpec


def _agent(tmp_path, host, *command):
    """Run the wrapper as mpirun would: ``AGENT... HOST`` (the agent ``sh -c COMMAND`` stands for
    ssh; the host is its ``$0``); the wrapper's exit code."""
    argv = [sys.executable, "-m", "launcher.execution.mpirun.rshwatch", str(tmp_path), "3", "sh", "-c", *command, host]
    return subprocess.run(argv, timeout=60).returncode


@pytest.mark.e2e
def test_the_wrapper_records_each_session_and_the_first_failure_unasked_is_the_lost_host(tmp_path) -> None:
    assert _agent(tmp_path, "h1", "exit 0") == 0
    assert _agent(tmp_path, "h2", "exit 255") == 255
    assert _agent(tmp_path, "h3", "exit 1") == 1  # later: a consequence
    rec = json.loads(open(record_path(str(tmp_path), "h2")).read())
    assert (rec["host"], rec["returncode"], rec["stopped"]) == ("h2", 255, False)
    assert lost_host(str(tmp_path)) == ("h2", "mpirun's daemon on h2 lost (its ssh session ended: exit status 255)")


def test_no_lost_host_when_every_session_ended_well_or_the_first_failure_was_asked_for(tmp_path) -> None:
    assert _agent(tmp_path, "h1", "exit 0") == 0
    assert lost_host(str(tmp_path)) is None
    (tmp_path / "orted_h2.json").write_text(
        json.dumps({"host": "h2", "ended": 1.0, "returncode": -15, "stopped": True})
    )
    (tmp_path / "orted_h3.json").write_text(
        json.dumps({"host": "h3", "ended": 2.0, "returncode": 255, "stopped": False})
    )
    assert lost_host(str(tmp_path)) is None
    assert lost_host(str(tmp_path / "missing")) is None


def test_the_agent_is_wrapped_and_nothing_else_changes() -> None:
    argv = ("mpirun", "-H", "a:1", "--mca", "plm_rsh_agent", "ssh -F cfg -o BatchMode=yes", "--mca", "x", "y", "prog")
    out = watched_agent(argv, "/j/mpirun")
    assert out[:5] == argv[:5] and out[6:] == argv[6:]
    assert out[5] == f"{sys.executable} -m launcher.execution.mpirun.rshwatch /j/mpirun 5 ssh -F cfg -o BatchMode=yes"
    assert watched_agent(("mpirun", "-np", "2", "prog"), "/j") == ("mpirun", "-np", "2", "prog")


def test_the_ranks_of_the_lost_host_are_the_failure_with_their_host_lost(tmp_path) -> None:
    spec = JobSpec(
        inventory=parse_host_list("h1:2,h2:2,h3:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/work",
        np=4,
        job_dir=str(tmp_path / "job"),
        job_id="j1",
        launcher="mpirun",
        wrapper="/t/mslaunch-rank.sh",
    )
    plan = build_plan(spec)
    mpirun = ProcResult("mpirun", None, "localhost", 205, 1.0, 2.0, "/j/mpirun.log")
    how = "mpirun's daemon on h2 lost (its ssh session ended: exit status 255)"
    out = report_outcomes(
        plan,
        plan.job_dir,
        "mpirun noticed that process rank 1 with PID 5 on node h1 exited on signal 9",
        mpirun,
        False,
        {"h2": how},
    )
    lost = {r.name: r.lost for r in out if r.lost}
    assert lost == {"rank 2": how, "rank 3": how}
    assert all(r.torn_down for r in out if r.host != "h2") and not any(r.name == "mpirun" for r in out)
    assert earliest_failure(out).host == "h2"
