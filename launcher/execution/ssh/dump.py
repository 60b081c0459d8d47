"""Stack dumps of ranks on ssh hosts: the dump runs on the rank's host and its text comes back.

* ssh backend: one ``exec <python> -S -c <stackdump source> --stdout rank<R>=<pid> ...`` per host
  (every running rank of the host at once) over the host's open connection (mslaunch need not be installed there; py-spy
  is used when it is next to
  that Python or on its PATH, else /proc);
* slurm backend: one ``srun --jobid J --overlap -N1 -n1 -w NODE <python> -m
  launcher.execution.process.stackdump --stdout ...`` per node, with the pids the shims recorded
  (:mod:`launcher.execution.slurm.dump`);
* mpirun: the ranks on this machine are descendants of mpirun and are dumped here (named by their
  ``RANK_ID``); those OpenMPI started on other hosts are found there by the job's marker in their
  environment, one ssh command a host (:mod:`launcher.execution.mpirun.dump`).

:mod:`launcher.execution.process.stackdump` prints one JSON line ``{"name", "pid", "text"}`` per process;
:func:`write_dumps` turns them into ``<folder>/<name>.pid<P>.txt`` files here.
"""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from launcher.execution.process.stackdump import REMOTE_TIMEOUT, targets, write_dumps

__all__ = ["StackDumps", "agent_dump", "ssh_dump"]


def ssh_dump(conn: Any, python: str, procs: Sequence[Tuple[str, int]], folder: str) -> Dict[Optional[int], List[str]]:
    """Dump processes on an ssh host over its connection (:class:`launcher.execution.ssh.connection.SshConnection`)."""
    from launcher.execution.probes import program_source

    source = program_source("launcher.execution.process.stackdump")
    command = " ".join(shlex.quote(p) for p in [python, "-S", "-c", source, "--stdout", *targets(procs)])
    rc, out, _ = conn.run(command, timeout=REMOTE_TIMEOUT)
    return write_dumps(folder, out.decode("utf-8", "replace"))


@dataclass
class StackDumps:
    """The stack dumps of one ssh host's ranks (a host agent's ``stack_dumps``): folder -> the
    files of each rank (None: the scheduler), written by the first dump into that folder."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: Dict[str, Dict[Optional[int], List[str]]] = field(default_factory=dict)


def agent_dump(agent: Any, folder: str, rank: Optional[int]) -> Dict[Optional[int], List[str]]:
    """``rank``'s files of one dump of every running rank of an ssh host agent
    (:class:`launcher.execution.ssh.hostagent.HostAgent`, its :class:`StackDumps` ``stack_dumps``):
    the first call for a host and ``folder`` dumps them all in one remote command; the other ranks
    of that host get its result."""
    dumps: StackDumps = agent.stack_dumps
    with dumps.lock:
        done = dumps.done
        if folder not in done:
            targets = [(f"rank{h.plan.rank}", h.pid) for h in list(agent.handles.values()) if h.pid and not h.done]
            done[folder] = ssh_dump(agent.conn, agent.python, targets, folder) if targets else {}
        return {rank: done[folder][rank]} if rank in done[folder] else {}
