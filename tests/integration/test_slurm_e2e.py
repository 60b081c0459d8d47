"""End to end with real MindSpore (CPU) on a real 3-node Slurm cluster (network namespaces).

Each case proves something different (~10-50 s each here):

* ``mslaunch check`` (an AllGather over the dynamic method) across 3 Slurm nodes inside ``salloc``;
* the reference trainer (resnet8, one step an epoch) under ``mslaunch sbatch --requeue``:
  preempted (SIGUSR1) after its epoch-1 checkpoint, requeued, and resumed by itself from that
  checkpoint in ``attempt_1/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.faultkit import wait_or_fail
from tests.harness.hostfaults import favored_slurmds
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns, pytest.mark.mindspore]

HELD_TRAINER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "held_trainer.py")


def _env(slurm: SlurmCluster):
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return env


@pytest.mark.cost(39)  # measured in a make test run on a fresh clone
def test_check_across_three_slurm_nodes(slurm: SlurmCluster, tmp_path) -> None:
    """``mslaunch check`` (MindSpore's AllGather over the dynamic cluster) on one rank per node."""
    check = " ".join(
        mslaunch_argv(
            "check", "--launcher", "slurm", "--np", "3", "--master-port", "auto", "--log-dir", str(tmp_path / "ck")
        )
    )
    res = subprocess.run(
        ["salloc", "-N3", "--ntasks-per-node=1", "sh", "-c", f"{check}; echo rc=$?"],
        env=_env(slurm),
        capture_output=True,
        text=True,
        timeout=400,
        cwd=str(tmp_path),
    )
    assert re.findall(r"^rc=(\d+)$", res.stdout, re.M) == ["0"], res.stdout + res.stderr
    assert "AllGather gave [0,1,2] on every rank" in res.stdout
    summary = json.loads((tmp_path / "ck" / "summary.json").read_text())
    assert sorted((p["name"], p["host"]) for p in summary["processes"]) == [
        ("rank 0", "node1"),
        ("rank 1", "node2"),
        ("rank 2", "node3"),
        ("scheduler", "node1"),
    ]
    slurm.wait_idle()
    assert slurm.node_pids() == {}


@pytest.mark.cost(56)
def test_trainer_under_sbatch_is_preempted_requeued_and_resumes_from_its_checkpoint(
    slurm: SlurmCluster, tmp_path
) -> None:
    """The reference trainer (resnet8, one step an epoch), held after its epoch-1 checkpoint in
    the first run (tests/scripts/held_trainer.py: the preemption then comes at a known point),
    preempted by SIGUSR1 and requeued: the requeued run (MSLAUNCH_ATTEMPT=1, from Slurm's restart
    count) resumes by itself, without --resume, from that checkpoint on both ranks, dropping the
    newer one only rank 0 has.  (Preemption and requeue with cheaper programs:
    test_slurm_sbatch.py.)"""
    env = _env(slurm)
    data, ckpt, job = tmp_path / "data", tmp_path / "ckpt", tmp_path / "job"
    subprocess.run(
        [sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "16", "--test", "4"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # the nodes' job steps get the CPU first: near its time alone beside the suite's other work
    with favored_slurmds(slurm):
        res = run_process(
            "sbatch",
            "-N",
            "2",
            "--ntasks-per-node",
            "1",
            "--signal",
            "USR1@60",
            "--requeue",
            "--log-dir",
            str(job),
            "--np",
            "2",
            "--master-port",
            "auto",
            "--grace",
            "10",
            HELD_TRAINER,
            "--arch",
            "resnet8",
            "--data-path",
            str(data),
            "--image-size",
            "32",
            "--batch-size",
            "2",
            "--steps-per-epoch",
            "1",
            "--workers",
            "1",
            "--ckpt-dir",
            str(ckpt),
            env=env,
            timeout=60,
            cwd=str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        sid, jid = res.stdout.split()

        def saved(rank: int) -> bool:  # the epoch-1 checkpoint of this rank is complete (written atomically)
            return (ckpt / f"ckpt_{rank}" / "resnet8-1_1.ckpt").exists()

        end, queued_at = time.monotonic() + 300, 0.0
        while time.monotonic() < end and not (saved(0) and saved(1)):
            if time.monotonic() - queued_at > 1:  # still in the queue (a job that ended would never save)
                assert slurm.run(["squeue", "-h", "-j", sid]).stdout.strip(), (job / "slurm.out").read_text()
                queued_at = time.monotonic()
            time.sleep(0.1)
        assert slurm.run(["scancel", "--signal=USR1", "--batch", sid]).returncode == 0
        wait_or_fail(lambda: (job / "summary.json").exists(), 120, "the preempted run's summary")
        # As if the preemption had come while rank 0 saved a newer checkpoint that rank 1 did not:
        # the requeued ranks must still resume from one common step.
        newer = ckpt / "ckpt_0" / "resnet8-2_1.ckpt"
        shutil.copyfile(ckpt / "ckpt_0" / "resnet8-1_1.ckpt", newer)
        slurm.release_requeued(sid, timeout=120)
        slurm.wait_left_queue(sid, 400)
    assert (job / "attempt_1" / "summary.json").exists(), (
        slurm.ctld_log_lines(f"JobId={sid}")[-6:],
        (job / "slurm.out").read_text()[-2000:],
    )
    first = json.loads((job / "summary.json").read_text())
    assert first["status"] == "preempted", first
    second = json.loads((job / "attempt_1" / "summary.json").read_text())
    assert second["status"] == "succeeded", (job / "attempt_1" / "worker_0.log").read_text()[-3000:]
    for rank in (0, 1):
        log = (job / f"worker_{rank}.log").read_text(errors="replace")
        assert "resume:" not in log and "checkpoint: " in log, log[-3000:]  # the first run started afresh
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        m = re.search(r"resume: (\S+resnet8-1_1\.ckpt) \(global step 1\); continuing at epoch 2 step 1\n", log)
        assert m, log[-3000:]
        assert "epoch: 2 step: 1, loss is" in log and "epoch: 1 step:" not in log, log[-3000:]
    for folder, attempt in (
        (job, "0"),
        (job / "attempt_1", "1"),
    ):  # the requeued run continues the count (SLURM_RESTART_COUNT)
        tasks = json.loads((folder / "slurm" / "tasks.json").read_text())
        assert all(["MSLAUNCH_ATTEMPT", attempt] in w["env"] for w in tasks["workers"]), tasks["workers"][0]["env"]
    assert f"resume: removed {newer}: not on every rank (those steps are trained again)" in (
        job / "attempt_1" / "worker_0.log"
    ).read_text(errors="replace")
    slurm.wait_idle()
    assert slurm.node_pids() == {}
