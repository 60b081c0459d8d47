"""Slurm batch jobs of ``mslaunch sbatch``: submit, ask their state, cancel (sbatch/squeue/scancel)."""

from __future__ import annotations

import subprocess
from typing import Dict, List, Optional

from launcher.errors import LaunchError


def _run(argv: List[str], timeout: float) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LaunchError(
            f"{argv[0]} not found; install the Slurm client (Debian: apt-get install slurm-client)"
        ) from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{argv[0]} did not answer within {timeout:g} s; is slurmctld reachable?") from None


def submit(script: str, cwd: str, timeout: float = 60.0) -> str:
    """``sbatch --parsable SCRIPT`` (run in ``cwd``); the Slurm job id.

    Raises:
        LaunchError: sbatch refused the job (its message) or is missing.
    """
    try:
        res = subprocess.run(
            ["sbatch", "--parsable", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise LaunchError("sbatch not found; install the Slurm client (Debian: apt-get install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"sbatch did not answer within {timeout:g} s; is slurmctld reachable?") from None
    job = res.stdout.strip().split(";", 1)[0]
    if res.returncode != 0 or not job.isdigit():
        why = (res.stderr.strip().splitlines() or [res.stdout.strip() or f"exit code {res.returncode}"])[-1]
        raise LaunchError(f"sbatch refused the job: {why}")
    return job


def job_state(slurm_job_id: str, timeout: float = 15.0) -> Optional[str]:
    """Slurm's state of the job (``PENDING``, ``RUNNING``, ``COMPLETING``...), None once it left the queue."""
    res = _run(["squeue", "-h", "-j", slurm_job_id, "-o", "%T"], timeout)
    state = res.stdout.strip().splitlines()
    return state[0].strip() if res.returncode == 0 and state else None


def job_record(slurm_job_id: str, timeout: float = 5.0) -> Dict[str, str]:
    """``scontrol show job -o JOB``'s fields (:func:`~launcher.planning.backends.slurm.parse_job_record`);
    ``{}`` when Slurm cannot be asked or does not know the job."""
    from launcher.planning.backends.slurm import parse_job_record

    try:
        res = _run(["scontrol", "show", "job", "-o", slurm_job_id], timeout)
    except LaunchError:
        return {}
    return parse_job_record(res.stdout) if res.returncode == 0 else {}


def cancel(slurm_job_id: str, timeout: float = 15.0) -> None:
    """``scancel`` the job (Slurm sends SIGTERM to the batch script's mslaunch and the steps).

    Raises:
        LaunchError: scancel failed.
    """
    res = _run(["scancel", slurm_job_id], timeout)
    if res.returncode != 0:
        raise LaunchError(f"scancel {slurm_job_id} failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
