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

Teardown: SIGTERM to srun (srun passes it to every task; the shims pass it to their ranks), the
grace, then ``scancel --signal=KILL`` and ``scancel`` of the attempt's steps and SIGKILL to srun.
If mslaunch dies, the job's watchdog kills srun and then runs
``python -m launcher.execution.slurm.cancel <job> <step name>`` (registered at create time).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, StartRequest
from launcher.execution.hostthreads import WatchesHostThreads, watch_host_threads
from launcher.execution.process.handle import RankFigures, WatchdogLink
from launcher.execution.process.spawn import LocalProcess, kill_tree
from launcher.execution.process.standin import StandInProcess, launcher_plan, read_json_record, start_standin
from launcher.execution.results import ProcResult
from launcher.execution.slurm.beat import BeatListener
from launcher.execution.slurm.shim import SECRET_CARRIER, record_key
from launcher.planning.backends.slurm import allocation_job_id, outside_stop, srun_steps
from launcher.planning.job.kinds import Role
from launcher.planning.job.secrets import split_pairs
from launcher.planning.job.spec import Plan, ProcPlan
from launcher.planning.text.private import makedirs_private, open_private

#: Folder of the shims' files in an attempt dir.
STATUS_DIR = "slurm"


def step_name(plan: Plan, attempt: int) -> str:
    """The ``--job-name`` of an attempt's steps."""
    return f"mslaunch-{plan.job_id}-a{attempt}"


def _records(status_dir: str, proc: ProcPlan) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """The shim's start record of ``proc`` (``{}`` until it started) and its exit record (None
    until it ended)."""
    key = record_key(proc.rank)
    return (
        read_json_record(os.path.join(status_dir, f"{key}.start.json")) or {},
        read_json_record(os.path.join(status_dir, f"{key}.exit.json")),
    )


def _steps(plan: Plan, attempt_dir: str, attempt: int) -> Tuple[Optional[Any], Any]:
    nodes = [p.host for p in plan.ranks]
    sched = plan.scheduler.host if plan.scheduler is not None else None
    tasks = os.path.join(attempt_dir, STATUS_DIR, "tasks.json")
    return srun_steps(nodes, sched, sys.executable, tasks, step_name(plan, attempt))


_STOP_CODES = frozenset({-signal.SIGTERM, 128 + signal.SIGTERM})
_KILL_CODES = frozenset({-signal.SIGKILL, 128 + signal.SIGKILL})


class SrunStepProcess(StandInProcess):
    """The local srun of one step, standing for the processes of that step (see :meth:`outcomes`).

    When srun ends by itself with a failure, the step's nodes that Slurm holds lost (``DOWN`` or
    ``NOT_RESPONDING``: :func:`launcher.execution.slurm.nodes.lost_nodes`) are asked once, from
    the thread that waits for srun: a node's slurmd that stops mid-job makes slurmctld mark the node
    not responding, then down, and end the step (with ``--no-kill``, the allocation goes on
    without the node). Each of the step's processes on such a node ends as ``host_lost``.
    """

    def __init__(
        self, base: LocalProcess, backend: "SlurmBackend", procs: List[StartRequest], role_plan: ProcPlan
    ) -> None:
        super().__init__(base, role_plan)
        self.backend = backend
        self.procs = procs
        self._pids: Dict[str, Tuple[Optional[int], str, Optional[int]]] = {}
        if role_plan.role == Role.SCHEDULER:
            self.log_path = procs[0].log_path
            self.host = procs[0].proc.host

    def dump_stacks(self, folder: str) -> Dict[Optional[int], List[str]]:
        """The stacks of this step's running processes, dumped on their nodes by an srun each."""
        from launcher.execution.slurm.dump import slurm_step_dump

        return slurm_step_dump(self.backend.job_id, self.backend.status_dir, [r.proc.rank for r in self.procs], folder)

    def read_lost(self, rc: int) -> Dict[str, str]:
        """The step's nodes Slurm holds lost, node -> how (asked once srun failed by itself)."""
        return self.backend.lost_nodes([r.proc.host for r in self.procs])

    def host_pids(self) -> Dict[str, Tuple[Optional[int], str, Optional[int]]]:
        """Each process of this step's pid on its node, from the shims' start records (read until
        every one is known)."""
        for req in self.procs:
            if req.proc.name not in self._pids:
                rec, _ = _records(self.backend.status_dir, req.proc)
                if isinstance(rec.get("pid"), int):
                    self._pids[req.proc.name] = (req.proc.rank, req.proc.host, rec["pid"])
        return self._pids

    def rank_figures(self) -> Dict[int, Tuple[str, RankFigures]]:
        """Each worker of this step's scheduler figures, as its shim last sampled them on its node
        (:mod:`launcher.execution.process.rankfigures`)."""
        from launcher.execution.process.rankfigures import read

        attempt_dir = os.path.dirname(self.backend.status_dir)
        out = {}
        for req in self.procs:
            rank = req.proc.rank
            figs = read(attempt_dir, rank) if rank is not None and req.proc.role == Role.WORKER else None
            if figs is not None and rank is not None:
                out[rank] = (req.proc.host, figs)
        return out

    def step_ids(self) -> List[str]:
        """``J.S`` of this step, from the shims' start records (empty until a task started)."""
        ids = set()
        for req in self.procs:
            rec, _ = _records(self.backend.status_dir, req.proc)
            if rec.get("job") and rec.get("step"):
                ids.add(f"{rec['job']}.{rec['step']}")
        return sorted(ids)

    def _scancel(self, signal_name: Optional[str]) -> None:
        ids = self.step_ids()
        if ids:
            from launcher.execution.slurm.cancel import scancel

            scancel(ids, signal_name)
        else:
            self.backend.cancel(signal_name)

    def nodes(self) -> List[str]:
        """The planned nodes of this step's processes."""
        return sorted({r.proc.host for r in self.procs})

    def fail_lost(self) -> None:
        """A node of the step went silent (:mod:`launcher.execution.slurm.beat`): end the step
        through Slurm and srun here, as a failure of the step (not a stop): its exit then asks
        which nodes were lost (:meth:`read_lost`)."""
        if self.popen.poll() is None:
            self.end_elsewhere()
            kill_tree(self.pid, self.pgid, signal.SIGKILL)

    def stop_gracefully(self) -> None:
        """SIGTERM to every task of the step (``scancel --signal=TERM``; the shims pass it to
        their ranks), so ranks get the grace.  (srun itself, given SIGTERM, would SIGKILL them.)"""
        self._scancel("TERM")

    def end_elsewhere(self) -> None:
        """While srun runs: SIGKILL the step's tasks through Slurm and cancel the step (then
        ``kill()`` SIGKILLs srun)."""
        if self.popen.poll() is None:
            self._scancel("KILL")
            self._scancel(None)

    def outcomes(
        self, rc: Optional[int], when: Optional[float], torn: bool, note: Optional[str] = None
    ) -> List[ProcResult]:
        """One result per process of the step, from the shims' records (see the module doc).

        A record's ``stopped`` flag marks an exit caused by a stop (Slurm ending the step after
        another task failed, or teardown): torn down, not a cause.  A process without an exit
        record was ended by Slurm (SIGKILL) or never started, or, on a node Slurm holds lost
        (:meth:`read_lost`), lost with its node (``host_lost``); when no process failed by
        itself and srun failed without being torn down, srun is added as the failure (its log
        says why).
        """
        out: List[ProcResult] = []
        lost = self.lost(rc) if not torn else {}
        own_failure = False
        records = [(req, *_records(self.backend.status_dir, req.proc)) for req in self.procs]
        # Slurm signals a step's processes one by one: a rank may die of the SIGTERM before its
        # shim learns of the stop.  A SIGTERM exit after another process's own failure, or
        # while mslaunch tore the step down, is a consequence, not a cause.
        # When Slurm lost a node of the step, it ends the step's tasks on the other nodes
        # (SIGTERM, then SIGKILL after KillWait): such a signal exit is the node's consequence.
        ended_by_slurm = _STOP_CODES | (_KILL_CODES if lost else frozenset())
        causes = [
            float(e.get("ended") or 0)
            for _, _, e in records
            if e is not None and int(e.get("returncode", 1)) not in ended_by_slurm | {0} and not e.get("stopped")
        ]
        first_cause = min(causes) if causes else None
        for req, start, end in records:
            host = str((end or start).get("node") or req.proc.host)
            started = start.get("started") or self.started
            on_lost = host in lost or req.proc.host in lost
            if end is not None and on_lost and (end.get("cut_off") or int(end.get("returncode", 1)) in _KILL_CODES):
                end = None  # ended with its node (Slurm's kill there, or its shim cut off from mslaunch)
            if end is not None:
                code = int(end.get("returncode", 1))
                by_slurm = code in ended_by_slurm
                after_cause = first_cause is not None and float(end.get("ended") or 0) >= first_cause
                stopped = code != 0 and (bool(end.get("stopped")) or (by_slurm and (torn or bool(lost) or after_cause)))
                if code != 0 and not stopped:
                    own_failure = True
                reason = note or (
                    f"ended by Slurm: node {', '.join(sorted(lost))} lost" if lost else "stopped by Slurm/mslaunch"
                )
                out.append(
                    ProcResult(
                        req.proc.name,
                        req.proc.rank,
                        host,
                        code,
                        started,
                        end.get("ended") or when,
                        req.log_path,
                        torn_down=stopped,
                        reason=reason if stopped else None,
                        pid=start.get("pid"),
                    )
                )
            elif on_lost:
                own_failure = True
                how = lost.get(host) or lost[req.proc.host]
                out.append(
                    ProcResult(
                        req.proc.name,
                        req.proc.rank,
                        host,
                        None,
                        started,
                        when,
                        req.log_path,
                        reason=how,
                        pid=start.get("pid"),
                        host_lost=how,
                    )
                )
            elif rc == 0:
                out.append(
                    ProcResult(req.proc.name, req.proc.rank, host, 0, started, when, req.log_path, pid=start.get("pid"))
                )
            else:
                out.append(
                    ProcResult(
                        req.proc.name,
                        req.proc.rank,
                        host,
                        None,
                        started,
                        when,
                        req.log_path,
                        torn_down=True,
                        reason="ended by Slurm" if start else "not started by srun",
                        pid=start.get("pid"),
                    )
                )
        if rc not in (0, None) and not own_failure and not torn:
            out.append(
                self.own_result(
                    rc, when, "srun" if self.plan.role != Role.SCHEDULER else "srun (scheduler)", reason=note
                )
            )
        return out


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
        found: Slurm's own view of the nodes is the only one)."""
        from launcher.execution.slurm.nodes import my_addr, node_addrs

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
                step.fail_lost()

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

    def close(self) -> None:
        """End the heartbeats (the shims see the link close and go on: Slurm ends their steps),
        then what :class:`WatchesHostThreads` closes."""
        if self.beats is not None:
            self.beats.close()
        super().close()

    def cancel(self, signal_name: Optional[str] = None) -> List[str]:
        """``scancel`` this attempt's steps (``--signal`` only when given); their ids."""
        from launcher.execution.slurm.cancel import cancel_steps

        return cancel_steps(self.job_id, self.name, signal_name)


# No per-host ToolCheck: 'doctor --launcher slurm' checks Slurm itself (launcher.execution.slurm.doctor).
