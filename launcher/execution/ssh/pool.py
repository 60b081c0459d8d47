"""A job's host agents kept from one attempt to the next (the ssh launcher's warm restarts).

An attempt's :class:`~launcher.execution.ssh.backend.SshBackend` hands each healthy agent back at
its close (:meth:`AgentPool.put`: its session open, none of its ranks running); the next attempt
takes it (:meth:`AgentPool.take`) instead of connecting, logging in and starting an agent again,
and the agent's warm zygote (:mod:`launcher.execution.ssh.remote_zygote`) forks the restarted
ranks without importing MindSpore again.  Between attempts the pool's own
:class:`~launcher.execution.ssh.pump.Pump` pings the kept agents, so they do not end their host's
work by themselves, and notices a host lost meanwhile (that agent is not handed out).

:meth:`AgentPool.standby` opens agents on the job's spare hosts in the background when the job
starts, with their zygote importing: a restart that moves ranks to a spare finds it warm.

:meth:`AgentPool.close` (the job is over: ``SshBackend.end_job``) ends every kept agent as an
attempt's close ends its own: stdin closed, so the agent ends what it still runs, and the
connection closed.  Nothing kept outlives mslaunch: an agent ends when its session closes or it
hears no ping (``agent_timeout``), and its zygote with it.  One job at a time.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from launcher.execution.ssh.connection import SshConnection
from launcher.execution.ssh.hostagent import HostAgent
from launcher.execution.ssh.pump import Pump

#: A kept host: its connection and its agent.
Kept = Tuple[SshConnection, HostAgent]


class AgentPool:
    """Keeps a job's host agents between attempts (see the module doc).

    Attributes:
        next_id: the next rank id an attempt gives an agent (ids never repeat within the job, so
            a kept agent's frames of an earlier attempt's rank reach no new handle).
        reused: how many agents attempts took from the pool.
    """

    def __init__(self) -> None:
        self._kept: Dict[str, Kept] = {}
        self._lock = threading.RLock()  # the kept agents and their pump (attempts and the standby thread)
        self._pump: Optional[Pump] = None
        self._standby: Optional[threading.Thread] = None
        self.standby_asked = False
        self.next_id = 0
        self.reused = 0

    # ------------------------------------------------------------ attempts

    def take(self, hosts: Sequence[str]) -> Dict[str, Kept]:
        """The kept agents of ``hosts`` that still serve (the rest of what is kept stays, pinged);
        waits for the spare hosts' start (:meth:`standby`) first."""
        standby = self._standby
        if standby is not None:
            standby.join()
        with self._lock:
            starting = [self._kept[n][1] for n in hosts if n in self._kept and self._kept[n][1].state == "starting"]
        for agent in starting:  # a spare's agent still logging in: its "ready" (or its start timeout) first
            agent.wait_ready()
        out: Dict[str, Kept] = {}
        with self._lock:
            self._stop_pump()
            for name in hosts:
                kept = self._kept.pop(name, None)
                if kept is None:
                    continue
                conn, agent = kept
                if agent.serves() and conn.active():
                    out[name] = kept
                else:
                    end_agents([kept[1]], [kept[0]])
            self.reused += len(out)
            self._start_pump()
        return out

    def put(self, kept: Dict[str, Kept]) -> None:
        """Keep these agents for the next attempt."""
        if not kept:
            return
        with self._lock:
            self._stop_pump()
            old = [self._kept[n] for n in kept if n in self._kept and self._kept[n] is not kept[n]]
            self._kept.update(kept)
            self._start_pump()
        end_agents([a for _, a in old], [c for c, _ in old])

    # ------------------------------------------------------------ spare hosts

    def standby(self, open_hosts: Callable[[], Dict[str, Kept]]) -> None:
        """Run ``open_hosts`` (connect to the spare hosts and start their agents and zygotes) in
        the background, once per job; what it opens is kept."""
        if self.standby_asked:
            return
        self.standby_asked = True

        def run() -> None:
            try:
                opened = open_hosts()
            except Exception:  # noqa: BLE001 - a spare that cannot be reached now is tried again when a restart needs it
                return
            self.put(opened)

        self._standby = threading.Thread(target=run, name="ssh-standby", daemon=True)
        self._standby.start()

    # ------------------------------------------------------------ the end

    def close(self) -> None:
        """End every kept agent and close its connection (the job is over)."""
        standby = self._standby
        if standby is not None:
            standby.join()
        with self._lock:
            self._stop_pump()
            kept, self._kept = list(self._kept.values()), {}
        end_agents([a for _, a in kept], [c for c, _ in kept])

    def _start_pump(self) -> None:
        with self._lock:
            agents = [agent for _, agent in self._kept.values()]
        if agents:
            self._pump = Pump(agents)
            self._pump.start()

    def _stop_pump(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.stop()


def end_agents(agents: Sequence[HostAgent], conns: Sequence[SshConnection], timeout: float = 3.0) -> None:
    """Close every agent's stdin and wait (at most ``timeout`` s, all hosts at once) until sshd
    reports its exit, then close ``conns``, so no agent outlives mslaunch: closing the
    connections alone lets each agent end by itself a moment after mslaunch exited.  An agent
    whose ranks still run ends them first (SIGTERM, 2 s, SIGKILL).  A lost host is not waited for:
    its connection closed, or its agent went silent (a cut link: the connection still looks open
    from here, and the agent ends its ranks by itself once it hears no ping)."""
    waiting = []
    for agent in agents:
        chan = agent.chan
        if chan is None or chan.closed or chan.exit_status_ready() or agent.lost or not agent.conn.active():
            continue
        agent.conn.send_eof(chan)
        waiting.append(chan)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        time.sleep(0.005)
        waiting = [c for c in waiting if not (c.closed or c.exit_status_ready())]
    threads = [threading.Thread(target=conn.close, daemon=True) for conn in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5.0)
