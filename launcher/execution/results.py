"""Outcomes of processes and jobs: failures are data (torch.distributed.elastic's habit)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # annotations only: the cause rules load when a failure is judged, not with every command
    from launcher.logs.causes import Cause
    from launcher.logs.hangreport import HangReport
from launcher.planning.job.kinds import JobStatus, describe_returncode, signal_name

#: Job states written to summary.json.
SUCCEEDED, FAILED, TIMEOUT, STOPPED = JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMEOUT, JobStatus.STOPPED
PREEMPTED = JobStatus.PREEMPTED
HUNG = JobStatus.HUNG
PLANNED = JobStatus.PLANNED

#: mslaunch's exit code for a job that ran past --timeout (GNU timeout's convention).
TIMEOUT_EXIT = 124
#: mslaunch's exit code for a hung job (no progress for --hang-timeout, or a collective timed out).
HUNG_EXIT = 125


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: the code itself, or 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class ProcResult:
    """How one process ended.

    Attributes:
        name: ``rank N`` or ``scheduler``.
        rank: the rank, None for the scheduler.
        host: where it ran.
        returncode: subprocess convention (negative = killed by that signal); None if unknown
            (e.g. never started, or a connection was lost).
        started, ended: epoch seconds (ended None while running).
        log: log path on the launching machine.
        torn_down: True if mslaunch ended it (teardown), so its code is not a cause.
        reason: a short text when the code alone does not tell (``connection lost``, ...).
        pid: its pid (on its host).
        exit_order: the kernel's order of exits of local processes (see
            :class:`launcher.execution.local.backend.LocalProcess`), for exits closer together than the
            reaping threads can tell apart; not in JSON.
        host_lost: how its host was lost, when its backend says so itself
            (:attr:`ProcessHandle.host_lost <launcher.execution.backend.ProcessHandle>`: the ssh
            session or agent gone, mpirun's daemon on it gone, its Slurm node down), else None;
            in JSON only when set.
    """

    name: str
    rank: Optional[int]
    host: str
    returncode: Optional[int]
    started: Optional[float]
    ended: Optional[float]
    log: str
    torn_down: bool = False
    reason: Optional[str] = None
    pid: Optional[int] = None
    exit_order: Optional[int] = None
    host_lost: Optional[str] = None

    @property
    def failed(self) -> bool:
        return not self.torn_down and (self.returncode is None or self.returncode != 0)

    @property
    def signal(self) -> Optional[str]:
        if self.returncode is not None and self.returncode < 0:
            return signal_name(-self.returncode)
        return None

    @property
    def exit_code(self) -> Optional[int]:
        return None if self.returncode is None else exit_code_of(self.returncode)

    @property
    def lost(self) -> Optional[str]:
        """How its host was lost (``connection to h3 lost (closed)``), or None: its backend's own
        word (:attr:`host_lost`), never read from a message; a process mslaunch tore down is not
        the one that lost its host."""
        return None if self.torn_down else self.host_lost

    def describe(self) -> str:
        if self.reason and (self.returncode is None or self.failed or self.torn_down):
            return self.reason  # e.g. a lost host (255) or a program that could not start
        if self.returncode is None:
            return "did not finish"
        return describe_returncode(self.returncode)

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "rank": self.rank,
            "host": self.host,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "started": self.started,
            "ended": self.ended,
            "log": self.log,
            "torn_down": self.torn_down,
            "reason": self.reason,
            "pid": self.pid,
            **({"host_lost": self.host_lost} if self.host_lost else {}),
        }


@dataclass(frozen=True)
class RootCause:
    """The earliest failure of a job: that process's result, the tail of its log and the cause
    judged from them (:func:`launcher.logs.causes.classify`; None where none was judged)."""

    process: ProcResult
    tail: Tuple[str, ...]
    cause: Optional[Cause] = None

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def rank(self) -> Optional[int]:
        return self.process.rank

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def reason(self) -> str:
        return self.process.describe()

    @property
    def log(self) -> str:
        return self.process.log

    def to_json(self) -> Dict[str, Any]:
        p = self.process
        return {
            "name": p.name,
            "rank": p.rank,
            "host": p.host,
            "exit_code": p.exit_code,
            "signal": p.signal,
            "reason": p.describe(),
            "log": p.log,
            "tail": list(self.tail),
            "time": p.ended,
            "cause": self.cause.to_json() if self.cause is not None else None,
        }


@dataclass(frozen=True)
class AttemptResult:
    """The outcome of one attempt of a job (``--max-restarts`` runs several).

    Attributes:
        attempt: 0 for the first run, k for the k-th restart.
        log_dir: where the attempt's logs are (the job dir, then ``attempt_<k>/``).
        status, exit_code, message, root_cause: as for the job, for this attempt alone.
        started, ended: epoch seconds.
        processes: every process of the attempt.
        hang: a hung attempt's report (limit, per-rank last step and frame, culprit, stacks folder).
        ended_because: why a failed, hung or stopped attempt ended, in one line (restarts).
        resumed_from_step: the step the attempt's ranks resumed after (its first step - 1), if > 0.
        best_step: the furthest step any of its ranks logged.
        steps_lost: steps the previous attempt had made that this one had to do again.
        replanned: the first attempt after a re-plan (a host left out): the crash-loop count
            starts afresh here.
        leave_out: a ``planned`` attempt's hosts to leave out from the next one, with why
            (``--straggler replace``); empty for a planned restart that grows the job.
    """

    attempt: int
    log_dir: str
    status: str
    exit_code: int
    started: float
    ended: float
    processes: Tuple[ProcResult, ...]
    root_cause: Optional[RootCause] = None
    message: Optional[str] = None
    hang: Optional[HangReport] = None
    ended_because: Optional[str] = None
    resumed_from_step: Optional[int] = None
    best_step: Optional[int] = None
    steps_lost: Optional[int] = None
    replanned: bool = False
    leave_out: Tuple[Tuple[str, str], ...] = ()

    def to_json(self) -> Dict[str, Any]:
        out = _outcome_json(self, {"attempt": self.attempt, "log_dir": self.log_dir}, {})
        if self.leave_out:
            out["leave_out"] = [{"host": h, "reason": why} for h, why in self.leave_out]
        for key in ("ended_because", "resumed_from_step", "best_step", "steps_lost"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.replanned:
            out["replanned"] = True
        return out


@dataclass(frozen=True)
class JobResult:
    """The outcome of a job: its last attempt, and in ``history`` every attempt."""

    job_id: str
    job_dir: str
    status: str
    exit_code: int
    started: float
    ended: float
    attempts: int
    processes: Tuple[ProcResult, ...]
    root_cause: Optional[RootCause] = None
    message: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    history: Tuple[AttemptResult, ...] = ()
    hang: Optional[HangReport] = None

    def to_json(self) -> Dict[str, Any]:
        out = _outcome_json(
            self,
            {"job_id": self.job_id, "job_dir": self.job_dir},
            {"duration": round(self.ended - self.started, 3), "attempts": self.attempts},
        )
        # Every attempt, failed ones before a successful restart included (the top-level
        # fields above describe the last attempt).
        out["attempt_results"] = [a.to_json() for a in self.history]
        out.update(self.extra)
        return out


def job_result(job_id: str, job_dir: str, started: float, history: Sequence[AttemptResult]) -> JobResult:
    """The job's result: its last attempt, with every attempt in ``history``."""
    import time

    last = history[-1]
    return JobResult(
        job_id=job_id,
        job_dir=job_dir,
        status=last.status,
        exit_code=last.exit_code,
        started=started,
        ended=time.time(),
        attempts=len(history),
        processes=last.processes,
        root_cause=last.root_cause,
        message=last.message,
        history=tuple(history),
        hang=last.hang,
    )


def _outcome_json(result: "AttemptResult | JobResult", head: Dict[str, Any], middle: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON of a job's or an attempt's outcome: ``head``, status, exit code and times,
    ``middle``, then processes, root cause and message (summary.json's key order)."""
    out = dict(head)
    out.update(status=result.status, exit_code=result.exit_code, started=result.started, ended=result.ended)
    out.update(middle)
    out.update(
        processes=[p.to_json() for p in result.processes],
        root_cause=result.root_cause.to_json() if result.root_cause else None,
        message=result.message,
    )
    if result.hang is not None:
        out["hang"] = result.hang.to_json()
    return out


def tail_lines(path: str, n: int = 20, max_bytes: int = 64 * 1024) -> Tuple[str, ...]:
    """The last ``n`` lines of a file (empty if unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ()
    lines = data.decode("utf-8", "replace").splitlines()
    return tuple(lines[-n:])


def earliest_failure(results: List[ProcResult]) -> Optional[ProcResult]:
    """The failed process that ended first (ties: lowest rank, scheduler last).

    When every failed process has an ``exit_order`` (local processes), the kernel's order
    decides; otherwise the ``ended`` times do.
    """
    failed = [r for r in results if r.failed]
    if not failed:
        return None
    last = 1 << 30
    if all(r.exit_order is not None for r in failed):
        return min(failed, key=lambda r: (r.exit_order, r.rank if r.rank is not None else last))
    return min(
        failed, key=lambda r: (r.ended if r.ended is not None else float("inf"), r.rank if r.rank is not None else last)
    )


_NODE_TIMED_OUT_RE = re.compile(r"The node: (\S+) is timed out")


def lost_nodes(lines: Sequence[str]) -> Tuple[str, ...]:
    """Node ids the dynamic-cluster scheduler reported as timed out (lost heartbeat), in order.

    MindSpore's scheduler logs ``The node: <id> is timed out`` when a worker stops sending
    heartbeats: it failed, or its node (another mslaunch in per-node mode) went away.  With
    ``MS_NODE_ID`` set, the id is the rank.
    """
    out: List[str] = []
    for line in lines:
        m = _NODE_TIMED_OUT_RE.search(line)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return tuple(out)


def lost_nodes_note(lines: Sequence[str]) -> Optional[str]:
    """A summary clause naming the ranks the scheduler lost, or None."""
    lost = lost_nodes(lines)
    if not lost:
        return None
    which = ", ".join(lost)
    return (
        f"the scheduler lost rank(s) {which} (heartbeat timed out): they failed or their node went away"
        " (in per-node mode, see that node's mslaunch summary)"
    )
