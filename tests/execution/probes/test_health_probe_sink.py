"""The health probe's transfer sink (launcher.execution.probes.health_probe): it listens on the
address it is given only, takes a peer's data only after the check's token, and names every
other connection in its next answer; a real peer's figures are unaffected."""

from __future__ import annotations

import secrets
import socket
import sys
import time

import psutil
import pytest

from launcher.execution.checks.health import _argv, close_all
from launcher.execution.checks.links import LocalLink
from launcher.execution.probes.health_probe import THREAD_ENV


def _closed(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock`` (an end that closes with unread data resets it)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.e2e
def test_a_sink_refuses_a_peer_without_the_token_and_names_it() -> None:
    token = secrets.token_hex(16)
    links = [LocalLink(n, _argv(sys.executable, "numpy", "127.0.0.1", 60), THREAD_ENV) for n in ("a", "b")]
    try:
        ports = []
        for link in links:
            link.send({"op": "start", "kernel": "numpy", "n": 32, "token": token})
            answer = link.recv(time.monotonic() + 30)
            assert "port" in answer, answer
            ports.append(answer["port"])
        a, b = links
        listening = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == ports[0]]
        assert [c.laddr.ip for c in listening if c.status == "LISTEN"] == ["127.0.0.1"]  # not 0.0.0.0
        impostor = socket.create_connection(("127.0.0.1", ports[0]))
        impostor.sendall(b"f" * 32 + b"\n" + b"\0" * 1000)
        assert _closed(impostor)  # closed unread
        impostor.close()
        b.send({"op": "send", "addr": "127.0.0.1", "port": ports[0], "seconds": 0.1, "delay": 0})
        sent = b.recv(time.monotonic() + 30)
        assert sent.get("mbps", 0) > 0, sent  # the real peer, with the token
        a.send({"op": "compute", "window": 0.01, "repeats": 1})
        assert "gflops" in a.recv(time.monotonic() + 30)
        assert a.refused == ["127.0.0.1"] and b.refused == []
    finally:
        close_all(links, 2.0, 2.0)
    assert all(link.proc.poll() is not None for link in links)
