"""AllReduce smoke test: every rank contributes ``rank + 1``; the sum is ``n (n + 1) / 2``.

Run under a launcher that sets a distributed environment (see ``allgather_check``)::

    python -m launcher.workloads.allreduce_smoke [--device-target CPU|GPU|Ascend]

Each worker prints one line ``mslaunch-allreduce rank=<r> sum=<v>`` (2 workers: ``sum=3.0``) and
exits 0 if the sum is right, else 1. The scheduler (``MS_ROLE=MS_SCHED``) only calls ``init()``.
Without a distributed environment: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Mapping, Optional, Sequence


def distributed_from_env(env: Mapping[str, str]) -> bool:
    """True when a launcher set a distributed environment (dynamic cluster, rank table, OpenMPI)."""
    return bool(env.get("MS_ROLE") or env.get("RANK_TABLE_FILE") or env.get("OMPI_COMM_WORLD_SIZE"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launcher.workloads.allreduce_smoke", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--device-target", default=os.environ.get("DEVICE_TARGET") or "CPU",
                        choices=("CPU", "GPU", "Ascend"))
    args = parser.parse_args(argv)
    if not distributed_from_env(os.environ):
        sys.stderr.write("allreduce_smoke: error: no distributed environment (MS_ROLE, RANK_TABLE_FILE or "
                         "OMPI_COMM_WORLD_SIZE); start it with a launcher\n")
        return 2

    import numpy as np

    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        ms.set_device(args.device_target)
    except RuntimeError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        sys.stderr.write(f"allreduce_smoke: error: --device-target {args.device_target} is not usable: {first}\n")
        return 2
    init()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return 0  # not reached in MindSpore 2.10: the scheduler's init() ends the process

    class _Sum(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.all_reduce = ops.AllReduce()

        def construct(self, x):
            return self.all_reduce(x)

    rank, size = get_rank(), get_group_size()
    total = float(_Sum()(Tensor(np.array([[rank + 1.0]], dtype=np.float32))).asnumpy().reshape(-1)[0])
    print(f"mslaunch-allreduce rank={rank} sum={total}", flush=True)
    return 0 if total == size * (size + 1) / 2 else 1


if __name__ == "__main__":
    sys.exit(main())
