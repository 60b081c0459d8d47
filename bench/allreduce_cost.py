"""What one gradient AllReduce of the reference trainer costs (a rank program for ``bench_cpu.py``).

Run under ``mslaunch run --np 2`` (dynamic method). Every worker all-reduces a float32 tensor with
as many elements as ResNet-50 (10 classes) has trainable parameters, i.e. the gradients the
trainer's data-parallel step reduces every step, ``--repeat`` times after one warm-up call, and
prints one line::

    allreduce-cost rank=<r> elements=<n> wall=<median s> cpu=<median s> sys=<median s>

``cpu`` is the process's user + system CPU time per call (every thread), ``sys`` its system part.
The scheduler only serves ``init()``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from typing import List, Optional, Sequence

#: Trainable parameters of ``launcher.workloads.resnet50.resnet50(10)`` (see its docstring).
RESNET50_PARAMETERS = 23_528_522


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=RESNET50_PARAMETERS)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from launcher.workloads.cluster import all_reduce_sum, exit_now, join_collective_cluster

    code = join_collective_cluster("allreduce_cost", __doc__.splitlines()[0], [])
    if code is not None:
        exit_now(code)

    import numpy as np
    from mindspore import Tensor
    from mindspore.communication import get_group_size, get_rank

    from launcher.workloads.cputhreads import apply_cpu_threads

    apply_cpu_threads()
    net = all_reduce_sum()
    x = Tensor(np.ones((args.elements,), np.float32))
    net(x).asnumpy()
    wall: List[float] = []
    cpu: List[float] = []
    sys_: List[float] = []
    for _ in range(args.repeat):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = net(x).asnumpy()
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        wall.append(t1 - t0)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        sys_.append(r1.ru_stime - r0.ru_stime)
    ok = float(out[0]) == float(get_group_size())
    net(Tensor(np.ones((1,), np.float32))).asnumpy()  # both ranks are done before either leaves
    print(
        f"allreduce-cost rank={get_rank()} elements={args.elements} wall={statistics.median(wall):.3f} "
        f"cpu={statistics.median(cpu):.3f} sys={statistics.median(sys_):.3f} ok={ok}",
        flush=True,
    )
    exit_now(0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
