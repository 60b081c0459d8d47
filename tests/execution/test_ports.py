"""Port checks: a listener makes a port busy; connections of a finished job in TIME_WAIT do not."""

from __future__ import annotations

import socket

import pytest

from launcher.errors import LaunchError
from launcher.execution.ports import check_port_free, port_is_free


def _time_wait_port() -> int:
    """A loopback port whose server side closed first, so its socket sits in TIME_WAIT."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    srv.close()
    conn.close()  # the server side closes first: its end enters TIME_WAIT once the client closes
    assert cli.recv(1) == b""
    cli.close()
    return port


def _in_time_wait(port: int) -> bool:
    want = f":{port:04X}"
    with open("/proc/net/tcp") as fh:
        return any(line.split()[1].endswith(want) and line.split()[3] == "06" for line in fh.readlines()[1:])


def test_a_port_in_time_wait_is_free_and_a_listener_is_busy():
    port = _time_wait_port()
    assert _in_time_wait(port), "the test needs a TIME_WAIT socket on the port"
    assert port_is_free(port, "127.0.0.1")
    check_port_free(port, "127.0.0.1")
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", port))
        busy.listen()
        assert not port_is_free(port, "127.0.0.1")
        with pytest.raises(LaunchError, match=f"port {port} is already in use.*--master-port auto"):
            check_port_free(port, "127.0.0.1")
