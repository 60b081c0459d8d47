"""The local launcher: one subprocess per planned process (see :mod:`launcher.execution.process.spawn`),
or, for Python ranks, forked from a zygote (see :mod:`launcher.execution.local.zygote`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from launcher.execution.backend import Backend, BackendContext
from launcher.execution.ports import check_scheduler_port
from launcher.execution.process.handle import WatchdogLink
from launcher.execution.process.spawn import (
    LocalProcess,
    start_local,
)
from launcher.planning.job.spec import Plan, ProcPlan

if TYPE_CHECKING:
    from launcher.execution.local.zygote_pool import ZygotePool


def _new_pool() -> "ZygotePool":
    from launcher.execution.local.zygote_pool import ZygotePool

    return ZygotePool()


@dataclass(frozen=True)
class LocalSettings:
    """Settings of the local backend (built once by the CLI).

    Attributes:
        zygote: fork local Python ranks from one process that imported MindSpore once
            (see :mod:`launcher.execution.local.zygote`; the CLI's default for MindSpore CPU jobs).
        on_note: called with a one-line message when the zygote falls back to plain processes.
        fork_scheduler: with the zygote, fork the scheduler too, running MindSpore's ``init()``
            alone instead of the user's script (:mod:`launcher.workloads.scheduler`).
        keep_zygote: a restart forks from the last attempt's zygote when that is safe (see
            :class:`launcher.execution.local.zygote_pool.ZygotePool`); False: each attempt imports anew.
        pool: where the zygote waits between attempts (one job at a time; ended by :meth:`LocalBackend.end_job`).
    """

    zygote: bool = False
    on_note: Optional[Callable[[str], None]] = None
    fork_scheduler: bool = False
    keep_zygote: bool = True
    pool: "ZygotePool" = field(default_factory=lambda: _new_pool())


class LocalBackend(Backend):
    """Starts processes on this machine (see :func:`start_local`)."""

    local_only = True

    def __init__(self, watchdog: Optional[WatchdogLink] = None) -> None:
        self.watchdog = watchdog

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        """A :class:`LocalBackend`, or with ``LocalSettings(zygote=True)`` a zygote launcher."""
        settings = ctx.settings_for("local", LocalSettings())
        if settings.zygote:
            from launcher.execution.local.zygote import ZygoteBackend, shared_env

            return ZygoteBackend.warm(
                ctx.watchdog,
                shared_env(ctx.plan),
                settings.on_note,
                settings.fork_scheduler,
                pool=settings.pool if settings.keep_zygote else None,
            )
        return cls(ctx.watchdog)

    @classmethod
    def end_job(cls, settings: Mapping[str, Any]) -> None:
        """End the zygote kept for a restart, if any."""
        local = settings.get("local")
        if isinstance(local, LocalSettings):
            local.pool.close()

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        check_scheduler_port(plan)

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> LocalProcess:
        return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
