"""Cluster sanity check: every rank contributes its rank id to an AllGather.

Run under a launcher that sets a distributed environment (dynamic cluster: ``MS_ROLE``,
``MS_WORKER_NUM``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, optional ``MS_NODE_ID``; or a rank table /
OpenMPI)::

    python -m launcher.workloads.allgather_check [--device-target CPU|GPU|Ascend]

Each worker prints exactly one line on stdout::

    mslaunch-check rank=<r> size=<n> gathered=<comma-separated ints>

and exits 0 when the gathered vector is ``0..n-1``; otherwise it prints a second line
``mslaunch-check rank=<r> FAILED: ...`` naming the missing ranks and the wrong positions and exits
1. The scheduler (``MS_ROLE=MS_SCHED``) only calls ``init()``, which in MindSpore 2.10 serves the
cluster and ends the process once every worker has left. Without a distributed environment the
check cannot run: one line on stderr, exit 2.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from launcher.workloads.cluster import all_gather, exit_now, join_collective_cluster


def diagnose(gathered: Sequence[int], size: int) -> Optional[str]:
    """``None`` when ``gathered == [0, 1, ..., size-1]``, else what is missing or wrong."""
    expected = list(range(size))
    if list(gathered) == expected:
        return None
    problems = []
    missing = sorted(set(expected) - set(gathered))
    if missing:
        problems.append("missing ranks " + ",".join(map(str, missing)))
    if len(gathered) != size:
        problems.append(f"got {len(gathered)} values for {size} ranks")
    wrong = [f"position {i} has {v}" for i, v in enumerate(gathered) if i >= size or v != i]
    if wrong:
        problems.append("wrong: " + "; ".join(wrong))
    return ", ".join(problems)


def main(argv: Optional[Sequence[str]] = None) -> int:
    code = join_collective_cluster("allgather_check", __doc__.splitlines()[0], argv)
    if code is not None:
        return code

    import numpy as np
    from mindspore import Tensor
    from mindspore.communication import get_group_size, get_rank

    rank, size = get_rank(), get_group_size()
    out = all_gather()(Tensor(np.array([[rank]], dtype=np.float32))).asnumpy()
    gathered: List[int] = [int(round(float(v))) for v in out.reshape(-1)]
    print(f"mslaunch-check rank={rank} size={size} gathered={','.join(map(str, gathered))}", flush=True)
    problem = diagnose(gathered, size)
    if problem is not None:
        print(f"mslaunch-check rank={rank} FAILED: {problem}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main())
