"""Elastic over ssh with real MindSpore: a switch failure takes two of three namespace hosts at once,
no spare is left, and ``--min-hosts 1`` lets the reference trainer go on, on the host left, with the
same global batch; once the hosts answer again, ``--grow-at-checkpoint`` ends the smaller attempt
itself (a planned restart: its rank saves at its next step's end) and the job finishes at full size
from that checkpoint, with no step lost.

The job: 3 hosts x 1 slot, ResNet-14 on 32x32 synthetic CIFAR-10, micro-batch 4, 30 steps,
``--ckpt-every 2``, ``--rejoin-after 0``. Attempt 0 runs 3 ranks; once rank 0 logged step 3 the
links of hosts 2 and 3 are cut together (their ranks alive behind them). Attempt 1 runs 1 rank that
accumulates 3 micro-batches per step (global batch 12, as planned): its mean loss agrees with that
of the steps trained at full size around it, within noise (other samples: the shards follow the rank
count; the update's arithmetic is tests/integration/test_grad_accum_e2e.py's). The links come back
once attempt 1 logged two steps; the grow watch (every 2 s) finds the hosts answering, and attempt 2
runs 3 ranks again, every rank resuming where attempt 1 stopped (rank 0 kept the missing ranks'
checkpoint folders).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.faultkit import wait_or_fail
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.netns, pytest.mark.mindspore]

STEPS, EVERY, BATCH = 30, 2, 4
LOSS = re.compile(r"^epoch: 1 step: (\d+), loss is (\S+)$", re.M)


def _losses(path):
    return {int(s): float(v) for s, v in LOSS.findall(path.read_text(errors="replace"))} if path.exists() else {}


def _events(job):
    path = job / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.cost(60)
def test_two_hosts_lost_at_once_the_job_goes_on_with_one_and_the_same_global_batch_then_grows_back(
    cluster,  # noqa: F811  (pytest's fixture, imported above)
    tmp_path,
):
    c = cluster
    data, job, ckpt = tmp_path / "data", tmp_path / "job", tmp_path / "ckpt"
    subprocess.run(
        [sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "600", "--test", "50"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "3", "--master-port", "auto",
        "--log-dir", str(job), "--tee", "none", "--grace", "5", "--max-restarts", "1",
        "--min-hosts", "1", "--rejoin-after", "0", "--grow-at-checkpoint", "--env", "GLOG_v=3",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet14", "--data-path", str(data),
        "--image-size", "32", "--batch-size", str(BATCH), "--steps-per-epoch", str(STEPS), "--epochs", "1",
        "--workers", "1", "--ckpt-dir", str(ckpt), "--ckpt-every", str(EVERY),
    )  # fmt: skip
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    cut = []
    try:
        wait_or_fail(lambda: 3 in _losses(job / "worker_0.log") or proc.poll() is not None, 300, "step 3")
        for i in (1, 2):  # a switch failure: both at once, the ranks alive behind their links
            c.cut_link(i)
            cut.append(i)
        small_log = job / "attempt_1" / "worker_0.log"  # the links come back once the smaller attempt steps
        wait_or_fail(lambda: len(_losses(small_log)) >= 2 or proc.poll() is not None, 300, "attempt 1 stepping")
        for i in cut:
            c.restore_link(i)
        cut.clear()
        _, err = proc.communicate(timeout=400)
    finally:
        for i in cut:
            c.restore_link(i)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    attempts = summary["attempt_results"]
    assert [a["status"] for a in attempts] == ["failed", "planned", "succeeded"], err[-3000:]
    ip = [h.ip for h in c.hosts]
    lost, back = summary["resized"]
    assert (lost["attempt"], lost["world_size"], lost["previous"], lost["planned"], lost["hosts"]) == (1, 1, 3, 3, 1)
    assert f"{ip[1]}: host lost" in lost["why"] and f"{ip[2]}: host lost" in lost["why"], lost
    assert (back["attempt"], back["world_size"], back["hosts"], back["why"]) == (2, 3, 3, f"back: {ip[1]}, {ip[2]}")
    assert "elastic: attempt 1 goes on with 1 of 3 ranks on 1 host" in err, err[-3000:]
    assert "planned restart: " in err and " answers again: growing back to 3 ranks" in err, err[-3000:]
    assert sorted(e["host"] for e in _events(job) if e["kind"] == "host_rejoined") == [ip[1], ip[2]]

    # attempt 1: one rank, 3 micro-batches a step: the planned global batch
    text = (job / "attempt_1" / "worker_0.log").read_text(errors="replace")
    assert (
        f"elastic: 1 of 3 planned ranks: --grad-accum 1 -> 3 micro-batches of {BATCH} per step, "
        f"so a step's global batch stays {3 * BATCH}"
    ) in text, text[-2000:]
    budget = json.loads(re.search(r"^MSLAUNCH_METRIC (.*)$", text, re.M).group(1))
    assert (budget["batch_size"], budget["grad_accum"], budget["steps_per_epoch"]) == (3 * BATCH, 3, STEPS)

    # the planned restart lost no step: every rank of attempt 2 resumed where attempt 1 stopped
    stopped_at = attempts[1]["best_step"]
    assert (attempts[2]["resumed_from_step"], attempts[2]["steps_lost"]) == (stopped_at, 0), attempts[2]
    for rank in range(3):
        log = (job / "attempt_2" / f"worker_{rank}.log").read_text(errors="replace")
        assert f"(global step {stopped_at}); continuing at epoch 1 step {stopped_at + 1}" in log, log[-2000:]
        assert max(_losses(job / "attempt_2" / f"worker_{rank}.log")) == STEPS

    # the learning curve: the steps trained by 1 rank x 3 micro-batches against those trained by
    # 3 ranks x 1 around them (one step's loss varies by +-30 % here with its samples: means of many)
    small = _losses(job / "attempt_1" / "worker_0.log")
    full = {**_losses(job / "worker_0.log"), **_losses(job / "attempt_2" / "worker_0.log")}
    assert len(small) >= 5 and len(full) >= 10, (small, full)
    mean_small, mean_full = sum(small.values()) / len(small), sum(full.values()) / len(full)
    assert abs(mean_small - mean_full) <= 0.2 * mean_full, (small, full)
    assert wait_nothing_left(c) == {}
