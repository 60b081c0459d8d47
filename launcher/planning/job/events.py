"""The events of a job, one frozen dataclass per :class:`~launcher.planning.job.kinds.EventKind`.

The supervisor, the runner and the ``--preflight`` check make them; ``on_event`` callbacks
(:data:`OnEvent`: ``events.jsonl``, then the console) receive them.  Each names its kind
(``kind``, a class attribute) and writes the line's data with ``to_json()``: the ``events.jsonl``
line is ``{**event.to_json(), "time": T, "kind": KIND}`` (:func:`launcher.logs.metricsfile.append_event`),
read back by the report, ``status`` and ``top``.

Pure: values only.  What a lower layer cannot name here (the failed attempt's root cause, a hang's
report) is held as a small protocol or as its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Protocol, Tuple, Type, Union

from launcher.planning.job.ckptinterval import Advice
from launcher.planning.job.kinds import EventKind
from launcher.planning.job.spec import Exclusion

__all__ = [
    "PAYLOADS",
    "Payload",
    "ClusterStop",
    "Event",
    "Exited",
    "Failure",
    "HostExcluded",
    "HostRejoined",
    "Resized",
    "Hung",
    "Interrupted",
    "JobEnd",
    "JobStart",
    "JudgedCause",
    "MetricsEndpoint",
    "Pid",
    "PlannedRestart",
    "OnEvent",
    "Preflight",
    "PreflightHost",
    "Restart",
    "RootCauseLike",
    "Started",
    "StopRestarts",
    "Straggler",
    "Teardown",
    "TimedOut",
]


class JudgedCause(Protocol):
    """Why a process failed (:class:`launcher.logs.causes.Cause`), as the console names it."""

    @property
    def kind(self) -> str: ...

    @property
    def evidence(self) -> str: ...


class RootCauseLike(Protocol):
    """The earliest failure of an attempt (:class:`launcher.execution.results.RootCause`)."""

    @property
    def cause(self) -> Optional[JudgedCause]: ...

    def to_json(self) -> Dict[str, Any]: ...


@dataclass(frozen=True)
class Payload:
    """What every event's payload shares: its data is its fields, in order (``to_json``), unless
    the payload says otherwise."""

    def to_json(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class PreflightHost(Payload):
    """One host's verdict of the preflight check."""

    host: str
    verdict: str
    reason: str


@dataclass(frozen=True)
class Preflight(Payload):
    """The health check before the start (``run --preflight MODE``, docs/health.md)."""

    kind: ClassVar[EventKind] = EventKind.PREFLIGHT
    mode: str
    seconds: float
    network: Optional[str]
    hosts: Tuple[PreflightHost, ...]
    devices: Any  # the devices' summary (JSON)
    excluded: Tuple[Exclusion, ...] = ()  # the hosts ``exclude`` left out
    refused: Tuple[str, ...] = ()  # connections refused for a bad token, one line each

    def to_json(self) -> Dict[str, Any]:
        out = {
            "mode": self.mode,
            "seconds": self.seconds,
            "network": self.network,
            "hosts": [h.to_json() for h in self.hosts],
            "excluded": [e.to_json() for e in self.excluded],
            "devices": self.devices,
        }
        if self.refused:
            out["refused"] = list(self.refused)
        return out


@dataclass(frozen=True)
class JobStart(Payload):
    """The job's supervision starts (written before the first attempt)."""

    kind: ClassVar[EventKind] = EventKind.JOB_START
    job_id: str


@dataclass(frozen=True)
class MetricsEndpoint(Payload):
    """Where the job's metrics are exposed: ``/metrics``'s URL and the textfile (None: not asked for)."""

    kind: ClassVar[EventKind] = EventKind.METRICS
    url: Optional[str]
    textfile: Optional[str]


@dataclass(frozen=True)
class Started(Payload):
    """A process of the attempt started."""

    kind: ClassVar[EventKind] = EventKind.STARTED
    name: str
    rank: Optional[int]
    host: str
    pid: Optional[int]
    log: str
    attempt: int


@dataclass(frozen=True)
class Pid(Payload):
    """A started process's pid on its own host, learnt after its ``started`` event (the ssh agent's
    report; mpirun's and Slurm's ranks from their wrapper): ``status`` shows it."""

    kind: ClassVar[EventKind] = EventKind.PID
    name: str
    rank: Optional[int]
    host: str
    pid: int
    attempt: int


@dataclass(frozen=True)
class Exited(Payload):
    """A process of the attempt ended (recorded once; what ``status`` of a running job shows)."""

    kind: ClassVar[EventKind] = EventKind.EXITED
    name: str
    rank: Optional[int]
    host: str
    returncode: int
    attempt: int


@dataclass(frozen=True)
class Failure(Payload):
    """A process failed: the attempt fails fast."""

    kind: ClassVar[EventKind] = EventKind.FAILURE
    name: str
    host: str
    returncode: int


@dataclass(frozen=True)
class Teardown(Payload):
    """The processes still running are stopped (SIGTERM, then SIGKILL after the grace)."""

    kind: ClassVar[EventKind] = EventKind.TEARDOWN
    names: Tuple[str, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"names": list(self.names)}


@dataclass(frozen=True)
class Restart(Payload):
    """The job restarts as attempt ``attempt`` (``MSLAUNCH_ATTEMPT=env_attempt``) after ``cause``,
    offering its processes the checkpoint interval ``ckpt_interval`` (``MSLAUNCH_CKPT_INTERVAL``),
    when the job's figures give one."""

    kind: ClassVar[EventKind] = EventKind.RESTART
    attempt: int
    cause: Optional[RootCauseLike]  # the failed attempt's root cause, if it has one
    env_attempt: int
    ckpt_interval: Optional[Advice] = None

    def to_json(self) -> Dict[str, Any]:
        out = {
            "attempt": self.attempt,
            "cause": self.cause.to_json() if self.cause is not None else None,
            "env_attempt": self.env_attempt,
        }
        if self.ckpt_interval is not None:
            out["ckpt_interval"] = self.ckpt_interval.to_json()
        return out


@dataclass(frozen=True)
class TimedOut(Payload):
    """The job ran past ``--timeout``."""

    kind: ClassVar[EventKind] = EventKind.TIMEOUT
    timeout: Optional[float]


@dataclass(frozen=True)
class Interrupted(Payload):
    """mslaunch received a stop signal."""

    kind: ClassVar[EventKind] = EventKind.INTERRUPTED
    signal: int


@dataclass(frozen=True)
class Hung(Payload):
    """The attempt is hung (no progress for the limit, or a collective timed out)."""

    kind: ClassVar[EventKind] = EventKind.HUNG
    message: str
    hang: Mapping[str, Any]  # the hang's report (launcher.logs.hangreport.HangReport), as JSON


@dataclass(frozen=True)
class StopRestarts(Payload):
    """Restarts stop with restarts left (a crash loop; too few spare hosts)."""

    kind: ClassVar[EventKind] = EventKind.STOP_RESTARTS
    message: str


@dataclass(frozen=True)
class HostExcluded(Payload):
    """A restart leaves out a host that failed too often (``moves``: where its ranks go, or empty)."""

    kind: ClassVar[EventKind] = EventKind.HOST_EXCLUDED
    exclusion: Exclusion
    moves: str

    def to_json(self) -> Dict[str, Any]:
        return dict(self.exclusion.to_json(), moves=self.moves)


@dataclass(frozen=True)
class PlannedRestart(Payload):
    """mslaunch ends the attempt to restart on other hosts (``reason``): a straggler's host left
    out (``--straggler replace``), or hosts back (``--grow-at-checkpoint``); the ranks are told
    (``MSLAUNCH_STOPPING_FILE`` says ``planned``) and save at their next step's end."""

    kind: ClassVar[EventKind] = EventKind.PLANNED_RESTART
    reason: str


@dataclass(frozen=True)
class HostRejoined(Payload):
    """A host left out earlier is tried again from ``attempt`` on: reachable again after the
    cooldown (``--rejoin-after``); ``left_out``: why it was left out."""

    kind: ClassVar[EventKind] = EventKind.HOST_REJOINED
    host: str
    attempt: int
    left_out: str


@dataclass(frozen=True)
class Resized(Payload):
    """Attempt ``attempt`` runs ``world_size`` ranks on ``hosts`` hosts, where the last ran
    ``previous``; the job was planned with ``planned`` (``--min-hosts``: the hosts left have too
    few slots, or hosts came back).  ``why``: the hosts left out and why, or that hosts came back."""

    kind: ClassVar[EventKind] = EventKind.RESIZED
    attempt: int
    world_size: int
    previous: int
    planned: int
    hosts: int
    why: str


@dataclass(frozen=True)
class ClusterStop(Payload):
    """The cluster's scheduler ends the job (Slurm: preemption, time limit, scancel)."""

    kind: ClassVar[EventKind] = EventKind.CLUSTER_STOP
    status: str
    message: Optional[str]


@dataclass(frozen=True)
class Straggler(Payload):
    """A running rank is named a straggler (it waits for a CPU far more than the others, or its TCP
    send queues stay full: ``by``), or no longer (``cleared``); ``since``: epoch seconds it was first named
    (:mod:`launcher.planning.health.stragglers`)."""

    kind: ClassVar[EventKind] = EventKind.STRAGGLER
    rank: int
    host: str
    evidence: str
    since: float
    attempt: int
    cleared: bool = False
    by: str = "cpu"  # what shows it: cpu (it waits for a CPU) or link (its TCP send queues stay full)


@dataclass(frozen=True)
class CheckpointFailed(Payload):
    """A rank reported that a checkpoint could not be written (``MSLAUNCH_METRIC {"ckpt_failed":
    WHY}``) and that it trains on; the reference trainer's ranks then keep the one before."""

    kind: ClassVar[EventKind] = EventKind.CKPT_FAILED
    rank: int
    attempt: int
    why: str


@dataclass(frozen=True)
class JobEnd(Payload):
    """The job ended (written after ``summary.json``)."""

    kind: ClassVar[EventKind] = EventKind.JOB_END
    status: str
    exit_code: int
    cause: Optional[str] = None  # the kind of the root cause of a failed or hung job (launcher.logs.causes.KINDS)


Event = Union[
    Preflight,
    JobStart,
    MetricsEndpoint,
    Started,
    Pid,
    Exited,
    Failure,
    Teardown,
    Restart,
    TimedOut,
    Interrupted,
    Hung,
    StopRestarts,
    HostExcluded,
    HostRejoined,
    Resized,
    PlannedRestart,
    ClusterStop,
    Straggler,
    CheckpointFailed,
    JobEnd,
]

#: Told of each event of a job (``events.jsonl``, then the console).
OnEvent = Callable[[Event], None]

#: kind -> its payload's class (one each).
PAYLOADS: Mapping[EventKind, Type[Any]] = {
    cls.kind: cls
    for cls in (
        Preflight,
        JobStart,
        MetricsEndpoint,
        Started,
        Pid,
        Exited,
        Failure,
        Teardown,
        Restart,
        TimedOut,
        Interrupted,
        Hung,
        StopRestarts,
        HostExcluded,
        HostRejoined,
        Resized,
        PlannedRestart,
        ClusterStop,
        Straggler,
        CheckpointFailed,
        JobEnd,
    )
}
