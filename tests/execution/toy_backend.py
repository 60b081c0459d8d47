"""A toy backend, written the way a new backend is added: this module and its registration only.

It runs each planned process with :class:`subprocess.Popen` in its own session (no watchdog,
no exit watcher), and describes itself in ``plan.json`` with a made-up command line.
Importing this module registers it as ``--launcher toy``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Dict, Optional

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, register_backend
from launcher.execution.process.handle import ProcessHandle
from launcher.planning.job.spec import Plan, ProcPlan


class ToyProcess(ProcessHandle):
    def __init__(self, plan: ProcPlan, popen: "subprocess.Popen[bytes]", log_path: str) -> None:
        self.plan = plan
        self.popen = popen
        self.host = plan.host
        self.log_path = log_path
        self.started = time.time()
        self.pid = self.pgid = popen.pid

    def wait(self) -> int:
        return self.popen.wait()

    def poll(self) -> Optional[int]:
        return self.popen.poll()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


class ToyBackend(Backend):
    local_only = True

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls()

    @classmethod
    def describe(cls, plan: Plan) -> Dict[str, Any]:
        return {"toy": ["toy-launch", "--procs", str(len(plan.processes))]}

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> ToyProcess:
        env = dict(os.environ)
        env.update(proc.env)
        with open(log_path, "ab") as log:
            try:
                popen = subprocess.Popen(
                    list(proc.argv),
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"{proc.name}: cannot start {proc.argv[0]!r}: {exc.strerror}") from None
        return ToyProcess(proc, popen, log_path)


register_backend("toy", ToyBackend)
