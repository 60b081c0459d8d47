"""The one thread that reads every host agent's channel of the ssh launcher, checks their
liveness and pings them (an attempt's :class:`~launcher.execution.ssh.backend.SshBackend`, or the
job's :class:`~launcher.execution.ssh.pool.AgentPool` between attempts)."""

from __future__ import annotations

import os
import selectors
import threading
import time
from typing import Dict, List

from launcher.execution.ssh.hostagent import HostAgent
from launcher.execution.ssh.settings import PING_INTERVAL

#: Seconds between liveness checks of every host agent.
_TICK = 0.25


class Pump(threading.Thread):
    """The one thread that reads every host agent's channel (``selectors``), checks liveness
    and pings; it never blocks on a link (requests go through each connection's sender)."""

    def __init__(self, agents: List[HostAgent]) -> None:
        super().__init__(name="ssh-pump", daemon=True)
        self.agents = agents
        self.stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop at once (it wakes from ``select``) and wait for it."""
        self.stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        self.join(timeout)
        if not self.is_alive():
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        registered: Dict[int, HostAgent] = {}
        for a in self.agents:
            if a.chan is not None and not a.ended:
                fd = a.chan.fileno()
                sel.register(fd, selectors.EVENT_READ, a)
                registered[fd] = a
        next_ping = time.monotonic() + PING_INTERVAL
        next_check = time.monotonic()
        try:
            while not self.stopping.is_set():
                for key, _ in sel.select(_TICK):
                    if key.data is None:  # woken by stop()
                        continue
                    key.data.pump()
                    if key.data.eof_since is not None:  # the channel stays readable from now on
                        sel.unregister(key.fd)
                        registered.pop(key.fd, None)
                now = time.monotonic()
                if now >= next_check:
                    for a in self.agents:
                        a.check(now)
                    next_check = now + _TICK
                for fd, a in list(registered.items()):
                    if a.ended:
                        sel.unregister(fd)
                        del registered[fd]
                if now >= next_ping:
                    for a in self.agents:
                        a.ping()
                    next_ping = now + PING_INTERVAL
        finally:
            sel.close()
