"""Slurm nodes as slurmctld knows them (``scontrol show node -o``): node name -> address (node
names need not resolve on the nodes, but ``MS_SCHED_HOST`` must be an address every node
reaches), the nodes Slurm holds lost (down, or their slurmd not responding), and this machine's
address towards them."""

from __future__ import annotations

import socket
import subprocess
from typing import Dict, Sequence

from launcher.errors import LaunchError
from launcher.planning.backends.slurm import node_lost, parse_node_addrs, parse_node_states


def node_addrs(nodes: Sequence[str], timeout: float = 30.0) -> Dict[str, str]:
    """NodeAddr of each of ``nodes`` (a node scontrol does not list maps to its name).

    Raises:
        LaunchError: scontrol is missing or fails.
    """
    from launcher.planning.inventory.hostlist import fold_hostlist

    try:
        res = subprocess.run(
            ["scontrol", "show", "node", "-o", fold_hostlist(list(nodes))],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise LaunchError(
            "scontrol not found; install the Slurm client (Debian: apt-get install slurm-client)"
        ) from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"scontrol show node did not answer within {timeout:g} s; is slurmctld reachable?") from None
    if res.returncode != 0:
        raise LaunchError(f"scontrol show node failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
    addrs = parse_node_addrs(res.stdout)
    return {n: addrs.get(n, n) for n in nodes}


def my_addr(peer: str) -> str:
    """This machine's address on the route to ``peer`` (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((peer, 9))
        return str(s.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        s.close()


def lost_nodes(nodes: Sequence[str], timeout: float = 5.0) -> Dict[str, str]:
    """The nodes of ``nodes`` Slurm itself holds lost (``DOWN`` or ``NOT_RESPONDING``, see
    :func:`~launcher.planning.backends.slurm.node_lost`), node -> how, from one ``scontrol show node
    -o``; {} when none is, or when scontrol cannot say (no error: the caller's failure stands as
    it is)."""
    from launcher.planning.inventory.hostlist import fold_hostlist

    if not nodes:
        return {}
    try:
        res = subprocess.run(
            ["scontrol", "show", "node", "-o", fold_hostlist(sorted(set(nodes)))],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if res.returncode != 0:
        return {}
    out: Dict[str, str] = {}
    for node, state in parse_node_states(res.stdout).items():
        how = node_lost(node, state)
        if how is not None and node in nodes:
            out[node] = how
    return out
