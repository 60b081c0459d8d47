"""``--grad-accum K`` on 2 local ranks with real MindSpore (CPU): one gradient AllReduce per K
micro-batches.

MindSpore dumps each compiled graph as it runs it (``MS_DEV_SAVE_GRAPHS``, only the pass before
execution): the forward-backward graph every micro-batch runs holds no AllReduce, the graph
of the optimizer step holds the gradients' AllReduces, and that graph runs once per optimizer
step (its optimizer's ``global_step`` in the checkpoint).  The two ranks read different shards,
so their weights agree after training only because that AllReduce ran.  A linear model on 2 ranks
checks the arithmetic: one step of K micro-batches on each rank moves the weights by the learning
rate times the mean gradient over every rank's K micro-batches.
"""

from __future__ import annotations

import glob
import json
import os
import re

import numpy as np
import pytest

from launcher.workloads.cifar10_synth import write_synthetic_cifar10
from tests.harness.cli import run_process

pytestmark = pytest.mark.mindspore

LOSS_RE = re.compile(r"^epoch: 1 step: (\d+), loss is [0-9.eE+-]+$", re.M)


LINEAR = r"""
import json, os, sys
import numpy as np, mindspore as ms
from mindspore import Tensor, nn
from mindspore.communication import get_group_size, get_rank, init
from launcher.workloads.cluster import exit_now
from launcher.workloads.grad_accum import AccumulatingStep
ms.set_context(mode=ms.GRAPH_MODE); ms.set_device("CPU")
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
init()
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
rank, size = get_rank(), get_group_size()
K, B, D, LR = 4, 8, 5, 0.1
rows = [np.random.default_rng(r).normal(size=(K * B, D + 1)).astype(np.float32) for r in range(size)]  # x, y
net = nn.Dense(D, 1, weight_init="zeros", has_bias=False)
acc = AccumulatingStep(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), learning_rate=LR), K, True)
mine = rows[rank]
acc.step(iter([(Tensor(mine[j * B:(j + 1) * B, :D]), Tensor(mine[j * B:(j + 1) * B, D:])) for j in range(K)]))
# at w = 0 the gradient of mean((x.w - y)^2) is -2 mean(y x): here the mean over all ranks' rows
every = np.concatenate(rows)
expected = -LR * -2 * (every[:, :D] * every[:, D:]).mean(axis=0)
print("linear " + json.dumps({"rank": rank, "w": net.weight.asnumpy().ravel().tolist(), "expected": expected.tolist(),
                              "alone": (-LR * -2 * (mine[:, :D] * mine[:, D:]).mean(axis=0)).tolist()}), flush=True)
exit_now(0)
"""


def _allreduces(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if re.search(r"= AllReduce\(", line))


@pytest.mark.cost(25)
def test_two_ranks_allreduce_once_per_k_micro_batches(tmp_path) -> None:
    write_synthetic_cifar10(str(tmp_path / "data"), train=400, test=20, seed=0)
    ir, ckpt, steps = tmp_path / "ir", tmp_path / "ckpt", 2
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--tee",
        "none",
        "--log-dir",
        str(tmp_path / "job"),
        "--env",
        "GLOG_v=3",
        "--env",
        "MS_DEV_SAVE_GRAPHS=1",
        "--env",
        "MS_DEV_DUMP_IR_PASSES=hwopt_before_mindrt",
        "--env",
        f"MS_DEV_SAVE_GRAPHS_PATH={ir}",
        "-m",
        "launcher.workloads.resnet50_cifar10",
        "--data-path",
        str(tmp_path / "data"),
        "--image-size",
        "32",
        "--arch",
        "resnet8",
        "--batch-size",
        "8",
        "--grad-accum",
        "4",
        "--epochs",
        "1",
        "--steps-per-epoch",
        str(steps),
        "--ckpt-dir",
        str(ckpt),
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import mindspore as ms

    params = []
    for rank in (0, 1):
        log = (tmp_path / "job" / f"worker_{rank}.log").read_text(errors="replace")
        assert LOSS_RE.findall(log) == ["1", "2"], log[-2000:]  # optimizer steps
        accumulate = glob.glob(str(ir / f"rank_{rank}" / "*_AccumulateGrads_construct_*.ir"))
        apply = glob.glob(str(ir / f"rank_{rank}" / "*_ApplyAccumulated_construct_*.ir"))
        assert len(accumulate) == len(apply) == 1, os.listdir(ir / f"rank_{rank}")
        assert _allreduces(accumulate[0]) == 0  # the K micro-batches: no communication
        # one per gradient of ResNet-8's 29 trainable parameters: 9 convolutions (the stem, 3 per block
        # of its 2 stages, 2 projections), gamma and beta of a BatchNorm after each, the dense weight and bias
        assert _allreduces(apply[0]) == 9 + 2 * 9 + 2
        p = ms.load_checkpoint(str(ckpt / f"ckpt_{rank}" / f"resnet8-1_{steps}.ckpt"))
        # the optimizer (with the AllReduce before it) ran once per optimizer step, not per micro-batch
        assert int(p["global_step"].asnumpy().reshape(-1)[0]) == steps
        assert not any(name.startswith("grad_accum") for name in p)  # no accumulator in a checkpoint
        params.append(p)
    weights = [n for n in params[0] if n.endswith(".weight") and not n.startswith("moments.")]
    assert len(weights) == 9 + 1  # the convolutions' and the dense layer's
    for name in weights:  # the ranks trained on different shards; the mean gradient kept them equal
        np.testing.assert_allclose(
            params[0][name].asnumpy(), params[1][name].asnumpy(), rtol=0, atol=1e-6, err_msg=name
        )
    # the moving statistics are each rank's own (local BatchNorm): they differ, so the check above can fail
    stats = [n for n in params[0] if n.endswith("moving_mean")]
    assert any(not np.allclose(params[0][n].asnumpy(), params[1][n].asnumpy()) for n in stats)


@pytest.mark.cost(10)
def test_two_ranks_update_with_the_mean_gradient_of_all_micro_batches(tmp_path) -> None:
    script = tmp_path / "linear.py"
    script.write_text(LINEAR)
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--tee",
        "none",
        "--log-dir",
        str(tmp_path / "job"),
        "--env",
        "GLOG_v=3",
        str(script),
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        log = (tmp_path / "job" / f"worker_{rank}.log").read_text(errors="replace")
        out = json.loads(next(ln for ln in log.splitlines() if ln.startswith("linear ")).split(" ", 1)[1])
        assert out["rank"] == rank
        np.testing.assert_allclose(out["w"], out["expected"], rtol=1e-5, atol=1e-7)
        assert not np.allclose(out["w"], out["alone"], rtol=1e-3)  # this rank's gradient alone would not do
