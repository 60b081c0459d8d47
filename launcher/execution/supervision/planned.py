"""Planned restarts: mslaunch ends a healthy attempt itself to restart on other hosts at once.

Two things ask for one (docs/spare-hosts.md):

* ``--straggler replace``: a rank named a straggler (:mod:`launcher.execution.supervision.stragglerwatch`)
  whose host can be left out (a spare is left, or ``--min-hosts`` lets the job go on smaller):
  its host is left out of the next attempt and never taken back in this job;
* ``--grow-at-checkpoint``: a job running smaller than planned (``--min-hosts``) whose left-out
  host answers again after its cooldown (:class:`GrowWatch`, a thread that probes them): the job
  grows back now instead of at the next fault.

The attempt takes the request once a second (:meth:`PlannedRestarts.take`), says so (the event
``planned_restart``), writes ``planned`` into the ranks' ``MSLAUNCH_STOPPING_FILE`` and tears
down: a rank that saves on SIGTERM (the reference trainer: :mod:`launcher.workloads.preempt`)
writes a checkpoint at its next step's end, which every rank reaches together in data parallel,
so the next attempt resumes with no step lost (a script that does not loses the steps since its
last checkpoint; the trainer ends at once when its last step is saved already, rather than wait for
a slow host's step).  The attempt ends ``planned``; the supervisor restarts at once, and a planned
restart does not count against ``--max-restarts``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from launcher.planning.job.spec import Exclusion, Plan

__all__ = ["GrowWatch", "PlannedRequest", "PlannedRestarts"]


@dataclass(frozen=True)
class PlannedRequest:
    """Why the attempt ends (one line), and the hosts to leave out with their reasons."""

    reason: str
    leave_out: Tuple[Tuple[str, str], ...] = ()


class PlannedRestarts:
    """The job's pending planned restart (thread-safe: the grow watch asks from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Optional[PlannedRequest] = None
        self.attempt = 0

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` starts: an older request is dropped (it was taken or is moot)."""
        with self._lock:
            self.attempt, self._pending = attempt, None

    def request(self, req: PlannedRequest) -> bool:
        """Ask for a planned restart of the running attempt; False when one is pending already."""
        with self._lock:
            if self._pending is not None:
                return False
            self._pending = req
            return True

    def take(self) -> Optional[PlannedRequest]:
        """The pending request, once."""
        with self._lock:
            req, self._pending = self._pending, None
            return req


class GrowWatch:
    """``--grow-at-checkpoint``: every ``every`` s, while the running plan is smaller than planned,
    probes the left-out hosts whose cooldown is over (``candidates``) and asks for a planned
    restart when one answers.

    Args:
        plan: the running plan (the supervisor's, read each round).
        candidates: the hosts of its exclusions that may come back now (cooldown over, not slow).
        reachable: the probe (its ssh port accepts).
        planned: where to ask.
        every: seconds between rounds.
        ready: whether the running attempt may be restarted now (it trained a step: a restart
            before its first step would save nothing and only cost its start).
    """

    def __init__(
        self,
        plan: Callable[[], Plan],
        candidates: Callable[[Sequence[Exclusion]], Sequence[str]],
        reachable: Callable[[str], bool],
        planned: PlannedRestarts,
        every: float = 2.0,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.ready = ready
        self.plan, self.candidates, self.reachable, self.planned, self.every = (
            plan,
            candidates,
            reachable,
            planned,
            every,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mslaunch-grow", daemon=True)

    def start(self) -> "GrowWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)

    def round(self) -> Optional[str]:
        """One round: the host that answered (a restart was asked for), or None."""
        plan = self.plan()
        if plan.world_size >= plan.planned_size or not self.ready():
            return None
        for host in self.candidates(plan.excluded):
            if self._stop.is_set():
                return None
            if self.reachable(host):
                reason = f"{host} answers again: growing back to {plan.planned_size} ranks"
                return host if self.planned.request(PlannedRequest(reason)) else None
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.round()
            except Exception:  # watching must never end a job
                pass
