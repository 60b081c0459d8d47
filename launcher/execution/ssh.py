"""The ssh launcher: one paramiko connection per host, one remote agent per rank.

Connections
    :class:`SshLauncher` connects to every host of the plan at once (a bounded pool of threads,
    a connect timeout per host) and fails with one :class:`~launcher.errors.LaunchError` naming
    every host that could not be reached and why.  Where to connect and as whom follows OpenSSH:
    the ssh config (``--ssh-config``, ``$MSLAUNCH_SSH_CONFIG`` or ``~/.ssh/config``; ``Host``
    patterns, ``HostName``, ``User``, ``Port``, ``IdentityFile``, ``IdentitiesOnly``,
    ``IdentityAgent none``, ``UserKnownHostsFile``, ``GlobalKnownHostsFile``,
    ``StrictHostKeyChecking``, ``Include``), then the YAML inventory's per-host ``ssh: {user,
    port, key}`` on top.  ``~`` is ``$HOME``.

Host keys
    Known keys come from the ``UserKnownHostsFile`` list (default ``~/.ssh/known_hosts``) and the
    global files.  An unknown key is refused with a message saying how to verify and add it,
    unless ``accept_new`` (``--ssh-accept-new``) or the config's ``StrictHostKeyChecking
    accept-new``/``no``: then it is trusted and appended to the first known_hosts file (trust on
    first use).  A *changed* key is always refused.

Ranks
    Each rank runs under :mod:`launcher.execution.remote_agent`, sent as source text over the
    channel's stdin (the remote host needs only a Python 3; ``python:`` in the inventory, else
    ``python3``).  The one remote command line is ``exec <python> -S -u -c <bootstrap>``, every
    piece ``shlex.quote``-d; argv, env and cwd travel as JSON on stdin and never meet a shell.
    The rank's stdout+stderr stream into its local log file (one thread per channel, a write per
    chunk), so ``mslaunch logs tail`` works unchanged.  The agent's stderr carries the protocol:
    ``started <pid>``, heartbeats, ``exit <rc>``.  Every second mslaunch pings every agent; a
    host that says nothing for ``lost_after`` seconds (or whose connection closes) is *lost*:
    its ranks' :meth:`SshProcess.wait` returns 255 with ``reason`` "connection to H lost", and the
    supervisor tears the job down everywhere.  An agent that hears no ping for ``agent_timeout``
    seconds ends its rank itself, so a cut link leaves nothing behind on the far side.

Only this module (and :mod:`launcher.execution.doctor`) talks SSH.  It never logs key material;
plans and logs hold key *paths* only.
"""
from __future__ import annotations

import glob
import json
import os
import posixpath
import queue
import shlex
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import paramiko

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, ProcessHandle, register_backend
from launcher.planning.inventory import Host, Inventory
from launcher.planning.plan import Plan, ProcPlan

#: Connections opened at once.
DEFAULT_POOL = 32
#: Seconds between pings to every agent.
PING_INTERVAL = 1.0
#: Seconds without a word from an agent after which its host counts as lost.
LOST_AFTER = 5.0
#: Seconds without a ping after which an agent ends its rank by itself.
AGENT_TIMEOUT = 8.0
#: Exit code of a rank whose host was lost (OpenSSH's for a failed connection).
LOST_RC = 255

#: Default seconds for a host's agent to say "started" (``--ssh-start-timeout``): the login
#: shell runs first (profile scripts, pyenv, ...), so this is longer than the liveness window.
START_TIMEOUT = 30.0

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


# ============================================================================ ssh config


def config_path(explicit: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The ssh config to read: ``explicit``, else ``$MSLAUNCH_SSH_CONFIG``, else ``~/.ssh/config``
    if it exists, else None."""
    env = os.environ if environ is None else environ
    if explicit:
        return os.path.expanduser(explicit)
    if env.get("MSLAUNCH_SSH_CONFIG"):
        return os.path.expanduser(env["MSLAUNCH_SSH_CONFIG"])
    default = os.path.expanduser("~/.ssh/config")
    return default if os.path.isfile(default) else None


def _config_text(path: str, depth: int = 0) -> str:
    """The text of an ssh config with ``Include`` lines replaced by the files they name."""
    if depth > 16:
        raise LaunchError("ssh config Include nesting is deeper than 16; is there a loop?", path=path)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        raise LaunchError("no such ssh config file; pass an existing --ssh-config", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LaunchError(f"cannot read ssh config: {exc}", path=path) from None
    out: List[str] = []
    for line in lines:
        words = line.strip().split(None, 1)
        if words and words[0].lower() == "include" and len(words) == 2:
            for pattern in shlex.split(words[1]):
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):  # OpenSSH: relative to ~/.ssh for user configs
                    pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
                for inc in sorted(glob.glob(pattern)):
                    out.append(_config_text(inc, depth + 1))
            continue
        out.append(line)
    return "\n".join(out)


def read_ssh_config(path: Optional[str]) -> paramiko.SSHConfig:
    """Parse the ssh config at ``path`` (None: an empty config).

    Raises:
        LaunchError: the file is missing, unreadable or malformed.
    """
    if path is None:
        return paramiko.SSHConfig()
    text = _config_text(path)
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as exc:  # paramiko raises ConfigParseError / ValueError
        raise LaunchError(f"cannot parse ssh config: {exc}", path=path) from None


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect to one inventory host (the resolved config; no key material).

    Attributes:
        name: the host as the inventory names it.
        hostname: the address to connect to (``HostName``).
        port: TCP port.
        user: login user.
        key_files: private key paths to offer (``IdentityFile`` / inventory ``ssh.key``).
        known_hosts: user known_hosts files; new keys are recorded in the first.
        global_known_hosts: read-only known_hosts files.
        accept_new: the config allows trust on first use (``StrictHostKeyChecking accept-new|no``).
        allow_agent: use ssh-agent (not with ``IdentitiesOnly yes`` / ``IdentityAgent none``).
        look_for_keys: try ``~/.ssh/id_*`` when no key file is given.
    """

    name: str
    hostname: str
    port: int
    user: str
    key_files: Tuple[str, ...]
    known_hosts: Tuple[str, ...]
    global_known_hosts: Tuple[str, ...] = ()
    accept_new: bool = False
    allow_agent: bool = True
    look_for_keys: bool = True

    @property
    def label(self) -> str:
        """``name`` plus where it points if that differs (``h1 (10.0.0.1:22)``)."""
        where = f"{self.hostname}:{self.port}"
        return self.name if where in (self.name, f"{self.name}:22") else f"{self.name} ({where})"


def resolve_target(host: Host, config: paramiko.SSHConfig, known_hosts: Optional[str] = None) -> SshTarget:
    """Combine the ssh config entry for ``host.name`` with the inventory's ``ssh:`` overrides."""
    import getpass

    conf = config.lookup(host.name)
    hostname = conf.get("hostname", host.name)
    port = host.ssh.port if host.ssh.port is not None else int(conf.get("port", 22))
    user = host.ssh.user or conf.get("user") or os.environ.get("USER") or getpass.getuser()
    if host.ssh.key is not None:
        keys: Tuple[str, ...] = (os.path.expanduser(host.ssh.key),)
    else:
        keys = tuple(os.path.expanduser(k) for k in conf.get("identityfile", []))
    if known_hosts is not None:
        user_kh: Tuple[str, ...] = (os.path.expanduser(known_hosts),)
    else:
        user_kh = tuple(os.path.expanduser(p) for p in shlex.split(conf.get("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2")))
    global_kh = tuple(os.path.expanduser(p) for p in shlex.split(conf.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2")))
    strict = conf.get("stricthostkeychecking", "ask").lower()
    only = conf.get("identitiesonly", "no").lower() == "yes"
    agent = conf.get("identityagent", "").lower() != "none" and not only
    return SshTarget(
        name=host.name, hostname=hostname, port=port, user=user, key_files=keys, known_hosts=user_kh,
        global_known_hosts=global_kh, accept_new=strict in ("accept-new", "no", "off"),
        allow_agent=agent, look_for_keys=not keys and not only,
    )


def resolve_addrs(inventory: Inventory, ssh_config: Optional[str]) -> Inventory:
    """Give every remote host without ``addr:`` the ``HostName`` its ssh config names.

    That is the address other hosts reach it at (``MS_SCHED_HOST``) when the inventory uses ssh
    aliases such as ``h1``.

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    config = read_ssh_config(config_path(ssh_config))
    hosts = []
    for h in inventory.hosts:
        if h.addr is None and not h.is_local:
            name = config.lookup(h.name).get("hostname", h.name)
            if name != h.name:
                h = replace(h, addr=name)
        hosts.append(h)
    return Inventory(tuple(hosts), source=inventory.source)


# ============================================================================ host keys


def fingerprint(key: paramiko.PKey) -> str:
    """``SHA256:...`` as OpenSSH prints it."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


class UnknownHostKey(paramiko.SSHException):
    """The server's host key is in no known_hosts file."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class RefuseUnknownPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking yes``: refuse hosts whose key is not known."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking accept-new``: trust an unknown key and record it.

    The key is added to the client and appended to ``path`` (created 0600, its folder 0700) as
    ``<host> <type> <base64>``.  Keys that *changed* never reach a policy: paramiko refuses them.
    """

    _lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            folder = os.path.dirname(self.path)
            if folder and not os.path.isdir(folder):
                os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="ascii") as fh:
                fh.write(line)


# ============================================================================ connections


class ConnectFailure(Exception):
    """Connecting to one host failed; ``str()`` says why in one line (no key material)."""


def _describe_connect_error(target: SshTarget, exc: BaseException, timeout: float) -> str:
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, UnknownHostKey):
        port = f"-p {target.port} " if target.port != 22 else ""
        kh = target.known_hosts[0] if target.known_hosts else "~/.ssh/known_hosts"
        return (f"host key for {target.name} is not known ({exc.key.get_name()} {fingerprint(exc.key)}); verify it and add it "
                f"to known_hosts (ssh-keyscan {port}{target.hostname} >> {kh}) or pass --ssh-accept-new")
    if isinstance(exc, paramiko.BadHostKeyException):
        kh = target.known_hosts[0] if target.known_hosts else "~/.ssh/known_hosts"
        return (f"host key for {target.name} has CHANGED (now {fingerprint(exc.key)}); someone may be intercepting the "
                f"connection; if the host was reinstalled, remove the old key with ssh-keygen -R {target.hostname} -f {kh}")
    if isinstance(exc, paramiko.PasswordRequiredException):
        return f"the private key for {target.name} is encrypted; load it into ssh-agent (ssh-add) first"
    if isinstance(exc, paramiko.SSHException) and "no authentication methods" in str(exc).lower():
        exc = paramiko.AuthenticationException(str(exc))  # e.g. every key file is missing
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(k + ("" if os.path.isfile(k) else " (missing)") for k in target.key_files) or "default keys / ssh-agent"
        return (f"authentication failed as {target.user}@{where} (keys: {keys}); check User/IdentityFile in the ssh "
                "config or ssh.user/ssh.key in the inventory")
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
            target.hostname, port=target.port, username=target.user, key_filename=keys or None,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout,
            allow_agent=target.allow_agent, look_for_keys=target.look_for_keys,
        )
    except Exception as exc:  # every failure becomes one line naming the host
        client.close()
        raise ConnectFailure(_describe_connect_error(target, exc, timeout)) from None
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
        self._outbox: "queue.Queue[Optional[Tuple[paramiko.Channel, bytes]]]" = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, name=f"ssh-send-{target.name}", daemon=True)
        self._sender.start()
        self.closed = False

    @property
    def name(self) -> str:
        return self.target.name

    def active(self) -> bool:
        with self._lock:
            return any((c.get_transport() is not None and c.get_transport().is_active()) for c in self._clients)  # type: ignore[union-attr]

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

    def _send_loop(self) -> None:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            chan, data = item
            try:
                if not chan.closed:
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
            raise LaunchError(f"cannot open SFTP on {self.target.label}: {exc}; enable 'Subsystem sftp' in its sshd_config") from None

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


def _parallel(fn: Callable[[Any], Any], items: Sequence[Any], pool: int) -> List[Tuple[Any, Optional[BaseException]]]:
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


def connect_each(
    hosts: Sequence[Host],
    ssh_config: Optional[str] = None,
    accept_new: bool = False,
    connect_timeout: float = 10.0,
    known_hosts: Optional[str] = None,
    pool: int = DEFAULT_POOL,
) -> Dict[str, Any]:
    """Connect to every host in parallel; host name -> :class:`SshConnection` or the reason (str).

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    config = read_ssh_config(config_path(ssh_config))
    targets = [resolve_target(h, config, known_hosts) for h in hosts]

    def one(target: SshTarget) -> SshConnection:
        client = open_client(target, accept_new, connect_timeout)
        return SshConnection(target, client, accept_new, connect_timeout)

    one.cleanup = lambda conn: conn.close()  # type: ignore[attr-defined]
    out: Dict[str, Any] = {}
    for target, (conn, exc) in zip(targets, _parallel(one, targets, pool)):
        if exc is None:
            out[target.name] = conn
        elif isinstance(exc, ConnectFailure):
            out[target.name] = str(exc)
        elif isinstance(exc, Exception):
            out[target.name] = _describe_connect_error(target, exc, connect_timeout)
        else:
            raise exc
    return out


def connect_all(
    hosts: Sequence[Host],
    ssh_config: Optional[str] = None,
    accept_new: bool = False,
    connect_timeout: float = 10.0,
    known_hosts: Optional[str] = None,
    pool: int = DEFAULT_POOL,
) -> Dict[str, SshConnection]:
    """Connect to every host in parallel, or fail naming every host that failed.

    Raises:
        LaunchError: one line per failed host (``cannot connect to 2 of 3 hosts: ...``); the
            connections that did succeed are closed first.
    """
    from launcher.execution.supervisor import Interrupted

    try:
        results = connect_each(hosts, ssh_config, accept_new, connect_timeout, known_hosts, pool)
    except Interrupted as exc:
        raise LaunchError("interrupted while connecting to the hosts", exit_code=128 + exc.signum) from None
    failed = {k: v for k, v in results.items() if isinstance(v, str)}
    if failed:
        for v in results.values():
            if isinstance(v, SshConnection):
                v.close()
        detail = "; ".join(f"{name}: {why}" for name, why in failed.items())
        raise LaunchError(f"cannot connect to {len(failed)} of {len(results)} host(s): {detail}")
    return results  # type: ignore[return-value]


# ============================================================================ files


def put_file(conn: SshConnection, path: str, content: bytes, mode: int = 0o600) -> None:
    """Write ``content`` to ``path`` on the host atomically (``mkdir -p`` its folder), read it
    back and compare.

    Raises:
        LaunchError: the file cannot be written or reads back different.
    """
    sftp = conn.sftp()
    try:
        folder = posixpath.dirname(path)
        parts: List[str] = []
        while folder not in ("", "/"):
            try:
                sftp.stat(folder)
                break
            except IOError:
                parts.append(folder)
                folder = posixpath.dirname(folder)
        for d in reversed(parts):
            try:
                sftp.mkdir(d, mode=0o700)
            except IOError:
                sftp.stat(d)  # created meanwhile (shared filesystem): fine; else raise
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with sftp.open(tmp, "wb") as fh:
            fh.write(content)
        sftp.chmod(tmp, mode)
        sftp.posix_rename(tmp, path)
        with sftp.open(path, "rb") as fh:
            back = fh.read()
    except (IOError, OSError, paramiko.SSHException) as exc:
        raise LaunchError(f"cannot write {path} on {conn.target.label}: {exc}") from None
    finally:
        sftp.close()
    if back != content:
        raise LaunchError(f"{path} on {conn.target.label} reads back different from what was written; check the remote disk")


def read_file(conn: SshConnection, path: str, limit: int = 1 << 20) -> bytes:
    """The content of ``path`` on the host.

    Raises:
        LaunchError: missing or unreadable (the message names host and path).
    """
    sftp = conn.sftp()
    try:
        with sftp.open(path, "rb") as fh:
            return fh.read(limit)
    except IOError as exc:
        if getattr(exc, "errno", None) == 2:
            raise LaunchError(f"{path} does not exist on {conn.target.label}") from None
        raise LaunchError(f"cannot read {path} on {conn.target.label}: {exc}") from None
    finally:
        sftp.close()


# ============================================================================ ranks


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

    def _read_stdout(self) -> None:
        try:
            with open(self.log_path, "ab", buffering=0) as fh:
                while True:
                    try:
                        data = self._chan.recv(65536)  # type: ignore[union-attr]
                    except socket.timeout:
                        continue
                    except Exception:
                        return
                    if not data:
                        return
                    fh.write(data)
        except OSError as exc:
            self._finish(1, f"cannot write {self.log_path}: {exc.strerror}")

    def _read_stderr(self) -> None:
        from launcher.execution.remote_agent import MARK

        buf = b""
        while True:
            try:
                data = self._chan.recv_stderr(4096)  # type: ignore[union-attr]
            except socket.timeout:
                continue
            except Exception:
                data = b""
            if not data:
                break
            self._last_heard = time.monotonic()
            self._heard_any = True
            buf += data
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode("utf-8", "replace")
                if line.startswith(MARK + " "):
                    self._message(line[len(MARK) + 1:])
                elif line.strip():
                    self._agent_lines = (self._agent_lines + [line])[-5:]
                    self._log_line(f"mslaunch-agent: {line}")
        self._stderr_closed()

    def _message(self, text: str) -> None:
        kind, _, arg = text.partition(" ")
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
        accept_new: trust and record unknown host keys (``--ssh-accept-new``).
        connect_timeout: seconds per connection attempt (``--ssh-connect-timeout``).
        ssh_config_path: ssh config to read (default: the plan's ``--ssh-config``,
            ``$MSLAUNCH_SSH_CONFIG``, ``~/.ssh/config``).
        known_hosts_path: known_hosts file to use instead of the config's ``UserKnownHostsFile``.
        lost_after: seconds of silence after which a host counts as lost, once its agent started.
        start_timeout: seconds for a host's agent to start (``--ssh-start-timeout``); past it
            the rank is reported as "did not start".
        agent_timeout: seconds without a ping after which an agent ends its rank.
        pool: connections opened at once.

    Raises:
        LaunchError: a host cannot be reached / authenticated / verified (every failed host is
            named), or a rank table cannot be copied to a host.
    """

    def __init__(
        self,
        plan: Plan,
        accept_new: bool = False,
        connect_timeout: float = 10.0,
        ssh_config_path: Optional[str] = None,
        known_hosts_path: Optional[str] = None,
        lost_after: float = LOST_AFTER,
        agent_timeout: float = AGENT_TIMEOUT,
        start_timeout: float = START_TIMEOUT,
        pool: int = DEFAULT_POOL,
    ) -> None:
        self.plan = plan
        self.lost_after = lost_after
        self.agent_timeout = agent_timeout
        self.start_timeout = start_timeout
        self._hosts = {h.name: h for h in plan.hosts}
        self._handles: List[SshProcess] = []
        self._stop = threading.Event()
        cfg = ssh_config_path or getattr(plan, "ssh_config", None)
        self.conns = connect_all(list(plan.hosts), cfg, accept_new, connect_timeout, known_hosts_path, pool)
        try:
            self._copy_artefacts(pool)
        except BaseException:
            self.close()
            raise
        self._pinger = threading.Thread(target=self._ping_loop, name="ssh-ping", daemon=True)
        self._pinger.start()

    def _copy_artefacts(self, pool: int) -> None:
        """Rank tables go to the same path on every host (their ranks read RANK_TABLE_FILE)."""
        tables = [a for a in self.plan.artefacts if a.kind == "rank_table"]
        if not tables:
            return
        from launcher.execution.supervisor import Interrupted

        def copy(conn: SshConnection) -> None:
            for art in tables:
                put_file(conn, posixpath.join(self.plan.job_dir, art.name), art.content.encode("utf-8"))

        try:
            results = _parallel(copy, list(self.conns.values()), pool)
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
        under_job = cwd == self.plan.job_dir or cwd.startswith(self.plan.job_dir.rstrip("/") + "/")
        cfg = {
            "argv": list(proc.argv),
            "env": dict(proc.env),
            "cwd": cwd,
            "mkdir": under_job,
            "env_dump": posixpath.join(cwd, posixpath.basename(proc.env_dump)) if proc.env_dump else None,
            "ping_timeout": self.agent_timeout,
            "heartbeat": PING_INTERVAL,
            "host": proc.host,
        }
        line = json.dumps({"src": agent_source(), "cfg": cfg}).encode("utf-8") + b"\n"
        if not conn.active():
            raise LaunchError(f"{proc.name}: the connection to {conn.target.label} is closed")
        # The log exists (and is empty) before the process, as for local ranks.
        open(log_path, "ab").close()
        handle = SshProcess(proc, conn, agent_command(python), line, log_path, self.lost_after, self.start_timeout)
        self._handles.append(handle)
        return handle

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls(ctx.plan, **dict(ctx.settings_for("ssh") or {}))

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


def collect_files(
    hosts: Sequence[Host],
    path: str,
    ssh_config: Optional[str] = None,
    accept_new: bool = False,
    connect_timeout: float = 10.0,
    pool: int = DEFAULT_POOL,
) -> Dict[str, str]:
    """Read ``path`` on every host in parallel (``localhost`` from this machine's disk).

    Returns:
        host name -> the file's text.

    Raises:
        LaunchError: naming every host that cannot be reached or has no readable ``path``.
    """
    remote = [h for h in hosts if not h.is_local]
    conns = connect_each(remote, ssh_config, accept_new, connect_timeout, pool=pool) if remote else {}
    try:
        def one(host: Host) -> str:
            if host.is_local:
                try:
                    with open(path, "rb") as fh:
                        return fh.read().decode("utf-8", "replace")
                except OSError as exc:
                    raise LaunchError(f"cannot read {path} on {host.name}: {exc.strerror}") from None
            conn = conns[host.name]
            if isinstance(conn, str):
                raise LaunchError(conn)
            return read_file(conn, path).decode("utf-8", "replace")

        results = _parallel(one, list(hosts), pool)
    finally:
        for c in conns.values():
            if isinstance(c, SshConnection):
                c.close()
    errors = [f"{h.name}: {exc}" for h, (_, exc) in zip(hosts, results) if exc is not None]
    if errors:
        raise LaunchError(f"cannot collect {path} from {len(errors)} of {len(hosts)} host(s): " + "; ".join(errors))
    return {h.name: text for h, (text, _) in zip(hosts, results)}
