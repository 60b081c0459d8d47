"""The mpirun backend's seam: its pure argv builder per attempt, ``describe`` for plan.json,
one start request standing for every process, and a missing mpirun named at start."""

from __future__ import annotations

import os

import pytest

from launcher.errors import LaunchError, PlanError
from launcher.execution.backend import BackendContext, get_backend
from launcher.execution.mpirun.backend import MPIRUN_CHECK, MpirunBackend
from launcher.planning.backends.mpirun import mpirun_command
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.spec import JobSpec

JOB = "/work/mslaunch_logs/j1"


def plan_for(launcher="mpirun", method="dynamic", **kw):
    spec = JobSpec(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/work",
        job_dir=JOB,
        job_id="j1",
        launcher=launcher,
        method=method,
        wrapper="/t/mslaunch-rank.sh" if launcher == "mpirun" else None,
        **kw,
    )
    return build_plan(spec)


def test_builder_for_a_restart_moves_only_the_log_settings():
    plan = plan_for()
    first = list(mpirun_command(plan))
    later = list(mpirun_command(plan, JOB + "/attempt_2"))
    changed = [(a, b) for a, b in zip(first, later) if a != b]
    assert len(first) == len(later) and changed == [
        (f"MSLAUNCH_LOG={JOB}/scheduler.log", f"MSLAUNCH_LOG={JOB}/attempt_2/scheduler.log"),
        (f"MSLAUNCH_LOG_DIR={JOB}", f"MSLAUNCH_LOG_DIR={JOB}/attempt_2"),
    ]
    assert mpirun_command(plan) == mpirun_command(plan, JOB)  # pure: same input, same argv


def test_builder_refuses_a_plan_of_another_backend():
    with pytest.raises(PlanError, match="no mpirun settings"):
        mpirun_command(plan_for(launcher="local"))


def test_describe_and_registry_entry():
    plan = plan_for(method="mpi")
    entry = get_backend("mpirun")
    assert entry.factory is MpirunBackend and entry.doctor_check == MPIRUN_CHECK
    assert entry.factory.describe(plan) == {"mpirun": list(mpirun_command(plan))}
    assert get_backend("local").factory.describe(plan) == {}
    assert not MpirunBackend.prepares_rank_dirs and not MpirunBackend.local_only


def test_one_request_stands_for_every_process(tmp_path):
    plan = plan_for()
    adir = str(tmp_path / "attempt_1")
    backend = MpirunBackend.create(BackendContext(plan, 1, adir))
    (req,) = backend.requests(plan, adir)
    assert req.proc.name == "mpirun" and req.proc.role == "launcher"
    assert req.log_path == os.path.join(adir, "mpirun.log")
    assert req.proc.argv == mpirun_command(plan, adir) and req.cwd == "/work"


def test_missing_mpirun_is_named_at_start(tmp_path):
    plan = plan_for(mpi=MpiOptions(mpirun=str(tmp_path / "no-such-mpirun")))
    backend = MpirunBackend.create(BackendContext(plan, 0, plan.job_dir))
    (req,) = backend.requests(plan, str(tmp_path))
    with pytest.raises(LaunchError, match="no-such-mpirun not found; install OpenMPI"):
        backend.start(req.proc, req.log_path, req.cwd)
