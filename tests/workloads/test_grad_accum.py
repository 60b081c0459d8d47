"""Gradient accumulation (``--grad-accum K``) with real MindSpore on CPU, in graph mode.

Two cases: the trainer's accumulating cells on ResNet-8 with BatchNorm in inference mode, where
K micro-batches must update the weights exactly as one batch of K times the size, and their
checkpoint (no accumulator) resumes a K=1 step; and the trainer itself, where K=4 micro-batches
of 8 must train like K=1 batches of 32 from the same seed (same images per step), and count
optimizer steps in every line and in its checkpoint.  The cells see 16x16 images and the trainer
8x8 ones (neither depends on the image size; a step on 32x32 costs many times more), and the
cells and the trainer's K=1 run (no checkpoints: no signal handler) run in this process, which
spares a MindSpore start each.  (The trainer's --resume itself runs in
tests/workloads/test_resnet50.py.)
The 2-rank case (one AllReduce per K micro-batches) is in tests/integration/test_grad_accum_e2e.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Iterator, List, Tuple

import numpy as np
import pytest

from launcher.logs.metrics import parse_line
from launcher.logs.progress import RankDeriver
from launcher.workloads.cifar10_synth import write_synthetic_cifar10
from tests.harness.mindspore import LAUNCHER_VARS, trainer_env

MODULE = "launcher.workloads.resnet50_cifar10"
LOSS_RE = re.compile(r"^epoch: (\d+) step: (\d+), loss is ([0-9.eE+-]+)$")


def _equivalence(folder: str) -> dict:
    """K=1 (the trainer's TrainOneStepCell, batch 16) against K=4 (its accumulating cells, 4 x 4) on
    ResNet-8 with the same weights and data (16x16 images), BatchNorm in inference mode (so a batch
    of 16 and four of 4 are the same function): the largest weight difference and facts about the
    cells.  Then the K=4 state's checkpoint (in ``folder``) resumes a new K=1 step (other initial
    weights) as the trainer's --resume does: the same weights and optimizer state, the step count
    goes on.  In this process: the cells compile here as in the trainer."""
    import mindspore as ms
    from mindspore import Tensor

    from launcher.workloads.checkpoints import _resume, save_checkpoint
    from launcher.workloads.grad_accum import one_batch_step
    from launcher.workloads.resnet50_cifar10 import make_accumulating_step, make_train_step, resnet

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 16, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, size=(2, 16)).astype(np.int32)
    ms.set_seed(1)
    net1 = resnet("resnet8")
    opt1, one = make_train_step(net1, lr=0.05)
    one.set_train(False)
    step1 = one_batch_step(one)
    losses1 = [step1(iter([(Tensor(x[i]), Tensor(y[i]))])) for i in range(2)]
    ms.set_seed(1)
    net4 = resnet("resnet8")
    opt4, acc = make_accumulating_step(net4, 4, False, lr=0.05)
    acc.accumulate.set_train(False)

    def micro(i: int) -> Iterator[Tuple[Tensor, Tensor]]:
        return iter([(Tensor(x[i][j * 4 : (j + 1) * 4]), Tensor(y[i][j * 4 : (j + 1) * 4])) for j in range(4)])

    losses4 = [acc.step(micro(i)) for i in range(2)]
    saved = sorted(ms.load_checkpoint(save_checkpoint(acc.state, folder, 1, 2, 2, 1, "resnet8")))
    ms.set_seed(2)
    net1b = resnet("resnet8")
    opt1b, oneb = make_train_step(net1b, lr=0.05)
    position = _resume(folder, oneb, opt1b, 2, 1, "resnet8")

    def diff(xs, ys) -> float:
        return max(float(np.abs(a.asnumpy() - b.asnumpy()).max()) for a, b in zip(xs, ys))

    return {
        "saved_accum": [n for n in saved if n.startswith("grad_accum")],
        "resumed_at": list(position),
        "resumed_global_step": int(opt1b.global_step.asnumpy()[0]),
        "resumed_weight_diff": diff(net1b.trainable_params(), net4.trainable_params()),
        "resumed_moment_diff": diff(opt1b.moments, opt4.moments),
        "losses1": losses1,
        "losses4": losses4,
        "max_weight_diff": diff(net1.trainable_params(), net4.trainable_params()),
        "max_moved": max(float(np.abs(a.asnumpy()).max()) for a in opt1.moments),
        "accum_left": max(float(np.abs(p.asnumpy()).max()) for p in acc.accum),
        "accum_names": sorted(p.name for p in acc.accum)[:1],
        "state_names_equal": sorted(p.name for p in acc.state.get_parameters())
        == sorted(p.name for p in one.get_parameters()),
        "global_steps": [int(opt1.global_step.asnumpy()[0]), int(opt4.global_step.asnumpy()[0])],
        "applied": acc.applied,
    }


def _env() -> dict:
    env = trainer_env()
    env["GLOG_v"] = "3"
    return env


def _trainer(args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=300, env=_env()
    )


def _losses(stdout: str) -> List[float]:
    return [float(m.group(3)) for m in map(LOSS_RE.match, stdout.splitlines()) if m]


@pytest.mark.mindspore
@pytest.mark.cost(12)
def test_k_micro_batches_update_the_weights_as_one_batch_k_times_the_size(tmp_path, capsys) -> None:
    out = _equivalence(str(tmp_path))
    stdout = capsys.readouterr().out
    assert out["max_moved"] > 1e-3  # the weights did move: the comparison below means something
    assert out["max_weight_diff"] < 1e-5, out
    # each step's loss is the mean over its K micro-batches: the loss of the whole batch
    assert out["losses4"] == pytest.approx(out["losses1"], abs=1e-5)
    assert out["accum_left"] == 0.0  # zeroed after every optimizer step
    assert out["global_steps"] == [2, 2] and out["applied"] == 2  # optimizer steps, not micro-batches
    assert out["accum_names"][0].startswith("grad_accum.")
    assert out["state_names_equal"]  # checkpoints of K=1 and K=4 hold the same names
    # the K=4 checkpoint holds no accumulator and resumes K=1: weights, momenta and step count
    assert out["saved_accum"] == []
    assert "resume: " in stdout and "(global step 2); continuing at epoch 2 step 1" in stdout, stdout
    assert out["resumed_at"] == [2, 0, 2] and out["resumed_global_step"] == 2
    assert out["resumed_weight_diff"] == 0.0 and out["resumed_moment_diff"] == 0.0, out


@pytest.mark.mindspore
@pytest.mark.cost(14)  # 7 s alone
def test_trainer_k4_batch8_trains_like_k1_batch32_and_counts_optimizer_steps(tmp_path, capsys, monkeypatch) -> None:
    write_synthetic_cifar10(str(tmp_path / "data"), train=1000, test=100, seed=0)
    steps = 6
    common = [
        "--data-path",
        str(tmp_path / "data"),
        "--image-size",  # 8: a sixteenth of the work of 32 per image; the curves fall all the same
        "8",
        "--arch",
        "resnet8",
        "--seed",
        "1",
        "--lr",  # 0.05: the curves fall as far in 6 steps as in 12 at the default 0.01
        "0.05",
        "--epochs",
        "1",
        "--steps-per-epoch",
        str(steps),
    ]
    acc = _trainer(common + ["--batch-size", "8", "--grad-accum", "4", "--ckpt-dir", str(tmp_path / "ckpt")])
    assert acc.returncode == 0, acc.stderr[-3000:]
    # the K=1 curve to compare with: the trainer's main in this process (without --ckpt-dir it
    # installs no signal handler), the same lines as `python -m` prints
    from launcher.workloads.resnet50_cifar10 import main

    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    code = main(common + ["--batch-size", "32"])
    one = capsys.readouterr()
    assert code == 0, one.err[-3000:]

    # every line counts optimizer steps: 6 loss lines, the step budget of 6 steps of 4 x 8 images
    lines = acc.stdout.splitlines()
    assert [m.group(2) for m in map(LOSS_RE.match, lines) if m] == [str(s) for s in range(1, steps + 1)]
    assert "125 batches of 8 per pass; --grad-accum 4: 31 optimizer steps of 4 batches per pass" in lines[1]
    budget = json.loads(next(ln for ln in lines if ln.startswith("MSLAUNCH_METRIC ")).split(" ", 1)[1])
    assert budget == {"batch_size": 32, "epochs": 1, "steps_per_epoch": steps, "grad_accum": 4, "micro_batch_size": 8}
    ckpt = tmp_path / "ckpt" / "ckpt_0" / f"resnet8-1_{steps}.ckpt"
    assert f"checkpoint: {ckpt}" in lines
    # and so does the checkpoint, which holds no accumulator (a K=1 run resumes from it: the
    # equivalence test above loads one into a K=1 step)
    import mindspore as ms

    params = ms.load_checkpoint(str(ckpt))
    assert int(params["global_step"].asnumpy().reshape(-1)[0]) == steps  # the optimizer's own count
    assert int(params["global_step_saved"].asnumpy()) == steps and int(params["step_num"].asnumpy()) == steps
    assert any(k.startswith("moments.") for k in params)
    assert not any(k.startswith("grad_accum") for k in params)
    # what `mslaunch top` and metrics.jsonl make of these lines: optimizer steps of 32 images
    deriver, records = RankDeriver(0), []
    for i, line in enumerate(lines):
        m = parse_line(line)
        if m is not None:
            records += deriver.feed([m], when=float(i))
    assert deriver.batch_size == 32 and deriver.total() == steps
    assert [r["global_step"] for r in records if r["kind"] == "step"] == list(range(1, steps + 1))

    # the learning curves (ResNet-8 over 6 steps at --lr 0.05: the mean of the last 3 losses falls
    # to 0.43 and 0.51 of the first loss here, 0.19 apart, against the bounds below): the same 32
    # images and weights at step 1, so the same loss up to BatchNorm (which normalises over each
    # micro-batch of 8); then both fall alike
    l1, l4 = _losses(one.out), _losses(acc.stdout)
    assert len(l1) == len(l4) == steps
    assert abs(l1[0] - l4[0]) < 0.1, (l1, l4)
    first, last1, last4 = l1[0], sum(l1[-3:]) / 3, sum(l4[-3:]) / 3
    assert last1 < 0.7 * first and last4 < 0.7 * first, (l1, l4)
    assert abs(last4 - last1) < 0.6, (l1, l4)


@pytest.mark.mindspore
@pytest.mark.cost(10)
def test_grad_accum_below_one_and_outside_data_parallel_are_one_line_errors(tmp_path, capsys, monkeypatch) -> None:
    # Flag errors: the trainer's main() refuses them before MindSpore does anything (no process
    # needed; `python -m` exits with main's code, as the run below shows).
    from launcher.workloads.resnet50_cifar10 import main

    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    write_synthetic_cifar10(str(tmp_path / "data"), train=40, test=10, seed=0)
    assert main(["--data-path", str(tmp_path / "data"), "--grad-accum", "0"]) == 2
    out = capsys.readouterr()
    assert out.err == "resnet50_cifar10: error: --grad-accum must be >= 1, got 0\n" and out.out == ""
    argv = ["--data-path", str(tmp_path / "data"), "--device-target", "GPU", "--parallel-mode", "auto_parallel"]
    assert main(argv + ["--grad-accum", "4"]) == 2
    out = capsys.readouterr()
    assert len(out.err.splitlines()) == 1 and "needs --parallel-mode data_parallel" in out.err and out.out == ""
    # a shard smaller than one optimizer step's K batches
    r = _trainer(
        [
            "--data-path",
            str(tmp_path / "data"),
            "--image-size",
            "32",
            "--arch",
            "resnet8",
            "--batch-size",
            "8",
            "--grad-accum",
            "8",
        ]
    )
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "fewer than --grad-accum 8 x --batch-size 8 records" in r.stderr
