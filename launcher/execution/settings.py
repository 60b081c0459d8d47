"""Typed supervision settings, built once by the CLI (``mslaunch run``, ``mslaunch check``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from launcher.errors import PlanError
from launcher.logs.hang import HangPolicy
from launcher.planning.health.stragglers import StragglerPolicy


@dataclass(frozen=True)
class ElasticSettings:
    """``--min-hosts`` and ``--rejoin-after`` (docs/spare-hosts.md#elastic).

    Attributes:
        min_hosts: when no spare is left, restarts go on with fewer hosts (and ranks), at least
            this many; None: the job stops instead.
        rejoin_after: seconds after which a host left out is tried again at a restart, if it
            answers (doubled each time it is left out again); None: never.
        grow: ``--grow-at-checkpoint``: a job running smaller than planned restarts as soon as a
            left-out host answers after its cooldown (a planned restart), not at the next fault.

    Raises:
        PlanError: ``min_hosts`` below 1 or a negative ``rejoin_after``.
    """

    min_hosts: Optional[int] = None
    rejoin_after: Optional[float] = 300.0
    grow: bool = False

    def __post_init__(self) -> None:
        if self.min_hosts is not None and self.min_hosts < 1:
            raise PlanError("--min-hosts must be >= 1 (the fewest hosts a restart may go on with)", field="--min-hosts")
        if self.rejoin_after is not None and not self.rejoin_after >= 0:
            raise PlanError("--rejoin-after must be seconds >= 0, or off", field="--rejoin-after")


@dataclass(frozen=True)
class SuperviseOptions:
    """Supervision knobs (CLI: --grace, --timeout, --start-timeout, --max-restarts, --sched-wait,
    --hang-timeout, --first-step-timeout, --restart-delay, --host-failures, --straggler).

    The defaults here are the CLI's defaults (the options read them from this class).

    Attributes:
        grace: seconds between SIGTERM and SIGKILL at teardown.
        timeout: bound on the whole job in seconds, or None.
        start_timeout: seconds for the scheduler's port to accept connections.
        max_restarts: restarts of the whole group after a failure.
        sched_grace: seconds the scheduler gets to exit by itself once every worker exited 0.
        scheduler_first: start the workers only once the scheduler's port accepts (the first
            attempt only: a restart never waits); False starts them right after the scheduler
            process (they retry registering) and checks the port after, with the same
            --start-timeout.
        hang: when an attempt is hung (``--hang-timeout``, ``--first-step-timeout``).
        restart_delay: seconds between the end of every process of a failed attempt and the restart.
        host_failures: failures attributed to one host after which the next attempt is re-planned
            without it (docs/spare-hosts.md); 0: never for failures (a lost host is still left out).
        straggler: ``--straggler``: name a rank that waits for a CPU far more than the others.
        elastic: ``--min-hosts`` and ``--rejoin-after``.

    Raises:
        PlanError: a negative --max-restarts, --restart-delay, --grace or --host-failures.
    """

    grace: float = 25.0
    timeout: Optional[float] = None
    start_timeout: float = 60.0
    max_restarts: int = 0
    sched_grace: float = 0.25
    scheduler_first: bool = True
    hang: HangPolicy = HangPolicy()
    restart_delay: float = 0.0
    host_failures: int = 2
    straggler: StragglerPolicy = StragglerPolicy()
    elastic: ElasticSettings = ElasticSettings()

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise PlanError("--max-restarts must be >= 0", field="--max-restarts")
        if not self.restart_delay >= 0:
            raise PlanError("--restart-delay must be >= 0", field="--restart-delay")
        if self.host_failures < 0:
            raise PlanError(
                "--host-failures must be >= 0 (0: never leave a host out for its failures)", field="--host-failures"
            )
        if self.grace < 0:
            raise PlanError("--grace must be >= 0", field="--grace")
