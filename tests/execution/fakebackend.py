"""An in-memory backend for supervisor tests: no processes, exits scripted per process name.

Each planned process gets a :class:`FakeProcess` that "runs" until the test's script ends it:
a script entry ``name -> Exit(rc, exit_time=None)`` ends it at start; a missing entry keeps it
running until teardown, where ``terminate()`` ends it with -SIGTERM (or never, if the name is
in ``stubborn``) and ``kill()`` with -SIGKILL.  Every call is logged in order on the backend.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext
from launcher.execution.process.handle import ReportedProcess
from launcher.planning.job.spec import Plan, ProcPlan


@dataclass(frozen=True)
class Exit:
    """End the process at start with ``rc``; ``exit_time``: the exit time the handle reports."""

    rc: int
    exit_time: Optional[float] = None


class FakeProcess(ReportedProcess):
    def __init__(self, backend: "FakeBackend", plan: ProcPlan, log_path: str) -> None:
        self.backend = backend
        self.plan = plan
        self.host = plan.host
        self.log_path = log_path
        self.started = time.time()

    def has_exited(self) -> bool:
        return self._done.is_set()

    def terminate(self) -> None:
        self.backend.calls.append(("terminate", self.plan.name))
        if self.plan.name not in self.backend.stubborn:
            self.exited(-signal.SIGTERM)

    def kill(self) -> None:
        self.backend.calls.append(("kill", self.plan.name))
        self.exited(-signal.SIGKILL)


@dataclass
class FakeBackend(Backend):
    """One attempt's fake backend (see the module doc)."""

    #: the handle type :meth:`start` makes (subclasses give their own)
    handle_class = FakeProcess

    script: Dict[str, Exit] = field(default_factory=dict)
    stubborn: Set[str] = field(default_factory=set)
    fail_start: Dict[str, str] = field(default_factory=dict)
    calls: List[Tuple[str, str]] = field(default_factory=list)
    handles: List[FakeProcess] = field(default_factory=list)
    closed: bool = False
    #: what :meth:`outside_stop` answers (a cluster scheduler ending the job), asked how often
    outside: Optional[Tuple[str, str]] = None
    outside_asked: int = 0

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls()

    def outside_stop(self) -> Optional[Tuple[str, str]]:
        self.outside_asked += 1
        return self.outside

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> FakeProcess:
        self.calls.append(("start", proc.name))
        if proc.name in self.fail_start:
            raise LaunchError(self.fail_start[proc.name])
        handle = self.handle_class(self, proc, log_path)
        self.handles.append(handle)
        planned = self.script.get(proc.name)
        if planned is not None:
            handle.exited(planned.rc, planned.exit_time)
        return handle

    def close(self) -> None:
        self.closed = True


def fake_plan(job_dir: str, ranks: int = 3, scheduler: bool = False) -> Plan:
    """A plan of ``ranks`` workers on this machine; with ``scheduler``, also a scheduler started
    first (no master address: nothing to dial)."""

    def proc(name: str, role: str, rank: Optional[int], log: str) -> ProcPlan:
        return ProcPlan(
            name=name,
            role=role,
            host="localhost",
            rank=rank,
            local_rank=rank,
            node_rank=0,
            device_id=rank,
            argv=("train",),
            env=(),
            cwd=job_dir,
            log=f"{job_dir}/{log}",
        )

    return Plan(
        job_id="j1",
        job_dir=job_dir,
        method="dynamic",
        launcher="fake",
        world_size=ranks,
        hosts=(),
        ranks=tuple(proc(f"rank {r}", "worker", r, f"worker_{r}.log") for r in range(ranks)),
        scheduler=proc("scheduler", "scheduler", None, "scheduler.log") if scheduler else None,
        artefacts=(),
        master_addr=None,
        master_port=None,
    )
