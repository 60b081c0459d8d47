"""AllReduce smoke test: every rank contributes ``rank + 1``; the sum is ``n (n + 1) / 2``.

Run under a launcher that sets a distributed environment (see ``allgather_check``)::

    python -m launcher.workloads.allreduce_smoke [--device-target CPU|GPU|Ascend]

Each worker prints one line ``mslaunch-allreduce rank=<r> sum=<v>`` (2 workers: ``sum=3.0``) and
exits 0 if the sum is right, else 1. The scheduler (``MS_ROLE=MS_SCHED``) only calls ``init()``.
Without a distributed environment: one line on stderr, exit 2.
"""

from __future__ import annotations

from typing import Optional, Sequence

from launcher.workloads.cluster import all_reduce_sum, exit_now, join_collective_cluster


def main(argv: Optional[Sequence[str]] = None) -> int:
    code = join_collective_cluster("allreduce_smoke", __doc__.splitlines()[0], argv)
    if code is not None:
        return code

    import numpy as np
    from mindspore import Tensor
    from mindspore.communication import get_group_size, get_rank

    rank, size = get_rank(), get_group_size()
    total = float(all_reduce_sum()(Tensor(np.array([[rank + 1.0]], dtype=np.float32))).asnumpy().reshape(-1)[0])
    print(f"mslaunch-allreduce rank={rank} sum={total}", flush=True)
    return 0 if total == size * (size + 1) / 2 else 1


if __name__ == "__main__":
    exit_now(main())
