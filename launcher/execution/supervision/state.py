"""Bookkeeping of one attempt for the supervisor: its phase, handles, exits, who was torn down.

The phase moves only through :meth:`AttemptState.transition`, along the table of
:mod:`launcher.execution.supervision.phases`.

Waiting never busy-loops: one thread per process blocks in ``wait()`` and posts to a queue
(or the backend posts each exit itself, :meth:`ProcessHandle.notify_exit`: no thread per process).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from launcher.execution.backend import Backend
from launcher.execution.process.handle import ProcessHandle
from launcher.execution.results import ProcResult
from launcher.execution.supervision.phases import AttemptPhase, check_transition
from launcher.planning.job.events import Exited, OnEvent, Pid

__all__ = ["AttemptState"]


class AttemptState:
    """Bookkeeping of one attempt: its phase, handles, exits, who was torn down."""

    def __init__(self, on_event: Optional[OnEvent] = None, attempt: int = 0) -> None:
        self.on_event = on_event  # gets an ``exited`` event for each exit, once, when it is recorded
        self.attempt = attempt
        self.handles: List[ProcessHandle] = []
        self.exits: Dict[int, Tuple[int, float]] = {}
        self.torn: Dict[int, bool] = {}
        self.notes: Dict[int, str] = {}
        self.events: "queue.Queue[Tuple[int, int, float]]" = queue.Queue()
        self.start_failure: Optional[ProcResult] = None
        self.backend: Optional[Backend] = None  # once created
        self.phase = AttemptPhase.STARTING
        self.phases: List[AttemptPhase] = [AttemptPhase.STARTING]  # every phase entered, in order
        self._pids: Dict[str, Optional[int]] = {}  # process name -> the pid its events told

    def transition(self, target: AttemptPhase) -> None:
        """Move to ``target``; raises :class:`~launcher.execution.supervision.phases.IllegalTransition`
        when the table does not allow it."""
        self.phase = check_transition(self.phase, target)
        self.phases.append(target)

    def add(self, handle: ProcessHandle) -> int:
        """Register ``handle``; a thread blocks in its ``wait()`` and posts the exit."""
        idx = len(self.handles)
        self.handles.append(handle)
        self._pids[handle.plan.name] = handle.pid  # what its ``started`` event tells
        if handle.notify_exit(lambda rc: self.events.put((idx, rc, time.time()))):
            return idx  # the backend reports the exit itself (no thread per process)

        def waiter() -> None:
            try:
                rc = handle.wait()
            except Exception as exc:  # a backend bug must not hang the job: count it as a failure
                rc = 255
                # a backend's bug: the process failed, its host is not lost
                handle.reason = f"mslaunch could not wait for it: {exc}"
            self.events.put((idx, rc, time.time()))

        threading.Thread(target=waiter, name=f"wait-{handle.plan.name}", daemon=True).start()
        return idx

    def running(self) -> List[int]:
        return [i for i in range(len(self.handles)) if i not in self.exits]

    def report_pids(self) -> None:
        """A ``pid`` event for each running process whose pid on its host became known since its
        ``started`` event (:func:`host_pids`)."""
        if self.on_event is None:
            return
        for idx, h in enumerate(self.handles):
            if idx in self.exits:
                continue
            for name, (rank, host, pid) in host_pids(h).items():
                if pid is not None and self._pids.get(name) != pid:
                    self._pids[name] = pid
                    self.on_event(Pid(name, rank, host, pid, self.attempt))

    def record(self, idx: int, rc: int, when: float) -> None:
        if idx in self.exits:
            return
        self.report_pids()  # a pid learnt just before the exit is told before it
        self.exits[idx] = (rc, when)
        if self.on_event is not None:
            h = self.handles[idx]
            self.on_event(Exited(h.plan.name, h.plan.rank, h.host, rc, self.attempt))

    def drain(self, timeout: float) -> Optional[Tuple[int, int, float]]:
        """Record the next exit, waiting at most ``timeout`` s; None if none came.  Pids learnt
        since the last call are told first."""
        self.report_pids()
        try:
            ev = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        self.record(*ev)
        return ev

    def drain_until(self, end: float, step: float = 0.2, stop: Callable[[], bool] = lambda: False) -> None:
        """Record exits until every process exited, ``time.monotonic()`` passes ``end`` or ``stop()``."""
        while self.running() and time.monotonic() < end and not stop():
            self.drain(max(0.0, min(step, end - time.monotonic())))

    def results(self) -> List[ProcResult]:
        """One result per planned process (a handle may stand for many), start failure included."""
        out: List[ProcResult] = []
        for idx, h in enumerate(self.handles):
            rc, when = self.exits.get(idx, (None, None))
            out.extend(h.outcomes(rc, when, self.torn.get(idx, False), self.notes.get(idx)))
        failure = self.start_failure
        if failure is None:
            return out
        if any(r.name == failure.name for r in out):
            return [failure if r.name == failure.name else r for r in out]
        return out + [failure]


def host_pids(handle: ProcessHandle) -> Mapping[str, Tuple[Optional[int], str, Optional[int]]]:
    """Process name -> ``(rank, host, pid on that host)`` of every planned process ``handle`` runs
    that it knows the pid of: the handle's ``host_pids()`` where it has one (a stand-in for
    ranks on other hosts: mpirun, srun), else its own ``pid`` (the ssh agent reports it after
    the start)."""
    more = getattr(handle, "host_pids", None)
    if callable(more):
        try:
            return dict(more())
        except Exception:  # best effort: a backend's helper files must not fail the job
            return {}
    return {handle.plan.name: (handle.plan.rank, handle.host, handle.pid)}
