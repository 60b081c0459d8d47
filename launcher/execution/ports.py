"""Ports on this machine: pick a free one, check that one is free, wait until one accepts."""

from __future__ import annotations

import socket
import time
from typing import Callable, Optional

from launcher.errors import LaunchError
from launcher.planning.job.spec import Plan


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "") -> bool:
    """True if ``port`` can be bound on ``host`` ("" = all addresses) right now.

    Bound with SO_REUSEADDR, as MindSpore's scheduler and every TCP server binds: connections of
    a finished job still in TIME_WAIT do not make the port busy, a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def check_port_free(port: int, host: str = "") -> None:
    """Raise a clear error if ``port`` is in use on this machine.

    Raises:
        LaunchError: naming the port and the flag to change it.
    """
    if not port_is_free(port, host):
        raise LaunchError(
            f"port {port} is already in use on this machine; pass --master-port auto or another free port",
            field="--master-port",
        )


def wait_accepting(
    host: str, port: int, timeout: float, alive: Optional[Callable[[], bool]] = None, interval: float = 0.02
) -> bool:
    """Wait until ``host:port`` accepts a TCP connection.

    Args:
        host: address to connect to.
        port: the port.
        timeout: seconds to wait at most.
        alive: called between tries; waiting stops (returning False) once it returns False,
            e.g. when the process that should listen has exited.
        interval: first pause between tries (doubles up to 0.2 s).

    Returns:
        True once a connection succeeded, False on timeout or when ``alive()`` turned False.
    """
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(1.0, max(0.05, deadline - time.monotonic()))):
                return True
        except OSError:
            pass
        if alive is not None and not alive():
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def resolve_ipv4(addr: str) -> str:
    """``addr`` as an IPv4 address (a name is resolved; an unresolvable one is returned as is)."""
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return addr


def is_local_addr(addr: str) -> bool:
    """True if ``addr`` (an IP or a name) is one of this machine's (network namespace's) addresses,
    as msrun decides whether to start the scheduler on this node."""
    import psutil

    ip = resolve_ipv4(addr)
    if ip.startswith("127."):
        return True
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and a.address == ip:
                return True
    return False


def local_ip_towards(addr: str) -> str:
    """The source address this machine uses to reach ``addr`` (msrun's ``{ip}``); no packet is sent."""
    ip = resolve_ipv4(addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, 9))
            return str(s.getsockname()[0])
        except OSError:
            return ip


def check_scheduler_port(plan: Plan) -> None:
    """The scheduler's port must be free on this machine when the scheduler runs here.

    Raises:
        LaunchError: the port is busy.
    """
    if plan.scheduler is not None and plan.master_port is not None:
        check_port_free(plan.master_port)
