"""Collect one file from many hosts in parallel (``ranktable gen --collect``)."""

from __future__ import annotations

from typing import Dict, Sequence

from launcher.errors import LaunchError
from launcher.execution.ssh.connection import SshConnection, connect_each, run_parallel
from launcher.execution.ssh.settings import SSHSettings
from launcher.execution.ssh.transfer import read_file
from launcher.planning.inventory.model import Host


def collect_files(hosts: Sequence[Host], path: str, settings: SSHSettings = SSHSettings()) -> Dict[str, str]:
    """Read ``path`` on every host in parallel (``localhost`` from this machine's disk).

    Returns:
        host name -> the file's text.

    Raises:
        LaunchError: naming every host that cannot be reached or has no readable ``path``.
    """
    remote = [h for h in hosts if not h.is_local]
    conns = connect_each(remote, settings) if remote else {}
    try:

        def one(host: Host) -> str:
            if host.is_local:
                return _read_local(host, path)
            conn = conns[host.name]
            if isinstance(conn, str):
                raise LaunchError(conn)
            return read_file(conn, path).decode("utf-8", "replace")

        results = run_parallel(one, list(hosts), settings.pool)
    finally:
        for c in conns.values():
            if isinstance(c, SshConnection):
                c.close()
    errors = [f"{h.name}: {exc}" for h, (_, exc) in zip(hosts, results) if exc is not None]
    if errors:
        raise LaunchError(f"cannot collect {path} from {len(errors)} of {len(hosts)} host(s): " + "; ".join(errors))
    return {h.name: text for h, (text, _) in zip(hosts, results)}


def _read_local(host: Host, path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError as exc:
        raise LaunchError(f"cannot read {path} on {host.name}: {exc.strerror}") from None
