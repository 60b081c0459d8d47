"""Elastic over ssh with real MindSpore: a switch failure takes two of three namespace hosts at
once, no spare is left, and ``--min-hosts 1`` lets the reference trainer go on, on the host left,
with the same global batch; once the hosts answer again, the next restart (a rank killed) takes
them back, and the job finishes at full size from the checkpoint its smaller attempt wrote.

The job: 3 hosts x 1 slot, ResNet-14 on 32x32 synthetic CIFAR-10, micro-batch 4, 12 steps,
``--ckpt-every 2``; ``--rejoin-after 0`` (a host is taken back at the first restart after it
answers).  Attempt 0 runs 3 ranks; after its step 3 the links of hosts 2 and 3 are cut together
(their ranks alive behind them).  Attempt 1 runs 1 rank that accumulates 3 micro-batches per step
(global batch 12, as planned).  Once it wrote a checkpoint and trained one step past it, the links
are back and its rank is SIGKILLed; attempt 2 runs 3 ranks again, every rank resuming from that
checkpoint (the missing ranks' folders were kept by rank 0), so the step after it is trained twice
from the same weights, once by 1 rank and once by 3: its losses agree within noise (different
samples: the shards follow the rank count).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.faultkit import wait_or_fail
from tests.harness.faultstream import rank_pids
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.netns, pytest.mark.mindspore]

STEPS, EVERY, BATCH = 12, 2, 4
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
        "--log-dir", str(job), "--tee", "none", "--grace", "5", "--max-restarts", "3",
        "--min-hosts", "1", "--rejoin-after", "0", "--env", f"FAULT_STREAM_MARK={tmp_path.name}", "--env", "GLOG_v=3",
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
        wait_or_fail(lambda: any(e["kind"] == "resized" for e in _events(job)), 180, "attempt 1 planned smaller")
        for i in cut:
            c.restore_link(i)
        cut.clear()
        one = job / "attempt_1" / "worker_0.log"

        def past_a_checkpoint():  # attempt 1 wrote a checkpoint and trained a step past it
            text = one.read_text(errors="replace") if one.exists() else ""
            saved = [int(m) for m in re.findall(r"^checkpoint: .*-1_(\d+)\.ckpt$", text, re.M)]
            return bool(saved) and max(saved) + 1 in _losses(one)

        wait_or_fail(lambda: past_a_checkpoint() or proc.poll() is not None, 300, "a checkpoint of attempt 1")
        os.kill(rank_pids(tmp_path.name)[("1", 0)], signal.SIGKILL)
        _, err = proc.communicate(timeout=400)
    finally:
        for i in cut:
            c.restore_link(i)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert [a["status"] for a in summary["attempt_results"]] == ["failed", "failed", "succeeded"]
    ip = [h.ip for h in c.hosts]
    lost, back = summary["resized"]
    assert (lost["attempt"], lost["world_size"], lost["previous"], lost["planned"], lost["hosts"]) == (1, 1, 3, 3, 1)
    assert f"{ip[1]}: host lost" in lost["why"] and f"{ip[2]}: host lost" in lost["why"], lost
    assert (back["attempt"], back["world_size"], back["hosts"], back["why"]) == (2, 3, 3, f"back: {ip[1]}, {ip[2]}")
    assert "elastic: attempt 1 goes on with 1 of 3 ranks on 1 host" in err, err[-3000:]
    assert sorted(e["host"] for e in _events(job) if e["kind"] == "host_rejoined") == [ip[1], ip[2]]

    # attempt 1: one rank, 3 micro-batches a step: the planned global batch
    text = (job / "attempt_1" / "worker_0.log").read_text(errors="replace")
    assert (
        f"elastic: 1 of 3 planned ranks: --grad-accum 1 -> 3 micro-batches of {BATCH} per step, "
        f"so a step's global batch stays {3 * BATCH}"
    ) in text, text[-2000:]
    budget = json.loads(re.search(r"^MSLAUNCH_METRIC (.*)$", text, re.M).group(1))
    assert (budget["batch_size"], budget["grad_accum"], budget["steps_per_epoch"]) == (3 * BATCH, 3, STEPS)

    # attempt 2: every rank resumed from the checkpoint attempt 1 wrote, and trained to the end
    small = _losses(job / "attempt_1" / "worker_0.log")
    saved = max(s for s in small if s % EVERY == 0 and s + 1 in small)
    for rank in range(3):
        log = (job / "attempt_2" / f"worker_{rank}.log").read_text(errors="replace")
        assert f"-1_{saved}.ckpt (global step {saved}); continuing at epoch 1 step {saved + 1}" in log, log[-2000:]
        assert max(_losses(job / "attempt_2" / f"worker_{rank}.log")) == STEPS
    full = _losses(job / "attempt_2" / "worker_0.log")
    # the step after it, from the same weights: 1 rank x 3 micro-batches against 3 ranks x 1
    assert abs(small[saved + 1] - full[saved + 1]) <= 0.25 * full[saved + 1], (small, full)
    assert wait_nothing_left(c) == {}
