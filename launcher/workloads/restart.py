"""What a workload learns from mslaunch's restarts: ``MSLAUNCH_ATTEMPT`` (0 in the first attempt,
k in the k-th restart) and ``MSLAUNCH_MAX_RESTARTS``.  Stdlib only.

The reference trainer resumes by itself from the newest common checkpoint when it is a restart
(``MSLAUNCH_ATTEMPT`` >= 1) and has ``--ckpt-dir``: no ``--resume`` needed.  A first attempt still
needs ``--resume`` to pick up an older run's checkpoints.
"""

from __future__ import annotations

from typing import Mapping, Optional

__all__ = ["attempt", "resume_on_restart"]


def attempt(env: Mapping[str, str]) -> int:
    """``MSLAUNCH_ATTEMPT`` as a number (0 when unset or not a number)."""
    text = env.get("MSLAUNCH_ATTEMPT", "").strip()
    return int(text) if text.isdigit() else 0


def resume_on_restart(resume: bool, ckpt_dir: Optional[str], env: Mapping[str, str]) -> bool:
    """Whether to resume: ``--resume``, or a restart attempt with a checkpoint folder."""
    return resume or (bool(ckpt_dir) and attempt(env) >= 1)
