"""Elastic over ssh on the 3-host namespace cluster (1 slot each, no spare): hosts lost with their
ranks alive behind cut links, ``--min-hosts 1`` lets the job go on, on the hosts left, and the
job grows back when the hosts answer again.

* With real MindSpore, the reference trainer (ResNet-8 on 16x16 synthetic CIFAR-10, micro-batch 4,
  ``--ckpt-every 2``, 8 steps): once rank 0 logged step 4 the link of host 3 is cut (its rank
  alive behind it). Attempt 1 runs 2 ranks that take the planned global batch of 12 exactly: 6
  images a rank, 2 micro-batches of 3 each (the micro-batch resized: 4 would make 8 or 16), to
  the end of the job, its losses in the range of the steps trained at full size (the update's
  arithmetic is tests/workloads/test_grad_accum.py's and tests/integration/test_grad_accum_e2e.py's;
  which K and micro-batch, tests/workloads/test_elastic.py's).
* Growing back, with ``tests/scripts/ckptprog.py`` (a data-parallel stand-in that checkpoints,
  keeps the missing ranks' checkpoints while smaller and saves on a planned SIGTERM, as the
  reference trainer does): a switch failure cuts hosts 2 and 3 together; the links come back once attempt 1 steps, and
  ``--grow-at-checkpoint`` ends attempt 1 itself (a planned restart), attempt 2 runs 3 ranks again
  from where attempt 1 stopped: no step lost.

Nothing is left on any host after either.
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
from tests.harness.hostfaults import host_faults
from tests.harness.paths import TESTS
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

pytestmark = pytest.mark.netns

STEPS, EVERY, BATCH, CUT = 8, 2, 4, 4
LOSS = re.compile(r"^epoch: 1 step: (\d+), loss is (\S+)$", re.M)
CKPTPROG = os.path.join(TESTS, "scripts", "ckptprog.py")


def _losses(path):
    return {int(s): float(v) for s, v in LOSS.findall(path.read_text(errors="replace"))} if path.exists() else {}


def _events(job):
    path = job / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run(c, tmp_path, argv, cut_at, restore_when=None, hosts=(1, 2)):
    """Run ``argv``; cut the links of ``hosts`` (indices) together once rank 0 logged step
    ``cut_at``; bring them back once ``restore_when()`` holds (or at the end).  (returncode, stderr)."""
    job = tmp_path / "job"
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    cut = []
    try:
        wait_or_fail(lambda: cut_at in _losses(job / "worker_0.log") or proc.poll() is not None, 300, "the cut")
        for i in hosts:  # all at once (a switch failure), the ranks alive behind their links
            c.cut_link(i)
            cut.append(i)
        if restore_when is not None:
            wait_or_fail(lambda: restore_when() or proc.poll() is not None, 300, "the time to bring the links back")
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
    return proc.returncode, err


def _check_shrunk(c, job, err, lost, gone=(1, 2)):
    ip, left = [h.ip for h in c.hosts], 3 - len(gone)
    assert (lost["attempt"], lost["world_size"], lost["previous"], lost["planned"], lost["hosts"]) == (
        1,
        left,
        3,
        3,
        left,
    )
    assert all(f"{ip[i]}: host lost" in lost["why"] for i in gone), lost
    hosts = "1 host" if left == 1 else f"{left} hosts"
    assert f"elastic: attempt 1 goes on with {left} of 3 ranks on {hosts}" in err, err[-3000:]


@pytest.mark.mindspore
@pytest.mark.cost(45)  # 33 s alone
def test_a_host_lost_the_trainer_goes_on_with_two_ranks_and_exactly_the_same_global_batch(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
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
        "--log-dir", str(job), "--tee", "none", "--grace", "5", "--max-restarts", "1", "--min-hosts", "1",
        "--env", "GLOG_v=3",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet8", "--data-path", str(data),
        "--image-size", "16", "--batch-size", str(BATCH), "--steps-per-epoch", str(STEPS), "--epochs", "1",
        "--workers", "1", "--ckpt-dir", str(ckpt), "--ckpt-every", str(EVERY),
    )  # fmt: skip
    with host_faults(c, favored=(0, 1, 2)):  # its ranks get the CPU first: near its time alone in the suite
        code, err = _run(c, tmp_path, argv, CUT, hosts=(2,))
    assert code == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert [a["status"] for a in summary["attempt_results"]] == ["failed", "succeeded"], err[-3000:]
    (lost,) = summary["resized"]
    _check_shrunk(c, job, err, lost, gone=(2,))

    # attempt 1: two ranks, 6 images each a step (2 micro-batches of 3): the planned global batch
    # of 12 exactly (4 a micro-batch would make 8 or 16), to the end, with the planned steps per epoch
    for rank in (0, 1):
        text = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        assert (
            f"elastic: 2 of 3 planned ranks: --grad-accum 1 -> 2 micro-batches of 3 (--batch-size {BATCH} -> 3) "
            f"per step, so a step's global batch stays {3 * BATCH}"
        ) in text, text[-2000:]
        assert f"rank {rank} of 2: 100 batches of 3 per pass" in text, text[-2000:]  # 600 images: 300 a rank
        # its graphs are another K's and micro-batch's: a compile-cache folder of this size's own
        assert f"compile cache: {job / 'compile_cache' / 'world-2-of-3'} (" in text, text[-2000:]
        budget = json.loads(re.search(r"^MSLAUNCH_METRIC (.*)$", text, re.M).group(1))
        want = {"batch_size": 6, "grad_accum": 2, "micro_batch_size": 3, "steps_per_epoch": STEPS}
        assert {k: budget[k] for k in want} == want, budget
    small, full = _losses(job / "attempt_1" / "worker_0.log"), _losses(job / "worker_0.log")
    assert max(small) == STEPS and min(small) <= CUT + 1, small

    # it trains on: every loss of the shrunk attempt finite and within the range of those at full
    # size (one step's loss varies by +-30 % here with its samples; that K micro-batches update the
    # weights as one batch K times the size is tests/workloads/test_grad_accum.py's)
    assert len(full) >= CUT and all(0.0 < v < 2.0 * max(full.values()) for v in small.values()), (small, full)
    assert wait_nothing_left(c) == {}


@pytest.mark.cost(20)
def test_grow_at_checkpoint_takes_the_hosts_back_once_they_answer_with_no_step_lost(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    c = cluster
    job, work = tmp_path / "job", tmp_path / "work"
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "3", "--master-port", "auto",
        "--log-dir", str(job), "--tee", "none", "--grace", "5", "--max-restarts", "1", "--min-hosts", "1",
        "--rejoin-after", "0", "--grow-at-checkpoint",
        "--no-python", sys.executable, CKPTPROG, str(work), "80", "0.1", "5",
    )  # fmt: skip
    small_log = job / "attempt_1" / "worker_0.log"
    code, err = _run(c, tmp_path, argv, 8, restore_when=lambda: len(_losses(small_log)) >= 3)
    assert code == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    attempts = summary["attempt_results"]
    assert [a["status"] for a in attempts] == ["failed", "planned", "succeeded"], err[-3000:]
    lost, back = summary["resized"]
    _check_shrunk(c, job, err, lost)
    ip = [h.ip for h in c.hosts]
    assert (back["attempt"], back["world_size"], back["hosts"], back["why"]) == (2, 3, 3, f"back: {ip[1]}, {ip[2]}")
    assert " answers again: growing back to 3 ranks; the ranks save at their next step's end" in err, err[-3000:]
    assert sorted(e["host"] for e in _events(job) if e["kind"] == "host_rejoined") == [ip[1], ip[2]]
    assert (job / "attempt_1" / "stopping").read_text() == "planned\n"
    # no step lost: every rank of attempt 2 resumed at the step where attempt 1 stopped
    stopped_at = attempts[1]["best_step"]
    assert (attempts[2]["resumed_from_step"], attempts[2]["steps_lost"]) == (stopped_at, 0), attempts[2]
    for rank in range(3):
        log = (job / "attempt_2" / f"worker_{rank}.log").read_text()
        assert (
            f"resume: global step {stopped_at}\n" in log
            and max(_losses(job / "attempt_2" / f"worker_{rank}.log")) == 80
        )
    assert wait_nothing_left(c) == {}
