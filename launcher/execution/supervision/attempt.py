"""One attempt of a job: start its processes, watch them, fail fast, tear down, judge.

The :class:`~launcher.execution.supervision.supervisor.Supervisor` runs one :class:`AttemptRunner`
per attempt (torch.distributed.elastic's split of the agent's restart loop from the process
context of one run); it drives the backend through :mod:`launcher.execution.backend` only.

An attempt is a state machine: its phases are
:class:`~launcher.execution.supervision.phases.AttemptPhase` (starting, running, finishing, hung,
tearing_down, done) and the moves allowed between them are the table
:data:`~launcher.execution.supervision.phases.TRANSITIONS`; the runner's
:class:`~launcher.execution.supervision.state.AttemptState` moves only through its ``transition()``.
The internal exceptions that cut an attempt short (``AttemptTimeout``, ``WatchEnded``, ``StartFailed``) each
name the phase they lead to (``leads_to``).

Waiting never busy-loops: one thread per process blocks in ``wait()`` and posts to a queue
(or the backend posts each exit itself, :meth:`ProcessHandle.notify_exit`: no thread per process);
the main thread blocks on that queue.  Signals to mslaunch become :class:`Interrupted`
exceptions, so ``finally`` blocks always tear down.  A backend that cannot be set up on a
restart fails that attempt; on the first attempt its error reaches the caller.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Set, Tuple

from launcher.errors import LaunchError
from launcher.execution import stopsignals
from launcher.execution.backend import Backend, StartRequest, attempt_path
from launcher.execution.process.handle import ProcessHandle
from launcher.execution.process.watchdog import Watchdog
from launcher.execution.results import (
    FAILED,
    HUNG,
    HUNG_EXIT,
    PLANNED,
    PREEMPTED,
    STOPPED,
    SUCCEEDED,
    TIMEOUT,
    TIMEOUT_EXIT,
    AttemptResult,
    ProcResult,
    RootCause,
    earliest_failure,
    exit_code_of,
    lost_nodes_note,
    tail_lines,
)
from launcher.execution.settings import SuperviseOptions
from launcher.execution.stopsignals import Interrupted
from launcher.execution.supervision import restarts
from launcher.execution.supervision.diagnose import HostRecorder, RootTail, judge_cause
from launcher.execution.supervision.outcome import AttemptTimeout, Outcome, StartFailed, WatchEnded
from launcher.execution.supervision.phases import AttemptPhase
from launcher.execution.supervision.state import AttemptState as _Attempt
from launcher.planning.job import events
from launcher.planning.job.events import OnEvent
from launcher.planning.job.kinds import Role, describe_returncode
from launcher.planning.job.spec import Plan

if TYPE_CHECKING:
    from launcher.execution.supervision.hangwatch import HangWatch

__all__ = ["COLLECTIVE_TAIL", "AttemptRunner", "BackendFactory", "Emit"]

#: Lines of a failed worker's log searched for a collective timeout: MindSpore's error line comes
#: before its traceback (and a forked rank's exit prints more), 60 lines missed it.
COLLECTIVE_TAIL = 400

#: Seconds teardown waits for exits after SIGKILL.
_KILL_WAIT = 5.0

#: Makes the backend of one attempt: ``(attempt, attempt_dir, plan) -> Backend`` (the attempt's
#: plan: a restart may run a re-planned one).
BackendFactory = Callable[[int, str, Plan], Backend]

#: Tells the job of an event (:mod:`launcher.planning.job.events`: events.jsonl, then the console); never raises.
Emit = OnEvent


class AttemptRunner:
    """Runs attempt ``attempt`` of a job in ``adir`` (see the module doc) and returns its result.

    Args:
        plan: the attempt's plan.
        attempt, adir: its number and log folder.
        backend_factory: makes its backend.
        options: supervision knobs.
        emit: the job's events (:data:`Emit`).
        prepare_attempt: called with ``(attempt, adir)`` before anything starts.
        watchdog: the job's watchdog (reaped local processes are forgotten after teardown), or None.
        reap_orphans: called after teardown with the pids of the started processes.
        hang: the job's hang watch, or None.
        attempt_base: ``MSLAUNCH_ATTEMPT`` of the job's first attempt.
    """

    def __init__(
        self,
        plan: Plan,
        attempt: int,
        adir: str,
        backend_factory: BackendFactory,
        options: SuperviseOptions,
        emit: Emit,
        prepare_attempt: Optional[Callable[[int, str], None]] = None,
        watchdog: Optional[Watchdog] = None,
        reap_orphans: Optional[Callable[[Set[int]], Any]] = None,
        hang: Optional["HangWatch"] = None,
        attempt_base: int = 0,
    ) -> None:
        self.plan, self.attempt, self.adir = plan, attempt, adir
        self.backend_factory = backend_factory
        self.options = options
        self.emit = emit
        self.prepare_attempt = prepare_attempt
        self.watchdog = watchdog
        self.reap_orphans = reap_orphans
        self.hang = hang
        self.attempt_base = attempt_base
        self.host_records = HostRecorder()
        self.state: Optional[_Attempt] = None  # the running attempt's bookkeeping (its phase), once run

    @property
    def phase(self) -> Optional[AttemptPhase]:
        """The attempt's current phase (None before :meth:`run`)."""
        return self.state.phase if self.state is not None else None

    def run(self, deadline: Optional[float]) -> AttemptResult:
        """Set up, start, watch, tear down and judge the attempt."""
        attempt, adir = self.attempt, self.adir
        started = time.time()
        state = self.state = _Attempt(on_event=self.emit, attempt=attempt)
        outcome = self._supervise(state, attempt, adir, deadline)
        results = state.results()
        if outcome.by_cluster:  # what died of the scheduler's signals did not fail by itself
            results = [
                replace(r, torn_down=True, reason=r.reason or outcome.message) if r.failed else r for r in results
            ]
        status, code, cause, message = self._judge(outcome, results, adir)
        return AttemptResult(
            attempt, adir, status, code, started, time.time(), tuple(results), cause, message, hang=outcome.hang,
            leave_out=outcome.leave_out,
        )  # fmt: skip

    def _supervise(self, state: _Attempt, attempt: int, adir: str, deadline: Optional[float]) -> Outcome:
        """Set up, start, watch and tear down one attempt; how it ended."""
        backend: Optional[Backend] = None
        outcome = Outcome(SUCCEEDED, 0)
        try:
            try:
                # Armed: a stop signal raises Interrupted at once (also one received earlier).
                stopsignals.arm(True)
                stopsignals.check()
                os.makedirs(adir, mode=0o700, exist_ok=True)
                if self.prepare_attempt is not None:
                    self.prepare_attempt(attempt, adir)
                backend = state.backend = self._create_backend(attempt, adir)
                if self.hang is not None:
                    self.hang.begin(attempt, [(p.rank, p.host) for p in self.plan.ranks if p.rank is not None])
                self._start_all(state, backend, adir, deadline, attempt)
                state.transition(AttemptPhase.RUNNING)
                outcome = self._watch(state, deadline)
            except Interrupted as exc:
                signum = exc.signum
                outside = None if signum == signal.SIGUSR1 else self._cluster_stop(state, 128 + signum)
                if outside is not None:  # e.g. scancel: Slurm signalled mslaunch
                    outcome = outside
                else:
                    status = PREEMPTED if signum == signal.SIGUSR1 else STOPPED
                    outcome = Outcome(status, 128 + signum, f"mslaunch received {signal.Signals(signum).name}")
                    self.emit(events.Interrupted(signum))
            except AttemptTimeout as exc:
                state.transition(exc.leads_to)
                outcome = Outcome(TIMEOUT, TIMEOUT_EXIT, f"the job ran past --timeout {self.options.timeout:g} s")
                self.emit(events.TimedOut(self.options.timeout))
            except WatchEnded as exc:
                state.transition(exc.leads_to)
                outcome = exc.outcome
            except StartFailed as exc:
                state.transition(exc.leads_to)
                outcome = self._cluster_stop(state, 128 + signal.SIGTERM) or Outcome(FAILED, exc.code, exc.message)
            finally:
                stopsignals.arm(False)  # from here on signals are only recorded: teardown runs to the end
                try:
                    if state.phase is not AttemptPhase.TEARING_DOWN:  # a success, a failure, a stop signal, an error
                        state.transition(AttemptPhase.TEARING_DOWN)
                finally:  # a refused move is a bug, but the processes are still ended
                    self._teardown(state, outcome.status)
                state.transition(AttemptPhase.DONE)
        finally:
            if backend is not None:
                backend.close()
        return outcome

    def _create_backend(self, attempt: int, adir: str) -> Backend:
        """The attempt's backend; a set-up failure on a restart fails that attempt only."""
        try:
            return self.backend_factory(attempt, adir, self.plan)
        except LaunchError as exc:
            stopsignals.check()  # set-up cut short by a stop signal: stopped, not failed
            if attempt == 0:
                raise
            raise StartFailed(f"attempt {attempt} could not start: {exc}", exc.exit_code) from None

    def _judge(
        self, outcome: Outcome, results: List[ProcResult], adir: str
    ) -> Tuple[str, int, Optional[RootCause], Optional[str]]:
        """Status, exit code, root cause (the earliest failure) and message of an attempt."""
        status, code, message = outcome.status, outcome.code, outcome.message
        cause = None
        if status == HUNG:
            from launcher.execution.supervision.hangwatch import culprit_cause

            return status, code, culprit_cause(outcome.hang, results), message
        failed = earliest_failure(results)
        if status == SUCCEEDED and failed is not None:
            status = FAILED
        if status != FAILED:
            return status, code, cause, message
        sched_tail: Tuple[str, ...] = ()
        if self.plan.scheduler is not None:
            sched_tail = tail_lines(attempt_path(self.plan.scheduler.log, self.plan.job_dir, adir), 200)
        if failed is not None:
            tail = RootTail.read(failed.log)
            records = self.host_records.records(failed.pid, failed.returncode)
            sched_host = self.plan.scheduler.host if self.plan.scheduler is not None else None
            cause = RootCause(failed, tail.shown(), judge_cause(failed, tail.lines, sched_tail, sched_host, records))
            code = failed.exit_code if failed.exit_code else 1
            if message is None:
                message = f"{failed.name} on {failed.host} failed: {failed.describe()}"
        note = lost_nodes_note(sched_tail)
        if note is not None:
            message = f"{message}; {note}" if message else note
        return status, code or 1, cause, message

    # ---------------------------------------------------------------- starting

    def _start_all(
        self, state: _Attempt, backend: Backend, adir: str, deadline: Optional[float], attempt: int = 0
    ) -> None:
        sched_idx: Optional[int] = None
        plan = restarts.attempt_plan(self.plan, attempt, self.options.max_restarts, self.attempt_base, adir)
        # A restart starts the workers right after the scheduler (they retry registering; its port is checked after)
        first = self.options.scheduler_first and attempt == 0
        for request in backend.requests(plan, adir):
            self._check_deadline(deadline)
            stopsignals.check()
            idx = self._start_one(state, backend, request)
            if self._is_scheduler(request):
                sched_idx = idx
                if first:
                    self._wait_scheduler(state, idx, deadline)
        if not first and sched_idx is not None:
            self._wait_scheduler(state, sched_idx, deadline)

    def _start_one(self, state: _Attempt, backend: Backend, request: StartRequest) -> int:
        proc = request.proc
        # Signals wait until the process is registered: nothing started can be forgotten.
        with stopsignals.blocked():
            try:
                handle = backend.start(proc, request.log_path, request.cwd)
            except LaunchError as exc:
                now = time.time()
                state.start_failure = ProcResult(
                    proc.name, proc.rank, proc.host, None, now, now, request.log_path, reason=str(exc)
                )
                raise StartFailed(str(exc), 1) from None
            idx = state.add(handle)
            self.host_records.started(handle.pid, local=handle.pgid is not None)  # reads a few files; never raises
        self.emit(events.Started(proc.name, proc.rank, proc.host, handle.pid, request.log_path, self.attempt))
        return idx

    def _is_scheduler(self, request: StartRequest) -> bool:
        return (
            request.proc.role == Role.SCHEDULER
            and self.plan.master_addr is not None
            and self.plan.master_port is not None
        )

    def _wait_scheduler(self, state: _Attempt, idx: int, deadline: Optional[float]) -> None:
        from launcher.execution.ports import wait_accepting

        handle = state.handles[idx]
        others = [h for i, h in enumerate(state.handles) if i != idx]  # workers already started (--no-sched-wait)
        limit = self.options.start_timeout
        if deadline is not None:
            limit = min(limit, max(0.0, deadline - time.monotonic()))
        addr, port = self.plan.master_addr, self.plan.master_port
        assert addr is not None and port is not None

        def a_worker_failed() -> bool:
            return any(h.poll() not in (None, 0) for h in others)

        ok = wait_accepting(addr, port, limit, alive=lambda: handle.poll() is None and not a_worker_failed())
        stopsignals.check()
        if ok or a_worker_failed():
            return  # a worker that failed meanwhile is judged by _watch at once (fail fast)
        self._check_deadline(deadline)
        rc = handle.poll()
        if rc is not None:
            state.record(idx, rc, time.time())
            raise StartFailed(
                f"the scheduler exited ({describe_returncode(rc)}) before its port {addr}:{port} accepted connections",
                exit_code_of(rc) or 1,
            )
        limit_text = f"--start-timeout {self.options.start_timeout:g} s"
        state.start_failure = ProcResult(
            handle.plan.name,
            None,
            handle.host,
            None,
            handle.started,
            time.time(),
            handle.log_path,
            reason=f"port {port} did not accept within {limit_text}",
        )
        raise StartFailed(f"the scheduler's port {addr}:{port} did not accept connections within {limit_text}", 1)

    # ---------------------------------------------------------------- watching

    def _watch(self, state: _Attempt, deadline: Optional[float]) -> Outcome:
        """Until every worker exited 0 (then the scheduler gets its grace) or one failed."""
        sched = [i for i, h in enumerate(state.handles) if h.plan.role == Role.SCHEDULER]
        pending = {i for i, h in enumerate(state.handles) if h.plan.role != Role.SCHEDULER}
        while True:
            failure = self._failure(state, pending, sched)  # also exits seen while starting
            if failure is not None:
                return failure
            if not pending:
                break
            wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
            state.drain(wait)
            stopsignals.check()
            self._check_deadline(deadline)
            self._check_hang(state)
        state.transition(AttemptPhase.FINISHING)
        state.drain_until(
            time.monotonic() + self.options.sched_grace, stop=lambda: all(i in state.exits for i in sched)
        )
        return Outcome(SUCCEEDED, 0)

    def _failure(self, state: _Attempt, pending: Set[int], sched: List[int]) -> Optional[Outcome]:
        """Drop exited workers from ``pending``; a failed worker (or a failed scheduler while
        workers run) as an outcome, announced."""
        for idx in sorted(pending):
            if idx in state.exits:
                pending.discard(idx)
                rc, _ = state.exits[idx]
                if rc != 0:
                    return self._failed(state, state.handles[idx].plan.name, state.handles[idx], rc)
        for idx in sched:
            if idx in state.exits and pending and state.exits[idx][0] != 0:
                return self._failed(state, "scheduler", state.handles[idx], state.exits[idx][0])
        return None

    def _failed(self, state: _Attempt, name: str, handle: ProcessHandle, rc: int) -> Outcome:
        """A process failed: the attempt's outcome, announced, unless the cluster's scheduler is
        ending the job (its processes die of its signals: a preemption is not their failure)."""
        outside = self._cluster_stop(state, exit_code_of(rc) or 1)
        if outside is not None:
            return outside
        self.emit(events.Failure(name, handle.host, rc))
        timed_out = (
            self.hang.timed_out(handle, tail_lines(handle.log_path, COLLECTIVE_TAIL)) if self.hang is not None else None
        )
        if timed_out is not None and handle.plan.rank is not None:  # it waited for a stuck rank: a hang too
            return self._hung(state, None, (handle.plan.rank, timed_out))
        return Outcome(FAILED, exit_code_of(rc))

    def _check_hang(self, state: _Attempt) -> None:
        verdict = None if self.hang is None else self.hang.due() or self.hang.stopped(state.handles, state.exits)
        if verdict is not None:
            raise WatchEnded(self._hung(state, verdict))
        req = self.hang.planned.take() if self.hang is not None and self.hang.planned is not None else None
        if req is not None:  # --straggler replace, --grow-at-checkpoint (planned.py): the ranks save, then go
            self.emit(events.PlannedRestart(req.reason))
            raise WatchEnded(Outcome(PLANNED, 0, f"planned restart: {req.reason}", leave_out=req.leave_out))

    def _hung(self, state: _Attempt, verdict: Any, timed_out: Optional[Tuple[int, str]] = None) -> Outcome:
        """Dump the running ranks' stacks and judge the culprit (before teardown); announced (``hung``)."""
        assert self.hang is not None
        state.transition(AttemptPhase.HUNG)
        with stopsignals.recorded_only():  # the dump runs to its end
            hang, message = self.hang.investigate(state.handles, dict(state.exits), self.adir, verdict, timed_out)
        self.emit(events.Hung(message, hang.to_json()))
        return Outcome(HUNG, HUNG_EXIT, message, hang=hang)

    def _cluster_stop(self, state: _Attempt, code: int) -> Optional[Outcome]:
        """:func:`_outside_stop` of the attempt's backend, announced (``cluster_stop``)."""
        outside = _outside_stop(state.backend, code)
        if outside is not None:
            self.emit(events.ClusterStop(outside.status, outside.message))
        return outside

    def _check_deadline(self, deadline: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise AttemptTimeout()

    # ---------------------------------------------------------------- teardown

    def _teardown(self, state: _Attempt, status: str = FAILED) -> None:
        """Why (the ``stopping`` file), SIGTERM every running worker and wait for them, then SIGTERM
        the scheduler, all within ``grace``; then SIGKILL whole trees; always kill groups.  The
        scheduler goes last: a worker that ends gracefully (it saves at its step's end on a planned
        or preempted stop) may still need it for that step.  After a success only the scheduler can
        still be running; it is ended without notice.  A stop signal received during the grace skips
        the rest of it.
        """
        if status != SUCCEEDED:
            restarts.tell_stopping(self.adir, status)
        # A process that already ended by itself (its waiter has not posted yet) is not torn
        # down: its own exit counts (it may be the earliest failure).
        running = [i for i in state.running() if not state.handles[i].has_exited()]
        if running and status != SUCCEEDED:
            self.emit(events.Teardown(tuple(state.handles[i].plan.name for i in running)))
        sched = [i for i in running if state.handles[i].plan.role == Role.SCHEDULER]
        workers = [i for i in running if i not in sched]
        signals_seen = len(stopsignals.pending)
        end = time.monotonic() + self.options.grace

        def signalled() -> bool:
            return len(stopsignals.pending) != signals_seen

        self._terminate(state, workers, status)
        state.drain_until(end, stop=lambda: signalled() or all(i in state.exits for i in workers))
        self._terminate(state, [i for i in sched if not state.handles[i].has_exited()], status)
        state.drain_until(end, stop=signalled)
        for handle in state.handles:
            _quietly(handle.kill)  # whole group/tree, also leftovers of exited leaders
        state.drain_until(time.monotonic() + _KILL_WAIT)
        self._after_teardown(state)

    def _terminate(self, state: _Attempt, which: List[int], status: str) -> None:
        for idx in which:
            state.torn[idx] = True
            if status == SUCCEEDED:
                state.notes[idx] = "ended after every worker finished"
            _quietly(state.handles[idx].terminate)

    def _after_teardown(self, state: _Attempt) -> None:
        """End orphans of the attempt; tell the watchdog which local processes were reaped."""
        if self.reap_orphans is not None:
            kept: Set[int] = set()
            if state.backend is not None:
                try:
                    kept = set(state.backend.keeps())  # e.g. the warm zygote a restart forks from
                except Exception:  # asking must not stop a teardown
                    kept = set()
            self.reap_orphans({h.pid for h in state.handles if h.pid is not None} | kept)
        if self.watchdog is not None:
            for idx, h in enumerate(state.handles):
                if h.pid is not None and idx in state.exits and h.pgid is not None:
                    self.watchdog.forget(h.pid)


def _outside_stop(backend: Optional[Backend], code: int) -> Optional[Outcome]:
    """The cluster scheduler's own reason to end the attempt, if it has one
    (:meth:`Backend.outside_stop`: a preemption, its time limit, a cancel), as the outcome
    (``code`` unless it is a time limit), so such an attempt is not judged a failure of its ranks."""
    try:
        with stopsignals.recorded_only():  # Slurm may signal mslaunch again meanwhile
            why = backend.outside_stop() if backend is not None else None
    except Exception:  # asking must not turn a judged attempt into a crash
        why = None
    if why is None:
        return None
    status, message = why
    return Outcome(status, TIMEOUT_EXIT if status == TIMEOUT else code, message, by_cluster=True)


def _quietly(fn: Callable[[], Any]) -> None:
    """Call ``fn`` (console output, signalling); a failure there must not stop a teardown."""
    try:
        fn()
    except Exception:
        pass
