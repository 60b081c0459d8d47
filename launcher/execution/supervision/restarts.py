"""Restarts that resume, and crash loops that stop.

* Each process of attempt ``k`` gets ``MSLAUNCH_ATTEMPT=k`` (0 in the first attempt),
  ``MSLAUNCH_MAX_RESTARTS`` (this run's ``--max-restarts``) and ``MSLAUNCH_STOPPING_FILE`` (the
  attempt's ``stopping`` file: :func:`tell_stopping`) in its env (:func:`attempt_plan`);
  under ``mslaunch sbatch`` a requeued run continues the count: ``SLURM_RESTART_COUNT`` plus the
  run's own restarts (:func:`attempt_base`).  The attempt's folder stays ``attempt_<k>`` of the
  run, ``k`` counted within the run.
* :class:`AttemptProgress` follows the metric records (``metrics.jsonl``'s, as they are written):
  per attempt the first and the highest global step any rank logged.  Each attempt's result gets
  ``ended_because``, ``resumed_from_step`` (its first step - 1, when it did not start from
  scratch), ``best_step`` and ``steps_lost`` (the previous attempt's best step minus where this
  one resumed).
* Crash loop (:func:`crash_loop`): after a failed or hung attempt, when the last two attempts both
  got no further than the best step reached before them, the job stops restarting, with one line
  (``attempts 1 and 2 got no further than step 120: not restarting``).  An attempt marked
  ``replanned`` (a host left out) starts the count afresh.  Attempts that logged no step tell
  nothing: they never stop the restarts.
* Same unfixable cause (:func:`launcher.logs.causes.repeated_unfixable`): when the last two
  attempts of that window failed with the same cause a restart cannot fix (the same Python
  exception at the same place, the same missing module or file), the job stops restarting with one
  line (``attempts 0 and 1 failed the same way (missing_module: ...), which a restart cannot fix:
  not restarting``), whether or not they logged steps.  Host-bound causes (a lost host, a SIGKILL)
  keep counting against their host (:mod:`launcher.execution.supervision.hostfaults`).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from launcher.execution.results import FAILED, HUNG, SUCCEEDED, AttemptResult
from launcher.planning.job import layout
from launcher.planning.job.ckptinterval import ENV_VAR as CKPT_INTERVAL_VAR
from launcher.planning.job.ckptinterval import STEPS_VAR as CKPT_STEPS_VAR
from launcher.planning.job.ckptinterval import Advice
from launcher.planning.job.events import CheckpointFailed
from launcher.planning.job.spec import Plan, ProcPlan
from launcher.planning.median import median

__all__ = [
    "ATTEMPT_VAR",
    "MAX_RESTARTS_VAR",
    "STOPPING_VAR",
    "AttemptProgress",
    "attempt_base",
    "attempt_plan",
    "crash_loop",
    "faults",
    "with_ckpt_interval",
    "tell_stopping",
]

ATTEMPT_VAR = "MSLAUNCH_ATTEMPT"
MAX_RESTARTS_VAR = "MSLAUNCH_MAX_RESTARTS"
STOPPING_VAR = "MSLAUNCH_STOPPING_FILE"


#: How many of the job's latest checkpoints :meth:`AttemptProgress.ckpt_seconds` looks at.
CKPT_SAMPLES = 5
#: And of their latest step times, for :meth:`AttemptProgress.step_seconds`.
STEP_SAMPLES = 64


def with_ckpt_interval(plan: Plan, advice: Optional[Advice]) -> Plan:
    """``plan`` with ``MSLAUNCH_CKPT_INTERVAL`` (:mod:`launcher.planning.job.ckptinterval`) in every
    process's env, or without it when ``advice`` is None (pure)."""
    extra = tuple(advice.env().items()) if advice is not None else ()

    def offer(proc: ProcPlan) -> ProcPlan:
        kept = tuple(kv for kv in proc.env if kv[0] not in (CKPT_INTERVAL_VAR, CKPT_STEPS_VAR))
        return replace(proc, env=kept + extra)

    sched = offer(plan.scheduler) if plan.scheduler is not None else None
    return replace(plan, ranks=tuple(offer(p) for p in plan.ranks), scheduler=sched)


def faults(history: Sequence[AttemptResult]) -> int:
    """Attempts that ended by a fault (failed or hung; not planned, stopped or succeeded)."""
    return sum(1 for r in history if r.status in (FAILED, HUNG))


def attempt_base(launcher: str, environ: Mapping[str, str]) -> int:
    """The number of the run's first attempt: ``SLURM_RESTART_COUNT`` for a (requeued) Slurm run, else 0."""
    if launcher != "slurm":
        return 0
    text = environ.get("SLURM_RESTART_COUNT", "0").strip()
    return int(text) if text.isdigit() else 0


def _with_env(proc: ProcPlan, extra: Tuple[Tuple[str, str], ...]) -> ProcPlan:
    names = {k for k, _ in extra}
    return replace(proc, env=tuple((k, v) for k, v in proc.env if k not in names) + extra)


def attempt_plan(plan: Plan, attempt: int, max_restarts: int, base: int = 0, adir: Optional[str] = None) -> Plan:
    """``plan`` with ``MSLAUNCH_ATTEMPT`` / ``MSLAUNCH_MAX_RESTARTS`` (and, given the attempt's
    folder ``adir``, ``MSLAUNCH_STOPPING_FILE``) in every process's env (pure)."""
    extra: Tuple[Tuple[str, str], ...] = ((ATTEMPT_VAR, str(base + attempt)), (MAX_RESTARTS_VAR, str(max_restarts)))
    if adir is not None:
        extra += ((STOPPING_VAR, layout.stopping_file(adir)),)
    sched = _with_env(plan.scheduler, extra) if plan.scheduler is not None else None
    return replace(plan, ranks=tuple(_with_env(p, extra) for p in plan.ranks), scheduler=sched)


class AttemptProgress:
    """Per attempt: the first and the highest global step any rank logged (thread-safe).

    Args:
        flush: called before a judgement, to read what the ranks wrote last (the metrics writer's poll).
    """

    def __init__(self, flush: Optional[Callable[[], Any]] = None) -> None:
        self.flush = flush
        #: told of each ``ckpt_failed`` a rank reported (the supervisor's ``emit``: events.jsonl, console)
        self.on_event: Optional[Callable[[CheckpointFailed], None]] = None
        self._lock = threading.Lock()
        self._first: Dict[int, int] = {}
        self._best: Dict[int, int] = {}
        # each checkpoint's cost: its slowest rank's write (ckpt_ms), by (attempt, its number in the attempt)
        self._ckpt_ms: Dict[Tuple[Any, int], float] = {}
        self._writes: Dict[Tuple[Any, Any], int] = {}  # (attempt, rank) -> writes it reported
        self._step_ms: List[float] = []  # and the last step times

    def on_records(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Metric records as written to ``metrics.jsonl`` (``attempt``, ``global_step``)."""
        failed = []
        with self._lock:
            for rec in records:
                g, k, rank, why = rec.get("global_step"), rec.get("attempt"), rec.get("rank"), rec.get("ckpt_failed")
                if rec.get("event") == "ckpt_failed" and isinstance(rank, int) and isinstance(why, str):
                    failed.append(CheckpointFailed(rank, k if isinstance(k, int) else 0, why))
                if isinstance(g, int) and isinstance(k, int) and rec.get("kind") == "step":
                    self._first[k] = min(self._first.get(k, g), g)
                    self._best[k] = max(self._best.get(k, g), g)
                ms = rec.get("ckpt_ms")
                if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0:
                    self._add_write(k, rank, float(ms))
                ms = rec.get("step_time_ms")
                if rec.get("kind") == "step" and isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0:
                    self._step_ms = (self._step_ms + [float(ms)])[-STEP_SAMPLES:]
        tell = self.on_event
        if tell is not None:
            for event in failed:
                tell(event)

    def step_seconds(self) -> Optional[float]:
        """The median of the last :data:`STEP_SAMPLES` step times the ranks logged, in seconds."""
        with self._lock:
            return median(self._step_ms) / 1000.0 if self._step_ms else None

    def _add_write(self, attempt: Any, rank: Any, ms: float) -> None:
        """A rank's write: its n-th of the attempt belongs to the attempt's n-th checkpoint (the
        ranks save at the same steps), which costs the job its slowest rank's write."""
        n = self._writes.get((attempt, rank), 0)
        self._writes[(attempt, rank)] = n + 1
        key = (attempt, n)
        self._ckpt_ms[key] = max(ms, self._ckpt_ms.get(key, ms))
        while len(self._ckpt_ms) > CKPT_SAMPLES:
            del self._ckpt_ms[next(iter(self._ckpt_ms))]

    def ckpt_seconds(self) -> Optional[float]:
        """What a checkpoint costs the job, in seconds (None before any): the median over its last
        :data:`CKPT_SAMPLES` checkpoints of each one's slowest write (the job waits for its
        slowest rank), so one slow write (a host under a fault) does not set the interval for
        the rest of the job, and a rank that always writes slowly does."""
        with self._lock:
            return median(list(self._ckpt_ms.values())) / 1000.0 if self._ckpt_ms else None

    def best(self, attempt: int) -> Optional[int]:
        with self._lock:
            return self._best.get(attempt)

    def steps(self, attempt: int) -> int:
        """How many steps ``attempt``'s ranks logged so far (its first to its furthest)."""
        with self._lock:
            return self._best[attempt] - self._first[attempt] + 1 if attempt in self._best else 0

    def annotate(self, result: AttemptResult, previous: Sequence[AttemptResult]) -> AttemptResult:
        """``result`` with ``ended_because``, ``resumed_from_step``, ``best_step`` and ``steps_lost``."""
        if self.flush is not None:
            try:
                self.flush()
            except Exception:  # metrics are best effort
                pass
        with self._lock:
            first, best = self._first.get(result.attempt), self._best.get(result.attempt)
        before = previous[-1].best_step if previous else None
        return replace(
            result,
            ended_because=_why(result) if result.status != SUCCEEDED else result.ended_because,
            resumed_from_step=first - 1 if first is not None and first > 1 else result.resumed_from_step,
            best_step=best if best is not None else result.best_step,
            steps_lost=max(0, before - (first - 1)) if before is not None and first is not None else result.steps_lost,
        )


def _why(result: AttemptResult) -> str:
    if result.status == HUNG:
        hang = result.hang
        what = "a collective timed out" if hang is not None and hang.collective else "no progress"
        return f"hung: {what}" + (
            f", likely culprit rank {hang.culprit.rank}" if hang is not None and hang.culprit else ""
        )
    if result.root_cause is not None:
        rc = result.root_cause
        return f"{rc.name} on {rc.host}: {rc.reason}"
    return result.message or result.status


def wait_delay(seconds: float) -> None:
    """``--restart-delay``: wait before the next attempt (every process of the last one is gone by
    now); a stop signal cuts it short (the next attempt then ends as stopped at once)."""
    import time

    from launcher.execution import stopsignals

    end = time.monotonic() + seconds
    while time.monotonic() < end and stopsignals.first() is None:
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def tell_stopping(adir: str, status: str) -> None:
    """Before a teardown's SIGTERM: why the ranks are stopped, one word in the attempt's
    ``stopping`` file (``MSLAUNCH_STOPPING_FILE``): the attempt's status, ``failed`` or ``hung`` (a
    fault), ``stopped``, ``preempted``, ``timeout`` or ``planned``
    (:mod:`launcher.execution.supervision.planned`).  A rank that saves a checkpoint on SIGTERM
    skips it after a fault: the rank that failed has no checkpoint of that step, so no resume could
    load it (the reference trainer, :mod:`launcher.workloads.preempt`).  Best effort: never raises."""
    import os

    path = layout.stopping_file(adir)
    tmp = f"{path}.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{status}\n")
        os.replace(tmp, path)
    except OSError:
        pass


def crash_loop(history: Sequence[AttemptResult]) -> Optional[str]:
    """The one line that stops the restarts, or None (see the module doc)."""
    start = 0
    for i, a in enumerate(history):
        if a.replanned:
            start = i
    window = list(history[start:])
    from launcher.logs.causes import repeated_unfixable  # the cause rules: loaded once a job has failed

    same = repeated_unfixable([(a.attempt, a.root_cause.cause if a.root_cause is not None else None) for a in window])
    if same is not None:
        return same
    if len(window) < 3:
        return None
    before = [a.best_step for a in window[:-2]]
    known = [b for b in before if isinstance(b, int)]
    last_two: List[Optional[int]] = [a.best_step for a in window[-2:]]
    if not known or any(not isinstance(b, int) for b in last_two):
        return None
    best = max(known)
    if all(b is not None and b <= best for b in last_two):
        k1, k2 = window[-2].attempt, window[-1].attempt
        return f"attempts {k1} and {k2} got no further than step {best}: not restarting"
    return None
