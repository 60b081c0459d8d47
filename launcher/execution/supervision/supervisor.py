"""The supervisor: a job's attempts, one after another, and what happens between them.

Each attempt is run by an :class:`~launcher.execution.supervision.attempt.AttemptRunner` (start,
watch, fail fast, tear down, judge: its state machine is in that module).  Between attempts the
supervisor decides whether to restart (``--max-restarts``, a stop signal, the crash-loop rule of
:mod:`launcher.execution.supervision.restarts`), and leaves out hosts that failed too often
(``--host-failures``): the next attempt runs a new plan on the spare hosts
(:mod:`launcher.execution.supervision.hostfaults`), or on fewer hosts (``--min-hosts``: the event
``resized``, and ``summary.json``'s ``resized``), and takes hosts back after their cooldown
(``--rejoin-after``).  Every event goes through :meth:`Supervisor.emit`
as one of the typed events of :mod:`launcher.planning.job.events`.

A backend that cannot be set up on a restart attempt (a host unreachable) fails that attempt
(recorded in its :class:`AttemptResult`); on the first attempt its error reaches the caller.
A watchdog process (see :mod:`launcher.execution.process.watchdog`) kills every process of the
job if mslaunch itself is killed.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set

from launcher.errors import MsLaunchError
from launcher.execution import stopsignals
from launcher.execution.backend import attempt_path
from launcher.execution.process.watchdog import Watchdog
from launcher.execution.results import FAILED, HUNG, PLANNED, STOPPED, AttemptResult, JobResult, job_result
from launcher.execution.settings import SuperviseOptions
from launcher.execution.stopsignals import Interrupted
from launcher.execution.supervision import restarts
from launcher.execution.supervision.attempt import AttemptRunner, BackendFactory
from launcher.planning.job import events, layout
from launcher.planning.job.ckptinterval import Advice, advise
from launcher.planning.job.events import Event, OnEvent
from launcher.planning.job.spec import Plan

if TYPE_CHECKING:
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.execution.supervision.hostfaults import Spares
    from launcher.execution.supervision.restarts import AttemptProgress

__all__ = ["BackendFactory", "Interrupted", "Supervisor", "SuperviseOptions", "Watchdog", "attempt_path"]


class Supervisor:
    """Runs a :class:`Plan` to completion and returns a :class:`JobResult`.

    Args:
        plan: the plan.
        backend_factory: makes the backend of an attempt (see :data:`BackendFactory`).
        options: supervision knobs.
        on_event: called with every event (:mod:`launcher.planning.job.events`: events.jsonl,
            then the console); see :meth:`emit`.
        prepare_attempt: called with the attempt dir before processes start (e.g. to create
            per-rank working dirs and env dumps).
        watchdog: the job's watchdog (local processes register with it themselves; reaped ones
            are forgotten after teardown), or None.
        attempt_dir: attempt number -> its log folder (default: job dir, then attempt_<k>/).
        reap_orphans: called after each teardown with the pids of the started processes; ends
            whatever else descends from mslaunch (see :func:`launcher.execution.local.backend.reap_orphans`).
        hang: the job's hang watch (:mod:`launcher.execution.supervision.hangwatch`), fed by the metrics writer:
            a hung attempt, or a worker whose collective timed out, ends as ``hung`` after its
            stacks are dumped.
        progress: the attempts' steps (:mod:`launcher.execution.supervision.restarts`): each attempt's result
            says where it resumed and the steps lost; a crash loop stops the restarts.
        attempt_base: ``MSLAUNCH_ATTEMPT`` of the first attempt (a requeued Slurm run continues the count).
        spares: re-plans a restart without the hosts that failed too often (``self.plan`` becomes
            the new plan; the event ``host_excluded`` per host); None: every attempt runs ``plan``.
    """

    def __init__(
        self,
        plan: Plan,
        backend_factory: BackendFactory,
        options: SuperviseOptions,
        on_event: Optional[OnEvent] = None,
        prepare_attempt: Optional[Callable[[int, str], None]] = None,
        watchdog: Optional[Watchdog] = None,
        attempt_dir: Optional[Callable[[int], str]] = None,
        reap_orphans: Optional[Callable[[Set[int]], Any]] = None,
        hang: Optional["HangWatch"] = None,
        progress: Optional["AttemptProgress"] = None,
        attempt_base: int = 0,
        spares: Optional["Spares"] = None,
    ) -> None:
        self.plan = plan
        self.backend_factory = backend_factory
        self.options = options
        self.on_event: OnEvent = on_event or (lambda event: None)
        self.prepare_attempt = prepare_attempt
        self.watchdog = watchdog
        self.attempt_dir = attempt_dir or (lambda k: layout.attempt_dir(plan.job_dir, k))
        self.current_attempt_dir, self.current_attempt = plan.job_dir, 0
        self.reap_orphans = reap_orphans
        self.hang = hang
        self.progress = progress
        self.attempt_base = attempt_base
        self.spares = spares
        self._replanned_at: Optional[int] = None  # the first attempt of the current plan, when re-planned
        self.resized: List[Dict[str, Any]] = []  # every change of the world size (summary.json's ``resized``)
        self.watchers: List[Any] = []  # threads watching the job while it runs (start(), stop()): the grow watch

    # ---------------------------------------------------------------- public

    def run(self) -> JobResult:
        """Run every attempt; a stop signal at any moment (even before this call, when recorded
        by :mod:`launcher.execution.stopsignals`) ends the job as ``stopped``.

        Raises:
            LaunchError: the first attempt's backend could not be set up (e.g. a host is
                unreachable) and no stop signal was received.
        """
        started = time.time()
        deadline = None if self.options.timeout is None else time.monotonic() + self.options.timeout
        history: List[AttemptResult] = []
        previous = stopsignals.install_for_run()
        for w in self.watchers:
            w.start()
        try:
            while True:
                result = self._attempt(len(history)).run(deadline)
                if self._replanned_at == len(history):  # the crash-loop count starts afresh here
                    result = replace(result, replanned=True)
                if self.progress is not None:
                    result = self.progress.annotate(result, history)
                history.append(result)
                if not self._restart_after(result, history):
                    return self._done(started, history)
                try:
                    moved = self._next_plan(result, len(history))
                except MsLaunchError as exc:  # not enough spare hosts: the job stops with that line
                    return self._stop_restarts(started, history, str(exc), alone=True)
                stop = None if moved else restarts.crash_loop(history)
                if stop is not None:
                    return self._stop_restarts(started, history, stop)
                advice = self._ckpt_advice(started, history)
                self.plan = restarts.with_ckpt_interval(self.plan, advice)
                self.emit(events.Restart(len(history), result.root_cause, self.attempt_base + len(history), advice))
                if result.status != PLANNED:  # a planned restart goes on at once
                    restarts.wait_delay(self.options.restart_delay)
        finally:
            for w in self.watchers:
                w.stop()
            stopsignals.restore_after_run(previous)

    def _ckpt_advice(self, started: float, history: List[AttemptResult]) -> Optional[Advice]:
        """The checkpoint interval for the next attempt (:mod:`launcher.planning.job.ckptinterval`):
        from the checkpoint cost the ranks reported and the job's faults over its wall time so far."""
        if self.progress is None:
            return None
        cost, step = self.progress.ckpt_seconds(), self.progress.step_seconds()
        return advise(cost, restarts.faults(history), time.time() - started, step)

    def _done(self, started: float, history: List[AttemptResult]) -> JobResult:
        sig = stopsignals.first()
        if history[-1].status == PLANNED and sig is not None:  # stopped during a planned restart: stopped
            history[-1] = replace(history[-1], status=STOPPED, exit_code=128 + sig)
        done = job_result(self.plan.job_id, self.plan.job_dir, started, history)
        extra = dict(done.extra)
        if self.plan.excluded:
            extra["excluded_hosts"] = [e.to_json() for e in self.plan.excluded]
        if self.resized:
            extra["resized"] = list(self.resized)
        return replace(done, extra=extra)

    def _stop_restarts(self, started: float, history: List[AttemptResult], stop: str, alone: bool = False) -> JobResult:
        """The job ends with restarts left; ``stop`` ends its message (``alone``: is all of it)."""
        self.emit(events.StopRestarts(stop))
        done = self._done(started, history)
        message = stop if alone or not done.message else f"{done.message}; {stop}"
        return replace(done, message=message, extra={**done.extra, "restarts_stopped": stop})

    def _next_plan(self, result: AttemptResult, attempt: int) -> bool:
        """Whether attempt ``attempt`` is re-planned without hosts that failed too often (each
        announced: ``host_excluded``); raises PlanError when the spares are too few."""
        nxt = self.spares.after(result, self.plan, attempt) if self.spares is not None else None
        if nxt is None:
            return False
        for e in nxt.rejoined:
            self.emit(events.HostRejoined(e.host, attempt, e.reason))
        for e in nxt.excluded:
            self.emit(events.HostExcluded(e, nxt.moves))
        old, new = self.plan, nxt.plan
        if new.world_size != old.world_size:
            if new.world_size < old.world_size:
                why = "; ".join(f"{e.host}: {e.reason}" for e in new.excluded) or "hosts left out"
            else:
                why = "back: " + ", ".join(e.host for e in nxt.rejoined)
            hosts = len({p.host for p in new.ranks})
            ev = events.Resized(attempt, new.world_size, old.world_size, new.planned_size, hosts, why)
            self.resized.append(ev.to_json())
            self.emit(ev)
        self.plan, self._replanned_at = new, attempt
        return True

    def _restart_after(self, result: AttemptResult, history: List[AttemptResult]) -> bool:
        """After a failed or hung attempt while restarts are left (planned restarts do not count
        against ``--max-restarts``), or a planned one; never after a stop signal."""
        if stopsignals.first() is not None:
            return False
        if result.status == PLANNED:
            return True
        used = sum(1 for a in history[:-1] if a.status != PLANNED)
        return result.status in (FAILED, HUNG) and used < self.options.max_restarts

    def _attempt(self, attempt: int) -> AttemptRunner:
        adir = self.attempt_dir(attempt)
        self.current_attempt_dir, self.current_attempt = adir, attempt
        return AttemptRunner(
            self.plan,
            attempt,
            adir,
            self.backend_factory,
            self.options,
            self.emit,
            self.prepare_attempt,
            self.watchdog,
            self.reap_orphans,
            self.hang,
            self.attempt_base,
        )

    def emit(self, event: Event) -> None:
        """Tell ``on_event`` of an event; a failure there (console output) never stops the job."""
        try:
            self.on_event(event)
        except Exception:
            pass
