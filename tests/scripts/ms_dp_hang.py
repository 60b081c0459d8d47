"""A 2-rank MindSpore data-parallel job (the tutorial's loop: value_and_grad, DistributedGradReducer,
optimizer) whose rank BLOCK_RANK blocks in Python before the gradient AllReduce at step BLOCK_STEP of
attempt 0 (``MSLAUNCH_ATTEMPT``); the other rank then waits inside MindSpore's AllReduce.

    ms_dp_hang.py STEPS BLOCK_RANK BLOCK_STEP

Prints the tutorial's ``epoch: 0, step: N, loss is X`` every step (nothing before the first) and
``attempt=<k> rank=<r>`` after it.
"""

import os
import sys
import time

import numpy as np

from launcher.workloads.cluster import exit_now, join_collective_cluster


def block_before_allreduce():
    while True:
        time.sleep(3600)


def main():
    steps, block_rank, block_step = (int(x) for x in sys.argv[1:4])
    code = join_collective_cluster("ms_dp_hang", "hang test", [])
    if code is not None:
        return code
    import mindspore as ms
    from mindspore import nn
    from mindspore.communication import get_rank

    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = get_rank()
    attempt = os.environ.get("MSLAUNCH_ATTEMPT", "-")
    net = nn.Dense(8, 2)
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), 0.01)

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)
    reducer = nn.DistributedGradReducer(opt.parameters)
    rng = np.random.default_rng(rank)
    for step in range(steps):
        x = ms.Tensor(rng.standard_normal((4, 8)).astype(np.float32))
        y = ms.Tensor(rng.standard_normal((4, 2)).astype(np.float32))
        loss, grads = grad_fn(x, y)
        if rank == block_rank and step == block_step and attempt in ("0", "-"):
            block_before_allreduce()
        grads = reducer(grads)
        opt(grads)
        print(f"epoch: 0, step: {step}, loss is {float(loss.asnumpy()):.6f}", flush=True)
        if step == 0:
            print(f"attempt={attempt} rank={rank}", flush=True)
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    exit_now(main())
