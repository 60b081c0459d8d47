"""What the multi-host benchmarks share: the stand-in scheduler, rank start stamps, the can-run check.

Their rank programs are MindSpore-free: each rank writes its own start time to ``<stamps>/rank_<RANK_ID>``
and the dynamic method's scheduler (``MS_ROLE=MS_SCHED``) only listens on its port, so mslaunch's
port check passes. Import it from a script in ``bench/`` (the script's folder is on ``sys.path``).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

#: The head of a Python rank program: the imports, and the scheduler's part (listen, then wait).
RANK_PROGRAM_HEAD = """\
import os, socket, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":  # the dynamic cluster's scheduler: listen, then wait
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])))
    s.listen(256)
    time.sleep(3600)
"""


def stamps_of(folder: str) -> List[float]:
    """The start stamps written so far in ``folder`` (files being written are skipped)."""
    out: List[float] = []
    for f in glob.glob(os.path.join(folder, "rank_*")):
        try:
            with open(f) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text:
            out.append(float(text))
    return out


def wait_stamps(
    folder: str,
    n: int,
    proc: Optional[subprocess.Popen] = None,
    timeout: float = 120.0,
    what: Callable[[], str] = lambda: "",
) -> List[float]:
    """Wait until ``n`` ranks stamped their start; their stamps.

    Raises:
        RuntimeError: ``proc`` (mslaunch) exited first, or ``timeout`` seconds passed.
    """
    deadline = time.time() + timeout
    while True:
        values = stamps_of(folder)
        if len(values) >= n:
            return values
        if proc is not None and proc.poll() is not None:
            tail = proc.stderr.read()[-2000:] if proc.stderr is not None else ""
            raise RuntimeError(
                f"mslaunch exited ({proc.returncode}) with {len(values)} of {n} ranks started: {tail}{what()}"
            )
        if time.time() > deadline:
            raise RuntimeError(f"only {len(values)} of {n} ranks started{what()}")
        time.sleep(0.01)


def cannot_run(slurm: bool = False) -> Optional[str]:
    """Why namespace clusters (and, with ``slurm``, Slurm clusters) cannot run here, or None."""
    from tests.harness.conftest_netns import netns_unavailable_reason

    reason = netns_unavailable_reason()
    if reason is None and slurm:
        from tests.harness.slurm_cluster import slurm_unavailable_reason

        reason = slurm_unavailable_reason()
    return reason


def exit_if_cannot_run(slurm: bool = False) -> None:
    """Print why and exit 2 when :func:`cannot_run` names a reason."""
    reason = cannot_run(slurm)
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        sys.exit(2)


def job_events(job: str) -> List[Dict[str, Any]]:
    """A job dir's ``events.jsonl`` as read now (empty before it exists)."""
    return _jsonl(os.path.join(job, "events.jsonl"))


def step_times(job: str, attempt: int, rank: int = 0) -> List[float]:
    """When ``rank`` logged each step of ``attempt`` (``metrics.jsonl``'s step records), in order."""
    recs = _jsonl(os.path.join(job, "metrics.jsonl"))
    return sorted(
        r["time"] for r in recs if r.get("kind") == "step" and r.get("rank") == rank and r.get("attempt") == attempt
    )


def step_rate(times: List[float]) -> Optional[float]:
    """Steps per second over ``times`` (None with fewer than 3)."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) >= 3 and times[-1] > times[0] else None


def wait_until(cond: Callable[[], Any], within: float, what: str) -> Any:
    """``cond()``'s first true value within ``within`` seconds; else exit with one line naming ``what``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise SystemExit(f"{os.path.basename(sys.argv[0])}: not within {within:g} s: {what}")


def _jsonl(path: str) -> List[Dict[str, Any]]:
    try:
        with open(path) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except OSError:
        return []
