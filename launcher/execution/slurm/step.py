"""One srun step of the slurm backend, standing for the processes it runs on the nodes
(:class:`SrunStepProcess`): their pids, figures and stacks, their results from the shims'
records, and the nodes lost with them (see :mod:`launcher.execution.slurm.backend`)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Dict, List, Optional, Protocol, Set, Tuple

from launcher.execution.backend import StartRequest
from launcher.execution.process.handle import RankFigures
from launcher.execution.process.spawn import LocalProcess, kill_tree
from launcher.execution.process.standin import StandInProcess, read_json_record
from launcher.execution.results import ProcResult
from launcher.execution.slurm.shim import record_key
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan


class StepOwner(Protocol):
    """What a step needs of its backend (:class:`launcher.execution.slurm.backend.SlurmBackend`)."""

    job_id: str
    status_dir: str

    def lost_nodes(self, nodes: List[str]) -> Dict[str, str]: ...

    def cancel(self, signal_name: Optional[str] = None) -> List[str]: ...

    def signal_shims(self, keys: Set[str], code: bytes) -> Set[str]: ...


def _records(status_dir: str, proc: ProcPlan) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """The shim's start record of ``proc`` (``{}`` until it started) and its exit record (None
    until it ended)."""
    key = record_key(proc.rank)
    return (
        read_json_record(os.path.join(status_dir, f"{key}.start.json")) or {},
        read_json_record(os.path.join(status_dir, f"{key}.exit.json")),
    )


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

    def __init__(self, base: LocalProcess, backend: StepOwner, procs: List[StartRequest], role_plan: ProcPlan) -> None:
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

    def fail_lost(self) -> Optional[threading.Thread]:
        """A node of the step went silent (:mod:`launcher.execution.slurm.beat`): SIGKILL to the
        step's tasks on the other nodes over their links, srun here ended at once, as a failure of
        the step (not a stop: its exit then asks which nodes were lost, :meth:`read_lost`), and
        the step cancelled through Slurm from a thread (returned), since slurmctld may answer only
        once its message to the silent node timed out."""
        if self.popen.poll() is not None:
            return None
        self._signal_shims(b"K")
        cancel = threading.Thread(target=self._cancel_tasks, name="mslaunch-slurm-cancel", daemon=True)
        cancel.start()
        kill_tree(self.pid, self.pgid, signal.SIGKILL)
        return cancel

    def _cancel_tasks(self) -> None:
        """SIGKILL to the step's tasks through Slurm, and the step cancelled."""
        self._scancel("KILL")
        self._scancel(None)

    def stop_gracefully(self) -> None:
        """SIGTERM to every task of the step, so ranks get the grace: over the shims' heartbeat
        links (:mod:`launcher.execution.slurm.beat`), else (a shim not linked) ``scancel
        --signal=TERM``; the shims pass it to their ranks.  (srun itself, given SIGTERM, would
        SIGKILL them.)"""
        if not self._signal_shims(b"T"):
            self._scancel("TERM")

    def _signal_shims(self, code: bytes) -> bool:
        """``code`` to the step's shims over their links; whether every one was reached."""
        keys = {record_key(r.proc.rank) for r in self.procs}
        return self.backend.signal_shims(keys, code) == keys

    def end_elsewhere(self) -> None:
        """While srun runs: SIGKILL the step's tasks through Slurm and cancel the step (then
        ``kill()`` SIGKILLs srun)."""
        if self.popen.poll() is None:
            self._signal_shims(b"K")
            self._cancel_tasks()

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
