"""Node name -> address of Slurm nodes (``scontrol show node -o``): node names need not resolve
on the nodes, but ``MS_SCHED_HOST`` must be an address every node reaches."""
from __future__ import annotations

import subprocess
from typing import Dict, Sequence

from launcher.errors import LaunchError
from launcher.planning.slurmalloc import parse_node_addrs


def node_addrs(nodes: Sequence[str], timeout: float = 30.0) -> Dict[str, str]:
    """NodeAddr of each of ``nodes`` (a node scontrol does not list maps to its name).

    Raises:
        LaunchError: scontrol is missing or fails.
    """
    from launcher.planning.hostlist import fold_hostlist

    try:
        res = subprocess.run(["scontrol", "show", "node", "-o", fold_hostlist(list(nodes))], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LaunchError("scontrol not found; install the Slurm client (Debian: apt-get install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"scontrol show node did not answer within {timeout:g} s; is slurmctld reachable?") from None
    if res.returncode != 0:
        raise LaunchError(f"scontrol show node failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
    addrs = parse_node_addrs(res.stdout)
    return {n: addrs.get(n, n) for n in nodes}
