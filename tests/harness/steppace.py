"""The machine's pace in a goodput run: how long the job's steps took before any fault.

ETTR divides the fault-free run's wall time by the faulty run's, and the two run one after the
other on a shared machine whose speed drifts (the same fault-free job took 643 s and 769 s within
the hour here).  The steps both runs train before the first fault are the same work in the same
conditions, so the ratio of their median step times says how much faster or slower the machine
was during the faulty run: :func:`pace_factor`.  ``bench/bench_goodput.py`` prints ETTR as
measured and at the faulty run's pace (the fault-free wall time scaled by that factor).
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Iterable, List, Optional

__all__ = ["step_times_ms", "pace_factor"]


def step_times_ms(job_dir: str, first: int, last: int) -> List[float]:
    """The step times (``step_time_ms`` of the ranks' step lines in ``metrics.jsonl``) of attempt
    0's global steps ``first``..``last``, every rank's."""
    out: List[float] = []
    try:
        with open(os.path.join(job_dir, "metrics.jsonl"), encoding="utf-8") as fh:
            lines: Iterable[str] = fh.readlines()
    except OSError:
        return out
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict) or r.get("kind") != "step" or r.get("attempt", 0) != 0:
            continue
        step, ms = r.get("global_step"), r.get("step_time_ms")
        if isinstance(step, int) and isinstance(ms, (int, float)) and first <= step <= last:
            out.append(float(ms))
    return out


def pace_factor(faulty_dir: str, free_dir: str, before_step: int, least: int = 3) -> Optional[float]:
    """The faulty run's median step time over the fault-free run's, over global steps 2 (the first
    step compiles) to ``before_step`` (the last step before the first fault); None with fewer than
    ``least`` steps in either run."""
    a = step_times_ms(faulty_dir, 2, before_step)
    b = step_times_ms(free_dir, 2, before_step)
    if len(a) < least or len(b) < least:
        return None
    return statistics.median(a) / statistics.median(b)
