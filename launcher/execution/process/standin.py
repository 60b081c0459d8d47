"""One local process that stands for many ranks: the base of mpirun's and srun's handles.

A stand-in (``mpirun``, one ``srun`` step) is a process on this machine whose exit is the end of
every planned process it runs elsewhere.  What the backends share:

* its planned process: :func:`launcher_plan` (role ``launcher``, on ``localhost``, no rank), or the
  plan of the process it stands for (the Slurm scheduler's step);
* its start: :func:`start_standin`, with SIGTERM (not SIGKILL) if mslaunch dies without a
  watchdog, so the stand-in ends what it stands for itself;
* :class:`StandInProcess`: once ``terminate()``/``kill()`` was called it is *stopping*, and its
  exit says nothing of its hosts; when it fails by itself (``rc != 0``, not stopping), the hosts it
  lost are read once (:meth:`StandInProcess.read_lost`, at the exit, from the thread that waits
  for it: before a teardown could end other hosts' sessions), and kept for its outcomes;
* :meth:`StandInProcess.own_result`: its own :class:`~launcher.execution.results.ProcResult`,
  which a backend adds when it failed and no process it stands for did;
* :func:`read_json_record`: one status record the backend's helpers write in the attempt dir
  (mpirun's rsh agent wrapper, the Slurm task shim).
"""

from __future__ import annotations

import json
import signal
from typing import Any, Dict, Optional, Sequence, Tuple

from launcher.execution.process.handle import WatchdogLink
from launcher.execution.process.spawn import LocalProcess, kill_tree, start_local
from launcher.execution.results import ProcResult
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan


def launcher_plan(
    name: str, argv: Sequence[str], cwd: str, log: str, env: Tuple[Tuple[str, str], ...] = ()
) -> ProcPlan:
    """The planned process of a stand-in run on this machine (``mpirun``, ``srun``): role
    ``launcher``, host ``localhost``, no rank nor device."""
    return ProcPlan(
        name=name,
        role=Role.LAUNCHER,
        host="localhost",
        rank=None,
        local_rank=None,
        node_rank=None,
        device_id=None,
        argv=tuple(argv),
        env=env,
        cwd=cwd,
        log=log,
    )


def start_standin(plan: ProcPlan, log_path: str, cwd: str, watchdog: Optional[WatchdogLink] = None) -> LocalProcess:
    """Start a stand-in on this machine (see :func:`~launcher.execution.process.spawn.start_local`).

    With the job's watchdog it registers there (frozen, then its tree killed, if mslaunch dies);
    without one it gets SIGTERM if mslaunch dies, and ends what it stands for itself.

    Raises:
        LaunchError: it cannot be started.
    """
    return start_local(plan, log_path, cwd=cwd, pdeathsig=signal.SIGTERM, watchdog=watchdog)


def read_json_record(path: str) -> Optional[Dict[str, Any]]:
    """The JSON object in ``path``; None when the file is missing, unreadable, not JSON or not an
    object (a record being written is replaced at once, so a partial one is never read)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class StandInProcess(LocalProcess):
    """A started stand-in (see the module doc), made from what :func:`start_standin` returned.

    Subclasses override :meth:`read_lost` (which hosts it lost), and may override
    :meth:`stop_gracefully` (what ``terminate()`` does) and :meth:`end_elsewhere` (what ``kill()``
    does before it kills its tree here).

    Args:
        base: the started process.
        plan: the planned process it stands as (None: ``base.plan``).

    Attributes:
        own_log: the stand-in's own log (``log_path`` may be set to the log of what it stands for).
    """

    _stopping = False  # terminate()/kill() was called: its exit says nothing of its hosts
    _asked = False  # read_lost was asked (once)
    _lost: Dict[str, str]  # what read_lost answered (set when asked)

    def __init__(self, base: LocalProcess, plan: Optional[ProcPlan] = None) -> None:
        super().__init__(plan if plan is not None else base.plan, base.popen, base.log_path)
        self.own_log = base.log_path

    def read_lost(self, rc: int) -> Dict[str, str]:
        """host -> how it was lost, for the hosts this stand-in lost when it failed by itself with
        ``rc`` (asked once; the default: none)."""
        return {}

    def lost(self, rc: Optional[int]) -> Dict[str, str]:
        """What :meth:`read_lost` answered; asked now if it was not yet and the stand-in failed by
        itself (``rc`` not 0 nor None, not stopping), else ``{}``."""
        if not self._asked:
            if rc in (0, None) or self._stopping:
                return {}
            self._asked = True
            self._lost = dict(self.read_lost(rc))
        return self._lost

    def wait(self) -> int:
        """Its returncode; when it failed by itself, its lost hosts are read at once (:meth:`lost`)."""
        rc = super().wait()
        self.lost(rc)
        return rc

    def stop_gracefully(self) -> None:
        """What ``terminate()`` does while it runs (default: SIGTERM to its process group)."""
        kill_tree(self.pid, self.pgid, signal.SIGTERM)

    def end_elsewhere(self) -> None:
        """What ``kill()`` does first, for what it stands for outside this machine's process
        tree (default: nothing)."""

    def terminate(self) -> None:
        self._stopping = True
        if self.popen.poll() is None:
            self.stop_gracefully()

    def kill(self) -> None:
        """:meth:`end_elsewhere`, then SIGKILL to its group and every descendant."""
        self._stopping = True
        self.end_elsewhere()
        kill_tree(self.pid, self.pgid, signal.SIGKILL)

    def own_result(
        self, rc: Optional[int], when: Optional[float], name: Optional[str] = None, reason: Optional[str] = None
    ) -> ProcResult:
        """The stand-in's own result (on ``localhost``, no rank, its own log), named ``name``
        (None: its plan's name)."""
        return ProcResult(
            name if name is not None else self.plan.name,
            None,
            "localhost",
            rc,
            self.started,
            when,
            self.own_log,
            pid=self.pid,
            reason=reason,
        )
