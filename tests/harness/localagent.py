"""The ssh host agent (``launcher/execution/ssh/remote_agent.py``) run as a local process, its stdin
kept open like an ssh channel, for the tests of the agent and of its zygote."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import psutil

from launcher.execution.ssh.agent import FrameReader, bootstrap_payload, op_line
from launcher.execution.ssh.remote_link import BOOTSTRAP, MAGIC


class LocalAgent:
    """The agent as a subprocess; a thread decodes its frames into per-rank output and events."""

    def __init__(
        self,
        ping_timeout: float = 30.0,
        heartbeat: float = 0.2,
        argv: Optional[List[str]] = None,
        sched_every: Optional[float] = None,
    ) -> None:
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-S", "-u", "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.head = b""
        self.out: Dict[int, bytearray] = {}
        self.events: List[Dict[str, Any]] = []
        self.beats: List[Dict[str, Any]] = []  # heartbeats
        self.cond = threading.Condition()
        self.eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.write(bootstrap_payload("here", ping_timeout, heartbeat, sched_every))

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def start(self, rid: int, argv: List[str], cwd: str, env: Optional[Dict[str, str]] = None, **cfg: Any) -> None:
        body = {"argv": argv, "env": env or {}, "cwd": cwd, "mkdir": False, "env_dump": None}
        body.update(cfg)
        self.write(op_line("start", rid, cfg=body))

    def _read(self) -> None:
        frames = FrameReader()
        head = b""
        synced = False
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            if not synced:
                head += data
                if MAGIC not in head:
                    continue
                self.head = head[: head.index(MAGIC)]
                data, synced = head[head.index(MAGIC) + len(MAGIC) :], True
            with self.cond:
                for kind, rid, body in frames.feed(data):
                    if kind == "O":
                        self.out.setdefault(rid, bytearray()).extend(body)
                    elif body.get("ev") != "hb":
                        self.events.append(body)
                    else:
                        self.beats.append(body)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = pred()
                if value:
                    return value
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; events {self.events}"
                self.cond.wait(left)

    def event(self, ev: str, rid: int, timeout: float = 20.0) -> Dict[str, Any]:
        return self.wait_for(
            lambda: next((e for e in self.events if e.get("ev") == ev and e.get("id") == rid), None), timeout
        )

    def exits(self) -> Dict[int, int]:
        with self.cond:
            return {e["id"]: e["rc"] for e in self.events if e.get("ev") == "exit"}

    def text(self, rid: int) -> str:
        with self.cond:
            return bytes(self.out.get(rid, b"")).decode()

    def close(self, timeout: float = 20.0) -> int:
        """Close stdin (the launcher goes away) and wait for the agent to end."""
        if not self.proc.stdin.closed:  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        return rc


def gone(pids: List[int], within: float = 5.0) -> List[int]:
    deadline = time.monotonic() + within
    while True:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
