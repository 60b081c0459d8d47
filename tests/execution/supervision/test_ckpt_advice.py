"""The checkpoint interval a restart offers (``MSLAUNCH_CKPT_INTERVAL[_STEPS]``): from the
checkpoint cost and step time the ranks reported and the faults the job met (fake backend)."""

from __future__ import annotations

import pytest

from launcher.execution.results import FAILED, HUNG, PLANNED, STOPPED, SUCCEEDED, AttemptResult
from launcher.execution.settings import SuperviseOptions
from launcher.execution.supervision.restarts import AttemptProgress, faults, with_ckpt_interval
from launcher.execution.supervision.supervisor import Supervisor
from launcher.planning.job.ckptinterval import ENV_VAR, STEPS_VAR, Advice
from tests.execution.supervision.test_hostfaults import BadHost, host_plan


def test_progress_keeps_the_latest_checkpoint_costs_and_step_times():
    prog = AttemptProgress()
    assert prog.ckpt_seconds() is None and prog.step_seconds() is None
    prog.on_records(
        [
            {"kind": "info", "attempt": 0, "rank": 0, "ckpt_ms": 800.0},
            {"kind": "info", "attempt": 0, "rank": 1, "ckpt_ms": 1250.0},  # the job waits for the slowest rank
            {"kind": "info", "attempt": 0, "rank": 1, "ckpt_ms": -3},  # not a time
            {"kind": "info", "attempt": 0, "rank": 1, "ckpt_ms": True},
        ]
        + [{"kind": "step", "attempt": 0, "global_step": g, "step_time_ms": 400.0 + g} for g in range(1, 6)]
        + [{"kind": "epoch", "attempt": 0, "step_time_ms": 9000.0}]  # an epoch's figure is not a step's
    )
    assert prog.ckpt_seconds() == 1.25 and prog.step_seconds() == pytest.approx(0.403)
    prog.on_records([{"kind": "info", "attempt": 1, "ckpt_ms": 100.0}] * 5)  # only the latest count
    assert prog.ckpt_seconds() == pytest.approx(0.1)


def _writes(attempt, per_rank):
    """The ranks' ``ckpt_ms`` records, checkpoint by checkpoint (``per_rank[r][i]``: rank r's i-th)."""
    out = []
    for i in range(len(per_rank[0])):
        out += [{"kind": "info", "attempt": attempt, "rank": r, "ckpt_ms": ms[i]} for r, ms in enumerate(per_rank)]
    return out


def test_a_checkpoint_costs_its_slowest_write_and_the_job_the_median_of_its_last_checkpoints():
    prog = AttemptProgress()
    # one write of rank 1 slow (its host under a CPU quota for a while): not the job's cost from then on
    prog.on_records(_writes(3, [[150, 160, 140, 150, 150, 155], [150, 160, 1186, 140, 150, 150], [140] * 6]))
    assert prog.ckpt_seconds() == pytest.approx(0.155)  # checkpoints 1-5 cost 160, 1186, 150, 150, 155
    # a rank that always writes slowly (its disk) sets the cost: the job waits for it at every checkpoint
    prog.on_records(_writes(4, [[150] * 5, [900, 950, 1000, 900, 950], [140] * 5]))
    assert prog.ckpt_seconds() == pytest.approx(0.95)
    # the ranks' writes of one checkpoint arrive in any order; a late one still counts for its own
    prog = AttemptProgress()
    prog.on_records([{"kind": "info", "attempt": 0, "rank": 0, "ckpt_ms": 100}] * 3)
    prog.on_records([{"kind": "info", "attempt": 0, "rank": 1, "ckpt_ms": ms} for ms in (100, 700, 700)])
    assert prog.ckpt_seconds() == pytest.approx(0.7)


def test_progress_tells_of_each_checkpoint_a_rank_could_not_write():
    from launcher.planning.job.events import CheckpointFailed

    prog, told = AttemptProgress(), []
    failed = {"kind": "info", "attempt": 2, "rank": 1, "event": "ckpt_failed", "ckpt_failed": "disk full"}
    prog.on_records([failed])  # nobody to tell yet: nothing
    prog.on_event = told.append
    prog.on_records([{"kind": "info", "attempt": 2, "rank": 0, "ckpt_ms": 10.0}, failed, dict(failed, rank=None)])
    assert told == [CheckpointFailed(1, 2, "disk full")] and prog.ckpt_seconds() == 0.01


def _result(status) -> AttemptResult:
    return AttemptResult(0, "/j", status, 1, 0.0, 1.0, ())


def test_only_failed_and_hung_attempts_are_faults():
    history = [_result(s) for s in (FAILED, PLANNED, HUNG, STOPPED, SUCCEEDED, FAILED)]
    assert faults(history) == 3


def test_the_variables_go_to_every_process_and_leave_when_there_is_no_advice(tmp_path):
    plan = host_plan(str(tmp_path / "job"))
    offered = with_ckpt_interval(plan, Advice(39.0, 1.0, 800.0, 2, 0.5))
    for p in offered.ranks:
        env = dict(p.env)
        assert (env[ENV_VAR], env[STEPS_VAR]) == ("39", "78")
    again = with_ckpt_interval(offered, Advice(20.0, 1.0, 200.0, 4))  # no step time now: no steps
    assert all(dict(p.env)[ENV_VAR] == "20" and STEPS_VAR not in dict(p.env) for p in again.ranks)
    assert with_ckpt_interval(offered, None).ranks == plan.ranks


def test_a_restart_after_a_fault_offers_the_interval_from_the_jobs_figures(tmp_path):
    job = BadHost()  # the first rank on h2 dies by SIGKILL in every attempt
    prog = AttemptProgress()
    prog.on_records(
        [{"kind": "info", "attempt": 0, "ckpt_ms": 2000.0}]
        + [{"kind": "step", "attempt": 0, "global_step": g, "step_time_ms": 250.0} for g in range(1, 4)]
    )
    plan = host_plan(str(tmp_path / "job"))
    result = Supervisor(
        plan, job.factory, SuperviseOptions(grace=1.0, max_restarts=1), on_event=job.event, progress=prog
    ).run()
    assert (result.status, result.attempts) == (FAILED, 2)
    first, second = job.plans
    assert all(ENV_VAR not in dict(p.env) for p in first.ranks)  # no fault met before attempt 0
    (restart,) = [d for k, d in job.events if k == "restart"]
    advice = restart["ckpt_interval"]
    assert advice["faults"] == 1 and advice["ckpt_seconds"] == 2.0
    # the job's first fault came within a second here: the 2 s write is more than half the time
    # between faults, so the interval is that time (at least a second), in steps of 0.25 s
    assert advice["seconds"] == pytest.approx(max(1.0, advice["mtbf_seconds"]), abs=1e-3)
    env = dict(second.ranks[0].env)
    assert env[ENV_VAR] == str(max(1, round(advice["seconds"]))) and env[STEPS_VAR] == str(advice["steps"])
    assert all(dict(p.env)[ENV_VAR] == env[ENV_VAR] for p in second.ranks)
