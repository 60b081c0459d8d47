"""``--ckpt-every N | auto[:N]``: how often the reference trainer checkpoints (stdlib only).

``N`` saves every N global steps (0: at epoch ends only).  ``auto`` takes the interval mslaunch
offers from the job's own figures (``MSLAUNCH_CKPT_INTERVAL_STEPS``: Young's and Daly's formula
on the measured checkpoint cost and time between faults, see docs/long-jobs.md), the same number
on every rank, so data-parallel ranks save at the same steps; until mslaunch offers one (the
first attempt, or a job without a fault yet), ``auto:N`` saves every N steps and ``auto`` at epoch
ends only.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["OFFER_STEPS_VAR", "ckpt_every_steps", "parse_ckpt_every"]

#: What mslaunch offers (launcher.planning.job.ckptinterval.STEPS_VAR; a test keeps them equal).
OFFER_STEPS_VAR = "MSLAUNCH_CKPT_INTERVAL_STEPS"


def parse_ckpt_every(text: str) -> str:
    """``text`` when it is ``N`` (>= 0), ``auto`` or ``auto:N``; else ValueError naming the forms."""
    body = text.strip()
    number = body[5:] if body.startswith("auto:") else ("0" if body == "auto" else body)
    if not number.isdecimal():
        raise ValueError(f"--ckpt-every takes N (steps, >= 0), auto or auto:N, got {text!r}")
    return body


def ckpt_every_steps(spec: str, environ: Mapping[str, str]) -> int:
    """The steps between checkpoints for ``spec`` (a value :func:`parse_ckpt_every` took): N; for
    ``auto[:N]`` the steps mslaunch offers in ``environ``, else N (0 for ``auto``)."""
    if not spec.startswith("auto"):
        return int(spec)
    offered = environ.get(OFFER_STEPS_VAR, "").strip()
    if offered.isdecimal() and int(offered) >= 1:
        return int(offered)
    return int(spec[5:]) if spec.startswith("auto:") else 0
