"""``python -m launcher.execution.slurm.requeue SUMMARY``: the last step of a ``mslaunch sbatch
--requeue`` batch script.

Requeues the Slurm job the script runs in (``scontrol requeue $SLURM_JOB_ID``) when the run's
summary says ``preempted`` (Slurm's SIGUSR1 warning, or a preemption that signalled the steps)
and Slurm is not requeueing the job already (``scontrol requeue`` by an operator, a preemption in
REQUEUE mode that ends the batch script too: the job's ``Restarts`` is then above this run's
``SLURM_RESTART_COUNT``); requeueing twice would skip an attempt. The next run continues in
``attempt_<k>/``.

Exit status: 0 requeued; 1 not (not preempted, no summary, or Slurm requeues it already);
2 ``scontrol requeue`` failed (its message on stderr).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Mapping, Optional, Sequence


def should_requeue(summary: Optional[Mapping[str, Any]], fields: Mapping[str, str], restart_count: int) -> bool:
    """Whether the script must requeue its job (pure; see the module doc).

    Args:
        summary: the run's ``summary.json`` (None: missing or unreadable).
        fields: the job's ``scontrol show job`` fields (``{}`` if Slurm could not be asked).
        restart_count: this run's ``SLURM_RESTART_COUNT``.
    """
    if not summary or summary.get("status") != "preempted":
        return False
    restarts = fields.get("Restarts", "")
    return not (restarts.isdigit() and int(restarts) > restart_count)


def _read_summary(path: str) -> Optional[Mapping[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m launcher.execution.slurm.requeue SUMMARY_JSON\n")
        return 2
    from launcher.execution.slurm.submit import job_record
    from launcher.planning.backends.slurm import allocation_job_id

    job = allocation_job_id(os.environ)
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    if not job or not should_requeue(_read_summary(args[0]), job_record(job), int(count) if count.isdigit() else 0):
        return 1
    sys.stdout.write(f"mslaunch: preempted; requeueing Slurm job {job}\n")
    sys.stdout.flush()
    try:
        res = subprocess.run(
            ["scontrol", "requeue", job], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        sys.stderr.write(f"mslaunch: scontrol requeue {job} failed: {exc}\n")
        return 2
    if res.returncode != 0:
        sys.stderr.write(f"mslaunch: scontrol requeue {job} failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
