"""The dynamic cluster's scheduler and nothing else: ``init()`` under ``MS_ROLE=MS_SCHED``.

Under MindSpore's dynamic cluster the scheduler process runs the same script as the workers but
does no training: its ``init()`` serves the cluster (registration, heartbeats, metadata) and, in
MindSpore 2.10, ends the process itself once every worker has finalized (or when a worker's
heartbeat stops: the scheduler then fails, as it would in the user's script).  This module is that
part alone, so the scheduler need not import and run the user's whole program (mslaunch's zygote
forks it; ``--no-zygote`` runs the user's script as the scheduler, as msrun does)::

    MS_ROLE=MS_SCHED MS_WORKER_NUM=2 MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT=8118 \\
        python -m launcher.workloads.scheduler

The scheduler runs on CPU whatever the workers' device.  Outside the scheduler role: one line on
stderr, exit 2.
"""

from __future__ import annotations

import os
import sys

from launcher.workloads.cluster import exit_now


def main() -> int:
    if os.environ.get("MS_ROLE") != "MS_SCHED":
        sys.stderr.write(
            "scheduler: error: MS_ROLE is not MS_SCHED; a launcher starts this as the dynamic cluster's scheduler\n"
        )
        return 2
    import mindspore as ms
    from mindspore.communication import init

    ms.set_device("CPU")
    init()
    return 0


if __name__ == "__main__":
    exit_now(main())
