"""mpirun settings that are not per app context (a value of :class:`~launcher.planning.job.spec.JobSpec`; pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class MpiOptions:
    """mpirun settings that are not per context.

    Attributes:
        mpirun: the mpirun executable.
        allow_run_as_root: add ``--allow-run-as-root`` (mslaunch runs as root).
        oversubscribe: add ``--oversubscribe``.
        nic: interface for ``btl_tcp_if_include`` / ``oob_tcp_if_include``.
        rsh_agent: ssh command line for OpenMPI's rsh agent (``plm_rsh_agent``), or None.
        hostfile: path of a generated hostfile to pass with ``--hostfile``, or None for ``-H``.
        extra: ``--mpi-arg`` passthrough, in order.
    """

    mpirun: str = "mpirun"
    allow_run_as_root: bool = False
    oversubscribe: bool = False
    nic: Optional[str] = None
    rsh_agent: Optional[str] = None
    hostfile: Optional[str] = None
    extra: Tuple[str, ...] = ()
