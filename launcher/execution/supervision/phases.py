"""The phases of one attempt and the moves allowed between them (pure data).

An :class:`~launcher.execution.supervision.attempt.AttemptRunner` is always in one
:class:`AttemptPhase`; it moves only along :data:`TRANSITIONS` (a phase -> the phases that may
follow it), through :func:`check_transition`::

    starting --(scheduler port accepts, workers started)--> running
    starting --(a start failed, --timeout, a stop signal, a set-up error)--> tearing_down
    running  --(every worker exited 0)--> finishing (the scheduler gets ``sched_grace`` s)
    running  --(a process fails: non-zero exit, signal, lost connection)--> tearing_down
    running  --(--timeout | SIGINT/SIGTERM/SIGHUP to mslaunch)--> tearing_down
    running  --(no progress for --hang-timeout | a worker's collective timed out)--> hung
    hung     --(every running rank's stacks dumped, the culprit judged)--> tearing_down
    finishing --(the scheduler ended or its grace ran out; a stop signal)--> tearing_down
    tearing_down --(SIGTERM to every process group, ``grace`` s, SIGKILL to whole trees)--> done

Every attempt tears down, a successful one too (quietly: only the scheduler can still run).
"""

from __future__ import annotations

from enum import Enum
from typing import FrozenSet, Mapping

__all__ = ["AttemptPhase", "IllegalTransition", "TRANSITIONS", "check_transition"]


class AttemptPhase(Enum):
    """Where one attempt is (see the module doc)."""

    STARTING = "starting"
    RUNNING = "running"
    FINISHING = "finishing"
    HUNG = "hung"
    TEARING_DOWN = "tearing_down"
    DONE = "done"


#: phase -> the phases that may follow it (``done`` is final).
TRANSITIONS: Mapping[AttemptPhase, FrozenSet[AttemptPhase]] = {
    AttemptPhase.STARTING: frozenset({AttemptPhase.RUNNING, AttemptPhase.TEARING_DOWN}),
    AttemptPhase.RUNNING: frozenset({AttemptPhase.FINISHING, AttemptPhase.HUNG, AttemptPhase.TEARING_DOWN}),
    AttemptPhase.FINISHING: frozenset({AttemptPhase.TEARING_DOWN}),
    AttemptPhase.HUNG: frozenset({AttemptPhase.TEARING_DOWN}),
    AttemptPhase.TEARING_DOWN: frozenset({AttemptPhase.DONE}),
    AttemptPhase.DONE: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move the table does not allow (internal: a bug in the supervisor, never the job's fault)."""

    def __init__(self, current: AttemptPhase, target: AttemptPhase) -> None:
        super().__init__(f"attempt phase {current.value} cannot move to {target.value}")
        self.current = current
        self.target = target


def check_transition(current: AttemptPhase, target: AttemptPhase) -> AttemptPhase:
    """``target`` when :data:`TRANSITIONS` allows ``current -> target``.

    Raises:
        IllegalTransition: it does not.
    """
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(current, target)
    return target
