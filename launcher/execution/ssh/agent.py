"""The launcher's side of the remote agent protocol (:mod:`launcher.execution.remote_agent`).

Each rank runs under the agent, sent as source text over the channel's stdin (the remote host
needs only a Python 3; ``python:`` in the inventory, else ``python3``).  The one remote command
line is ``exec <python> -S -u -c <bootstrap>`` (:func:`agent_command`, every piece
``shlex.quote``-d); argv, env and cwd travel as JSON on stdin (:meth:`AgentConfig.payload`) and
never meet a shell.  The agent's stderr carries the protocol (:func:`parse_message`):
``started <pid>``, heartbeats, ``error <message>``, ``exit <rc>``; the launcher writes ``ping``,
``TERM`` and ``KILL`` lines to its stdin.
"""
from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from launcher.execution.ssh.settings import PING_INTERVAL
from launcher.planning.plan import ProcPlan

#: Exit code of a rank whose host was lost (OpenSSH's for a failed connection).
LOST_RC = 255

_AGENT_SOURCE: Optional[str] = None


def agent_source() -> str:
    """The source text of :mod:`launcher.execution.remote_agent` (read once)."""
    global _AGENT_SOURCE
    if _AGENT_SOURCE is None:
        from launcher.execution import remote_agent

        with open(remote_agent.__file__, "r", encoding="utf-8") as fh:
            _AGENT_SOURCE = fh.read()
    return _AGENT_SOURCE


def agent_command(python: str) -> str:
    """The remote command line that starts the agent under ``python`` (every piece quoted)."""
    from launcher.execution.remote_agent import BOOTSTRAP

    return "exec " + " ".join(shlex.quote(p) for p in (python, "-S", "-u", "-c", BOOTSTRAP))


@dataclass(frozen=True)
class AgentConfig:
    """What the agent is told about its rank (the ``cfg`` object of the first stdin line).

    Attributes:
        argv: the rank's argv (never given to a shell).
        env: variables set on top of the login environment.
        cwd: working directory.
        mkdir: create ``cwd`` first (it lies under the job directory).
        env_dump: where the agent writes the rank's full environment (ranktable method), or None.
        ping_timeout: seconds without a ping after which the agent ends its rank.
        heartbeat: seconds between the agent's heartbeats.
        host: the host's name as the inventory gives it (for messages).
    """

    argv: Tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    mkdir: bool
    env_dump: Optional[str]
    ping_timeout: float
    heartbeat: float
    host: str

    @classmethod
    def for_rank(cls, proc: ProcPlan, cwd: str, job_dir: str, ping_timeout: float) -> "AgentConfig":
        """The config of ``proc`` run in ``cwd`` (created by the agent when under ``job_dir``)."""
        under_job = cwd == job_dir or cwd.startswith(job_dir.rstrip("/") + "/")
        return cls(
            argv=tuple(proc.argv),
            env=dict(proc.env),
            cwd=cwd,
            mkdir=under_job,
            env_dump=posixpath.join(cwd, posixpath.basename(proc.env_dump)) if proc.env_dump else None,
            ping_timeout=ping_timeout,
            heartbeat=PING_INTERVAL,
            host=proc.host,
        )

    def to_json(self) -> Dict[str, Any]:
        """The JSON object :func:`launcher.execution.remote_agent.main` reads."""
        return {"argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd, "mkdir": self.mkdir, "env_dump": self.env_dump,
                "ping_timeout": self.ping_timeout, "heartbeat": self.heartbeat, "host": self.host}

    def payload(self) -> bytes:
        """The first stdin line: the agent's source and this config, as one JSON line."""
        return json.dumps({"src": agent_source(), "cfg": self.to_json()}).encode("utf-8") + b"\n"


def parse_message(line: str) -> Optional[Tuple[str, str]]:
    """``(kind, argument)`` of an agent protocol line (``@@mslaunch started 42`` -> ``("started",
    "42")``), or None for any other stderr line."""
    from launcher.execution.remote_agent import MARK

    if not line.startswith(MARK + " "):
        return None
    kind, _, arg = line[len(MARK) + 1:].partition(" ")
    return kind, arg
