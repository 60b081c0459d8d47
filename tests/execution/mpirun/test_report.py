"""mpirun's failure report: parsed from real OpenMPI 4.1.4 output, mapped to per-process results.

The texts in ``data/mpirun/`` were printed by ``mpirun`` 4.1.4 on this machine:

* exit_code.txt: ``-np 3``, MPI rank 1 exits 3 while the others sleep;
* mpmd_exit_code.txt: ``-np 1 ... : -np 2 ...`` (mslaunch's scheduler + workers shape), MPI rank 2 exits 5;
* signal_kill.txt / signal_term.txt: MPI rank 2 / 0 killed by SIGKILL / SIGTERM;
* daemon_failed.txt: ``--host nosuchhost-xyz`` (mpirun's own start failure, no rank to blame);
* aborted_only.txt: mpirun exited before printing which process failed first.
"""

from __future__ import annotations

import os

import pytest

from launcher.execution.mpirun.backend import parse_first_failure, report_outcomes
from launcher.execution.results import ProcResult
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.spec import JobSpec

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def report(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("exit_code.txt", (1, 3, None)),
        ("mpmd_exit_code.txt", (2, 5, None)),
        ("signal_kill.txt", (2, None, 9)),
        ("signal_term.txt", (0, None, 15)),
        ("daemon_failed.txt", None),
        ("aborted_only.txt", None),
    ],
)
def test_parse_first_failure_of_real_reports(name, expected):
    assert parse_first_failure(report(name)) == expected


def test_parse_first_failure_ignores_rank_output_around_the_report():
    text = "rank 0 epoch 1 loss 0.3\nExit code: 7 (a rank printing this is not mpirun)\n" + report("exit_code.txt")
    assert parse_first_failure(text) == (1, 3, None)


def _plan(tmp_path):
    spec = JobSpec(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/work",
        job_dir=str(tmp_path / "job"),
        job_id="j1",
        launcher="mpirun",
        wrapper="/t/mslaunch-rank.sh",
    )
    return build_plan(spec)


def _mpirun(rc, log="/j/mpirun.log"):
    return ProcResult("mpirun", None, "localhost", rc, 10.0, 20.0, log, pid=4242)


def test_outcomes_blame_the_reported_rank_behind_the_scheduler(tmp_path):
    plan = _plan(tmp_path)  # MPI rank 0 is the scheduler: MPI rank 2 is mslaunch's rank 1
    out = report_outcomes(plan, plan.job_dir, report("mpmd_exit_code.txt"), _mpirun(5), torn=False)
    assert [(r.name, r.returncode, r.torn_down, r.reason) for r in out] == [
        ("scheduler", None, True, "ended by mpirun"),
        ("rank 0", None, True, "ended by mpirun"),
        ("rank 1", 5, False, None),
    ]
    assert out[2].log == os.path.join(plan.job_dir, "worker_1.log") and out[2].ended == 20.0


def test_outcomes_of_a_signal_and_of_a_later_attempt(tmp_path):
    plan = _plan(tmp_path)
    adir = os.path.join(plan.job_dir, "attempt_1")
    out = report_outcomes(plan, adir, report("signal_kill.txt"), _mpirun(137), torn=False)
    assert [(r.name, r.returncode, r.signal) for r in out if not r.torn_down] == [("rank 1", -9, "SIGKILL")]
    assert [r.log for r in out] == [os.path.join(adir, n) for n in ("scheduler.log", "worker_0.log", "worker_1.log")]


def test_outcomes_when_mpirun_itself_failed_or_succeeded(tmp_path):
    plan = _plan(tmp_path)
    own = _mpirun(255)
    failed = report_outcomes(plan, plan.job_dir, report("daemon_failed.txt"), own, torn=False)
    assert failed[-1] is own and all(r.torn_down for r in failed[:-1])
    torn = report_outcomes(plan, plan.job_dir, report("daemon_failed.txt"), own, torn=True)
    assert own not in torn  # ended by mslaunch: not a cause
    ok = report_outcomes(plan, plan.job_dir, "", _mpirun(0), torn=False)
    assert [(r.name, r.returncode) for r in ok] == [("scheduler", 0), ("rank 0", 0), ("rank 1", 0)]
