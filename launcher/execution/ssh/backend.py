"""The ssh launcher: one paramiko connection per host, one remote agent per rank.

:class:`SshLauncher` connects to every host of the plan at once (:func:`~.connection.connect_all`),
copies the rank tables there (:func:`~.transfer.put_file`) and starts each rank under the remote
agent (:mod:`~.agent`).  The rank's stdout+stderr stream into its local log file (one thread per
channel, a write per chunk), so ``mslaunch logs tail`` works unchanged.  Every second mslaunch
pings every agent; a host that says nothing for ``lost_after`` seconds (or whose connection
closes) is *lost*: its ranks' :meth:`SshProcess.wait` returns 255 with ``reason`` "connection to
H lost", and the supervisor tears the job down everywhere.  An agent that hears no ping for
``agent_timeout`` seconds ends its rank itself, so a cut link leaves nothing behind on the far side.

Handle state machine (:class:`SshProcess`)::

    opening --session open, payload sent--> starting --"started <pid>"--> running
    opening/starting --session fails, or no word within start_timeout--> done (255, reason)
    running --"exit <rc>" then EOF--> done (rc)
    running --silent for lost_after s, or connection closed--> done (255, "connection ... lost")
"""
from __future__ import annotations

import posixpath
import socket
import threading
import time
from dataclasses import replace
from typing import List, Optional

import paramiko

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, ProcessHandle, register_backend
from launcher.execution.ssh.agent import LOST_RC, AgentConfig, agent_command, parse_message
from launcher.execution.ssh.connection import SshConnection, connect_all, run_parallel
from launcher.execution.ssh.settings import PING_INTERVAL, START_TIMEOUT, SSHSettings
from launcher.execution.ssh.transfer import put_file
from launcher.planning.plan import Plan, ProcPlan


class SshProcess(ProcessHandle):
    """One rank running under the remote agent (implements the supervisor's Handle).

    Attributes:
        plan, host, log_path, started: as for every handle.
        pid: the rank's pid on its host, once the agent reported it.
        reason: why it failed when the exit code does not say (lost host, cannot start).
    """

    def __init__(self, plan: ProcPlan, conn: SshConnection, command: str, payload: bytes, log_path: str, lost_after: float,
                 start_timeout: float = START_TIMEOUT) -> None:
        self.plan = plan
        self.host = plan.host
        self.log_path = log_path
        self.started = time.time()
        self.pid: Optional[int] = None
        self.reason: Optional[str] = None
        self._conn = conn
        self._chan: Optional[paramiko.Channel] = None
        self._pending: List[bytes] = []  # control lines asked for before the session was open
        self._lost_after = lost_after
        self._start_timeout = start_timeout
        self._last_heard = time.monotonic()
        self._heard_any = False
        self._rc: Optional[int] = None
        self._trailer: Optional[int] = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._agent_lines: List[str] = []
        self._out = threading.Thread(target=self._read_stdout, name=f"ssh-out-{plan.name}", daemon=True)
        self._err = threading.Thread(target=self._read_stderr, name=f"ssh-err-{plan.name}", daemon=True)
        # Opening the session takes round trips: do it in the background so that the ranks of a
        # job start concurrently (a failure ends this handle with a reason, like a failed rank).
        threading.Thread(target=self._open, args=(command, payload), name=f"ssh-open-{plan.name}", daemon=True).start()

    def _open(self, command: str, payload: bytes) -> None:
        try:
            chan = self._conn.open_channel()
        except LaunchError as exc:
            self._finish(LOST_RC, f"cannot start {self.plan.name} on {self.host}: {exc}")
            return
        try:
            chan.exec_command(command)
            chan.sendall(payload)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            chan.close()
            self._finish(LOST_RC, f"cannot start {self.plan.name} on {self.host}: {exc}")
            return
        with self._lock:
            self._chan = chan
            pending, self._pending = self._pending, []
        for line in pending:
            self._conn.send(chan, line)
        self._out.start()
        self._err.start()

    def _control(self, line: bytes) -> None:
        with self._lock:
            if self._done.is_set():
                return
            if self._chan is None:
                self._pending.append(line)
                return
            chan = self._chan
        self._conn.send(chan, line)

    # ------------------------------------------------------------ Handle

    def wait(self) -> int:
        """Block until the rank exits or its host is lost; its returncode (negative: signal;
        255: lost)."""
        while not self._done.wait(0.25):
            self._check_lost()
        assert self._rc is not None
        return self._rc

    def poll(self) -> Optional[int]:
        self._check_lost()
        return self._rc if self._done.is_set() else None

    def terminate(self) -> None:
        """SIGTERM to the rank's process group (via the agent)."""
        self._control(b"TERM\n")

    def kill(self) -> None:
        """SIGKILL to the rank's group and every descendant (via the agent)."""
        self._control(b"KILL\n")

    # ------------------------------------------------------------ internals

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def ping(self) -> None:
        chan = self._chan
        if chan is not None and not self._done.is_set():
            self._conn.send(chan, b"ping\n")

    def _finish(self, rc: int, reason: Optional[str] = None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._rc = rc
            if reason is not None:
                self.reason = reason
            self._done.set()
        if reason is not None:
            self._log_line(f"mslaunch: {reason}")

    def _check_lost(self) -> None:
        if self._done.is_set():
            return
        quiet = time.monotonic() - self._last_heard
        if not self._heard_any:
            # Nothing from the agent yet: the login shell is still running (or hangs).
            if quiet > self._start_timeout:
                self._finish(LOST_RC, f"the mslaunch agent on {self.host} did not start within --ssh-start-timeout "
                                      f"{self._start_timeout:g} s (a slow or hanging login shell?)")
            elif not self._conn.active():
                self._finish(LOST_RC, f"connection to {self.host} lost (closed)")
            return
        if quiet > self._lost_after:
            self._finish(LOST_RC, f"connection to {self.host} lost (no answer for {quiet:.0f} s)")
        elif not self._conn.active():
            self._finish(LOST_RC, f"connection to {self.host} lost (closed)")

    def _log_line(self, text: str) -> None:
        try:
            with open(self.log_path, "ab") as fh:
                fh.write(text.encode("utf-8", "replace") + b"\n")
        except OSError:
            pass

    def _recv(self, stderr: bool) -> bytes:
        """The channel's next chunk of stdout (or stderr); ``b""`` at EOF or on any error."""
        read = self._chan.recv_stderr if stderr else self._chan.recv  # type: ignore[union-attr]
        while True:
            try:
                return read(4096 if stderr else 65536)
            except socket.timeout:
                continue
            except Exception:
                return b""

    def _read_stdout(self) -> None:
        try:
            with open(self.log_path, "ab", buffering=0) as fh:
                while True:
                    data = self._recv(stderr=False)
                    if not data:
                        return
                    fh.write(data)
        except OSError as exc:
            self._finish(1, f"cannot write {self.log_path}: {exc.strerror}")

    def _read_stderr(self) -> None:
        buf = b""
        while True:
            data = self._recv(stderr=True)
            if not data:
                break
            self._last_heard = time.monotonic()
            self._heard_any = True
            buf += data
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode("utf-8", "replace")
                message = parse_message(line)
                if message is not None:
                    self._message(*message)
                elif line.strip():
                    self._agent_lines = (self._agent_lines + [line])[-5:]
                    self._log_line(f"mslaunch-agent: {line}")
        self._stderr_closed()

    def _message(self, kind: str, arg: str) -> None:
        if kind == "started":
            try:
                self.pid = int(arg)
            except ValueError:
                pass
        elif kind == "error":
            self.reason = arg
        elif kind == "exit":
            try:
                self._trailer = int(arg)
            except ValueError:
                self._trailer = 1

    def _stderr_closed(self) -> None:
        if self._trailer is not None:
            self._out.join(5.0)  # the rest of the output arrives before the channel's EOF
            self._finish(self._trailer, self.reason)
            return
        if self._done.is_set():
            return
        status = None
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if self._chan.exit_status_ready():  # type: ignore[union-attr]
                status = self._chan.recv_exit_status()  # type: ignore[union-attr]
                break
            time.sleep(0.02)
        if status is None or status < 0 or not self._conn.active():
            self._finish(LOST_RC, f"connection to {self.host} lost (closed)")
            return
        self._out.join(2.0)
        said = "; ".join(self._agent_lines[-2:]) or "no output"
        self._finish(status if status else LOST_RC, f"the mslaunch agent on {self.host} exited with status {status}: {said}")


class SshLauncher(Backend):
    """Starts a plan's processes on remote hosts over SSH (the supervisor's Launcher).

    Args:
        plan: the plan; every host of it is connected to at once.
        settings: the SSH settings; ``settings.config`` None means the plan's ``--ssh-config``
            (then ``$MSLAUNCH_SSH_CONFIG``, ``~/.ssh/config``).

    Raises:
        LaunchError: a host cannot be reached / authenticated / verified (every failed host is
            named), or a rank table cannot be copied to a host.
    """

    def __init__(self, plan: Plan, settings: SSHSettings = SSHSettings()) -> None:
        self.plan = plan
        if settings.config is None and plan.ssh_config:
            settings = replace(settings, config=plan.ssh_config)
        self.settings = settings
        self._hosts = {h.name: h for h in plan.hosts}
        self._handles: List[SshProcess] = []
        self._stop = threading.Event()
        self.conns = connect_all(list(plan.hosts), settings)
        try:
            self._copy_artefacts()
        except BaseException:
            self.close()
            raise
        self._pinger = threading.Thread(target=self._ping_loop, name="ssh-ping", daemon=True)
        self._pinger.start()

    def _copy_artefacts(self) -> None:
        """Rank tables go to the same path on every host (their ranks read RANK_TABLE_FILE)."""
        tables = [a for a in self.plan.artefacts if a.kind == "rank_table"]
        if not tables:
            return
        from launcher.execution.supervisor import Interrupted

        def copy(conn: SshConnection) -> None:
            for art in tables:
                put_file(conn, posixpath.join(self.plan.job_dir, art.name), art.content.encode("utf-8"))

        try:
            results = run_parallel(copy, list(self.conns.values()), self.settings.pool)
        except Interrupted as exc:
            raise LaunchError("interrupted while copying the rank table", exit_code=128 + exc.signum) from None
        errors = [str(exc) for _, exc in results if exc is not None]
        if errors:
            raise LaunchError("; ".join(errors))

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> SshProcess:
        """Start ``proc`` on its host; returns at once (the session opens in the background and
        the agent reports the pid later; a session that cannot be opened ends the handle with 255
        and a reason).

        Raises:
            LaunchError: the host is not connected.
        """
        conn = self.conns.get(proc.host)
        if conn is None:
            raise LaunchError(f"{proc.name}: host {proc.host} is not in the plan's hosts")
        host = self._hosts.get(proc.host)
        python = host.python if host is not None and host.python else "python3"
        payload = AgentConfig.for_rank(proc, cwd, self.plan.job_dir, self.settings.agent_timeout).payload()
        if not conn.active():
            raise LaunchError(f"{proc.name}: the connection to {conn.target.label} is closed")
        # The log exists (and is empty) before the process, as for local ranks.
        open(log_path, "ab").close()
        handle = SshProcess(proc, conn, agent_command(python), payload, log_path, self.settings.lost_after, self.settings.start_timeout)
        self._handles.append(handle)
        return handle

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls(ctx.plan, ctx.settings_for("ssh") or SSHSettings())

    def _ping_loop(self) -> None:
        while not self._stop.wait(PING_INTERVAL):
            for h in list(self._handles):
                h.ping()

    def close(self) -> None:
        """Stop pinging and close every connection (agents still running then end their ranks)."""
        self._stop.set()
        conns = list(getattr(self, "conns", {}).values())
        threads = [threading.Thread(target=c.close, daemon=True) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5.0)


register_backend("ssh", SshLauncher)
