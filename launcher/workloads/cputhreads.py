"""Apply the per-rank CPU thread count a launcher planned (workload side; imports MindSpore).

MindSpore 2.10 reads no environment variable for its CPU kernel thread pool: its size is
``mindspore.device_context.cpu.op_tuning.threads_num(n)`` (default: every core of the machine,
whatever the process's affinity). mslaunch plans a thread count per rank and passes it as
``MSLAUNCH_CPU_THREADS`` (next to ``OMP_NUM_THREADS``); a MindSpore program applies it with one
call, before it builds or runs anything::

    from launcher.workloads.cputhreads import apply_cpu_threads
    apply_cpu_threads()

The shipped workloads call it. Without ``MSLAUNCH_CPU_THREADS`` (not under mslaunch, or
``--cpu-tune off``) nothing changes.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

ENV_NAME = "MSLAUNCH_CPU_THREADS"


def planned_threads(env: Mapping[str, str]) -> Optional[int]:
    """The planned thread count in ``env``, or None when unset or not a positive integer."""
    text = env.get(ENV_NAME, "").strip()
    if not text.isdigit() or int(text) < 1:
        return None
    return int(text)


def apply_cpu_threads(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Size MindSpore's CPU kernel thread pool to ``MSLAUNCH_CPU_THREADS``.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        The thread count set, or None when nothing was planned or the pool was already sized
        (MindSpore refuses a second ``threads_num`` call; the program's own choice wins).
    """
    n = planned_threads(os.environ if env is None else env)
    if n is None:
        return None
    import mindspore as ms

    try:
        ms.device_context.cpu.op_tuning.threads_num(n)
    except RuntimeError:
        return None
    return n
