"""Stack dumps of the ranks OpenMPI started on other hosts: on each such host, over ssh.

mpirun's ranks on this machine are its descendants and are dumped here
(:meth:`launcher.execution.backend.ProcessHandle.dump_stacks`).  A rank on another host is a child
of that host's ``orted``; mslaunch knows no pid of it.  So one command per host, through the same
ssh that OpenMPI reaches the host with (the plan's ``plm_rsh_agent``), runs the stack dump there
(:mod:`launcher.execution.process.stackdump`, sent as source: mslaunch need not be installed on
the host), which finds the host's ranks by the job's marker in their environment: the attempt's
log folder (``MSLAUNCH_LOG_DIR``, which every rank context of the mpirun command carries) and the
rank's ``RANK_ID`` (set by the per-rank wrapper), read from ``/proc/PID/environ`` (no command line
or other free text is parsed).  Each dump comes back as JSON lines and is written here.
"""

from __future__ import annotations

import shlex
from typing import Dict, List, Optional, Sequence

from launcher.execution.process.stackdump import dump_each, remote_dump
from launcher.planning.inventory.model import is_local
from launcher.planning.job.spec import Plan

__all__ = ["MARKER", "remote_dumps"]

#: The variable whose value (the attempt's log folder) marks the job's ranks on a host.
MARKER = "MSLAUNCH_LOG_DIR"
#: Seconds ssh may take to connect before a host's dump is given up.
CONNECT_TIMEOUT = 10


def host_command(python: str, attempt_dir: str, ranks: Sequence[int]) -> str:
    """The shell command that dumps ``ranks`` of the job's attempt on a host (one string, as ssh takes it)."""
    from launcher.execution.probes import program_source

    source = program_source("launcher.execution.process.stackdump")
    argv = [
        python,
        "-S",
        "-c",
        source,
        "--stdout",
        "--marker",
        f"{MARKER}={attempt_dir}",
        "--ranks",
        ",".join(str(r) for r in ranks),
    ]
    return " ".join(shlex.quote(a) for a in argv)


def ssh_argv(rsh_agent: Optional[str], host: str, command: str) -> List[str]:
    """``<the rsh agent> -o ConnectTimeout=N <host> <command>`` (plain ``ssh`` without an agent)."""
    agent = shlex.split(rsh_agent) if rsh_agent else ["ssh", "-o", "BatchMode=yes"]
    return agent[:1] + ["-o", f"ConnectTimeout={CONNECT_TIMEOUT}"] + agent[1:] + [host, command]


def remote_dumps(
    plan: Plan, rsh_agent: Optional[str], attempt_dir: str, folder: str, skip: Sequence[int] = ()
) -> Dict[Optional[int], List[str]]:
    """Dump the ranks of ``plan`` on every host other than this machine, each host at once (a thread
    each, one ssh command a host); rank -> files (the rank's own process first).  Ranks in ``skip``
    (already dumped here) are left out; a host that cannot be reached gives nothing."""
    python = {h.name: h.python or "python3" for h in plan.hosts}
    by_host: Dict[str, List[int]] = {}
    for proc in plan.ranks:
        if proc.rank is not None and proc.rank not in skip and not is_local(proc.host):
            by_host.setdefault(proc.host, []).append(proc.rank)

    def one(host: str, ranks: List[int]) -> Dict[Optional[int], List[str]]:
        argv = ssh_argv(rsh_agent, host, host_command(python.get(host, "python3"), attempt_dir, ranks))
        return remote_dump(argv, folder)

    return dump_each(by_host, one)
