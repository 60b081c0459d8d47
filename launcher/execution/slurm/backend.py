"""The slurm backend (``--launcher slurm``): srun job steps inside a Slurm allocation.

One attempt starts at most two job steps, both named ``mslaunch-<job id>-a<attempt>``:

* the dynamic method's scheduler: one task on the first node, started first;
* every worker: ONE step of ``world_size`` tasks, task ``r`` on rank ``r``'s planned node
  (``--distribution=arbitrary`` + ``SLURM_HOSTFILE``), ``--kill-on-bad-exit=1``.

Each task runs the shim (:mod:`launcher.execution.slurm.shim`), which runs its rank with exactly
the plan's argv/env/cwd, writes the rank's output to its ``worker_<rank>.log`` and its own exit
code or signal to ``<attempt dir>/slurm/rank_<r>.exit.json``.  One step for all workers (rather
than one step per rank) costs one srun process and one step creation whatever the world size,
and lets Slurm end every task within ~0.1 s when one fails; the per-task records keep what one
step per rank would give: the failing rank's own code, node and time.

On-disk (per attempt dir)::

    srun.log, srun_scheduler.log    srun's own output (its errors)
    slurm/tasks.json                what the shims run (argv, env, cwd, log per process)
    slurm/hostfile                  SLURM_HOSTFILE: rank r's node on line r
    slurm/<key>.start.json, slurm/<key>.exit.json   the shims' records (see the shim)

A node Slurm holds lost when the step fails (``DOWN`` or ``NOT_RESPONDING`` in ``scontrol show
node``, e.g. its slurmd stopped) makes each of the step's processes there end with ``host_lost``,
so a restart leaves the node out and uses a spare node of the allocation (docs/spare-hosts.md).
A node whose link is cut is known sooner, from its shims' heartbeats
(:mod:`launcher.execution.slurm.beat`): silent for 5 s, it is lost, and the attempt's steps on it
end as failed by the node, as if Slurm had said so (Slurm says so only after ``SlurmdTimeout``).

The job dir must be on a filesystem every node of the allocation sees (it is where the shims
read their tasks and write logs and records).

Teardown: SIGTERM to every task over the shims' heartbeat links (``scancel --signal=TERM`` when a
shim has none; the shims pass it to their ranks), the grace, then SIGKILL the same way,
``scancel`` of the attempt's steps and SIGKILL to srun (see :mod:`launcher.execution.slurm.step`).
If mslaunch dies, the job's watchdog kills srun and then runs
``python -m launcher.execution.slurm.cancel <job> <step name>`` (registered at create time).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import threading
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, StartRequest
from launcher.execution.hostthreads import WatchesHostThreads, watch_host_threads
from launcher.execution.process.handle import WatchdogLink
from launcher.execution.process.standin import launcher_plan, start_standin
from launcher.execution.slurm.beat import BeatListener
from launcher.execution.slurm.shim import SECRET_CARRIER
from launcher.execution.slurm.step import SrunStepProcess
from launcher.planning.backends.slurm import allocation_job_id, outside_stop, srun_steps
from launcher.planning.job.kinds import Role
from launcher.planning.job.secrets import split_pairs
from launcher.planning.job.spec import Plan, ProcPlan
from launcher.planning.text.private import makedirs_private, open_private

#: Folder of the shims' files in an attempt dir.
STATUS_DIR = "slurm"
#: ``off`` in mslaunch's environment: no heartbeats with the shims (a node is lost when Slurm says so).
HEARTBEAT_VAR = "MSLAUNCH_SLURM_HEARTBEAT"


def step_name(plan: Plan, attempt: int) -> str:
    """The ``--job-name`` of an attempt's steps."""
    return f"mslaunch-{plan.job_id}-a{attempt}"


def _steps(plan: Plan, attempt_dir: str, attempt: int) -> Tuple[Optional[Any], Any]:
    nodes = [p.host for p in plan.ranks]
    sched = plan.scheduler.host if plan.scheduler is not None else None
    tasks = os.path.join(attempt_dir, STATUS_DIR, "tasks.json")
    return srun_steps(nodes, sched, sys.executable, tasks, step_name(plan, attempt))


class SlurmBackend(WatchesHostThreads, Backend):
    """Starts an attempt's processes as srun job steps (see the module doc).

    Args:
        plan: the plan (``--launcher slurm``).
        attempt: the attempt number (names the steps).
        attempt_dir: the attempt's folder.
        job_id: the Slurm job (allocation) id.
        watchdog: the job's watchdog (srun registers with it; it cancels the steps if mslaunch dies).
    """

    def __init__(
        self, plan: Plan, attempt: int, attempt_dir: str, job_id: str, watchdog: Optional[WatchdogLink]
    ) -> None:
        self.plan = plan
        self.attempt = attempt
        self.attempt_dir = attempt_dir
        self.job_id = job_id
        self.watchdog = watchdog
        self.name = step_name(plan, attempt)
        self.status_dir = os.path.join(attempt_dir, STATUS_DIR)
        self.beats: Optional[BeatListener] = None
        self._silent: Dict[str, str] = {}
        self._steps: List[SrunStepProcess] = []
        self._cancels: List[threading.Thread] = []  # scancels of steps on a silent node (fail_lost)
        self.on_note: Optional[Callable[[str], None]] = None

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        """Raises LaunchError outside an allocation or without srun."""
        cls.preflight(ctx.plan)
        job_id = allocation_job_id(os.environ)
        backend = cls(ctx.plan, ctx.attempt, ctx.attempt_dir or ctx.plan.job_dir, job_id, ctx.watchdog)
        if ctx.watchdog is not None:
            from launcher.execution.process.watchdog import on_death

            on_death(ctx.watchdog, [sys.executable, "-m", "launcher.execution.slurm.cancel", job_id, backend.name])
        backend.threads_watch = watch_host_threads(ctx, "slurm", backend.attempt_dir)
        backend.on_note = getattr(ctx.settings_for("slurm"), "on_note", None)
        return backend

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        if not allocation_job_id(os.environ):
            raise LaunchError(
                "--launcher slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set); "
                "use salloc/sbatch, or 'mslaunch sbatch ...'"
            )
        if shutil.which("srun") is None:
            raise LaunchError("srun not found; install the Slurm client (Debian: apt-get install slurm-client)")

    @classmethod
    def describe(cls, plan: Plan) -> Dict[str, Any]:
        sched, workers = _steps(plan, plan.job_dir, 0)
        out: Dict[str, Any] = {"srun": list(workers.argv), "slurm_hostfile": list(workers.hostfile)}
        if sched is not None:
            out["srun_scheduler"] = list(sched.argv)
        return out

    def requests(self, plan: Plan, attempt_dir: str) -> Tuple[StartRequest, ...]:
        """Write ``slurm/tasks.json`` and ``slurm/hostfile``; the scheduler's step (if any), then
        the workers' step."""
        planned = super().requests(plan, attempt_dir)
        sched_req = [r for r in planned if r.proc.role == Role.SCHEDULER]
        worker_reqs = [r for r in planned if r.proc.role != Role.SCHEDULER]
        makedirs_private(self.status_dir)
        from launcher.jobs.jobdir import write_json

        threads = {r: t for t in plan.host_threads for r in t.ranks}
        carriers: Dict[Tuple[str, str], str] = {}  # (secret name, value) -> its carrier in srun's env

        def entry(r: StartRequest) -> Dict[str, Any]:
            plain, secret = split_pairs(r.proc.env, plan.secrets)
            carried = {}
            for k, v in secret:
                carried[k] = carriers.setdefault((k, v), f"{SECRET_CARRIER}{len(carriers)}_{k}")
            out: Dict[str, Any] = {
                "name": r.proc.name,
                "rank": r.proc.rank,
                "argv": list(r.proc.argv),
                "env": [list(kv) for kv in plain],
                "cwd": r.cwd,
                "log": r.log_path,
            }
            if carried:  # never in this file: srun's environment carries them to the shim
                out["secrets"] = carried
            t = threads.get(r.proc.rank) if r.proc.rank is not None else None
            if t is not None and t.set_vars:  # set by the shim from its node's cores
                out["threads"] = {"set": list(t.set_vars), "user_omp": t.user_omp}
            return out

        tasks = os.path.join(self.status_dir, "tasks.json")
        content: Dict[str, Any] = {
            "scheduler": entry(sched_req[0]) if sched_req else None,
            "workers": [entry(r) for r in worker_reqs],
            "status_dir": self.status_dir,
        }
        beat = self._listen(sorted({r.proc.host for r in planned}))
        if beat is not None:  # the file is private (0600): the token is the attempt's alone
            content["beat"] = beat
        write_json(tasks, content)
        sched, workers = _steps(plan, attempt_dir, self.attempt)
        hostfile = os.path.join(self.status_dir, "hostfile")
        with os.fdopen(open_private(hostfile, append=False), "w", encoding="utf-8") as fh:
            fh.write("\n".join(workers.hostfile) + "\n")
        out: List[StartRequest] = []
        cwd = worker_reqs[0].cwd if worker_reqs else plan.job_dir
        carried = tuple((c, v) for (_, v), c in carriers.items())
        if sched is not None and sched_req:
            proc = replace(sched_req[0].proc, argv=sched.argv, env=carried)
            out.append(StartRequest(proc, os.path.join(attempt_dir, "srun_scheduler.log"), cwd))
        log = os.path.join(attempt_dir, "srun.log")
        proc = launcher_plan("srun", workers.argv, cwd, log, env=(("SLURM_HOSTFILE", hostfile),) + carried)
        out.append(StartRequest(proc, log, cwd))
        self._sched_reqs = sched_req
        self._worker_reqs = worker_reqs
        return tuple(out)

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> SrunStepProcess:
        """Start one srun (the scheduler's step or the workers' step).

        Raises:
            LaunchError: srun cannot be run.
        """
        # srun registers with the watchdog (by pid) but does not pass the job token on: tasks on
        # the nodes are ended through Slurm (scancel), as they must be on a real cluster.
        from launcher.execution.process.watchdog import TOKEN_VAR

        proc = replace(proc, argv=("env", "-u", TOKEN_VAR) + tuple(proc.argv))
        base = start_standin(proc, log_path, cwd, self.watchdog)
        if proc.role == Role.SCHEDULER:
            step = SrunStepProcess(base, self, list(self._sched_reqs), proc)
        else:
            step = SrunStepProcess(base, self, list(self._worker_reqs), proc)
        self._steps.append(step)
        return step

    def _listen(self, nodes: List[str]) -> Optional[Dict[str, Any]]:
        """Start the attempt's heartbeat listener (:mod:`launcher.execution.slurm.beat`) on this
        machine's address towards the nodes; what the shims need to reach it, or None (no address
        found, or :data:`HEARTBEAT_VAR` is ``off``: Slurm's own view of the nodes is the only one)."""
        from launcher.execution.slurm.nodes import my_addr, node_addrs

        if os.environ.get(HEARTBEAT_VAR, "").strip().lower() in ("off", "0", "no", "false"):
            return None

        try:
            addrs = node_addrs(nodes, timeout=10.0)
            self.beats = BeatListener(my_addr(addrs[nodes[0]]), secrets.token_hex(16), self._on_silent)
        except (LaunchError, OSError, IndexError) as exc:
            if self.on_note is not None:
                self.on_note(f"slurm: no heartbeats from the nodes ({exc}); a node is known lost when Slurm says so")
            return None
        host, port = self.beats.address
        return {"addr": [host, port], "token": self.beats.token}

    def _on_silent(self, node: str, how: str) -> None:
        """From the listener's thread: ``node`` went silent; its steps end, failed by the node."""
        self._silent[node] = how
        for step in list(self._steps):
            if node in step.nodes():
                cancel = step.fail_lost()
                if cancel is not None:
                    self._cancels.append(cancel)

    def outside_stop(self) -> Optional[Tuple[str, str]]:
        """Slurm's own reason to end the run (see :func:`~launcher.planning.backends.slurm.outside_stop`),
        from one ``scontrol show job``."""
        from launcher.execution.slurm.submit import job_record

        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        return outside_stop(
            job_record(self.job_id, timeout=3.0), self.job_id, int(restarts) if restarts.isdigit() else 0
        )

    def lost_nodes(self, nodes: List[str]) -> Dict[str, str]:
        """Of ``nodes``, those whose heartbeats went silent (:mod:`launcher.execution.slurm.beat`),
        and those Slurm holds lost (see :func:`launcher.execution.slurm.nodes.lost_nodes`)."""
        from launcher.execution.slurm.nodes import lost_nodes

        silent = {n: self._silent[n] for n in nodes if n in self._silent}
        rest = [n for n in nodes if n not in silent]
        return {**silent, **(lost_nodes(rest) if rest else {})}

    def signal_shims(self, keys: Set[str], code: bytes) -> Set[str]:
        """Send ``code`` to the shims of ``keys`` over their heartbeat links (see
        :meth:`launcher.execution.slurm.beat.BeatListener.send`); the keys reached."""
        return self.beats.send(keys, code) if self.beats is not None else set()

    def close(self) -> None:
        """End the heartbeats (the shims see the link close and go on: Slurm ends their steps),
        then what :class:`WatchesHostThreads` closes."""
        if self.beats is not None:
            self.beats.close()
        for cancel in self._cancels:
            cancel.join(timeout=30)
        super().close()

    def cancel(self, signal_name: Optional[str] = None) -> List[str]:
        """``scancel`` this attempt's steps (``--signal`` only when given); their ids."""
        from launcher.execution.slurm.cancel import cancel_steps

        return cancel_steps(self.job_id, self.name, signal_name)


# No per-host ToolCheck: 'doctor --launcher slurm' checks Slurm itself (launcher.execution.slurm.doctor).
