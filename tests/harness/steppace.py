"""The machine's speed in a goodput run, and ETTR measured within the faulty run alone.

ETTR divides the fault-free run's wall time by the faulty run's, and the two run one after the
other on a shared machine whose speed drifts: here the same step of the same job took 2.3 s in
one stretch and 3.9 s in another of the same run (2026-11-29), and the same fault-free job 643 s
and 769 s within the hour.  So the bench prints beside ETTR each run's median step time (how
fast the machine was in each) and :func:`ettr_within`, which needs no second run.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Iterable, Optional, Sequence

__all__ = ["ettr_within", "median_step_ms"]


def median_step_ms(job_dir: str) -> Optional[float]:
    """The median step time (``step_time_ms`` of the ranks' step lines in ``metrics.jsonl``, every
    attempt and rank) of a job; None without any."""
    out = []
    try:
        with open(os.path.join(job_dir, "metrics.jsonl"), encoding="utf-8") as fh:
            lines: Iterable[str] = fh.readlines()
    except OSError:
        return None
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        ms = r.get("step_time_ms") if isinstance(r, dict) and r.get("kind") == "step" else None
        if isinstance(ms, (int, float)) and not isinstance(ms, bool):
            out.append(float(ms))
    return statistics.median(out) if out else None


def ettr_within(wall: float, lost: Sequence[Optional[float]]) -> float:
    """``1 - sum(lost) / wall``: the share of the faulty run's wall time not lost to its faults
    (each fault's cost measured from outside, :meth:`tests.harness.faultstream.Injected.net`;
    None counts 0).
    Its start-up counts as useful, as the fault-free run's does in ETTR; what it cannot see is a
    fault's cost in slower steps afterwards (a job gone smaller, a slow host before it is named)."""
    return 1.0 - sum(x or 0.0 for x in lost) / wall
