"""Per-rank training progress: records for ``metrics.jsonl`` and the snapshot ``top`` shows.

Pure (no I/O, no clock): times are passed in.

``metrics.jsonl`` (in the job dir, one JSON object a line, appended as log lines arrive)::

    {"rank": 0, "attempt": 0, "time": 1700000000.12, "kind": "step", "source": "lossmonitor",
     "epoch": 1, "step": 7, "global_step": 7, "loss": 2.18, "step_time_ms": 540.2,
     "samples_per_s": 59.2}

``kind``/``source`` as in :class:`launcher.logs.metrics.Metric`; keys without a value are left
out.  ``time`` is when mslaunch read the line (wall clock, s).  ``global_step`` counts steps over the
whole run (from the epoch and the step within it).  ``step_time_ms`` is the printed one, else the
time between the arrivals of step lines; ``samples_per_s`` the printed one, else
``batch_size * 1000 / step_time_ms`` when the batch size is known (also for ``TimeMonitor``'s
per-epoch step time).  A NaN/Inf loss is a record
with ``"event": "nonfinite_loss"`` and ``loss_text``.

A counter of samples (``"unit": "samples"``: PyTorch's MNIST line ``Train Epoch: 1 [640/60000
(1%)]``, see :mod:`launcher.logs.grammar`) keeps its numbers: ``step`` is the sample position
within the epoch, ``global_step`` the samples seen over the run (``(epoch - 1) * N + n``, so
ordering and progress hold), ``total_steps`` the run's samples when the epochs are known; its
``samples_per_s`` is the rate of that position (no ``step_time_ms``: a step's size is unknown).

A step counted within an epoch only by guess (a ``text`` line with an epoch and a step keyword)
is taken as counted over the run once a new epoch's first step continues the previous epoch's
instead of starting again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, List, Optional, Sequence, Tuple

from launcher.logs.metrics import Metric
from launcher.planning.job.kinds import JobStatus
from launcher.planning.median import median as median_of

__all__ = ["RankDeriver", "Progress", "RankRow", "Snapshot", "snapshot", "STRAGGLER_RATIO", "SILENT_AFTER"]

#: A rank whose step time exceeds this many times the median of all ranks is a straggler.
STRAGGLER_RATIO = 1.3
#: A running rank with no output for this many seconds is silent.
SILENT_AFTER = 60.0

_WINDOW_S = 5.0  # derived step times span at least this much history when there is that much


class RankDeriver:
    """Turns one rank's metrics (as they arrive) into ``metrics.jsonl`` records.

    Args:
        rank: the rank.
        attempt: the attempt (0, then 1.. after restarts).
    """

    def __init__(self, rank: int, attempt: int = 0) -> None:
        self.rank = rank
        self.attempt = attempt
        self.batch_size: Optional[int] = None
        self.steps_per_epoch: Optional[int] = None
        self.epochs: Optional[int] = None
        self.total_steps: Optional[int] = None
        self._offset = 0
        self._last_epoch: Optional[int] = None
        self._last_step_in_epoch = 0
        self._zero_epoch = False
        self._zero_step = False
        self._run_counter = False  # a text line's step turned out to count over the run
        self._history: Deque[Tuple[float, int]] = deque(maxlen=64)  # (arrival time, global step) per batch

    def feed(self, metrics: Sequence[Metric], when: float) -> List[Dict[str, Any]]:
        """Records for the metrics of one rank's lines that arrived together at ``when``."""
        records: List[Dict[str, Any]] = []
        last_global: Optional[int] = None
        for m in metrics:
            if m.batch_size is not None:
                self.batch_size = m.batch_size
            if m.steps_per_epoch is not None:
                self.steps_per_epoch = m.steps_per_epoch
            if m.epochs is not None:
                self.epochs = m.epochs
            if m.total_steps is not None:
                self.total_steps = m.total_steps
            rec: Dict[str, Any] = {
                "rank": self.rank,
                "attempt": self.attempt,
                "time": round(when, 3),
                "kind": m.kind,
                "source": m.source,
            }
            for key in (
                "epoch",
                "step",
                "loss",
                "loss_text",
                "step_time_ms",
                "samples_per_s",
                "batch_size",
                "event",
                "unit",
                "ckpt_ms",
                "ckpt_failed",
            ):
                value = getattr(m, key)
                if value is not None:
                    rec[key] = value
            if m.eval:
                rec["eval"] = dict(m.eval)
            g = self._global_step(m)
            if g is not None:
                rec["global_step"] = g
                last_global = g
            total = self.total()
            if total is not None:
                rec["total_steps"] = total
            records.append(rec)
        # Step times the lines did not print: the rate of steps over the last arrivals.
        derived: Optional[float] = None
        if last_global is not None:
            derived = self._derive(last_global, when)
        for rec in records:
            if rec.get("unit") == "samples":
                if "global_step" in rec and "samples_per_s" not in rec and derived:
                    rec["samples_per_s"] = round(1000.0 / derived, 3)
                continue
            if rec["kind"] == "step" and "global_step" in rec and "step_time_ms" not in rec and derived is not None:
                rec["step_time_ms"] = round(derived, 3)
            if (
                rec["kind"] in ("step", "epoch")
                and "samples_per_s" not in rec
                and self.batch_size
                and rec.get("step_time_ms")
            ):
                rec["samples_per_s"] = round(self.batch_size * 1000.0 / rec["step_time_ms"], 3)
        return records

    def total(self) -> Optional[int]:
        """Steps of the whole run, when known."""
        if self.total_steps is not None:
            return self.total_steps
        if self.epochs is not None and self.steps_per_epoch is not None:
            return self.epochs * self.steps_per_epoch
        return None

    def _global_step(self, m: Metric) -> Optional[int]:
        """Steps over the whole run, counted from 1.  Epochs and steps may count from 0 (MindSpore's
        tutorials print ``epoch: 0, step: 0``): a 0 seen once marks the rank's count as 0-based."""
        if m.step is None:
            return None
        samples = m.unit == "samples"  # a position: 0 is the start, not a 0-based count
        if m.epoch == 0:
            self._zero_epoch = True
        if m.step == 0 and not samples:
            self._zero_step = True
        step = m.step + (1 if self._zero_step and not samples else 0)
        if not m.step_in_epoch or m.epoch is None or self._run_counter:
            return step
        epoch = m.epoch + (1 if self._zero_epoch else 0)
        if self.steps_per_epoch:
            return (epoch - 1) * self.steps_per_epoch + step
        if (
            m.source == "text"
            and self._last_epoch is not None
            and epoch > self._last_epoch
            and step > self._last_step_in_epoch
        ):  # a new epoch did not start the count again
            self._run_counter = True
            return step
        if self._last_epoch is not None and epoch > self._last_epoch:
            self._offset += self._last_step_in_epoch
            self._last_step_in_epoch = 0
        self._last_epoch = epoch if self._last_epoch is None else max(self._last_epoch, epoch)
        self._last_step_in_epoch = max(self._last_step_in_epoch, step)
        return self._offset + step

    def _derive(self, g: int, when: float) -> Optional[float]:
        hist = self._history
        if hist and hist[-1][0] == when:
            hist.pop()
        base: Optional[Tuple[float, int]] = None
        for t, step in reversed(hist):  # newest first: stop once the window spans _WINDOW_S
            if step < g and t < when:
                base = (t, step)
                if when - t >= _WINDOW_S:
                    break
        hist.append((when, g))
        if base is None:
            return None
        return (when - base[0]) * 1000.0 / (g - base[1])


@dataclass
class RankState:
    """What is known of one rank from its records (the newest values)."""

    rank: int
    attempt: int = 0
    time: Optional[float] = None
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    total_steps: Optional[int] = None
    loss: Optional[float] = None
    step_time_ms: Optional[float] = None
    samples_per_s: Optional[float] = None
    eval: Dict[str, float] = field(default_factory=dict)
    events: List[Dict[str, Any]] = field(default_factory=list)
    steps_seen: int = 0
    unit: Optional[str] = None


class Progress:
    """The newest state of every rank, from ``metrics.jsonl`` records (in order)."""

    def __init__(self) -> None:
        self.ranks: Dict[int, RankState] = {}

    def add(self, rec: Dict[str, Any]) -> None:
        """Take one record (malformed ones are ignored)."""
        rank = rec.get("rank")
        if not isinstance(rank, int):
            return
        st = self.ranks.get(rank)
        attempt = rec.get("attempt", 0) if isinstance(rec.get("attempt"), int) else 0
        if st is None or attempt > st.attempt:
            st = self.ranks[rank] = RankState(rank, attempt)
        elif attempt < st.attempt:
            return  # an older attempt's line read late
        if isinstance(rec.get("time"), (int, float)):
            st.time = float(rec["time"])
        for key in ("epoch", "step", "global_step", "total_steps"):
            if isinstance(rec.get(key), int):
                setattr(st, key, rec[key])
        for key in ("loss", "step_time_ms", "samples_per_s"):
            if isinstance(rec.get(key), (int, float)):
                setattr(st, key, float(rec[key]))
        if rec.get("kind") == "step" and isinstance(rec.get("global_step"), int):
            st.unit = rec["unit"] if isinstance(rec.get("unit"), str) else None
        if isinstance(rec.get("eval"), dict):
            st.eval.update({k: v for k, v in rec["eval"].items() if isinstance(v, (int, float))})
        if rec.get("event"):
            st.events.append(rec)
            if rec.get("event") == "nonfinite_loss":
                st.loss = float("nan")
        if rec.get("kind") == "step" and isinstance(rec.get("global_step"), int):
            st.steps_seen += 1

    def extend(self, records: Iterable[Dict[str, Any]]) -> None:
        for rec in records:
            self.add(rec)


@dataclass(frozen=True)
class RankRow:
    """One row of ``mslaunch top``."""

    rank: int
    host: str
    state: str
    epoch: Optional[int]
    step: Optional[int]
    total_steps: Optional[int]
    loss: Optional[float]
    step_time_ms: Optional[float]
    samples_per_s: Optional[float]
    last_output_age: Optional[float]
    straggler: bool
    silent: bool
    nonfinite_loss: bool
    unit: Optional[str] = None  # what ``step`` counts when not steps: ``samples``

    def to_json(self) -> Dict[str, Any]:
        loss = self.loss
        return {
            "rank": self.rank,
            "host": self.host,
            "state": self.state,
            "epoch": self.epoch,
            "step": self.step,
            "total_steps": self.total_steps,
            "loss": None if loss is None or loss != loss else loss,
            "step_time_ms": self.step_time_ms,
            "samples_per_s": self.samples_per_s,
            "last_output_age": None if self.last_output_age is None else round(self.last_output_age, 3),
            "straggler": self.straggler,
            "silent": self.silent,
            "nonfinite_loss": self.nonfinite_loss,
            "unit": self.unit or "steps",
        }


@dataclass(frozen=True)
class Snapshot:
    """What ``mslaunch top`` shows at one moment (``--json`` prints :meth:`to_json`)."""

    job_id: str
    state: str
    time: float
    rows: Tuple[RankRow, ...]
    samples_per_s: Optional[float]
    slowest_rank: Optional[int]
    fastest_rank: Optional[int]
    median_step_time_ms: Optional[float]
    eta_s: Optional[float]
    stragglers: Tuple[int, ...]
    silent: Tuple[int, ...]

    def to_json(self) -> Dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "time": self.time,
            "ranks": [r.to_json() for r in self.rows],
            "totals": {
                "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
                "slowest_rank": self.slowest_rank,
                "fastest_rank": self.fastest_rank,
                "median_step_time_ms": None if self.median_step_time_ms is None else round(self.median_step_time_ms, 3),
                "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
                "stragglers": list(self.stragglers),
                "silent": list(self.silent),
            },
        }


def snapshot(
    job_id: str,
    job_state: str,
    now: float,
    world_size: int,
    hosts: Dict[int, str],
    progress: Progress,
    last_output: Dict[int, Optional[float]],
    exits: Optional[Dict[int, Dict[str, Any]]] = None,
    straggler_ratio: float = STRAGGLER_RATIO,
    silent_after: float = SILENT_AFTER,
) -> Snapshot:
    """The table ``mslaunch top`` shows.

    Args:
        job_id: the job's id.
        job_state: ``running``, ``succeeded``, ``failed``, ``stopped``, ``timeout`` or ``lost``.
        now: the current wall-clock time (s).
        world_size: number of ranks (rows 0..world_size-1).
        hosts: rank -> host.
        progress: the ranks' metrics.
        last_output: rank -> time of the rank's last output (its log's mtime), None if no log yet.
        exits: rank -> the rank's entry of ``summary.json`` ``processes`` once the job ended.
        straggler_ratio: step time above this times the median flags a straggler (needs 2+ ranks
            with step times).
        silent_after: a running rank with no output for this many seconds is silent.

    Returns:
        The snapshot; states are ``waiting`` (no output yet), ``running``, ``silent``, ``done``,
        ``failed``, ``stopped`` or ``lost``.
    """
    exits = exits or {}
    times = {r: st.step_time_ms for r, st in progress.ranks.items() if st.step_time_ms and r < world_size}
    median = median_of(times.values()) if times else None
    stragglers = tuple(
        sorted(r for r, t in times.items() if len(times) >= 2 and median and t > straggler_ratio * median)
    )
    rows: List[RankRow] = []
    silent: List[int] = []
    for rank in range(world_size):
        st = progress.ranks.get(rank) or RankState(rank)
        out = last_output.get(rank)
        age = None if out is None else max(0.0, now - out)
        state, is_silent = _rank_state(exits.get(rank), job_state, out is not None, age, silent_after)
        if is_silent:
            silent.append(rank)
        rows.append(
            RankRow(
                rank=rank,
                host=hosts.get(rank, "?"),
                state=state,
                epoch=st.epoch,
                step=st.global_step if st.global_step is not None else st.step,
                total_steps=st.total_steps,
                loss=st.loss,
                step_time_ms=st.step_time_ms,
                samples_per_s=st.samples_per_s,
                last_output_age=age,
                straggler=rank in stragglers,
                silent=is_silent,
                nonfinite_loss=any(e.get("event") == "nonfinite_loss" for e in st.events),
                unit=st.unit,
            )
        )
    rates = [r.samples_per_s for r in rows if r.samples_per_s is not None]
    slowest, fastest = _spread(times)
    eta = _eta(rows) if job_state == JobStatus.RUNNING else None
    return Snapshot(
        job_id=job_id,
        state=job_state,
        time=now,
        rows=tuple(rows),
        samples_per_s=sum(rates) if rates else None,
        slowest_rank=slowest,
        fastest_rank=fastest,
        median_step_time_ms=median,
        eta_s=eta,
        stragglers=stragglers,
        silent=tuple(silent),
    )


def _spread(times: Dict[int, float]) -> Tuple[Optional[int], Optional[int]]:
    """``(slowest rank, fastest rank)`` by step time, or ``(None, None)`` when there is no spread:
    fewer than two ranks with step times, or all of them equal at the precision shown (whole ms)."""
    if len(times) < 2:
        return None, None
    slowest = max(times, key=lambda r: (times[r], -r))
    fastest = min(times, key=lambda r: (times[r], r))
    if round(times[slowest]) <= round(times[fastest]):
        return None, None
    return slowest, fastest


def _rank_state(
    exit_: Optional[Dict[str, Any]], job_state: str, has_output: bool, age: Optional[float], silent_after: float
) -> Tuple[str, bool]:
    """One rank's ``(state, silent)`` for :func:`snapshot`.

    Args:
        exit_: the rank's entry of ``summary.json`` ``processes``, None while it has none.
        job_state: the job's state.
        has_output: the rank has written output (its log exists).
        age: seconds since its last output, None without output.
        silent_after: a running rank quiet for longer is silent.
    """
    if exit_ is not None:
        if exit_.get("exit_code") == 0 and not exit_.get("signal"):
            return "done", False
        if exit_.get("torn_down"):
            return "stopped", False
        if exit_.get("exit_code") is None and exit_.get("signal") is None:
            return ("stopped" if job_state != JobStatus.RUNNING else "running"), False
        return "failed", False
    if job_state == JobStatus.RUNNING:
        if not has_output:
            return "waiting", False
        if age is not None and age > silent_after:
            return "silent", True
        return "running", False
    if job_state == JobStatus.LOST:
        return "lost", False
    return ("done" if job_state == JobStatus.SUCCEEDED else "stopped"), False


def _eta(rows: List[RankRow]) -> Optional[float]:
    """Seconds until the slowest running rank finishes its step budget, None when unknown (a counter
    of samples: its samples left at its samples/s)."""
    left: List[float] = []
    for r in rows:
        if r.total_steps is None or r.step is None or r.state not in ("running", "silent"):
            continue
        if r.unit == "samples":
            if r.samples_per_s:
                left.append((r.total_steps - r.step) / r.samples_per_s)
        elif r.step_time_ms:
            left.append((r.total_steps - r.step) * r.step_time_ms / 1000.0)
    return max(0.0, max(left)) if left else None
