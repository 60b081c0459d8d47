"""The named values mslaunch writes and compares: methods, roles, job states, artefact and event kinds.

Each is a ``str`` enum: a member *is* its string (``Method.DYNAMIC == "dynamic"``), so JSON files,
CLI choices and comparisons with plain strings read from disk keep working, and ``str()`` /
f-strings give the bare value on every Python version (3.12 changed the default ``format`` of
mixed-in enums; :class:`StrEnum` pins it).

Also the one wording of a process's exit status (:func:`describe_returncode`).
"""

from __future__ import annotations

import signal
from enum import Enum
from typing import Tuple, Type, TypeVar

__all__ = [
    "ArtefactKind",
    "EventKind",
    "JobStatus",
    "Method",
    "Role",
    "StrEnum",
    "describe_returncode",
    "signal_name",
    "values",
]

E = TypeVar("E", bound="StrEnum")


class StrEnum(str, Enum):
    """A ``str`` enum whose ``str()`` and ``format()`` are its value (``"dynamic"``, not ``Method.DYNAMIC``)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


def values(enum: Type[E]) -> Tuple[str, ...]:
    """The plain string values of ``enum``, in definition order (for choices and messages)."""
    return tuple(member.value for member in enum)


class Method(StrEnum):
    """Rendezvous method: how ranks find each other (``--method``)."""

    DYNAMIC = "dynamic"  #: MindSpore dynamic cluster: one MS_SCHED scheduler + MS_WORKERs
    RANKTABLE = "ranktable"  #: Ascend HCCL rank table: RANK_TABLE_FILE + RANK_ID + DEVICE_ID
    MPI = "mpi"  #: OpenMPI assigns the ranks


class Role(StrEnum):
    """What one planned process is."""

    WORKER = "worker"
    SCHEDULER = "scheduler"
    #: one process that starts and stands for many ranks (``mpirun``)
    LAUNCHER = "launcher"


class JobStatus(StrEnum):
    """How a job ended (``summary.json`` ``status``; ``mslaunch status`` adds the live states)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    STOPPED = "stopped"
    #: stopped gracefully on Slurm's preemption / time-limit warning (``--signal=USR1@<s>``)
    PREEMPTED = "preempted"
    #: no rank made progress for --hang-timeout, or a rank's collective timed out (``docs/long-jobs.md``)
    HUNG = "hung"
    #: ended by mslaunch to restart on other hosts at once (``--straggler replace``,
    #: ``--grow-at-checkpoint``): the ranks save at their next step's end; the job goes on
    PLANNED = "planned"
    #: submitted with ``mslaunch sbatch``; its run has not started yet
    SUBMITTED = "submitted"
    #: a job whose supervising mslaunch still holds its lock
    RUNNING = "running"
    #: no lock holder and no summary: its mslaunch died without a word
    LOST = "lost"
    #: a job file that cannot be read
    CORRUPT = "corrupt"


class ArtefactKind(StrEnum):
    """What a file a plan writes into the job dir before start is (``plan.json`` ``artefacts[].kind``)."""

    RANK_TABLE = "rank_table"
    HOSTFILE = "hostfile"
    SSH_CONFIG = "ssh_config"


class EventKind(StrEnum):
    """Kinds of the supervisor's events (``events.jsonl`` ``kind``; the report's timeline)."""

    PREFLIGHT = "preflight"  # the health check before the start: verdicts, hosts left out (docs/health.md)
    JOB_START = "job_start"
    METRICS = "metrics"  # where the job's metrics are exposed (--metrics-port / --metrics-textfile, docs/watching.md)
    STARTED = "started"
    PID = "pid"  # a started process's pid on its own host, learnt after its start (ssh, mpirun, Slurm)
    EXITED = "exited"  # a process of the attempt ended (what `status` of a running job shows)
    FAILURE = "failure"
    TEARDOWN = "teardown"
    RESTART = "restart"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    HUNG = "hung"  # the attempt is hung (no progress for the limit, or a collective timed out)
    STOP_RESTARTS = "stop_restarts"  # a crash loop: restarts stop (docs/long-jobs.md)
    HOST_EXCLUDED = "host_excluded"  # a restart leaves out a host that failed too often (docs/spare-hosts.md)
    RESIZED = "resized"  # a restart runs another number of ranks: fewer hosts left, or hosts back (--min-hosts)
    HOST_REJOINED = "host_rejoined"  # a host left out earlier is given ranks again (--min-hosts, --rejoin-after)
    CLUSTER_STOP = "cluster_stop"  # the cluster's scheduler ends the job (Slurm: preemption, time limit, scancel)
    PLANNED_RESTART = "planned_restart"  # mslaunch ends the attempt to restart on other hosts (docs/spare-hosts.md)
    STRAGGLER = "straggler"  # a rank waits for CPU far more than the others, or no longer (docs/long-jobs.md)
    CKPT_FAILED = "ckpt_failed"  # a rank could not write a checkpoint; the job trains on (docs/long-jobs.md)
    JOB_END = "job_end"


def signal_name(num: int) -> str:
    """``SIGKILL`` for 9; ``SIG<num>`` for a number the platform has no name for."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def describe_returncode(returncode: int) -> str:
    """The one wording of a process's exit status that summaries, events and the console show.

    Args:
        returncode: subprocess convention: ``>= 0`` an exit code, ``< 0`` killed by that signal.

    Returns:
        ``"exit code 3"`` or ``"killed by SIGKILL"`` (``"killed by SIG77"`` for an unnamed signal).
    """
    if returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exit code {returncode}"
