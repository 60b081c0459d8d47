"""Restarts: MSLAUNCH_ATTEMPT in every process's env, per-attempt progress, crash-loop stop, --restart-delay."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from launcher.execution.results import AttemptResult
from launcher.execution.supervision.restarts import (
    AttemptProgress,
    attempt_base,
    attempt_plan,
    crash_loop,
    tell_stopping,
)
from launcher.planning.job.spec import Plan, ProcPlan
from tests.execution.local.test_hang_local import PROG, hjob  # noqa: F401  (the fixture)
from tests.execution.local.test_run_local import assert_all_gone
from tests.harness.cli import run_cli, run_process


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _proc(name, rank, env):
    return ProcPlan(
        name,
        "worker" if rank is not None else "scheduler",
        "localhost",
        rank,
        rank,
        0,
        None,
        ("python",),
        env,
        "/j",
        "/j/l",
    )


def test_attempt_plan_sets_the_attempt_in_every_process_env():
    plan = Plan(
        "j",
        "/j",
        "dynamic",
        "local",
        2,
        (),
        (_proc("rank 0", 0, (("A", "1"), ("MSLAUNCH_ATTEMPT", "9"))), _proc("rank 1", 1, ())),
        _proc("scheduler", None, ()),
        (),
        "127.0.0.1",
        1,
    )
    got = attempt_plan(plan, 2, 3, base=1)
    assert got.ranks[0].env == (("A", "1"), ("MSLAUNCH_ATTEMPT", "3"), ("MSLAUNCH_MAX_RESTARTS", "3"))
    assert got.ranks[1].env == got.scheduler.env == (("MSLAUNCH_ATTEMPT", "3"), ("MSLAUNCH_MAX_RESTARTS", "3"))
    assert plan.ranks[0].env[1] == ("MSLAUNCH_ATTEMPT", "9")  # the input is not changed


@pytest.mark.parametrize(
    "launcher,env,base",
    [
        ("slurm", {"SLURM_RESTART_COUNT": "2"}, 2),
        ("slurm", {}, 0),
        ("local", {"SLURM_RESTART_COUNT": "2"}, 0),
        ("slurm", {"SLURM_RESTART_COUNT": "x"}, 0),
    ],
)
def test_attempt_base_continues_a_requeued_slurm_run(launcher, env, base):
    assert attempt_base(launcher, env) == base


def _attempt(k, status="failed", **fields):
    return AttemptResult(k, f"/j/attempt_{k}", status, 1, 0.0, 1.0, (), **fields)


@pytest.mark.parametrize(
    "bests,stop",
    [
        ([120, 120, 120], "attempts 1 and 2 got no further than step 120: not restarting"),
        ([120, 100, 119], "attempts 1 and 2 got no further than step 120: not restarting"),
        ([120, 130, 130], None),  # attempt 1 got further
        ([120, 120], None),  # one attempt without progress is not a loop yet
        ([None, None, None], None),  # no steps: nothing is known
        ([50, 120, 120, 120], "attempts 2 and 3 got no further than step 120: not restarting"),
        ([120, 120, None], None),
    ],
)
def test_crash_loop(bests, stop):
    history = [_attempt(k, **({"best_step": b} if b is not None else {})) for k, b in enumerate(bests)]
    assert crash_loop(history) == stop


def test_a_replanned_attempt_starts_the_count_afresh():
    history = [_attempt(0, best_step=120), _attempt(1, best_step=120, replanned=True), _attempt(2, best_step=120)]
    assert crash_loop(history) is None


def test_progress_gives_resume_point_best_step_and_steps_lost():
    prog = AttemptProgress()
    prog.on_records([{"kind": "step", "attempt": 0, "global_step": g} for g in (1, 2, 3, 4, 5)])
    prog.on_records(
        [{"kind": "step", "attempt": 1, "global_step": g} for g in (4, 5, 6)] + [{"kind": "eval", "attempt": 1}]
    )
    first = prog.annotate(_attempt(0), [])
    second = prog.annotate(_attempt(1, status="succeeded"), [first])
    annotations = ("ended_because", "resumed_from_step", "best_step", "steps_lost")
    assert {k: getattr(first, k) for k in annotations} == {
        "ended_because": "failed",
        "resumed_from_step": None,
        "best_step": 5,
        "steps_lost": None,
    }
    assert {k: getattr(second, k) for k in annotations} == {
        "ended_because": None,
        "resumed_from_step": 3,
        "best_step": 6,
        "steps_lost": 2,
    }
    assert {k: v for k, v in second.to_json().items() if k in annotations} == {
        "resumed_from_step": 3,
        "best_step": 6,
        "steps_lost": 2,
    }


@pytest.mark.e2e
def test_a_job_failing_at_the_same_step_stops_after_two_attempts_without_progress(hjob):  # noqa: F811  (pytest's fixture, imported above)
    r = hjob.run("fail-at", "4", extra=("--max-restarts", "5", "--restart-delay", "0.5"))
    assert r.returncode == 3, r.stderr
    s = hjob.summary()
    assert s["attempts"] == 3 and s["restarts_stopped"] == "attempts 1 and 2 got no further than step 3: not restarting"
    assert "mslaunch: attempts 1 and 2 got no further than step 3: not restarting" in r.stderr
    assert [a.get("best_step") for a in s["attempt_results"]] == [3, 3, 3]
    assert [a.get("steps_lost") for a in s["attempt_results"]] == [None, 3, 3]
    assert all("exit code 3" in a["ended_because"] for a in s["attempt_results"])
    made = sorted(p.name for p in hjob.pids.iterdir() if ".attempt" in p.name)
    assert made == sorted(
        f"{n}.attempt{k}" for n in ("rank0", "rank1", "scheduler") for k in (0, 1, 2)
    )  # MSLAUNCH_ATTEMPT=k
    events = [json.loads(line) for line in (hjob.dir / "events.jsonl").read_text().splitlines()]
    for i, ev in enumerate(events):  # --restart-delay: the next attempt starts no sooner
        if ev["kind"] == "restart":
            nxt = next(e for e in events[i:] if e["kind"] == "started")
            assert nxt["time"] - ev["time"] >= 0.5
    st = run_cli("status", str(hjob.dir))  # in this process (tests/harness/cli.py)
    assert "attempt 1: failed (rank" in st.stdout and "3 step(s) lost" in st.stdout and "not restarting" in st.stdout
    assert_all_gone(hjob.pids)


@pytest.mark.e2e
def test_a_hung_attempt_is_restarted_and_the_restart_knows_it(hjob):  # noqa: F811  (pytest's fixture, imported above)
    r = hjob.run(
        "steps",
        "0.3",
        "12",
        "--stall-rank",
        "1",
        "--stall-at",
        "5",
        extra=("--hang-timeout", "4", "--max-restarts", "1"),
    )
    assert r.returncode == 0, r.stderr
    s = hjob.summary()
    assert [a["status"] for a in s["attempt_results"]] == ["hung", "succeeded"] and s["status"] == "succeeded"
    assert s["attempt_results"][0]["hang"]["culprit"]["rank"] == 1
    assert s["attempt_results"][0]["ended_because"] == "hung: no progress, likely culprit rank 1"
    assert (hjob.pids / "rank1.attempt1").exists() and (hjob.dir / "attempt_1" / "worker_1.log").read_text().count(
        "loss is"
    ) == 12
    assert_all_gone(hjob.pids)


def _failed_with(k, cause, **fields):
    from launcher.execution.results import ProcResult, RootCause

    proc = ProcResult("rank 0", 0, "h1", 1, 0.0, 1.0, "/j/worker_0.log")
    return _attempt(k, root_cause=RootCause(proc, (), cause), **fields)


def _exc(where="train.py:5", message="KeyError: 'lr'"):
    from launcher.logs.causes import Cause

    return Cause(
        "python_exception", f"{message} at {where}", "fix it", key=("python_exception", "KeyError", message, where)
    )


def test_the_same_unfixable_cause_twice_stops_the_restarts_without_steps():
    history = [_failed_with(0, _exc()), _failed_with(1, _exc())]
    assert crash_loop(history) == (
        "attempts 0 and 1 failed the same way (python_exception: KeyError: 'lr' at train.py:5), "
        "which a restart cannot fix: not restarting"
    )


@pytest.mark.parametrize(
    "second",
    [
        lambda: _exc(where="train.py:6"),  # another place
        lambda: _exc(message="KeyError: 'batch'"),  # another message
        lambda: None,  # no cause judged
    ],
)
def test_different_causes_do_not_stop_the_restarts(second):
    assert crash_loop([_failed_with(0, _exc()), _failed_with(1, second())]) is None


def test_fixable_causes_and_a_replan_do_not_stop_the_restarts():
    from launcher.logs.causes import Cause

    killed = Cause("oom", "killed by SIGKILL; limit 48.0 MiB", "fewer ranks")
    assert (
        crash_loop([_failed_with(0, killed), _failed_with(1, killed)]) is None
    )  # host-bound: counted per host instead
    assert crash_loop([_failed_with(0, _exc()), _failed_with(1, _exc(), replanned=True)]) is None
    assert (
        crash_loop([_failed_with(0, _exc()), _failed_with(1, _exc(), replanned=True), _failed_with(2, _exc())])
        is not None
    )
    assert crash_loop([_failed_with(0, _exc()), _attempt(1)]) is None  # no root cause


def test_each_process_knows_where_mslaunch_says_why_it_stops_it(tmp_path):
    plan = Plan("j", "/j", "dynamic", "local", 1, (), (_proc("rank 0", 0, ()),), None, (), "127.0.0.1", 1)
    got = attempt_plan(plan, 1, 2, adir="/j/attempt_1")
    assert got.ranks[0].env[-1] == ("MSLAUNCH_STOPPING_FILE", "/j/attempt_1/stopping")
    tell_stopping(str(tmp_path), "preempted")
    assert (tmp_path / "stopping").read_text() == "preempted\n"
    assert (tmp_path / "stopping").stat().st_mode & 0o777 == 0o600 and os.listdir(tmp_path) == ["stopping"]
    tell_stopping(str(tmp_path / "gone"), "failed")  # best effort: an attempt folder that is gone


@pytest.mark.e2e
def test_a_rank_torn_down_after_a_failure_reads_why_before_its_sigterm(tmp_path):
    prog = os.path.join(os.path.dirname(PROG), "stopwhy.py")
    job = tmp_path / "job"
    run = ["run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--grace", "2", "--tee", "none"]
    r = run_process(*run, prog, "1", cwd=str(tmp_path), env=dict(os.environ, MSLAUNCH_HOME=str(tmp_path / "home")))
    assert r.returncode == 3, r.stderr
    assert (job / "worker_0.log").read_text().splitlines() == ["stopping: failed"]
    assert (job / "stopping").read_text() == "failed\n"
    started = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    pids = [e["pid"] for e in started if e["kind"] == "started"]
    assert len(pids) == 3 and not [p for p in pids if _alive(p)]
