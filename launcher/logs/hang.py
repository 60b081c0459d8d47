"""Hang detection from the ranks' log lines: pure (times are passed in), fed by the metric follower.

``--hang-timeout auto|auto:FLOOR|SECONDS|off`` and ``--first-step-timeout SECONDS`` (:class:`HangPolicy`).

Progress is a new step on any rank (:attr:`launcher.logs.metrics.Metric.progress` of its lines);
for a rank whose log has shown no step yet, any new line of it.  State machine of one attempt
(:meth:`HangTracker.begin` starts it)::

    auto:  waiting --(a rank logged a step)--> armed --(no progress for the limit)--> hung
           limit = max(60 s, 5 x the longest interval between two steps of a rank seen in the job)
           (auto:FLOOR: FLOOR s instead of 60 s)
           armed by the ranks that log steps: scripts often print only on rank 0; a rank that has
           logged no step is judged by its output lines (as SECONDS does), so one that keeps
           printing holds the verdict off while it prints, and one that printed nothing adds nothing
           a job that never logs a step is never armed (not watched)
    SECONDS: armed from the start (each rank from its first line), limit SECONDS
           --(no progress for the limit)--> hung
    off:   never hung (but see --first-step-timeout)
    --first-step-timeout S (any mode): hung when no rank logged a step S s after the start
    --stopped-timeout S (any mode; 5 s by default, ``off``): hung when a rank's own process has
           been stopped by a signal (state T: SIGSTOP, ^Z) for S s: it neither exits nor prints,
           and without this only a collective's timeout (about 30 s on MindSpore's CPU ring)
           or the limit above would end it; the supervisor asks the process handles

The tracker is fed from the follower's thread and asked from the supervisor's: a lock guards it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from launcher.errors import PlanError

__all__ = [
    "AUTO_FACTOR",
    "AUTO_FLOOR",
    "STOPPED_LIMIT",
    "HangPolicy",
    "HangTracker",
    "HangVerdict",
    "RankWatch",
    "step_text",
]

#: ``--stopped-timeout``'s default: seconds a rank's process may stay stopped by a signal.
STOPPED_LIMIT = 5.0
#: ``auto``: the limit is at least this many seconds ...
AUTO_FLOOR = 60.0
#: ... and this many times the longest interval between two steps seen so far.
AUTO_FACTOR = 5.0

Progress = Tuple[Optional[int], int]


def _seconds(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PlanError(f"{flag} {text!r}: expected auto, off or a number of seconds", field=flag) from None
    if not value > 0 or value != value or value == float("inf"):
        raise PlanError(f"{flag} {text!r}: must be a positive number of seconds", field=flag)
    return value


@dataclass(frozen=True)
class HangPolicy:
    """When an attempt counts as hung.

    Attributes:
        mode: ``auto``, ``fixed`` (an explicit number of seconds) or ``off``.
        seconds: the fixed limit (``fixed`` only).
        first_step: ``--first-step-timeout``: seconds from the start to the first step, or None.
        floor: ``auto``'s least limit (``--hang-timeout auto:SECONDS``; 60 s by default).
        stopped: ``--stopped-timeout``: seconds a rank's process may stay stopped by a signal, or
            None (off).
    """

    mode: str = "auto"
    seconds: Optional[float] = None
    first_step: Optional[float] = None
    floor: float = AUTO_FLOOR
    stopped: Optional[float] = STOPPED_LIMIT

    @classmethod
    def parse(
        cls, text: Optional[str], first_step: Optional[str] = None, stopped: Optional[str] = None
    ) -> "HangPolicy":
        """From the flags' texts (``--hang-timeout auto|auto:FLOOR|SECONDS|off``,
        ``--first-step-timeout SECONDS|off``, ``--stopped-timeout SECONDS|off``).

        ``auto:FLOOR`` is ``auto`` with FLOOR seconds as its least limit instead of 60 s (jobs whose
        steps take well under a second can be watched more tightly).

        Raises:
            PlanError: not auto/off/a positive number.
        """
        from dataclasses import replace

        first = None
        if first_step is not None and first_step.strip().lower() not in ("off", "none", ""):
            first = _seconds(first_step.strip(), "--first-step-timeout")
        halt: Optional[float] = STOPPED_LIMIT
        if stopped is not None:
            word = stopped.strip().lower()
            halt = None if word in ("off", "none", "0") else _seconds(word, "--stopped-timeout")
        return replace(cls._parse(text, first), stopped=halt)

    @classmethod
    def _parse(cls, text: Optional[str], first: Optional[float]) -> "HangPolicy":
        word = (text or "auto").strip().lower()
        if word == "auto":
            return cls("auto", None, first)
        if word.startswith("auto:"):
            try:
                floor = _seconds(word[len("auto:") :].strip(), "--hang-timeout")
            except PlanError:
                raise PlanError(
                    f"--hang-timeout {text!r}: auto:FLOOR takes a positive number of seconds (e.g. auto:20)",
                    field="--hang-timeout",
                ) from None
            return cls("auto", None, first, floor)
        if word in ("off", "none", "0"):
            return cls("off", None, first)
        return cls("fixed", _seconds(word, "--hang-timeout"), first)

    @property
    def watching(self) -> bool:
        """Lines are watched (a limit or a first-step limit); see :attr:`stopped` for stopped ranks."""
        return self.mode != "off" or self.first_step is not None

    def describe(self) -> str:
        if self.mode == "auto":
            text = "auto" if self.floor == AUTO_FLOOR else f"auto (floor {self.floor:g} s)"
        elif self.mode == "off":
            text = "off"
        else:
            text = f"{self.seconds:g} s"
        text += f", first step within {self.first_step:g} s" if self.first_step is not None else ""
        if self.stopped != STOPPED_LIMIT:
            text += ", stopped ranks not watched" if self.stopped is None else f", stopped for {self.stopped:g} s"
        return text


@dataclass
class RankWatch:
    """What the tracker knows of one rank in the current attempt (monotonic times)."""

    rank: int
    last_step: Optional[Progress] = None
    last_step_at: Optional[float] = None
    last_output_at: Optional[float] = None
    steps: int = 0
    longest: float = 0.0  # longest interval between two of its steps (this attempt)

    def to_json(self, now: float) -> Dict[str, object]:
        return {
            "rank": self.rank,
            "last_step": step_text(self.last_step),
            "last_step_age_s": None if self.last_step_at is None else round(now - self.last_step_at, 1),
            "last_output_age_s": None if self.last_output_at is None else round(now - self.last_output_at, 1),
        }


@dataclass(frozen=True)
class HangVerdict:
    """Why the attempt is hung: the limit, how it was derived, and when progress was last seen."""

    limit: float
    derived: str
    idle: float  # seconds without progress when judged (stopped: seconds the rank was stopped)
    stopped_rank: Optional[int] = None  # a rank's process stopped by a signal for the limit

    def to_json(self) -> Dict[str, object]:
        out: Dict[str, object] = {
            "limit_s": round(self.limit, 1),
            "derived": self.derived,
            "idle_s": round(self.idle, 1),
        }
        if self.stopped_rank is not None:
            out["stopped_rank"] = self.stopped_rank
        return out


def step_text(progress: Optional[Progress]) -> Optional[str]:
    """``epoch 1 step 40`` / ``step 12`` / None."""
    if progress is None:
        return None
    epoch, step = progress
    return f"step {step}" if epoch is None else f"epoch {epoch} step {step}"


class HangTracker:
    """Judges hangs of one job's attempts from their lines (see the module doc).

    Args:
        policy: the flags.
    """

    def __init__(self, policy: HangPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._attempt: Optional[int] = None
        self._began = 0.0
        self._ranks: Dict[int, RankWatch] = {}
        self._longest = 0.0  # over the whole job (every attempt)
        self._longest_where = ""

    def begin(self, attempt: int, ranks: Iterable[int], now: float) -> None:
        """A new attempt starts now with these ranks; older attempts' lines are ignored from here on."""
        with self._lock:
            self._attempt = attempt
            self._began = now
            self._ranks = {r: RankWatch(r) for r in ranks}

    def feed(self, attempt: int, rank: int, progress: Optional[Progress], now: float) -> None:
        """One line of ``rank`` in ``attempt`` arrived at ``now``; ``progress`` is its step, if any."""
        with self._lock:
            if attempt != self._attempt:
                return
            w = self._ranks.get(rank)
            if w is None:
                w = self._ranks[rank] = RankWatch(rank)
            w.last_output_at = now
            if progress is None or progress == w.last_step:
                return
            if w.last_step_at is not None:
                gap = now - w.last_step_at
                w.longest = max(w.longest, gap)
                if gap > self._longest:
                    self._longest = gap
                    self._longest_where = f"rank {rank}, {step_text(w.last_step)} -> {step_text(progress)}"
            w.last_step, w.last_step_at = progress, now
            w.steps += 1

    def ranks(self) -> List[RankWatch]:
        """A copy of every rank's state, ranks ascending."""
        with self._lock:
            return [RankWatch(**vars(w)) for _, w in sorted(self._ranks.items())]

    def limit(self) -> Tuple[Optional[float], str]:
        """The limit in force now and how it was derived (None: not watching yet)."""
        with self._lock:
            return self._limit()

    def _limit(self) -> Tuple[Optional[float], str]:
        p = self.policy
        if p.mode == "fixed":
            assert p.seconds is not None
            return p.seconds, f"--hang-timeout {p.seconds:g} s"
        if p.mode == "auto":
            if not any(w.steps for w in self._ranks.values()):
                return None, "auto: not armed until a rank logs a step"
            quiet = sum(1 for w in self._ranks.values() if not w.steps)
            others = (
                f"; {quiet} of {len(self._ranks)} ranks log no steps (judged by their output lines)" if quiet else ""
            )
            scaled = AUTO_FACTOR * self._longest
            if scaled > p.floor:
                return (
                    scaled,
                    f"auto: {AUTO_FACTOR:g} x the longest step interval {self._longest:.1f} s "
                    f"({self._longest_where}){others}",
                )
            longest = f"{self._longest:.1f} s" if self._longest else "none yet"
            return (
                p.floor,
                f"auto: the {p.floor:g} s floor ({AUTO_FACTOR:g} x the longest step interval, {longest}, is "
                f"less){others}",
            )
        return None, "off"

    def _last_progress(self) -> Optional[float]:
        """Monotonic time of the last progress of any rank: its newest step, or for a rank without
        steps its newest line; None while no rank printed a line (a rank is watched from its first
        line: importing and compiling may print nothing)."""
        times: List[float] = []
        for w in self._ranks.values():
            if w.steps and w.last_step_at is not None:
                times.append(w.last_step_at)
            elif w.last_output_at is not None:
                times.append(w.last_output_at)
        return max(times) if times else None

    def due(self, now: float) -> Optional[HangVerdict]:
        """The verdict when the attempt is hung at ``now``, else None."""
        with self._lock:
            if self._attempt is None:
                return None
            p = self.policy
            stepped = any(w.steps for w in self._ranks.values())
            if p.first_step is not None and not stepped and now - self._began > p.first_step:
                return HangVerdict(
                    p.first_step, f"--first-step-timeout {p.first_step:g} s: no rank logged a step", now - self._began
                )
            limit, derived = self._limit()
            if limit is None:
                return None
            last = self._last_progress()
            if last is None:
                return None
            idle = now - last
            return HangVerdict(limit, derived, idle) if idle > limit else None
