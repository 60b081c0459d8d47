"""The supervisor's straggler watch (``--straggler``): samples every running rank's scheduler
figures every few seconds and names a rank that waits for a CPU far more than the others (the rule
is :mod:`launcher.planning.health.stragglers`).

Wiring: :func:`launcher.execution.runner.make_supervisor` gives one :class:`StragglerWatch` to the
job's hang watch (:attr:`HangWatch.stragglers <launcher.execution.supervision.hangwatch.HangWatch>`),
which the attempt asks about once a second while it waits (:meth:`look`); each rank's figures
come from its handle (:meth:`ProcessHandle.sched_figures
<launcher.execution.process.handle.ProcessHandle.sched_figures>`: ``/proc`` for a rank on this
machine, the host agent's heartbeats over ssh).  A rank named (or cleared) is an event
(``straggler``: ``events.jsonl``, the console, ``status``); every rank named in the job is in
``summary.json``'s ``stragglers`` (:meth:`summary`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from launcher.execution.process.handle import ProcessHandle
from launcher.planning.health.stragglers import Sample, StragglerJudge, StragglerPolicy, StragglerVerdict
from launcher.planning.job import events
from launcher.planning.job.events import OnEvent

__all__ = ["StragglerWatch"]


class StragglerWatch:
    """One job's straggler watch (called from the supervisor's thread only).

    Args:
        policy: ``--straggler``.
        emit: the job's events.
        clock: the monotonic clock (when a look is due; a verdict's ``since`` is epoch seconds).
    """

    def __init__(
        self,
        policy: StragglerPolicy,
        emit: OnEvent,
        clock: Callable[[], float] = time.monotonic,
        on_named: Optional[Callable[[str, str], bool]] = None,
    ) -> None:
        self.policy = policy
        self.emit = emit
        self.on_named = on_named  # --straggler replace: (host, evidence) -> whether a planned restart leaves it out
        self._clock = clock
        self.judge = StragglerJudge(policy)
        self.attempt = 0
        self._next = 0.0
        self.named: List[Dict[str, Any]] = []  # every rank named in the job, in order (summary.json)
        self.cpu_s = 0.0  # the watch's own CPU seconds (sampling and judging)
        self.looks = 0

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` starts: its ranks are judged afresh."""
        self.attempt = attempt
        self.judge = StragglerJudge(self.policy)
        self._next = self._clock() + self.policy.every

    def look(self, handles: Sequence[ProcessHandle], exits: Dict[int, Any]) -> None:
        """Sample and judge when a look is due (every :attr:`StragglerPolicy.every` s); never raises."""
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.policy.every
        started = time.thread_time()
        try:
            self._look(handles, exits)
        except Exception:  # watching must never end a job
            pass
        self.cpu_s += time.thread_time() - started
        self.looks += 1

    def _look(self, handles: Sequence[ProcessHandle], exits: Dict[int, Any]) -> None:
        samples: Dict[int, Sample] = {}
        hosts: Dict[int, str] = {}
        for idx, h in enumerate(handles):
            if idx in exits:
                continue
            try:
                figures = h.rank_figures()  # one rank, or every rank of an mpirun or srun step
            except Exception:  # one handle's look failing leaves the others judged
                continue
            for rank, (host, figs) in figures.items():
                samples[rank] = Sample(*figs)
                hosts[rank] = host
        update = self.judge.feed(samples, hosts, time.time())
        for v in update.named:
            self.named.append(dict(v.to_json(), attempt=self.attempt, since=round(v.since, 3)))
            self._emit(v, cleared=False)
            if self.on_named is not None and self.on_named(v.host, v.evidence):
                self.named[-1]["replaced"] = True
        for v in update.cleared:
            for row in self.named:
                if row["rank"] == v.rank and row["attempt"] == self.attempt and "cleared" not in row:
                    row["cleared"] = round(time.time(), 3)
            self._emit(v, cleared=True)

    def _emit(self, v: StragglerVerdict, cleared: bool) -> None:
        self.emit(events.Straggler(v.rank, v.host, v.evidence, round(v.since, 3), self.attempt, cleared, v.kind))

    def summary(self) -> Dict[str, Any]:
        """``summary.json``'s ``stragglers`` (when any: every rank named in the job: rank, host,
        share, the others' shares, evidence, attempt, since, cleared when it recovered) and
        ``straggler_watch`` (``looks``, ``cpu_s``: what watching cost the supervisor)."""
        out: Dict[str, Any] = {"straggler_watch": {"looks": self.looks, "cpu_s": round(self.cpu_s, 3)}}
        if self.named:
            out["stragglers"] = list(self.named)
        return out
