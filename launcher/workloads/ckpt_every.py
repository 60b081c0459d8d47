"""``--ckpt-every N | auto[:N]``: how often the reference trainer checkpoints (stdlib only).

``N`` saves every N global steps (0: at epoch ends only).  ``auto`` takes the interval mslaunch
offers from the job's own figures (``MSLAUNCH_CKPT_INTERVAL_STEPS``: Young's and Daly's formula
on the measured checkpoint cost and time between faults, see docs/long-jobs.md), the same number
on every rank, so data-parallel ranks save at the same steps.  Until mslaunch offers one (the
first attempt, or a job without a fault yet), ``auto:N`` saves every N steps, and ``auto`` works
the interval out itself (:class:`Schedule`): the same formula on its own figures, with the time
trained so far standing for the time between faults (no fault in that time: the mean is at
least about that long), so it saves often at first and less as the job runs without a fault.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Deque, Mapping, Optional, Sequence, Tuple

__all__ = ["OFFER_STEPS_VAR", "Schedule", "ckpt_every_steps", "parse_ckpt_every", "schedule_for"]

#: What mslaunch offers (launcher.planning.job.ckptinterval.STEPS_VAR; a test keeps them equal).
OFFER_STEPS_VAR = "MSLAUNCH_CKPT_INTERVAL_STEPS"
#: A rank's figures are the median of its last this many steps and checkpoint writes.
WINDOW = 5


def parse_ckpt_every(text: str) -> str:
    """``text`` when it is ``N`` (>= 0), ``auto`` or ``auto:N``; else ValueError naming the forms."""
    body = text.strip()
    number = body[5:] if body.startswith("auto:") else ("0" if body == "auto" else body)
    if not number.isdecimal():
        raise ValueError(f"--ckpt-every takes N (steps, >= 0), auto or auto:N, got {text!r}")
    return body


def ckpt_every_steps(spec: str, environ: Mapping[str, str]) -> int:
    """The steps between checkpoints for ``spec`` (a value :func:`parse_ckpt_every` took): N; for
    ``auto[:N]`` the steps mslaunch offers in ``environ``, else N (0 for ``auto``: see
    :func:`schedule_for`, which works that interval out)."""
    if not spec.startswith("auto"):
        return int(spec)
    offered = environ.get(OFFER_STEPS_VAR, "").strip()
    if offered.isdecimal() and int(offered) >= 1:
        return int(offered)
    return int(spec[5:]) if spec.startswith("auto:") else 0


def schedule_for(spec: str, environ: Mapping[str, str]) -> "Schedule":
    """The trainer's schedule for ``spec``: every :func:`ckpt_every_steps` steps, or for ``auto``
    with nothing offered, measured (:class:`Schedule`)."""
    steps = ckpt_every_steps(spec, environ)
    return Schedule(steps, measured=spec == "auto" and steps == 0)


def daly_steps(ckpt_s: float, step_s: float, steps_done: int) -> int:
    """Steps to the next checkpoint for a write of ``ckpt_s`` seconds, steps of ``step_s`` seconds
    and ``steps_done`` steps trained without a fault so far: Daly's ``sqrt(2 C M) - C`` (``M``
    when ``C >= M / 2``), with ``M`` the time those steps took; at least 1."""
    mtbf = max(steps_done, 1) * step_s
    seconds = mtbf if ckpt_s >= mtbf / 2 else math.sqrt(2.0 * ckpt_s * mtbf) - ckpt_s
    return max(1, int(seconds // step_s))


class Schedule:
    """At which global steps the trainer checkpoints (besides epoch ends).

    Fixed: every ``every`` steps (0: never).  Measured (``auto`` before an offer): the next save
    follows :func:`daly_steps` on figures every rank agrees on.  At each save, every rank gives
    :meth:`mine` (its median write and step times) to one AllGather, and :meth:`agree` takes the
    whole table, the same on every rank: the slowest rank's figures set the next step, so every
    rank saves at the same steps (a save is collective: see launcher.workloads.checkpoints).  Until
    a table has every rank's figures, the next step is the next one.
    """

    def __init__(self, every: int, measured: bool = False) -> None:
        self.every = every
        self.measured = measured
        self.next_step: Optional[int] = None  # measured: the next save (None: the next step)
        self._steps: Deque[float] = deque(maxlen=WINDOW)
        self._saves: Deque[float] = deque(maxlen=WINDOW)

    def due(self, global_step: int) -> bool:
        """Whether to save after ``global_step`` (the same answer on every rank)."""
        if not self.measured:
            return bool(self.every) and global_step % self.every == 0
        return self.next_step is None or global_step >= self.next_step

    def step_took(self, seconds: float) -> None:
        """A trained step's time (not the step that compiled)."""
        self._steps.append(seconds)

    def save_took(self, seconds: float) -> None:
        """A checkpoint write's time, on this rank."""
        self._saves.append(seconds)

    def mine(self) -> Tuple[float, float]:
        """This rank's (write, step) seconds: medians of the last :data:`WINDOW`; -1 when none yet."""
        write = statistics.median(self._saves) if self._saves else -1.0
        step = statistics.median(self._steps) if self._steps else -1.0
        return write, step

    def agree(self, everyone: Sequence[Tuple[float, float]], global_step: int) -> None:
        """Every rank's :meth:`mine`, as gathered at the save after ``global_step``: the next save."""
        if not self.measured:
            return
        if not everyone or any(not (w >= 0 and s > 0) for w, s in everyone):
            self.next_step = global_step + 1
            return
        write = max(w for w, _ in everyone)
        step = max(s for _, s in everyone)
        self.next_step = global_step + daly_steps(write, step, global_step)
