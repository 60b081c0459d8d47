"""Wait for a host name to resolve (pods on Kubernetes start in any order: the scheduler pod's
DNS record appears only once that pod exists)."""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Callable, Optional

from launcher.errors import LaunchError


def is_ip(text: str) -> bool:
    """True if ``text`` is an IPv4 or IPv6 address (no lookup needed)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def lookup_ipv4(name: str) -> Optional[str]:
    """``name``'s IPv4 address (resolver order: /etc/hosts, then DNS), or None if it has none now."""
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def wait_resolved(
    name: str,
    timeout: float,
    *,
    field: str = "--master_addr",
    on_wait: Optional[Callable[[], None]] = None,
    lookup: Optional[Callable[[str], Optional[str]]] = None,
) -> str:
    """``name`` as an IPv4 address, waiting up to ``timeout`` seconds for it to resolve.

    Args:
        name: a host name or an address (returned as is).
        timeout: seconds to keep trying.
        field: the option named in the error.
        on_wait: called once, when the first lookup fails (to say that we wait).
        lookup: the resolver (default :func:`lookup_ipv4`; tests pass their own).

    Raises:
        LaunchError: it did not resolve in time (one line, exit code 1).
    """
    if is_ip(name):
        return name
    lookup = lookup or lookup_ipv4
    deadline = time.monotonic() + timeout
    pause = 0.05
    told = False
    while True:
        ip = lookup(name)
        if ip is not None:
            return ip
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"the scheduler's address {name!r} did not resolve within --start-timeout {timeout:g} s "
                f"(is the scheduler's node, node 0, running?)",
                field=field,
            )
        if not told and on_wait is not None:
            on_wait()
            told = True
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 1.0)
