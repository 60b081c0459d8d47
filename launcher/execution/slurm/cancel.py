"""Cancel the job steps of one mslaunch attempt by their step name.

``python -m launcher.execution.slurm.cancel JOBID STEP_NAME [SIGNAL]``

Used by the slurm backend's teardown and by the job's watchdog when mslaunch dies (it cannot know
the step ids in advance: steps are found with ``squeue --steps`` by their ``--job-name``).
"""

from __future__ import annotations

import subprocess
import sys
from typing import List, Optional


def step_ids(job_id: str, step_name: str, timeout: float = 15.0) -> List[str]:
    """The ids (``J.S``) of job ``job_id``'s running steps named ``step_name``."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "--steps", "-j", job_id, "-o", "%i %j"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    ids = []
    for line in out.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[1].strip() == step_name:
            ids.append(parts[0])
    return ids


def scancel(ids: List[str], signal_name: Optional[str] = None, timeout: float = 15.0) -> None:
    """``scancel [--signal=SIG] ids...`` (``--signal``: signal the tasks, the steps go on)."""
    argv = ["scancel"] + ([f"--signal={signal_name}"] if signal_name else []) + list(ids)
    try:
        subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        pass


def cancel_steps(job_id: str, step_name: str, signal_name: Optional[str] = None, timeout: float = 15.0) -> List[str]:
    """``scancel`` every running step of ``job_id`` named ``step_name`` (with ``--signal`` if
    given: signal the tasks only); the step ids signalled."""
    ids = step_ids(job_id, step_name, timeout)
    if ids:
        scancel(ids, signal_name, timeout)
    return ids


def main(argv: List[str]) -> int:
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: python -m launcher.execution.slurm.cancel JOBID STEP_NAME [SIGNAL]\n")
        return 2
    cancel_steps(argv[0], argv[1], argv[2] if len(argv) == 3 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
