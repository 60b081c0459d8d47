"""The zygote process as mslaunch sees it, and the pool that keeps it between attempts.

:class:`Zygote` starts one :mod:`launcher.execution.local.zygote_server` process, reads its
replies and the exits of the children it forked (its reader thread), sends it requests, and says
whether a new attempt may fork from it (:meth:`Zygote.reusable`).  :class:`ZygotePool` keeps a
job's zygote from one attempt to the next.  Used by :class:`launcher.execution.local.zygote.ZygoteBackend`
(the forking and the fallback to plain processes are there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Optional, Sequence

from launcher.execution.process.fastjoin import zygote_env
from launcher.execution.process.handle import ReportedProcess
from launcher.execution.process.spawn import _child_setup
from launcher.execution.process.watchdog import TOKEN_VAR


class Zygote:
    """One zygote process and what mslaunch knows of it (fed by its reader thread).

    A job's attempt uses it through :class:`~launcher.execution.local.zygote.ZygoteBackend`; a
    :class:`ZygotePool` may keep it for the next attempt (:meth:`reusable` says whether that is safe).
    """

    def __init__(self, preload: Sequence[str], env: Dict[str, str]) -> None:
        self.preload = tuple(preload)
        self.env = env  # what it started (and imported) under
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.reader: Optional[threading.Thread] = None
        self.cv = threading.Condition()
        self.state: Optional[str] = None  # None: importing; "ready"; or why it cannot fork
        self.ready_info: Dict[str, Any] = {}
        self.replies: "list[Dict[str, Any]]" = []
        self.children: Dict[int, ReportedProcess] = {}  # pid -> the backend's ZygoteProcess
        self.early: Dict[int, int] = {}

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def start(self, watchdog: Optional[Any]) -> Optional[str]:
        """Start the process; why it could not, or None."""
        # Like a local rank: a subreaper registered with the watchdog and carrying the job's token,
        # so a SIGKILL of mslaunch ends the zygote and every process it forked, however deep.
        # With the shim that shortens MindSpore's address polls (launcher.execution.process.fastjoin)
        # where it can be built; its "ready" report says whether it has it.
        env = zygote_env(self.env)[0]
        fd: Optional[int] = None
        sig = signal.SIGKILL
        if watchdog is not None:
            env[TOKEN_VAR] = watchdog.token
            fd, sig = watchdog.fd, signal.SIGSTOP
        parent = os.getpid()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.execution.local.zygote_server", *self.preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=lambda: _child_setup(sig, fd, parent),
                close_fds=True,
            )
        except OSError as exc:
            return f"the zygote could not start ({exc.strerror})"
        self.reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self.reader.start()
        return None

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "exit" in msg:
                pid, rc = int(msg["exit"]), int(msg["status"])
                with self.cv:
                    child = self.children.get(pid)
                    if child is None:
                        self.early[pid] = rc
                if child is not None:
                    child.exited(rc)
                continue
            with self.cv:
                if self.state is None:  # the first line: ready, or why not
                    self.state = "ready" if "ready" in msg else str(msg.get("unsafe") or msg)
                    self.ready_info = msg.get("ready") or {}
                else:
                    self.replies.append(msg)
                self.cv.notify_all()
        # The zygote is gone: children it had not reported are lost to us (they die with it).
        with self.cv:
            if self.state is None:
                self.state = "the zygote ended during its import"
            self.replies.append({"error": "the zygote process ended"})
            self.cv.notify_all()
            pending = [c for c in self.children.values() if c.poll() is None]
        for child in pending:
            child.exited(255)

    def wait_ready(self) -> str:
        """``ready``, or why it cannot fork (waits for the end of its import)."""
        with self.cv:
            while self.state is None:
                self.cv.wait()
            return self.state

    def request(self, message: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send one request; the zygote's reply (``{"error": ...}`` when it is gone or silent
        for ``timeout`` seconds).  Callers serialize their requests."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            return {"error": f"the zygote is gone ({exc})"}
        with self.cv:
            if not self.cv.wait_for(lambda: bool(self.replies), timeout):
                return {"error": f"the zygote did not answer within {timeout:g} s"}
            return self.replies.pop(0)

    def alive(self) -> bool:
        """Running, and ready to fork or still importing."""
        return self.proc is not None and self.proc.poll() is None and self.state in (None, "ready")

    def reusable(self, env: Dict[str, str], timeout: float = 10.0) -> Optional[str]:
        """None when a new attempt may fork from this zygote as from a new one; else why not.

        Safe when: it is alive and answers; it imported under the same environment (but the
        launcher's own ``MSLAUNCH_*`` variables, e.g. the attempt number, which no import
        reads); it is still a single-threaded process; and nothing of the last attempt is left
        under it (every process it forked, or adopted as a subreaper, has ended and been reaped:
        its answer comes after it reported those exits).  Then its records of the last attempt
        are dropped, so a recycled pid is never taken for an old one.
        """
        if not self.alive():
            return "it ended"
        if _comparable(self.env) != _comparable(env):
            return "the new attempt's environment differs from the one it imported under"
        state = self.wait_ready()
        if state != "ready":
            return state
        end = time.monotonic() + timeout
        while True:
            reply = self.request({"ping": True}, max(0.1, end - time.monotonic()))
            pong = reply.get("pong")
            if not isinstance(pong, dict):
                return f"it did not answer ({reply.get('error') or reply})"
            if len(pong.get("threads") or ()) > 1:
                return f"it has {len(pong['threads'])} threads"
            if not pong.get("children"):
                break
            if time.monotonic() >= end:
                return f"{len(pong['children'])} process(es) of the last attempt still run under it"
            time.sleep(0.05)
        with self.cv:
            self.children.clear()
            self.early.clear()
        return None

    def close(self) -> None:
        """End the zygote (its stdin closes; it exits)."""
        proc = self.proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)


def _comparable(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("MSLAUNCH_")}


class ZygotePool:
    """Keeps a job's zygote from one attempt to the next (a restart forks from the warm one).

    The attempt's backend hands its zygote back at :meth:`~launcher.execution.local.zygote.ZygoteBackend.close`; the
    next
    attempt's backend takes it if :meth:`Zygote.reusable` (else it is ended and a new one
    imports).  :meth:`close` ends what is kept (the job is over).  One job at a time.

    Attributes:
        reused: how many attempts forked from a kept zygote.
        refused: why a kept zygote was not reused, one line per time.
    """

    def __init__(self, settle: float = 10.0) -> None:
        self.settle = settle  # seconds the last attempt's processes get to be reaped under a kept zygote
        self._kept: Optional[Zygote] = None
        self._lock = threading.Lock()
        self.reused = 0
        self.refused: "list[str]" = []

    def put(self, zyg: Zygote) -> None:
        with self._lock:
            old, self._kept = self._kept, zyg
        if old is not None and old is not zyg:
            old.close()

    def take(self, preload: Sequence[str], env: Dict[str, str]) -> Optional[Zygote]:
        """The kept zygote if it is safe to reuse for ``preload`` under ``env``; else None (it is ended)."""
        with self._lock:
            zyg, self._kept = self._kept, None
        if zyg is None:
            return None
        why = "it imported other modules" if zyg.preload != tuple(preload) else zyg.reusable(env, self.settle)
        if why is None:
            self.reused += 1
            return zyg
        self.refused.append(why)
        zyg.close()
        return None

    def pids(self) -> "set[int]":
        with self._lock:
            pid = self._kept.pid if self._kept is not None else None
        return {pid} if pid is not None else set()

    def close(self) -> None:
        with self._lock:
            zyg, self._kept = self._kept, None
        if zyg is not None:
            zyg.close()
