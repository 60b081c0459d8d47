"""The numbers a running job exposes to Prometheus: pure, from the records the job already writes.

A :class:`JobModel` folds the job's ``events.jsonl`` records (the supervisor's events) and its
``metrics.jsonl`` records (the ranks' progress, :mod:`launcher.logs.progress`) into a
:class:`JobSample` at a given time.  No I/O, no clock, no Prometheus library: the exporter
(:mod:`launcher.logs.promexport`) reads the files, asks for a sample and turns it into metric
families.

What each number means:

- ``state``: ``starting`` before the job's first event, ``running`` from ``job_start``, then the
  ``job_end`` status (:class:`~launcher.planning.job.kinds.JobStatus`).
- ``attempt``: the attempt running or last run (0, then 1.. after restarts: ``started`` and
  ``restart`` events).
- ``restarts``: ``restart`` events.
- ``failures``: failed attempts by the kind of their root cause (:data:`launcher.logs.causes.KINDS`):
  each ``restart`` event's cause, and the ``job_end`` cause of a job that ended failed or hung;
  an attempt whose cause is not known counts as ``unknown``.
- ``ranks_running``: ranks (not the scheduler) of the current attempt started and not yet exited.
- ``hosts_excluded``: hosts left out, by ``--preflight exclude`` or by restarts (``host_excluded``).
- ``ckpt_failures``: checkpoints a rank reported it could not write while the job trained on
  (``ckpt_failed``): no restart, so nothing else shows them.
- per rank, the current attempt's newest step record (:class:`launcher.logs.progress.Progress`):
  step, loss, samples per second, step time, the time of its last step line and the seconds since,
  and whether it is a straggler: named by the straggler watch (a ``straggler`` event not cleared
  since: docs/long-jobs.md), or its step time above ``straggler_ratio`` times the median of the ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Set, Tuple

from launcher.logs.progress import STRAGGLER_RATIO, Progress
from launcher.planning.job.kinds import EventKind, JobStatus
from launcher.planning.median import median as median_of

__all__ = ["JobIdentity", "JobModel", "JobSample", "RankSample", "STATES", "UNKNOWN_CAUSE"]

#: The values of the ``state`` label: ``starting`` and the job's statuses a run can be in or end with.
STATES: Tuple[str, ...] = (
    "starting",
    JobStatus.RUNNING.value,
    JobStatus.SUCCEEDED.value,
    JobStatus.FAILED.value,
    JobStatus.HUNG.value,
    JobStatus.TIMEOUT.value,
    JobStatus.STOPPED.value,
    JobStatus.PREEMPTED.value,
)
UNKNOWN_CAUSE = "unknown"


@dataclass(frozen=True)
class JobIdentity:
    """What names the job (``mslaunch_job_info``'s labels) and what it plans.

    Attributes:
        job_id: the job's id.
        backend: ``--launcher`` (``local``, ``ssh``, ``mpirun``, ``slurm``, ...).
        script: the program's file name (or module), without its arguments.
        ranks_planned: the ranks this mslaunch runs: the world size, or in per-node mode its node's.
        node_rank: per-node mode's ``--node_rank`` (None otherwise).
    """

    job_id: str
    backend: str
    script: str
    ranks_planned: int
    node_rank: Optional[int] = None


@dataclass(frozen=True)
class RankSample:
    """One rank's numbers (None: not known yet)."""

    rank: int
    step: Optional[int]
    loss: Optional[float]
    samples_per_s: Optional[float]
    step_seconds: Optional[float]
    last_step_time: Optional[float]
    seconds_since_step: Optional[float]
    straggler: bool


@dataclass(frozen=True)
class JobSample:
    """The job at one moment."""

    identity: JobIdentity
    time: float
    state: str
    started: Optional[float]
    attempt: int
    restarts: int
    failures: Mapping[str, int]
    ranks_running: int
    hosts_excluded: int
    ranks: Tuple[RankSample, ...] = field(default_factory=tuple)
    ckpt_failures: int = 0

    @property
    def samples_per_s(self) -> Optional[float]:
        """The ranks' samples per second together (None when no rank says)."""
        rates = [r.samples_per_s for r in self.ranks if r.samples_per_s is not None]
        return sum(rates) if rates else None


def _cause_kind(data: Any) -> str:
    """The kind of a root cause's JSON (``restart``'s ``cause``), else ``unknown``."""
    if isinstance(data, Mapping):
        inner = data.get("cause")
        if isinstance(inner, Mapping) and isinstance(inner.get("kind"), str) and inner["kind"]:
            return str(inner["kind"])
    return UNKNOWN_CAUSE


class JobModel:
    """The job's numbers, fed its records in the order they were written.

    Args:
        identity: the job.
        causes: the cause kinds every failure counter starts with (at 0), so each series exists
            before its first failure.
        straggler_ratio: a rank's step time above this times the median makes it a straggler.
    """

    def __init__(
        self, identity: JobIdentity, causes: Tuple[str, ...] = (), straggler_ratio: float = STRAGGLER_RATIO
    ) -> None:
        self.identity = identity
        self.straggler_ratio = straggler_ratio
        self.progress = Progress()
        self.state = "starting"
        self.started: Optional[float] = None
        self.attempt = 0
        self.restarts = 0
        self.failures: Dict[str, int] = {kind: 0 for kind in causes}
        self.ckpt_failures = 0
        self._running: Dict[int, Set[int]] = {}  # attempt -> ranks started and not exited
        self._excluded: Set[str] = set()
        self._named: Set[Tuple[int, int]] = set()  # (attempt, rank) the straggler watch names now

    def add_event(self, rec: Mapping[str, Any]) -> None:
        """Take one ``events.jsonl`` record (unknown or malformed ones are ignored)."""
        kind = rec.get("kind")
        if kind == EventKind.JOB_START:
            self.state = JobStatus.RUNNING.value
            self.started = _number(rec.get("time"))
        elif kind == EventKind.STARTED:
            attempt, rank = rec.get("attempt"), rec.get("rank")
            if isinstance(attempt, int):
                self.attempt = max(self.attempt, attempt)
                if isinstance(rank, int):
                    self._running.setdefault(attempt, set()).add(rank)
        elif kind == EventKind.EXITED:
            attempt, rank = rec.get("attempt"), rec.get("rank")
            if isinstance(attempt, int) and isinstance(rank, int):
                self._running.get(attempt, set()).discard(rank)
        elif kind == EventKind.RESTART:
            self.restarts += 1
            self._fail(_cause_kind(rec.get("cause")))
            if isinstance(rec.get("attempt"), int):
                self.attempt = max(self.attempt, rec["attempt"])
        elif kind == EventKind.STRAGGLER and isinstance(rec.get("rank"), int):
            attempt = rec.get("attempt")
            key = (attempt if isinstance(attempt, int) else self.attempt, int(rec["rank"]))
            if rec.get("cleared"):
                self._named.discard(key)
            else:
                self._named.add(key)
        elif kind == EventKind.CKPT_FAILED:
            self.ckpt_failures += 1
        elif kind == EventKind.HOST_EXCLUDED and isinstance(rec.get("host"), str):
            self._excluded.add(rec["host"])
        elif kind == EventKind.PREFLIGHT and isinstance(rec.get("excluded"), list):
            self._excluded.update(e["host"] for e in rec["excluded"] if isinstance(e, Mapping) and "host" in e)
        elif kind == EventKind.JOB_END and isinstance(rec.get("status"), str):
            self.state = rec["status"]
            self._running.clear()
            if rec["status"] in (JobStatus.FAILED, JobStatus.HUNG):
                cause = rec.get("cause")
                self._fail(cause if isinstance(cause, str) and cause else UNKNOWN_CAUSE)

    def _fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1

    def add_metric(self, rec: Mapping[str, Any]) -> None:
        """Take one ``metrics.jsonl`` record."""
        self.progress.add(dict(rec))

    def sample(self, now: float) -> JobSample:
        """The numbers at wall-clock time ``now`` (s)."""
        ranks = {r: st for r, st in self.progress.ranks.items() if st.attempt == self.attempt}
        times = {r: st.step_time_ms for r, st in ranks.items() if st.step_time_ms}
        median = median_of(times.values()) if len(times) >= 2 else None
        rows = []
        for rank in sorted(ranks):
            st = ranks[rank]
            step = st.global_step if st.global_step is not None else st.step
            last = st.time if st.steps_seen else None
            rows.append(
                RankSample(
                    rank=rank,
                    step=step,
                    loss=st.loss,
                    samples_per_s=st.samples_per_s,
                    step_seconds=None if st.step_time_ms is None else st.step_time_ms / 1000.0,
                    last_step_time=last,
                    seconds_since_step=None if last is None else max(0.0, now - last),
                    straggler=(self.attempt, rank) in self._named
                    or bool(median and rank in times and times[rank] > self.straggler_ratio * median),
                )
            )
        return JobSample(
            identity=self.identity,
            time=now,
            state=self.state,
            started=self.started,
            attempt=self.attempt,
            restarts=self.restarts,
            failures=dict(self.failures),
            ranks_running=len(self._running.get(self.attempt, ())),
            hosts_excluded=len(self._excluded),
            ranks=tuple(rows),
            ckpt_failures=self.ckpt_failures,
        )


def _number(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
