"""Heartbeats between mslaunch and the Slurm task shims: a node cut off is known in seconds.

Slurm learns that a node is gone only after ``SlurmdTimeout`` and its next ping of the node
(20 s with the namespace cluster's 10 s; 300 s is Slurm's default), and only then ends the step.
Over ssh, the host agents' pings find a cut link in about 5 s; this is the same for Slurm:

* mslaunch listens (:class:`BeatListener`, one thread, one TCP port on its address towards the
  nodes); the tasks file gives each shim the address and the attempt's token;
* each shim connects once its rank started (:func:`shim_beat`), says ``{"node", "key", "token"}``
  in one line, then sends one byte every :data:`BEAT_INTERVAL` s and reads mslaunch's bytes;
* mslaunch sends one byte every :data:`BEAT_INTERVAL` s on each link.  A link that says nothing
  for :data:`SILENT_AFTER` s, not closed (a rank that ended closes its link: its shim exits), makes
  its node *silent*: ``on_silent(node, how)`` once per node, and the backend ends the attempt's
  steps there as failed with the node lost (:mod:`launcher.execution.slurm.backend`);
* a shim whose link said nothing for :data:`SHIM_TIMEOUT` s ends its rank (SIGKILL to the rank's
  process group, as the ssh agent does after its ping timeout): a node cut off from mslaunch does
  not train on alone, whatever Slurm does when it hears of the node again;
* mslaunch's teardown signals the ranks over the links (:meth:`BeatListener.send`: ``T`` for
  SIGTERM, ``K`` for SIGKILL; the shim passes it to its rank's process group as it does Slurm's):
  ``scancel --signal`` waits for every node of the job, and with one node silent it takes
  ``MessageTimeout`` + 1 s (6 s here) and fails, even for a step on other nodes.

A shim that cannot connect (no route back to mslaunch) runs its rank without heartbeats: then
Slurm's own view of the node is the only one, as before.  A connection without the token is
closed.  Standard library only (the shim imports it on every node).
"""

from __future__ import annotations

import hmac
import json
import select
import signal
import socket
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

#: Seconds between two beats, both ways.
BEAT_INTERVAL = 1.0
#: mslaunch: seconds of silence on a node's link after which the node counts as lost (as
#: ``LOST_AFTER`` over ssh).
SILENT_AFTER = 5.0
#: A shim: seconds of silence from mslaunch after which it ends its rank (as ``AGENT_TIMEOUT``).
SHIM_TIMEOUT = 8.0
#: A shim gives up connecting after this many seconds (its rank runs on without heartbeats).
CONNECT_FOR = 30.0
_HELLO_LIMIT = 4096
#: What mslaunch may send a shim beside its beats (``.``): a signal for the shim's rank.
SIGNALS = {b"T": signal.SIGTERM, b"K": signal.SIGKILL}


class _Link:
    __slots__ = ("sock", "buf", "node", "key", "last")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.buf = b""
        self.node: Optional[str] = None
        self.key = ""
        self.last = now


class BeatListener:
    """mslaunch's side (see the module doc).

    Args:
        addr: the address to listen on (this machine's address towards the nodes).
        token: the attempt's token; a link that does not say it is closed.
        on_silent: called once per node, from the listener's thread, with the node and a
            sentence saying how it was lost.
        silent_after: seconds of silence that make a node silent.
    """

    def __init__(
        self,
        addr: str,
        token: str,
        on_silent: Callable[[str, str], None],
        silent_after: float = SILENT_AFTER,
        interval: float = BEAT_INTERVAL,
    ) -> None:
        self.token = token
        self.on_silent = on_silent
        self.silent_after = silent_after
        self.interval = interval
        self.silent: Dict[str, str] = {}
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.bind((addr, 0))
        self._srv.listen(64)
        self._srv.setblocking(False)
        self._links: List[_Link] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mslaunch-slurm-beat", daemon=True)
        self._thread.start()

    @property
    def address(self) -> Tuple[str, int]:
        host, port = self._srv.getsockname()[:2]
        return str(host), int(port)

    def nodes(self) -> Dict[str, int]:
        """node -> its open links (those that said hello)."""
        with self._lock:
            out: Dict[str, int] = {}
            for link in self._links:
                if link.node is not None:
                    out[link.node] = out.get(link.node, 0) + 1
            return out

    def send(self, keys: Set[str], code: bytes) -> Set[str]:
        """Send ``code`` (:data:`SIGNALS`' keys) on the links whose shim said one of ``keys``
        (``rank_<r>``, ``scheduler``); the keys it reached (not those of a silent node)."""
        reached: Set[str] = set()
        with self._lock:
            for link in self._links:
                if link.node is not None and link.key in keys and link.node not in self.silent:
                    try:
                        link.sock.send(code)
                        reached.add(link.key)
                    except OSError:
                        pass
        return reached

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            for link in self._links:
                _close(link.sock)
            self._links = []
        _close(self._srv)

    def _run(self) -> None:
        next_beat = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                socks = [self._srv] + [link.sock for link in self._links]
            try:
                readable, _, _ = select.select(socks, [], [], min(self.interval, 0.2))
            except (OSError, ValueError):
                readable = []
            now = time.monotonic()
            for sock in readable:
                if sock is self._srv:
                    self._accept(now)
                else:
                    self._read(sock, now)
            if now >= next_beat:
                next_beat = now + self.interval
                self._beat()
            self._judge(time.monotonic())

    def _accept(self, now: float) -> None:
        try:
            sock, _ = self._srv.accept()
        except OSError:
            return
        sock.setblocking(False)
        with self._lock:
            self._links.append(_Link(sock, now))

    def _read(self, sock: socket.socket, now: float) -> None:
        link = next((x for x in self._links if x.sock is sock), None)
        if link is None:
            return
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # closed: its shim ended (a rank that ended is no lost node)
            self._drop(link)
            return
        link.last = now
        if link.node is None:
            link.buf += data
            if b"\n" not in link.buf:
                if len(link.buf) > _HELLO_LIMIT:
                    self._drop(link)
                return
            line = link.buf.split(b"\n", 1)[0]
            try:
                hello = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                hello = None
            ok = isinstance(hello, dict) and hmac.compare_digest(
                str(hello.get("token") or "").encode(), self.token.encode()
            )
            if not ok or not isinstance(hello.get("node"), str):
                self._drop(link)
                return
            link.node, link.key, link.buf = str(hello["node"]), str(hello.get("key") or ""), b""

    def _beat(self) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            if link.node is None:
                continue
            try:
                link.sock.send(b".")
            except (BlockingIOError, InterruptedError):
                pass  # its buffer is full: the node reads nothing; silence will tell
            except OSError:
                pass  # a reset: the read sees it

    def _judge(self, now: float) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            if link.node is None:
                if now - link.last > self.silent_after:
                    self._drop(link)  # connected, never said hello
                continue
            quiet = now - link.last
            if quiet > self.silent_after and link.node not in self.silent:
                how = (
                    f"no heartbeat from node {link.node} for {quiet:.0f} s (its {link.key or 'task'}'s shim);"
                    " the node or its link is down"
                )
                self.silent[link.node] = how
                try:
                    self.on_silent(link.node, how)
                except Exception:  # noqa: BLE001 - the listener goes on for the other nodes
                    pass

    def _drop(self, link: _Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        _close(link.sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def shim_beat(
    addr: Tuple[str, int],
    token: str,
    node: str,
    key: str,
    on_lost: Callable[[], None],
    done: threading.Event,
    timeout: float = SHIM_TIMEOUT,
    interval: float = BEAT_INTERVAL,
    connect_for: float = CONNECT_FOR,
    on_signal: Optional[Callable[[int], None]] = None,
) -> None:
    """A shim's side (see the module doc), until ``done`` is set: connect, say hello, beat; call
    ``on_signal(signum)`` for each signal mslaunch sends (:data:`SIGNALS`), and ``on_lost()``
    once when mslaunch said nothing for ``timeout`` s on a link that was up.  Returns without a
    call when it cannot connect within ``connect_for`` s."""
    sock = _connect(addr, done, connect_for)
    if sock is None:
        return
    try:
        hello = json.dumps({"node": node, "key": key, "token": token}) + "\n"
        sock.sendall(hello.encode())
        sock.setblocking(False)
        last_in = time.monotonic()
        next_beat = 0.0
        while not done.is_set():
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + interval
                try:
                    sock.send(b".")
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    pass  # reset: reading says so
            try:
                readable, _, _ = select.select([sock], [], [], min(interval, 0.2))
            except (OSError, ValueError):
                readable = []
            if readable:
                try:
                    data = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    data = b"."
                except OSError:
                    data = b""
                if not data:
                    return  # mslaunch closed the link (its attempt ended): Slurm ends the step
                last_in = time.monotonic()
                for code, signum in SIGNALS.items():
                    if code in data and on_signal is not None:
                        on_signal(signum)
            if time.monotonic() - last_in > timeout:
                on_lost()
                return
    finally:
        _close(sock)


def _connect(addr: Tuple[str, int], done: threading.Event, connect_for: float) -> Optional[socket.socket]:
    deadline = time.monotonic() + connect_for
    while not done.is_set() and time.monotonic() < deadline:
        try:
            return socket.create_connection(addr, timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        except OSError:
            done.wait(1.0)
    return None
