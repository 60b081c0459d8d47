"""The reference trainer (``launcher.workloads.resnet50_cifar10``) for a preemption test under
``mslaunch sbatch --requeue``, preempted at a known point:

* the first Slurm run (``SLURM_RESTART_COUNT`` unset or 0) trains ``--epochs 1``, saves that
  epoch's checkpoint as usual, and is then held: each worker prints ``held: epoch 1 saved`` and
  waits, alive in its MindSpore cluster, for the SIGTERM of the preemption (the scheduler stays
  in its ``init()``, serving the cluster, as while the workers train);
* a requeued run trains ``--epochs 2``: it must resume from that checkpoint to train epoch 2 only.

    held_trainer.py TRAINER_ARGS...   (the trainer's own arguments, without --epochs)

Without the hold, the preemption would race the end of a short first run.
"""

import os
import sys
import time

from launcher.workloads.resnet50_cifar10 import main


def hold_until_preempted() -> None:
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    first = os.environ.get("SLURM_RESTART_COUNT", "0") in ("", "0")
    code = main(sys.argv[1:] + ["--epochs", "1" if first else "2"])
    if first and code == 0 and os.environ.get("MS_ROLE") != "MS_SCHED":
        print("held: epoch 1 saved; waiting for the preemption", flush=True)
        hold_until_preempted()
    sys.exit(code)
