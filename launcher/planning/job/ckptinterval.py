"""The checkpoint interval a job's own figures call for (pure): Young's and Daly's formula.

A checkpoint costs the job ``C`` seconds each time it is written; a fault costs it the steps since
the last one.  With faults ``M`` seconds apart on average, the interval that loses the least is
about ``sqrt(2 C M)`` (Young, 1974); Daly's first-order refinement (2006) takes the write itself off,
``sqrt(2 C M) - C``, and checkpoints every ``M`` when a write costs half of ``M`` or more.

mslaunch measures both figures on the job itself: ``C`` from the ``ckpt_ms`` the ranks report
(``MSLAUNCH_METRIC {"ckpt_ms": ...}``; the reference trainer does after every save), ``M`` as the
job's wall time so far over the faults it met (failed or hung attempts; planned restarts are not
faults).  From the first restart after a fault on, every process gets the interval in seconds as
``MSLAUNCH_CKPT_INTERVAL`` (:data:`ENV_VAR`) and, when the ranks' step time is known, in steps as
``MSLAUNCH_CKPT_INTERVAL_STEPS`` (:data:`STEPS_VAR`: the same number on every rank, so data-parallel
ranks save at the same steps): the reference trainer's ``--ckpt-every auto`` takes the steps; any
script can read either.  Before a fault, or without a reported checkpoint cost, nothing is offered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["ENV_VAR", "STEPS_VAR", "Advice", "advise", "daly_interval"]

ENV_VAR = "MSLAUNCH_CKPT_INTERVAL"
STEPS_VAR = "MSLAUNCH_CKPT_INTERVAL_STEPS"

#: The shortest interval offered, in seconds (a write that costs nothing would give 0).
MIN_SECONDS = 1.0


def daly_interval(cost: float, mtbf: float) -> float:
    """Seconds between checkpoints for a write of ``cost`` seconds and faults ``mtbf`` seconds
    apart: ``sqrt(2 cost mtbf) - cost``, or ``mtbf`` when ``cost >= mtbf / 2`` (Daly's first order).

    Raises:
        ValueError: ``cost`` is negative or ``mtbf`` is not positive.
    """
    if not (cost >= 0 and mtbf > 0):
        raise ValueError(f"need a checkpoint cost >= 0 and a time between faults > 0 (got {cost}, {mtbf})")
    if cost >= mtbf / 2:
        return mtbf
    return math.sqrt(2.0 * cost * mtbf) - cost


@dataclass(frozen=True)
class Advice:
    """The interval offered and the figures it comes from (seconds; ``faults`` met so far;
    ``steps``: the interval in steps of ``step_seconds``, when the step time is known)."""

    seconds: float
    ckpt_seconds: float
    mtbf_seconds: float
    faults: int
    step_seconds: Optional[float] = None

    @property
    def steps(self) -> Optional[int]:
        """The interval in whole steps (at least 1), or None without a step time."""
        if self.step_seconds is None or not self.step_seconds > 0:
            return None
        return max(1, int(round(self.seconds / self.step_seconds)))

    def env(self) -> Dict[str, str]:
        """The variables every process gets."""
        out = {ENV_VAR: self.env_value()}
        if self.steps is not None:
            out[STEPS_VAR] = str(self.steps)
        return out

    def env_value(self) -> str:
        """``MSLAUNCH_CKPT_INTERVAL``'s value: whole seconds, at least 1."""
        return str(max(1, int(round(self.seconds))))

    def describe(self) -> str:
        """``checkpoint interval 40 s offered (MSLAUNCH_CKPT_INTERVAL: ...)`` for the console."""
        steps = f" = {self.steps} steps" if self.steps is not None else ""
        return (
            f"checkpoint interval {self.env_value()} s{steps} offered ({ENV_VAR}: Young/Daly from a "
            f"{self.ckpt_seconds:.2g} s checkpoint and {_span(self.mtbf_seconds)} between faults, "
            f"{self.faults} so far)"
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "ckpt_seconds": round(self.ckpt_seconds, 3),
            "mtbf_seconds": round(self.mtbf_seconds, 3),
            "faults": self.faults,
            "steps": self.steps,
        }


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def advise(
    ckpt_seconds: Optional[float], faults: int, elapsed: float, step_seconds: Optional[float] = None
) -> Optional[Advice]:
    """The interval for a job that ran ``elapsed`` seconds, met ``faults`` faults and reported
    checkpoints of ``ckpt_seconds`` (None: not reported) and steps of ``step_seconds`` (None: not
    known); None when the checkpoint cost or a fault is missing."""
    if ckpt_seconds is None or not math.isfinite(ckpt_seconds) or ckpt_seconds < 0:
        return None
    if faults < 1 or not (elapsed > 0 and math.isfinite(elapsed)):
        return None
    mtbf = elapsed / faults
    step = step_seconds if step_seconds is not None and math.isfinite(step_seconds) and step_seconds > 0 else None
    return Advice(max(MIN_SECONDS, daly_interval(ckpt_seconds, mtbf)), ckpt_seconds, mtbf, faults, step)
