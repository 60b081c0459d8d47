"""How an attempt's supervision ended (:class:`Outcome`), and the exceptions that cut an attempt
short while :mod:`launcher.execution.supervision.attempt` watches it, each naming the phase it
leads to (``leads_to``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from launcher.execution.supervision.phases import AttemptPhase
from launcher.logs.hangreport import HangReport

__all__ = ["AttemptTimeout", "Outcome", "StartFailed", "WatchEnded"]


@dataclass(frozen=True)
class Outcome:
    """How an attempt's supervision ended, before the results are judged."""

    status: str
    code: int
    message: Optional[str] = None
    by_cluster: bool = False  # the cluster's scheduler ended the attempt (see _outside_stop)
    hang: Optional[HangReport] = None  # a hung attempt's report (see launcher.logs.hangreport)
    leave_out: Tuple[Tuple[str, str], ...] = ()  # a planned restart's hosts to leave out (planned.py)


class AttemptTimeout(Exception):
    """The job ran past ``--timeout`` (becomes a ``timeout`` result)."""

    leads_to = AttemptPhase.TEARING_DOWN


class WatchEnded(Exception):
    """The watch ends the attempt (carries its outcome): hung (stacks already dumped in
    phase ``hung``), or a planned restart."""

    leads_to = AttemptPhase.TEARING_DOWN

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class StartFailed(Exception):
    """An attempt could not start (becomes a ``failed`` attempt result)."""

    leads_to = AttemptPhase.TEARING_DOWN

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
