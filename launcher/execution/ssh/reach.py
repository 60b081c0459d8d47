"""Whether a host left out of a job answers again (``--rejoin-after``): its ssh port accepts a
TCP connection within a few seconds (where the job's ssh config points it)."""

from __future__ import annotations

import socket
from typing import Callable, Optional, Sequence

from launcher.planning.inventory.model import Host

__all__ = ["answers_probe"]


def answers_probe(hosts: Sequence[Host], ssh_config: Optional[str], timeout: float = 3.0) -> Callable[[str], bool]:
    """A probe of ``hosts`` by name: True when the host's ssh port accepts within ``timeout``
    seconds; a host it does not know, or whose config cannot be read, answers False."""
    from launcher.execution.ssh.config import read_ssh_config, resolve_target

    by_name = {h.name: h for h in hosts}

    def answers(name: str) -> bool:
        host = by_name.get(name)
        if host is None:
            return False
        try:
            target = resolve_target(host, read_ssh_config(ssh_config))
            with socket.create_connection((target.hostname, target.port), timeout=timeout):
                return True
        except (OSError, ValueError):
            return False

    return answers
