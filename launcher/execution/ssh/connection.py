"""Connections: one authenticated paramiko client per host, opened for many hosts at once.

:func:`connect_all` connects to every host of a plan in parallel (a bounded pool of threads, a
connect timeout per host) and fails with one :class:`~launcher.errors.LaunchError` naming every
host that could not be reached and why; :func:`connect_each` returns the reasons instead.
Every failure becomes one line naming the host (:func:`describe_connect_error`); key material
is never logged.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import paramiko

from launcher.errors import LaunchError
from launcher.execution.ssh.config import SshTarget, config_path, read_ssh_config, resolve_target
from launcher.execution.ssh.hostkeys import AcceptNewPolicy, RefuseUnknownPolicy, UnknownHostKey, fingerprint
from launcher.execution.ssh.settings import SSHSettings
from launcher.planning.inventory.model import Host


class ConnectFailure(LaunchError):
    """Connecting to one host failed; ``str()`` says why in one line (no key material)."""


def describe_connect_error(target: SshTarget, exc: BaseException, timeout: float) -> str:
    """One line saying why connecting to ``target`` failed and what to do (no key material)."""
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, UnknownHostKey):
        port = f"-p {target.port} " if target.port != 22 else ""
        kh = target.known_hosts[0] if target.known_hosts else "~/.ssh/known_hosts"
        return (
            f"host key for {target.name} is not known ({exc.key.get_name()} {fingerprint(exc.key)}); verify it and add "
            "it "
            f"to known_hosts (ssh-keyscan {port}{target.hostname} >> {kh}) or pass --ssh-accept-new"
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        kh = target.known_hosts[0] if target.known_hosts else "~/.ssh/known_hosts"
        return (
            f"host key for {target.name} has CHANGED (now {fingerprint(exc.key)}); someone may be intercepting the "
            f"connection; if the host was reinstalled, remove the old key with ssh-keygen -R {target.hostname} -f {kh}"
        )
    if isinstance(exc, paramiko.PasswordRequiredException):
        return f"the private key for {target.name} is encrypted; load it into ssh-agent (ssh-add) first"
    if isinstance(exc, paramiko.SSHException) and "no authentication methods" in str(exc).lower():
        exc = paramiko.AuthenticationException(str(exc))  # e.g. every key file is missing
    if isinstance(exc, paramiko.AuthenticationException):
        keys = (
            ", ".join(k + ("" if os.path.isfile(k) else " (missing)") for k in target.key_files)
            or "default keys / ssh-agent"
        )
        return (
            f"authentication failed as {target.user}@{where} (keys: {keys}); check User/IdentityFile in the ssh "
            "config or ssh.user/ssh.key in the inventory"
        )
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {target.hostname}: {exc.strerror or exc}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer from {where} within {timeout:g} s (host down or link cut?)"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        errnos = {getattr(e, "errno", None) for e in exc.errors.values()}
        if errnos <= {111}:
            return f"connection refused by {where} (is sshd running there?)"
        return f"cannot connect to {where}: {exc}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where} (is sshd running there?)"
    if isinstance(exc, OSError):
        return f"cannot connect to {where}: {exc.strerror or exc}"
    if isinstance(exc, paramiko.SSHException):
        text = str(exc)
        if "banner" in text.lower():
            return f"no SSH banner from {where} within {timeout:g} s ({text})"
        return f"SSH to {where} failed: {text}"
    return f"SSH to {where} failed: {type(exc).__name__}: {exc}"


def open_client(target: SshTarget, accept_new: bool = False, timeout: float = 10.0) -> paramiko.SSHClient:
    """Connect and authenticate to ``target``.

    Raises:
        ConnectFailure: with a one-line reason (unreachable, timeout, refused, auth, host key).
    """
    client = paramiko.SSHClient()
    try:
        for path in target.global_known_hosts:
            if os.path.isfile(path):
                client.load_system_host_keys(path)
        for path in target.known_hosts:
            if os.path.isfile(path):
                client.get_host_keys().load(path)
    except (OSError, paramiko.SSHException) as exc:
        client.close()
        raise ConnectFailure(f"cannot read known_hosts for {target.name}: {exc}") from None
    if accept_new or target.accept_new:
        record = target.known_hosts[0] if target.known_hosts else os.path.expanduser("~/.ssh/known_hosts")
        client.set_missing_host_key_policy(AcceptNewPolicy(record))
    else:
        client.set_missing_host_key_policy(RefuseUnknownPolicy())
    keys = [k for k in target.key_files if os.path.isfile(k)]
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            key_filename=keys or None,  # type: ignore[arg-type]  # paramiko takes a list of key files too; its stubs say one str
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            allow_agent=target.allow_agent,
            look_for_keys=target.look_for_keys,
        )
    except Exception as exc:  # every failure becomes one line naming the host
        client.close()
        raise ConnectFailure(describe_connect_error(target, exc, timeout)) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(0)
    return client


class SshConnection:
    """An authenticated connection to one host (more are opened if ``MaxSessions`` is reached).

    A sender thread writes control lines to channels, so a stalled link never blocks the caller.
    """

    def __init__(self, target: SshTarget, client: paramiko.SSHClient, accept_new: bool, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self._accept_new = accept_new
        self._clients = [client]
        self._lock = threading.Lock()
        self._outbox: "queue.Queue[Optional[Tuple[paramiko.Channel, Optional[bytes]]]]" = queue.Queue()  # None: EOF
        self._sender = threading.Thread(target=self._send_loop, name=f"ssh-send-{target.name}", daemon=True)
        self._sender.start()
        self.closed = False

    @property
    def name(self) -> str:
        return self.target.name

    def active(self) -> bool:
        with self._lock:
            return any((c.get_transport() is not None and c.get_transport().is_active()) for c in self._clients)  # type: ignore[union-attr]  # the transport just checked not None

    def open_channel(self) -> paramiko.Channel:
        """A new session channel; opens another connection when the server refuses more sessions.

        Raises:
            LaunchError: the connection is gone or no session can be opened.
        """
        with self._lock:
            client = self._clients[-1]
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise LaunchError(f"the connection to {self.target.label} is closed")
        try:
            return transport.open_session(timeout=self.timeout)
        except paramiko.ChannelException as exc:
            if exc.code != 1:  # 1: administratively prohibited (sshd MaxSessions)
                raise LaunchError(f"cannot open a session on {self.target.label}: {exc}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise LaunchError(f"cannot open a session on {self.target.label}: {exc}") from None
        try:
            extra = open_client(self.target, self._accept_new, self.timeout)
        except ConnectFailure as exc:
            raise LaunchError(f"{self.target.label} refuses more sessions and a new connection failed: {exc}") from None
        with self._lock:
            self._clients.append(extra)
        transport = extra.get_transport()
        assert transport is not None
        try:
            return transport.open_session(timeout=self.timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise LaunchError(f"cannot open a session on {self.target.label}: {exc}") from None

    def send(self, chan: paramiko.Channel, data: bytes) -> None:
        """Queue ``data`` for ``chan`` (never blocks)."""
        if not self.closed:
            self._outbox.put((chan, data))

    def send_eof(self, chan: paramiko.Channel) -> None:
        """Queue the end of ``chan``'s stdin, after what is queued for it (never blocks)."""
        if not self.closed:
            self._outbox.put((chan, None))

    def _send_loop(self) -> None:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            chan, data = item
            try:
                if chan.closed:
                    continue
                if data is None:
                    chan.shutdown_write()
                else:
                    chan.sendall(data)
            except Exception:
                pass

    def run(self, command: str, stdin: Optional[bytes] = None, timeout: float = 30.0) -> Tuple[int, bytes, bytes]:
        """Run ``command`` (a remote shell command line: quote its pieces) and collect its output.

        Returns:
            ``(exit status, stdout, stderr)``.

        Raises:
            LaunchError: no session, or no exit within ``timeout`` seconds.
        """
        chan = self.open_channel()
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                if chan.recv_ready():
                    out += chan.recv(65536)
                elif chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                elif chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                elif time.monotonic() > deadline:
                    raise LaunchError(f"{self.target.label}: {command[:60]!r} did not finish within {timeout:g} s")
                else:
                    time.sleep(0.005)
            while True:  # the rest after the exit status
                chunk = chan.recv(65536) if chan.recv_ready() else b""
                echunk = chan.recv_stderr(65536) if chan.recv_stderr_ready() else b""
                if not chunk and not echunk:
                    break
                out += chunk
                err += echunk
            return chan.recv_exit_status(), bytes(out), bytes(err)
        except socket.timeout:
            raise LaunchError(f"{self.target.label}: {command[:60]!r} did not finish within {timeout:g} s") from None
        finally:
            chan.close()

    def sftp(self) -> paramiko.SFTPClient:
        """An SFTP client on this connection.

        Raises:
            LaunchError: the server has no sftp subsystem.
        """
        with self._lock:
            client = self._clients[0]
        try:
            return client.open_sftp()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise LaunchError(
                f"cannot open SFTP on {self.target.label}: {exc}; enable 'Subsystem sftp' in its sshd_config"
            ) from None

    def close(self, timeout: float = 3.0) -> None:
        """Close every connection to the host (bounded: a stalled link does not hang us)."""
        if self.closed:
            return
        self.closed = True
        self._outbox.put(None)
        with self._lock:
            clients = list(self._clients)

        def shut() -> None:
            for c in clients:
                try:
                    c.close()
                except Exception:
                    pass

        t = threading.Thread(target=shut, name=f"ssh-close-{self.target.name}", daemon=True)
        t.start()
        t.join(timeout)


def run_parallel(
    fn: Callable[[Any], Any], items: Sequence[Any], pool: int
) -> List[Tuple[Any, Optional[BaseException]]]:
    """``fn(item)`` for every item with at most ``pool`` at once (daemon threads); results in order.

    If the caller is interrupted while waiting, results that arrive later are passed to
    ``fn.cleanup`` (if set) so nothing leaks.
    """
    results: List[Tuple[Any, Optional[BaseException]]] = [(None, None)] * len(items)
    sem = threading.BoundedSemaphore(max(1, pool))
    left = [len(items)]
    cond = threading.Condition()
    abandoned = [False]

    def work(i: int, item: Any) -> None:
        with sem:
            try:
                res: Tuple[Any, Optional[BaseException]] = (fn(item), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                res = (None, exc)
        with cond:
            results[i] = res
            left[0] -= 1
            cond.notify_all()
            late = abandoned[0]
        if late and res[0] is not None:
            cleanup = getattr(fn, "cleanup", None)
            if cleanup is not None:
                cleanup(res[0])

    for i, item in enumerate(items):
        threading.Thread(target=work, args=(i, item), name="ssh-connect", daemon=True).start()
    try:
        with cond:
            while left[0]:
                cond.wait(0.1)
    except BaseException:
        with cond:
            abandoned[0] = True
            done = [r for r in results if r[0] is not None]
        cleanup = getattr(fn, "cleanup", None)
        if cleanup is not None:
            for value, _ in done:
                cleanup(value)
        raise
    return results


def connect_each(hosts: Sequence[Host], settings: SSHSettings = SSHSettings()) -> Dict[str, Any]:
    """Connect to every host in parallel; host name -> :class:`SshConnection` or the reason (str).

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    config = read_ssh_config(config_path(settings.config))
    targets = [resolve_target(h, config, settings.known_hosts) for h in hosts]
    timeout = settings.connect_timeout

    def one(target: SshTarget) -> SshConnection:
        client = open_client(target, settings.accept_new, timeout)
        return SshConnection(target, client, settings.accept_new, timeout)

    one.cleanup = lambda conn: conn.close()  # type: ignore[attr-defined]  # a function attribute the connection pool looks for
    out: Dict[str, Any] = {}
    for target, (conn, exc) in zip(targets, run_parallel(one, targets, settings.pool)):
        if exc is None:
            out[target.name] = conn
        elif isinstance(exc, ConnectFailure):
            out[target.name] = str(exc)
        elif isinstance(exc, Exception):
            out[target.name] = describe_connect_error(target, exc, timeout)
        else:
            raise exc
    return out


def connect_all(hosts: Sequence[Host], settings: SSHSettings = SSHSettings()) -> Dict[str, SshConnection]:
    """Connect to every host in parallel, or fail naming every host that failed.

    Raises:
        LaunchError: one line per failed host (``cannot connect to 2 of 3 hosts: ...``); the
            connections that did succeed are closed first.
    """
    from launcher.execution.stopsignals import Interrupted

    try:
        results = connect_each(hosts, settings)
    except Interrupted as exc:
        raise LaunchError("interrupted while connecting to the hosts", exit_code=128 + exc.signum) from None
    failed = {k: v for k, v in results.items() if isinstance(v, str)}
    if failed:
        for v in results.values():
            if isinstance(v, SshConnection):
                v.close()
        detail = "; ".join(f"{name}: {why}" for name, why in failed.items())
        raise LaunchError(f"cannot connect to {len(failed)} of {len(results)} host(s): {detail}")
    return results
