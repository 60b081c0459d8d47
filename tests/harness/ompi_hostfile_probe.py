"""Ask the installed OpenMPI how it reads hostfiles, without reaching any host.

Run as ``unshare --net --pid --fork --kill-child python -m tests.harness.ompi_hostfile_probe DIR``
(root): inside a fresh network namespace that has only a loopback interface (and a pid
namespace, so that every process started in it ends with it), for every ``DIR/*.hosts`` it runs
``mpirun --hostfile F`` with

* ``--mca ras_base_verbose 5``: the allocation (hosts, slots, max_slots) is printed right after
  the hostfile is read, before any daemon is started;
* ``--mca plm_rsh_agent <recorder>``: the "ssh" that would start a daemon on each remote host is
  a script that writes its arguments (``[user@]host [-p port] orted ...``) to ``F.agent`` and
  then waits, so nothing is started anywhere and name lookups cannot leave the namespace.

An agent that failed at once would let mpirun give up before it started the agents of the other
hosts, so the agents wait: once every remote host of the printed allocation has its agent line
(or mpirun ended by itself: a refused file), mpirun's session is killed. It writes ``F.out`` /
``F.err`` (mpirun's output) and ``F.agent``, four mpiruns at a time.
:func:`read_result` turns them into what OpenMPI made of the file.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

AGENT = '#!/bin/sh\nprintf "%s\\n" "$*" >> "$MSL_AGENT_LOG"\nexec sleep 600\n'
#: Longest one mpirun may take to print its allocation and start its agents.
DEADLINE = 120.0
_ALLOC_RE = re.compile(r"^\t(\S+): flags=0x[0-9a-fA-F]+ slots=(\d+) max_slots=(\d+) ", re.MULTILINE)


def _agents_started(path: str) -> bool:
    """Whether every remote host of the allocation printed so far has its agent line."""
    with open(path + ".out", errors="replace") as f:
        remote = {m.group(1) for m in _ALLOC_RE.finditer(f.read())} - {socket.gethostname()}
    if not remote or not os.path.exists(path + ".agent"):
        return False
    with open(path + ".agent") as f:
        return remote <= {line.split()[0].rpartition("@")[2] for line in f if line.strip()}


def probe(path: str, agent: str) -> None:
    # one session directory per mpirun: OpenMPI creates ``$TMPDIR/ompi.<host>.<uid>`` and fails
    # ("mkdir ... File exists") when two mpiruns started at once race to create the same one
    tmp = path + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, MSL_AGENT_LOG=path + ".agent", TMPDIR=tmp)
    argv = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "--mca",
        "ras_base_verbose",
        "5",
        "--mca",
        "plm_rsh_agent",
        agent,
        "--hostfile",
        path,
        "-n",
        "1",
        "true",
    ]
    with open(path + ".out", "wb") as out, open(path + ".err", "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True)
    deadline = time.monotonic() + DEADLINE
    try:
        while proc.poll() is None and not _agents_started(path) and time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main(folder: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    agent = os.path.join(folder, "agent.sh")
    with open(agent, "w") as f:
        f.write(AGENT)
    os.chmod(agent, 0o755)
    files = sorted(glob.glob(os.path.join(folder, "*.hosts")))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: probe(p, agent), files))


@dataclass(frozen=True)
class OmpiResult:
    """What OpenMPI made of one hostfile.

    Attributes:
        accepted: the allocation was printed and no message names the hostfile (every
            hostfile error of OpenMPI's names the file).
        hosts: name -> (slots, max_slots or None), as read (before any daemon reports cores).
        ssh: name -> (user or None, port or None) from the agent's command line of each remote host.
        agent_ran: the agent was started at least once (so ``ssh`` is known).
        stderr: mpirun's messages, for failure reports.
    """

    accepted: bool
    hosts: Dict[str, Tuple[int, Optional[int]]]
    ssh: Dict[str, Tuple[Optional[str], Optional[int]]]
    agent_ran: bool
    stderr: str


def read_result(path: str) -> OmpiResult:
    with open(path + ".out", errors="replace") as f:
        out = f.read()
    with open(path + ".err", errors="replace") as f:
        err = f.read()
    hosts = {m.group(1): (int(m.group(2)), int(m.group(3)) or None) for m in _ALLOC_RE.finditer(out)}
    ssh: Dict[str, Tuple[Optional[str], Optional[int]]] = {}
    agent_ran = os.path.exists(path + ".agent")
    if agent_ran:
        with open(path + ".agent") as f:
            for line in f:
                words = line.split()
                user, _, host = words[0].rpartition("@")
                port = int(words[2]) if words[1:2] == ["-p"] else None
                ssh[host] = (user or None, port)
    named = os.path.basename(path) in err
    return OmpiResult(accepted=bool(hosts) and not named, hosts=hosts, ssh=ssh, agent_ran=agent_ran, stderr=err)


if __name__ == "__main__":
    main(sys.argv[1])
