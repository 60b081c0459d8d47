"""The slurm backend on a real 3-node Slurm cluster (network namespaces): ranks as srun job steps
with the plan's env, fail fast with the failing rank's own code and node, SIGTERM/SIGKILL of
mslaunch leave nothing on any node, -H narrowing, --max-restarts, and the error outside an
allocation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Dict, List

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.faultkit import wait_or_fail
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prog.py")


def _summary(job_dir: str) -> Dict:
    with open(os.path.join(job_dir, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _log_json(path: str) -> Dict:
    with open(path, encoding="utf-8") as fh:
        return json.loads(fh.readline())


def _gone(pids: List[int]) -> bool:
    return not any(
        os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().rsplit(")", 1)[-1].split()[0] != "Z"
        for p in pids
    )


def _assert_nothing_left(slurm: SlurmCluster, alloc_job: str) -> None:
    """No job process on any node now (slurmstepd may linger a moment), no step of ours left."""
    assert slurm.node_pids(include_slurm=False) == {}

    def no_steps() -> bool:
        steps = slurm.run(["squeue", "-h", "--steps", "-j", alloc_job, "-o", "%i %j"]).stdout.split("\n")
        return [s for s in steps if "mslaunch-" in s] == []

    wait_or_fail(no_steps, 30, "the job's steps to complete")
    slurm.wait_quiet()


def test_six_ranks_on_three_nodes_with_the_planned_env_and_a_failing_rank_ends_the_job(
    slurm: SlurmCluster, tmp_path
) -> None:
    """Inside salloc -N3: 6 ranks on 3 nodes, each with exactly the env `plan` shows; then a
    rank exiting 3 ends the job with exit 3, the summary naming rank 3 and node2."""
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    common = ["--launcher", "slurm", "--np", "6", "--master-port", "29517"]
    plan_dir, run_dir, fail_dir = tmp_path / "p", tmp_path / "ok", tmp_path / "fail"
    inner = (
        f"{' '.join(mslaunch_argv('plan', '--json', *common, '--job-id', 'j1', '--log-dir', str(run_dir), PROG, 'ok', '1'))} > {plan_dir}.json && "  # noqa: E501 - kept whole: a literal line as the program sees it
        f"{' '.join(mslaunch_argv('run', *common, '--job-id', 'j1', '--log-dir', str(run_dir), '--tee', 'none', PROG, 'ok', '1'))}; echo rc=$?; "  # noqa: E501 - kept whole: a literal line as the program sees it
        f"{' '.join(mslaunch_argv('run', *common, '--log-dir', str(fail_dir), '--tee', 'none', '--grace', '5', PROG, 'fail', '60'))}; echo rc=$?"  # noqa: E501 - kept whole: a literal line as the program sees it
    )
    res = subprocess.run(
        ["salloc", "-N3", "--ntasks-per-node=2", "sh", "-c", inner],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=str(tmp_path),
    )
    assert "rc=0\nrc=3" in res.stdout, res.stdout + res.stderr
    plan = json.loads((tmp_path / "p.json").read_text())
    planned = {p["rank"]: p for p in plan["ranks"]}
    assert plan["scheduler"]["host"] == "node1" and plan["srun"][0] == "srun"
    assert sorted(planned) == list(range(6))
    for rank, proc in planned.items():
        seen = _log_json(os.path.join(run_dir, f"worker_{rank}.log"))
        assert seen["node"] == proc["host"] == f"node{rank // 2 + 1}"
        penv = proc["env"]
        for key, value in seen["env"].items():
            if key in penv:
                assert value == penv[key], (rank, key)
        assert {k: v for k, v in penv.items() if k.startswith(("MS_", "RANK_"))} == {
            k: v for k, v in seen["env"].items() if k.startswith(("MS_", "RANK_"))
        }
        assert seen["env"]["MS_SCHED_HOST"] == slurm.addr("node1")
    ok = _summary(str(run_dir))
    assert ok["status"] == "succeeded" and ok["exit_code"] == 0
    assert sorted((p["name"], p["host"]) for p in ok["processes"])[0] == ("rank 0", "node1")
    fail = _summary(str(fail_dir))
    assert fail["exit_code"] == 3
    assert fail["root_cause"]["rank"] == 3 and fail["root_cause"]["host"] == "node2", fail["root_cause"]
    others = [p for p in fail["processes"] if p["rank"] not in (3, None)]
    assert len(others) == 5 and all(p["torn_down"] for p in others)
    # the others were ended within seconds, not after their 60 s
    assert fail["duration"] < 30
    slurm.wait_idle()
    assert slurm.node_pids() == {}


def _start(slurm_env: Dict[str, str], tmp_path, *args: str) -> subprocess.Popen:
    env = dict(slurm_env)
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    env["PROG_PIDS"] = str(tmp_path / "pids")
    os.makedirs(env["PROG_PIDS"], exist_ok=True)
    return subprocess.Popen(
        mslaunch_argv(
            "run",
            "--launcher",
            "slurm",
            "--log-dir",
            str(tmp_path / "job"),
            "--tee",
            "none",
            "--master-port",
            "auto",
            *args,
        ),
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rank_pids(tmp_path, n: int) -> List[int]:
    d = tmp_path / "pids"
    wait_or_fail(
        lambda: len(os.listdir(d)) >= n and all((d / f).read_text() for f in os.listdir(d)),
        60,
        f"{n} processes started",
    )
    return [int((d / f).read_text()) for f in os.listdir(d)]


def test_sigterm_to_mslaunch_stops_every_rank_gracefully(slurm: SlurmCluster, tmp_path) -> None:
    with slurm.allocation(3, 2) as env:
        proc = _start(env, tmp_path, "--np", "6", PROG, "ok", "120")
        try:
            pids = _rank_pids(tmp_path, 7)  # 6 ranks + the scheduler
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 143, err
        summary = _summary(str(tmp_path / "job"))
        assert summary["status"] == "stopped"
        ranks = [p for p in summary["processes"] if p["rank"] is not None]
        # each rank got SIGTERM (the grace), not srun's SIGKILL
        assert sorted(p["signal"] for p in ranks) == ["SIGTERM"] * 6, ranks
        assert _gone(pids)
        _assert_nothing_left(slurm, env["SLURM_JOB_ID"])


def test_sigkill_of_mslaunch_leaves_nothing_on_any_node(slurm: SlurmCluster, tmp_path) -> None:
    with slurm.allocation(3, 2) as env:
        proc = _start(env, tmp_path, "--np", "6", PROG, "hang", "300")
        try:
            pids = _rank_pids(tmp_path, 7)
            proc.kill()
            proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # the watchdog kills srun and cancels the steps (ranks that ignore SIGTERM included)
        wait_or_fail(lambda: _gone(pids), 60, "every rank gone after mslaunch was SIGKILLed")
        wait_or_fail(lambda: slurm.node_pids(include_slurm=False) == {}, 30, "no job process on any node")
        _assert_nothing_left(slurm, env["SLURM_JOB_ID"])


def test_dash_h_narrows_the_allocation(slurm: SlurmCluster, tmp_path) -> None:
    with slurm.allocation(3, 2) as env:
        proc = _start(env, tmp_path, "-H", "node[2-3]:1", PROG, "ok", "0.2")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        summary = _summary(str(tmp_path / "job"))
        hosts = sorted((p["name"], p["host"]) for p in summary["processes"])
        assert hosts == [("rank 0", "node2"), ("rank 1", "node3"), ("scheduler", "node2")]
        seen = _log_json(str(tmp_path / "job" / "worker_1.log"))
        assert seen["env"]["MS_SCHED_HOST"] == slurm.addr("node2")
        assert seen["env"]["MS_WORKER_NUM"] == "2"
        _assert_nothing_left(slurm, env["SLURM_JOB_ID"])


def test_max_restarts_runs_a_second_attempt_in_attempt_1(slurm: SlurmCluster, tmp_path) -> None:
    with slurm.allocation(3, 2) as env:
        proc = _start(env, tmp_path, "--np", "4", "--max-restarts", "1", "--grace", "2", PROG, "fail", "60")
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 3, err
        summary = _summary(str(tmp_path / "job"))
        assert summary["attempts"] == 2
        assert summary["root_cause"]["rank"] == 3
        assert os.path.exists(tmp_path / "job" / "attempt_1" / "worker_3.log")
        assert _log_json(str(tmp_path / "job" / "attempt_1" / "worker_3.log"))["node"] == "node2"
        _assert_nothing_left(slurm, env["SLURM_JOB_ID"])


def test_outside_an_allocation_says_to_use_salloc_or_sbatch(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    res = run_process("run", "--launcher", "slurm", "--np", "2", PROG, env=env, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "salloc" in lines[0] and "mslaunch sbatch" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
