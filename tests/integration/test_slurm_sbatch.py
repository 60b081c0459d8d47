"""``mslaunch sbatch`` on a real 3-node Slurm cluster: submit, ps/status/logs tail -f/stop
(scancel), and preemption: SIGUSR1 -> summary 'preempted' -> requeue -> the next run in
attempt_1/ (also when Slurm requeues the job itself, and on a real preemption by a job of a
higher-priority partition)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Dict, List

import pytest

from tests.cli.bad_run_options import BAD_RUN_OPTIONS
from tests.harness.cli import mslaunch_argv, run_cli, run_process
from tests.harness.faultkit import wait_or_fail
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]

PROG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "execution", "slurm", "prog.py")


def _env(slurm: SlurmCluster, tmp_path) -> Dict[str, str]:
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    env["PROG_PIDS"] = str(tmp_path / "pids")
    os.makedirs(env["PROG_PIDS"], exist_ok=True)
    return env


def _submit(slurm: SlurmCluster, env: Dict[str, str], tmp_path, *args: str) -> List[str]:
    res = run_process("sbatch", *args, env=env, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    ids = res.stdout.split()
    assert len(ids) == 2 and ids[0].isdigit(), res.stdout
    return ids


def _queued(slurm: SlurmCluster, sid: str) -> bool:
    return bool(slurm.run(["squeue", "-h", "-j", sid, "-o", "%T"]).stdout.strip())


def test_submit_ps_status_logs_tail_and_stop(slurm: SlurmCluster, tmp_path) -> None:
    env = _env(slurm, tmp_path)
    job_dir = tmp_path / "job"
    sid, jid = _submit(
        slurm,
        env,
        tmp_path,
        "-N",
        "3",
        "--ntasks-per-node",
        "2",
        "--log-dir",
        str(job_dir),
        "--np",
        "6",
        "--grace",
        "1",
        PROG,
        "ok",
        "300",
    )
    assert (job_dir / "sbatch.sh").read_text().startswith("#!/bin/bash\n#SBATCH")
    tail = subprocess.Popen(
        mslaunch_argv("logs", "tail", jid, "-f"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_or_fail(lambda: len(os.listdir(tmp_path / "pids")) == 7, 90, "the scheduler and 6 ranks started")
        status = run_process("status", jid, env=env, timeout=60)
        assert (
            status.returncode == 0
            and f"job {jid}: running" in status.stdout
            and f"slurm job: {sid} (RUNNING)" in status.stdout
        ), status.stdout
        ps = run_process("ps", env=env, timeout=60)
        assert jid in ps.stdout and "running" in ps.stdout
        stop = run_process("stop", jid, env=env, timeout=60)
        assert stop.returncode == 0 and f"scancel {sid}" in stop.stdout, stop.stderr
        assert not _queued(slurm, sid)
        out, _ = tail.communicate(timeout=60)  # -f ends by itself once the Slurm job left the queue
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0
    for rank in range(6):
        assert f"[rank {rank}]" in out, out
    summary = json.loads((job_dir / "summary.json").read_text())  # -f ended: the run wrote it
    assert (summary["status"], summary["message"]) == ("stopped", f"Slurm cancelled job {sid}"), summary
    slurm.wait_idle()
    assert slurm.node_pids() == {}
    status = run_process("status", jid, env=env, timeout=60)
    assert f"slurm job: {sid} (not in the queue)" in status.stdout


def _requeued_run_ended(slurm: SlurmCluster, sid: str, job_dir) -> None:
    """Wait until the Slurm job left the queue, then require its requeued run's summary."""
    slurm.wait_left_queue(sid, 120)
    assert (job_dir / "attempt_1" / "summary.json").exists(), (
        slurm.ctld_log_lines(f"JobId={sid}")[-6:],
        (job_dir / "slurm.out").read_text()[-2000:],
    )


@pytest.mark.cost(15)  # measured in a make test run
def test_preemption_signal_requeues_and_the_run_continues_in_attempt_1(slurm: SlurmCluster, tmp_path) -> None:
    env = _env(slurm, tmp_path)
    job_dir = tmp_path / "job"
    sid, jid = _submit(
        slurm,
        env,
        tmp_path,
        "-N",
        "3",
        "--ntasks-per-node",
        "1",
        "--signal",
        "USR1@30",
        "--requeue",
        "--log-dir",
        str(job_dir),
        "--np",
        "3",
        PROG,
        "ok",
        "4",
    )
    wait_or_fail(lambda: len(os.listdir(tmp_path / "pids")) == 4, 90, "the first run started")
    # Slurm's warning before preemption / the time limit (what --signal=B:USR1@30 makes Slurm send)
    res = slurm.run(["scancel", "--signal=USR1", "--batch", sid])
    assert res.returncode == 0, res.stderr
    slurm.release_requeued(sid)
    _requeued_run_ended(slurm, sid, job_dir)
    first = json.loads((job_dir / "summary.json").read_text())
    assert first["status"] == "preempted"
    ranks = [p for p in first["processes"] if p["rank"] is not None]
    assert [p["signal"] for p in ranks] == ["SIGTERM"] * 3  # stopped gracefully
    second = json.loads((job_dir / "attempt_1" / "summary.json").read_text())
    assert second["status"] == "succeeded" and second["job_id"] == jid
    seen = json.loads((job_dir / "attempt_1" / "worker_0.log").read_text().splitlines()[0])
    assert seen["env"].get("SLURM_RESTART_COUNT") == "1"
    assert "requeueing Slurm job" in (job_dir / "slurm.out").read_text()
    status = run_process("status", jid, env=env, timeout=60)  # the registry follows the latest run
    assert f"job {jid}: succeeded" in status.stdout and str(job_dir / "attempt_1") in status.stdout
    slurm.wait_idle()
    assert slurm.node_pids() == {}


@pytest.mark.cost(15)  # measured in a make test run
def test_a_job_requeued_by_slurm_continues_in_attempt_1(slurm: SlurmCluster, tmp_path) -> None:
    env = _env(slurm, tmp_path)
    job_dir = tmp_path / "job"
    sid, jid = _submit(
        slurm,
        env,
        tmp_path,
        "-N",
        "2",
        "--ntasks-per-node",
        "1",
        "--requeue",
        "--log-dir",
        str(job_dir),
        "--np",
        "2",
        PROG,
        "ok",
        "3",
    )
    wait_or_fail(lambda: len(os.listdir(tmp_path / "pids")) == 3, 90, "the first run started")
    res = slurm.run(["scontrol", "requeue", sid])
    assert res.returncode == 0, res.stderr
    slurm.release_requeued(sid)
    _requeued_run_ended(slurm, sid, job_dir)
    first = json.loads((job_dir / "summary.json").read_text())
    assert (first["status"], first["message"]) == ("preempted", f"Slurm requeued job {sid}")
    # Slurm requeued it: the script must not requeue it once more (that would skip attempt_1)
    assert "requeueing Slurm job" not in (job_dir / "slurm.out").read_text()
    assert json.loads((job_dir / "attempt_1" / "summary.json").read_text())["status"] == "succeeded"
    assert not (job_dir / "attempt_2").exists()
    slurm.wait_idle()
    assert slurm.node_pids() == {}


@pytest.mark.cost(15)  # 8-10 s alone and beside two busy loops
def test_a_job_preempted_by_a_higher_priority_job_is_requeued_and_continues(slurm: SlurmCluster, tmp_path) -> None:
    """A real preemption: a job of the higher-tier partition 'urgent' needs every node. Slurm
    (PreemptMode=REQUEUE, GraceTime) signals the steps at once, not the batch script: mslaunch
    must judge that a preemption, not a failure of its ranks, and the script requeue the job.
    In the requeued run rank 3 fails by itself: that is a failure again (the job keeps its old
    PreemptTime), and a failed run is not requeued."""
    env = _env(slurm, tmp_path)
    job_dir = tmp_path / "job"
    sid, jid = _submit(
        slurm,
        env,
        tmp_path,
        "-N",
        "2",
        "--ntasks-per-node",
        "2",
        "--requeue",
        "--log-dir",
        str(job_dir),
        "--np",
        "4",
        PROG,
        "fail-requeued",
        "300/30",
    )
    wait_or_fail(lambda: len(os.listdir(tmp_path / "pids")) == 5, 90, "the first run started")
    urgent = slurm.run(
        ["sbatch", "--parsable", "-p", "urgent", "-N3", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 1"]
    )
    assert urgent.returncode == 0, urgent.stderr
    wait_or_fail(lambda: (job_dir / "summary.json").exists(), 60, "the preempted run's summary")
    slurm.release_requeued(sid, timeout=120)
    _requeued_run_ended(slurm, sid, job_dir)
    first = json.loads((job_dir / "summary.json").read_text())
    assert first["status"] == "preempted" and first["message"].startswith(f"Slurm preempted job {sid} at "), first
    assert first["root_cause"] is None and first["exit_code"] == 143
    ranks = [p for p in first["processes"] if p["rank"] is not None]
    assert len(ranks) == 4 and all(p["torn_down"] for p in ranks), ranks
    out = (job_dir / "slurm.out").read_text()
    assert f"mslaunch: Slurm preempted job {sid} at " in out and out.count(f"requeueing Slurm job {sid}") == 1, out[
        -3000:
    ]
    events = [json.loads(line)["kind"] for line in open(job_dir / "events.jsonl")]
    assert "cluster_stop" in events and "failure" not in events
    second = json.loads((job_dir / "attempt_1" / "summary.json").read_text())
    assert (second["status"], second["exit_code"]) == ("failed", 3), second
    assert (second["root_cause"]["name"], second["root_cause"]["host"]) == ("rank 3", "node2")
    seen = json.loads((job_dir / "attempt_1" / "worker_0.log").read_text().splitlines()[0])
    assert seen["env"].get("SLURM_RESTART_COUNT") == "1"
    assert not (job_dir / "attempt_2").exists()
    slurm.wait_idle()
    assert slurm.node_pids() == {}


# ---------------------------------------------------------------- submit-time checks, the allocation from the job

#: the cases of issue 27: (id, sbatch arguments, needle of the one-line error)
ISSUE_CASES = [
    ("bogus-option", ["-N", "1", "--np", "1", "--bogus", "3", "prog.py"], "--bogus"),
    ("np-zero", ["-N", "1", "--np", "0", "prog.py"], "--np must be at least 1"),
    ("method", ["-N", "1", "--np", "1", "--method", "nonsense", "prog.py"], "unknown method 'nonsense'"),
    ("ranks-do-not-fit", ["-N", "2", "--ntasks-per-node", "2", "--np", "9", "prog.py"], "9 ranks do not fit"),
    ("missing-script", ["-N", "2", "--np", "4", "missing_script.py"], "no such file 'missing_script.py'"),
]
REFUSED = ISSUE_CASES + [
    (f"run-{cid}", ["--np", "1", *options, "prog.py"], needle) for cid, options, needle, _real in BAD_RUN_OPTIONS
]


def _submissions(slurm: SlurmCluster) -> int:
    """Batch jobs slurmctld has taken so far (its log line per submission)."""
    return len(slurm.ctld_log_lines("_slurm_rpc_submit_batch_job"))


def _queue(slurm: SlurmCluster) -> str:
    res = slurm.run(["squeue", "-h", "-o", "%i %j %T"])
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("cid, args, needle", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_job_that_would_fail_in_the_allocation_is_refused_at_submit(
    slurm: SlurmCluster, tmp_path, cid, args, needle
) -> None:
    """Each case of issue 27 and every run validation error: refused by a real submission
    (no --dry-run) with one line, exit 2; Slurm got nothing, nothing was written.  The cases of
    issue 27 run as processes; the run validation errors in this process (``run_cli``: the same
    command with the cluster's sbatch on its PATH, a tenth of the CPU), where a case that got
    through would be a real submission, which the queue's check below sees."""
    env = _env(slurm, tmp_path)
    (tmp_path / "prog.py").write_text("")
    before_queue, before_count = _queue(slurm), _submissions(slurm)
    runner = run_cli if cid.startswith("run-") else run_process
    res = runner("sbatch", *args, env=env, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr and "Traceback" not in res.stderr, (
        res.stderr
    )
    assert res.stdout == ""
    assert (_queue(slurm), _submissions(slurm)) == (before_queue, before_count)
    assert sorted(os.listdir(tmp_path)) == ["pids", "prog.py"]


def test_dry_run_anywhere_before_script_submits_nothing(slurm: SlurmCluster, tmp_path) -> None:
    env = _env(slurm, tmp_path)
    before_queue, before_count = _queue(slurm), _submissions(slurm)
    res = run_process(
        "sbatch", "-N", "1", "--np", "1", "--dry-run", PROG, "ok", "1", env=env, timeout=60, cwd=str(tmp_path)
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("#!/bin/bash\n") and "--dry-run" not in res.stdout
    assert (_queue(slurm), _submissions(slurm)) == (before_queue, before_count)
    assert sorted(os.listdir(tmp_path)) == ["pids"]


def test_a_job_sized_from_np_and_per_host_runs_on_two_nodes(slurm: SlurmCluster, tmp_path) -> None:
    """Only --np 4 --per-host 2 (and --job-name after them: sbatch's): the script asks for 2
    nodes x 2 tasks, and the 4 ranks run 2 on each of 2 nodes."""
    env = _env(slurm, tmp_path)
    before = _submissions(slurm)
    sid, jid = _submit(
        slurm, env, tmp_path, "--np", "4", "--per-host", "2", "--job-name", "sized-by-np", PROG, "ok", "300"
    )
    job_dir = tmp_path / "mslaunch_logs" / jid
    script = (job_dir / "sbatch.sh").read_text().splitlines()
    assert (
        "#SBATCH --nodes=2" in script
        and "#SBATCH --ntasks-per-node=2" in script
        and "#SBATCH --job-name=sized-by-np" in script
    )
    assert _submissions(slurm) == before + 1
    wait_or_fail(lambda: len(os.listdir(tmp_path / "pids")) == 5, 90, "the scheduler and 4 ranks started")
    res = slurm.run(["squeue", "-h", "-j", sid, "-o", "%j %D %T"])
    assert res.stdout.split() == ["sized-by-np", "2", "RUNNING"], res.stdout
    stop = run_process("stop", jid, env=env, timeout=60)
    assert stop.returncode == 0, stop.stderr
    slurm.wait_left_queue(sid, 60)
    wait_or_fail(lambda: (job_dir / "summary.json").exists(), 60, "the run's summary")
    nodes = {}
    for rank in range(4):
        seen = json.loads((job_dir / f"worker_{rank}.log").read_text().splitlines()[0])
        nodes.setdefault(seen["node"], []).append(rank)
    assert sorted(nodes.values()) == [[0, 1], [2, 3]] and len(nodes) == 2, nodes
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["status"] == "stopped", summary
    assert sorted(p["rank"] for p in summary["processes"] if p["rank"] is not None) == [0, 1, 2, 3]
    slurm.wait_idle()
    assert slurm.node_pids() == {}
