"""Typed SSH settings: one value built once in ``launcher.cli`` from the ``--ssh-*`` flags.

This module imports nothing heavy (no paramiko), so the CLI can build the value at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

if TYPE_CHECKING:
    from launcher.planning.inventory.model import Host

#: Connections opened at once.
DEFAULT_POOL = 32
#: Seconds to connect (and authenticate) to one host (``--ssh-connect-timeout``).
CONNECT_TIMEOUT = 10.0
#: Seconds between pings to every agent.
PING_INTERVAL = 1.0
#: Seconds without a word from an agent after which its host counts as lost.
LOST_AFTER = 5.0
#: Seconds without a ping after which a host agent ends every rank of its host by itself.
AGENT_TIMEOUT = 8.0
#: Seconds between a host agent's samples of its ranks' scheduler figures (the straggler watch's
#: evidence), unless the watch looks more often.
SAMPLE_EVERY = 2.0
#: Default seconds for a host's agent to say "ready" (``--ssh-start-timeout``): the login
#: shell runs first (profile scripts, pyenv, ...), so this is longer than the liveness window.
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class SSHSettings:
    """How mslaunch talks SSH to remote hosts.

    Attributes:
        config: ssh config to read (``--ssh-config``); None: the plan's, else
            ``$MSLAUNCH_SSH_CONFIG``, else ``~/.ssh/config`` (see :func:`~.config.config_path`).
        accept_new: trust and record unknown host keys (``--ssh-accept-new``).
        connect_timeout: seconds per connection attempt (``--ssh-connect-timeout``).
        start_timeout: seconds for a host's agent to start (``--ssh-start-timeout``).
        known_hosts: known_hosts file to use instead of the config's ``UserKnownHostsFile``.
        lost_after: seconds of silence after which a host counts as lost, once its agent started.
        agent_timeout: seconds without a ping after which a host agent ends its host's ranks.
        pool: connections opened at once.
        on_note: called with one line for the console (e.g. the threads a host's cores gave its
            ranks, learned at start); None: not shown.
        zygote: modules each host's zygote imports before it forks that host's Python ranks
            (:mod:`launcher.execution.ssh.remote_zygote`); empty: every rank is a plain process.
        keep: the job's pool that keeps each host's agent (and its zygote) from one attempt to
            the next (:mod:`launcher.execution.ssh.pool`); None: each attempt connects anew.
        standby: the job's spare hosts with their ranks' interpreter: with ``keep``, their agents
            (and zygotes) start in the background when the job starts.
        sample_every: seconds between each host agent's samples of its ranks' scheduler figures
            (:func:`sample_every`: twice per look of the straggler watch, so each look has a new one).
    """

    config: Optional[str] = None
    accept_new: bool = False
    connect_timeout: float = CONNECT_TIMEOUT
    start_timeout: float = START_TIMEOUT
    known_hosts: Optional[str] = None
    lost_after: float = LOST_AFTER
    agent_timeout: float = AGENT_TIMEOUT
    pool: int = DEFAULT_POOL
    on_note: Optional[Callable[[str], None]] = field(default=None, compare=False)
    zygote: Tuple[str, ...] = ()
    keep: Optional[Any] = field(default=None, compare=False)  # an AgentPool (its module imports this one)
    standby: Tuple[Tuple["Host", str], ...] = ()
    sample_every: float = SAMPLE_EVERY


def sample_every(look_every: float) -> float:
    """A host agent's seconds between samples for a straggler watch that looks every
    ``look_every`` seconds: half that, so every look finds a sample taken since the last (a look
    that finds the same sample again confirms nothing), between 0.5 s and :data:`SAMPLE_EVERY`."""
    return max(0.5, min(SAMPLE_EVERY, look_every / 2))
