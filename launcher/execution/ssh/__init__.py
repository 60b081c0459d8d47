"""The ssh backend: paramiko connections to remote hosts, one remote agent per host.

Modules (each imports only those above it)::

    settings    SSHSettings, the typed --ssh-* flags (no paramiko: cheap to import)
    config      ssh config (OpenSSH's, Include expanded) -> SshTarget per host
    hostkeys    known_hosts policies: refuse unknown keys, or trust on first use
    connection  SshConnection, connect_each / connect_all over a bounded thread pool
    transfer    SFTP: put_file (atomic, read back), read_file
    agent       the launcher's side of the host agent protocol (AgentConfig, requests, frames)
    backend     SshBackend, its host agents (HostAgent) and rank handles (SshProcess)
    collect     collect_files: one file from many hosts

Only this package (and :mod:`launcher.execution.checks.doctor`) talks SSH.  It never logs key
material; plans and logs hold key *paths* only.

The names below are re-exported lazily (PEP 562), so ``from launcher.execution.ssh import
SSHSettings`` does not import paramiko; everything else loads on first use.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List

#: public name -> (module, name there)
_EXPORTS: Dict[str, tuple] = {
    **{n: ("settings", n) for n in ("SSHSettings", "DEFAULT_POOL", "CONNECT_TIMEOUT", "PING_INTERVAL", "LOST_AFTER",
                                     "AGENT_TIMEOUT", "START_TIMEOUT")},
    **{n: ("config", n) for n in ("SshTarget", "config_path", "read_ssh_config", "resolve_target", "resolve_addrs")},
    **{n: ("hostkeys", n) for n in ("UnknownHostKey", "RefuseUnknownPolicy", "AcceptNewPolicy", "fingerprint")},
    **{n: ("connection", n) for n in ("ConnectFailure", "SshConnection", "connect_each", "connect_all", "open_client",
                                       "describe_connect_error", "run_parallel")},
    "_describe_connect_error": ("connection", "describe_connect_error"),
    "_parallel": ("connection", "run_parallel"),
    **{n: ("transfer", n) for n in ("put_file", "read_file")},
    **{n: ("agent", n) for n in ("AgentConfig", "LOST_RC", "agent_source", "agent_command", "bootstrap_payload", "op_line",
                                  "FrameReader")},
    **{n: ("backend", n) for n in ("SshBackend", "SshProcess", "HostAgent")},
    "collect_files": ("collect", "collect_files"),
}

__all__ = sorted(n for n in _EXPORTS if not n.startswith("_"))


def __getattr__(name: str) -> Any:
    """Load ``name`` from the submodule that defines it (see :data:`_EXPORTS`)."""
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
