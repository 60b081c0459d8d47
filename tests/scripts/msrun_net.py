"""A net.py as in MindSpore's msrun docs, reduced to one AllReduce (CPU, dynamic cluster).

Each worker prints ``net rank=<r> size=<n> sum=<v>`` and exits 0 when ``v == n(n+1)/2``, the way
the project's collective checks end (``launcher.workloads.cluster.exit_now``): MindSpore 2.10's
exit cleanup now and then crashes after the result (a rank of a correct two-node run in CI ended
by SIGSEGV right after printing its sum), which is the framework's, not what these tests are about.
``NET_FAIL_RANK=<r>``: that rank exits 3 right after ``init()`` (a worker failing mid-job), the same
way: MindSpore's exit cleanup after ``sys.exit(3)`` there once never returned (a CI run under load,
2026-11-29: its main thread in ``futex_wait`` for two minutes, until its peers' collective timed
out; it returned in 0.7 s in the runs before and after), which is the framework's too: through
``exit_now`` a cleanup still running after 30 s ends the rank with its code.
The scheduler's ``init()`` serves the cluster and ends the process.
"""

import os

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init

from launcher.workloads.cluster import exit_now

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
init()
rank, size = get_rank(), get_group_size()
if os.environ.get("NET_FAIL_RANK") == str(rank):
    print(f"net rank={rank} failing on purpose", flush=True)
    exit_now(3)


class _Sum(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(x)


total = float(_Sum()(Tensor(np.array([[rank + 1.0]], dtype=np.float32))).asnumpy().reshape(-1)[0])
print(f"net rank={rank} size={size} sum={total}", flush=True)
exit_now(0 if total == size * (size + 1) / 2 else 1)
