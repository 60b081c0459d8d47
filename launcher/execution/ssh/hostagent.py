"""One host's agent and its ranks, as the ssh launcher sees them (:mod:`launcher.execution.ssh.backend`).

:class:`HostAgent` owns one SSH session running the remote agent, sends it requests, decodes its
frames into each rank's log file and exit, and notices when the host is lost;
:class:`SshProcess` is one rank's handle.  Their state machines are in the backend's docstring.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import paramiko

from launcher.errors import LaunchError
from launcher.execution.process.handle import ProcessHandle, RankFigures, figures
from launcher.execution.ssh.agent import (
    LOST_RC,
    FrameError,
    FrameReader,
    agent_command,
    bootstrap_payload,
    op_line,
    split_lines,
)
from launcher.execution.ssh.connection import SshConnection
from launcher.execution.ssh.dump import StackDumps
from launcher.execution.ssh.settings import PING_INTERVAL, SSHSettings
from launcher.planning.job.spec import ProcPlan
from launcher.planning.text.private import open_private

#: Log files kept open at once (the least recently written are closed beyond that).
_MAX_OPEN_LOGS = 256
#: Bytes read from one channel before the pump turns to the others.
_READ_BUDGET = 1 << 20
#: Seconds to wait for the exit status of an agent whose channel reached EOF.
_STATUS_WAIT = 2.0


class LogFiles:
    """Appends to many log files through a bounded set of open descriptors (LRU)."""

    def __init__(self, max_open: int = _MAX_OPEN_LOGS) -> None:
        self._fds: "collections.OrderedDict[str, int]" = collections.OrderedDict()
        self._max = max_open
        self._lock = threading.Lock()

    def write(self, path: str, data: bytes) -> None:
        """Append ``data`` to ``path`` at once (unbuffered).

        Raises:
            OSError: the file cannot be opened or written.
        """
        with self._lock:
            fd = self._fds.pop(path, None)
            if fd is None:
                fd = open_private(path)  # 0600: a rank may print its environment
                while len(self._fds) >= self._max:
                    _, old = self._fds.popitem(last=False)
                    os.close(old)
            self._fds[path] = fd
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]

    def close(self, path: Optional[str] = None) -> None:
        """Close ``path``'s descriptor (every one when None)."""
        with self._lock:
            paths = list(self._fds) if path is None else [path]
            for p in paths:
                fd = self._fds.pop(p, None)
                if fd is not None:
                    os.close(fd)


class SshProcess(ProcessHandle):
    """One rank run by its host's agent (implements the supervisor's handle).

    Attributes:
        plan, host, log_path, started: as for every handle.
        pid: the rank's pid on its host, once the agent reported it.
        exit_time: epoch seconds of the exit as the agent saw it, on this machine's clock (the
            agent's clock shifted by :attr:`HostAgent.clock_offset`).
        reason: why it failed when the exit code does not say (lost host, cannot start).
    """

    def __init__(self, plan: ProcPlan, agent: "HostAgent", rank_id: int, log_path: str) -> None:
        self.plan = plan
        self.host = plan.host
        self.log_path = log_path
        self.started = time.time()
        self.pid: Optional[int] = None
        self.reason: Optional[str] = None
        self.exit_time: Optional[float] = None
        self.rank_id = rank_id
        self._agent = agent
        self._rc: Optional[int] = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._listeners: List[Callable[[int], None]] = []

    # ------------------------------------------------------------ Handle

    def wait(self) -> int:
        """Block until the rank exits or its host is lost; its returncode (negative: signal;
        255: lost)."""
        self._done.wait()
        assert self._rc is not None
        return self._rc

    def poll(self) -> Optional[int]:
        return self._rc if self._done.is_set() else None

    def has_exited(self) -> bool:
        return self._done.is_set()

    def notify_exit(self, callback: Callable[[int], None]) -> bool:
        """``callback(returncode)`` once the rank exits (from the pump thread); no waiter thread."""
        with self._lock:
            if not self._done.is_set():
                self._listeners.append(callback)
                return True
        assert self._rc is not None
        callback(self._rc)
        return True

    def terminate(self) -> None:
        """SIGTERM to the rank's process group (via its host agent)."""
        if not self._done.is_set():
            self._agent.control(op_line("term", self.rank_id))

    def kill(self) -> None:
        """SIGKILL to the rank's group and every descendant (via its host agent; the agent also
        kills what an exited rank left behind)."""
        if not self._done.is_set():
            self._agent.control(op_line("kill", self.rank_id))

    def stopped_for(self, now: float) -> Optional[float]:
        """As its host agent's heartbeats tell (one a second): see :meth:`HostAgent._message`."""
        if self._done.is_set() or self.stopped_since is None:
            return None
        return now - self.stopped_since

    def sched_figures(self) -> Optional[RankFigures]:
        """As its host agent's heartbeats tell (a sample every few seconds): see :meth:`HostAgent._message`."""
        return None if self._done.is_set() else self.sched_seen

    def dump_stacks(self, folder: str) -> Dict[Optional[int], List[str]]:
        """This rank's stacks, dumped on its host with its host's other ranks
        (:func:`launcher.execution.ssh.dump.agent_dump`)."""
        from launcher.execution.ssh.dump import agent_dump

        return agent_dump(self._agent, folder, self.plan.rank)

    # ------------------------------------------------------------ from the pump

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def finish(self, rc: int, reason: Optional[str] = None, exit_time: Optional[float] = None) -> None:
        """Record the exit (the first report wins), log the reason, wake waiters and listeners."""
        with self._lock:
            if self._done.is_set():
                return
            self._rc = rc
            if reason is not None:
                self.reason = reason
            self.exit_time = exit_time
            listeners, self._listeners = self._listeners, []
            if reason is not None:
                self._agent.log_line(self, f"mslaunch: {reason}")
            self._agent.logs.close(self.log_path)
            self._done.set()
        for cb in listeners:
            try:
                cb(rc)
            except Exception:
                pass


class HostAgent:
    """The one agent session on one host: its channel, its ranks, its liveness (see the module
    doc for the state machine).  Its methods run in the pump thread except :meth:`open` (set-up),
    :meth:`add` and :meth:`control` (any thread)."""

    def __init__(self, conn: SshConnection, python: str, settings: SSHSettings, logs: LogFiles) -> None:
        self.conn = conn
        self.host = conn.name
        self.python = python
        self.settings = settings
        self.logs = logs
        self.chan: Optional[paramiko.Channel] = None
        self.state = "opening"
        self.opened_at = time.monotonic()
        self.last_heard = self.opened_at
        self.agent_pid: Optional[int] = None
        self.handles: Dict[int, SshProcess] = {}
        self._lock = threading.Lock()
        self._reader = FrameReader()
        self._synced = False
        self._junk = b""
        self._err = b""
        self._said: List[str] = []
        self._end: Optional[tuple] = None  # (rc, reason) for ranks of an ended agent
        self.lost = False  # ended as lost (closed, or silent: a cut link looks open here): never waited for
        self.eof_since: Optional[float] = None
        #: This machine's clock minus the agent's host clock, plus the least delay seen: the
        #: smallest ``time.time() - sent`` over the agent's time-stamped messages (None until one).
        self.clock_offset: Optional[float] = None
        #: the host's cores as its agent read them (its "ready" message), None until then
        self.cores: Optional[Dict[str, Any]] = None
        self._heard = threading.Event()  # set on "ready" or when the agent ended
        self.stack_dumps = StackDumps()  # its ranks' stack dumps, one remote command per folder

    def wait_ready(self) -> bool:
        """Block until the agent said "ready" (True) or ended (False); bounded by the pump's
        start timeout (``--ssh-start-timeout``), which ends an agent that does not start."""
        self._heard.wait()
        return self._end is None

    def serves(self) -> bool:
        """Ready, not ended, and none of its ranks running: an attempt may hand it to the next
        (:class:`~launcher.execution.ssh.pool.AgentPool`)."""
        with self._lock:
            handles = list(self.handles.values())
        return self._end is None and self.state == "ready" and all(h.done for h in handles)

    def adopt(self, settings: SSHSettings, logs: LogFiles) -> None:
        """A new attempt takes this agent: its settings and log files; the last attempt's ranks forgotten."""
        with self._lock:
            self.handles = {}
        self.settings, self.logs = settings, logs

    # ------------------------------------------------------------ set-up / requests

    def open(self) -> None:
        """Open the session and send the agent (blocking round trips; run in parallel)."""
        try:
            chan = self.conn.open_channel()
        except LaunchError as exc:
            self._ended(LOST_RC, f"cannot start the mslaunch agent on {self.host}: {exc}")
            return
        try:
            chan.exec_command(agent_command(self.python))
            chan.sendall(
                bootstrap_payload(self.host, self.settings.agent_timeout, PING_INTERVAL, self.settings.sample_every)
            )
        except (paramiko.SSHException, OSError, EOFError) as exc:
            status, said = _early_end(chan)
            chan.close()
            if status is not None and status > 0:  # the remote command ended before it read the agent: why
                self._ended(status, f"the mslaunch agent on {self.host} exited with status {status}: {said}")
            else:
                self._ended(LOST_RC, f"cannot start the mslaunch agent on {self.host}: {exc}")
            return
        with self._lock:
            self.chan = chan
            self.opened_at = self.last_heard = time.monotonic()
            self.state = "starting"

    def add(self, handle: SshProcess, request: bytes) -> None:
        """Route frames of ``handle.rank_id`` to ``handle`` and send its start ``request``."""
        with self._lock:
            end = self._end
            if end is None:
                self.handles[handle.rank_id] = handle
        if end is not None:
            handle.finish(*end)
            return
        self.control(request)

    def control(self, line: bytes) -> None:
        """Queue one request line to the agent (never blocks; dropped once the agent ended)."""
        chan = self.chan
        if chan is not None and self._end is None:
            self.conn.send(chan, line)

    def log_line(self, handle: SshProcess, text: str) -> None:
        try:
            self.logs.write(handle.log_path, text.encode("utf-8", "replace") + b"\n")
        except OSError:
            pass

    @property
    def ended(self) -> bool:
        return self._end is not None

    # ------------------------------------------------------------ the pump's side

    def pump(self) -> None:
        """Read what the channel holds (bounded), dispatch frames, notice EOF."""
        chan = self.chan
        if chan is None or self._end is not None:
            return
        budget = _READ_BUDGET
        try:
            while budget > 0 and chan.recv_stderr_ready():
                data = chan.recv_stderr(65536)
                budget -= len(data)
                self._stderr(data)
            while budget > 0 and chan.recv_ready():
                data = chan.recv(65536)
                if not data:
                    break
                budget -= len(data)
                self._stdout(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        if (chan.closed or chan.eof_received) and not chan.recv_ready() and not chan.recv_stderr_ready():
            if self.eof_since is None:
                self.eof_since = time.monotonic()

    def _stdout(self, data: bytes) -> None:
        self.last_heard = time.monotonic()
        if not self._synced:
            from launcher.execution.ssh.remote_link import MAGIC

            self._junk += data
            at = self._junk.find(MAGIC)
            if at < 0:
                if len(self._junk) > 1 << 16:  # a login shell that writes a lot to stdout
                    self._note_junk(self._junk[: -len(MAGIC)])
                    self._junk = self._junk[-len(MAGIC) :]
                return
            self._note_junk(self._junk[:at])
            data, self._junk, self._synced = self._junk[at + len(MAGIC) :], b"", True
        try:
            for kind, rid, body in self._reader.feed(data):
                if kind == "O":
                    handle = self.handles.get(rid)
                    if handle is not None:
                        try:
                            self.logs.write(handle.log_path, body)
                        except OSError as exc:
                            handle.finish(1, f"cannot write {handle.log_path}: {exc.strerror}")
                else:
                    self._message(rid, body)
        except FrameError as exc:
            # Closing the session makes the agent end its ranks (stdin EOF).
            self._ended(
                LOST_RC,
                f"the mslaunch agent's output from {self.host} is garbled ({exc}): does something on "
                "that host write to the SSH session's stdout after login (a background job of a shell rc file)?",
            )
            if self.chan is not None:
                self.chan.close()

    def _note_junk(self, junk: bytes) -> None:
        lines = [line for line in junk.decode("utf-8", "replace").splitlines() if line.strip()]
        for line in lines:
            self._said = (self._said + [line])[-5:]

    def _message(self, rid: int, msg: Dict[str, Any]) -> None:
        ev = msg.get("ev")
        sent = msg.get("time")
        if ev in ("ready", "hb") and isinstance(sent, (int, float)):
            offset = time.time() - float(sent)
            if self.clock_offset is None or offset < self.clock_offset:
                self.clock_offset = offset
        if ev == "ready":
            self.state = "ready"
            self.agent_pid = msg.get("pid")
            cores = msg.get("cores")
            self.cores = cores if isinstance(cores, dict) else None
            self._heard.set()
            return
        if ev == "hb":
            stopped = msg.get("stopped")
            if isinstance(stopped, list):  # an older agent sends none: nothing is known
                now = time.monotonic()
                for rank_id, h in list(self.handles.items()):
                    h.seen_stopped(rank_id in stopped, now)
            sched = msg.get("sched")
            if isinstance(sched, dict):  # the ranks' [T, CPU_S, DELAY_S, SEND_QUEUED, BUSIEST_LINK_S]
                for rank_id, h in list(self.handles.items()):
                    figs = figures(sched.get(str(rank_id)))
                    if figs is not None:
                        h.sched_seen = figs
            return
        if ev == "note":
            if self.settings.on_note is not None:
                self.settings.on_note(str(msg.get("msg", "")))
            return
        handle = self.handles.get(rid)
        if handle is None:
            return
        if ev == "started":
            handle.pid = msg.get("pid")
        elif ev == "error":
            handle.reason = str(msg.get("msg", ""))
        elif ev == "exit":
            rc = msg.get("rc")
            handle.finish(rc if isinstance(rc, int) else 1, handle.reason, self.local_time(msg.get("time")))

    def local_time(self, when: Any) -> Optional[float]:
        """The agent's epoch time ``when`` on this machine's clock (so exits on different hosts
        compare, whatever their clocks' skew); None when ``when`` is not a number."""
        if not isinstance(when, (int, float)):
            return None
        return float(when) + (self.clock_offset or 0.0)

    def _stderr(self, data: bytes) -> None:
        lines, self._err = split_lines(self._err + data)
        for line in lines:
            if not line.strip():
                continue
            self._said = (self._said + [line])[-5:]
            for h in list(self.handles.values()):
                if not h.done:
                    self.log_line(h, f"mslaunch-agent: {line}")

    def check(self, now: float) -> None:
        """Liveness: start timeout, silence, closed connection, and the end of the channel."""
        if self._end is not None or self.state == "opening":
            return
        chan = self.chan
        assert chan is not None
        if self.eof_since is not None:
            if chan.exit_status_ready() or now - self.eof_since > _STATUS_WAIT:
                self._channel_ended()
            return
        quiet = now - self.last_heard
        if quiet > min(self.settings.lost_after, self.settings.start_timeout):
            self.pump()  # words already here (this thread was slow) are not silence
            quiet = now - self.last_heard
        if self.state == "starting":
            # Nothing from the agent yet: the login shell is still running (or hangs).
            if quiet > self.settings.start_timeout:
                self._ended(
                    LOST_RC,
                    f"the mslaunch agent on {self.host} did not start within --ssh-start-timeout "
                    f"{self.settings.start_timeout:g} s (a slow or hanging login shell?)",
                )
            elif not self.conn.active():
                self._ended(LOST_RC, f"connection to {self.host} lost (closed)", lost=True)
            return
        if quiet > self.settings.lost_after:
            self._ended(LOST_RC, f"connection to {self.host} lost (no answer for {quiet:.0f} s)", lost=True)
        elif not self.conn.active():
            self._ended(LOST_RC, f"connection to {self.host} lost (closed)", lost=True)

    def ping(self) -> None:
        if self.state == "ready" and self._end is None:
            self.control(op_line("ping"))

    def _channel_ended(self) -> None:
        chan = self.chan
        assert chan is not None
        status = chan.recv_exit_status() if chan.exit_status_ready() else None
        if not self.conn.active():
            self._ended(LOST_RC, f"connection to {self.host} lost (closed)", lost=True)
            return
        said = "; ".join(self._said[-2:]) or "no output"
        if status is None or status < 0:  # sshd sent exit-signal (paramiko keeps no status)
            self._ended(
                LOST_RC, f"the mslaunch agent on {self.host} ended without an exit status (killed by a signal?): {said}"
            )
            return
        self._ended(
            status if status else LOST_RC, f"the mslaunch agent on {self.host} exited with status {status}: {said}"
        )

    def _ended(self, rc: int, reason: str, lost: bool = False) -> None:
        """The agent is gone: every unfinished rank ends with ``rc`` and ``reason``; ``lost``: because
        the host was lost (the connection closed, or the agent went silent), which each rank says
        as its ``host_lost``."""
        with self._lock:
            if self._end is not None:
                return
            self._end = (rc, reason)
            self.state = "ended"
            self.lost = lost
            handles = list(self.handles.values())
        self._heard.set()
        for h in handles:
            if lost and not h.done:
                h.host_lost = reason
            h.finish(rc, reason)


def _early_end(chan: Any, wait: float = 5.0) -> "tuple[Optional[int], str]":
    """The exit status and last stderr/stdout lines of a session whose command ended while the
    agent was being sent (the host's shell could not run its Python, say): (None, "") when the
    command did not end within ``wait`` s."""
    deadline = time.monotonic() + wait
    while not chan.exit_status_ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not chan.exit_status_ready():
        return None, ""
    text = b""
    for ready, recv in ((chan.recv_stderr_ready, chan.recv_stderr), (chan.recv_ready, chan.recv)):
        while ready():
            text += recv(65536)
    lines = [line for line in text.decode("utf-8", "replace").splitlines() if line.strip()]
    return chan.recv_exit_status(), "; ".join(lines[-2:]) or "no output"
