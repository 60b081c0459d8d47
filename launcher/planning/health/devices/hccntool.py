"""``hccn_tool -i N ... -g``: one Ascend device NIC's link, network health, IP and TLS (pure parsers).

What the tool prints (see ``docs/health.md``; sources in ``tests/planning/data/devices/README.md``)::

    hccn_tool -i 0 -link -g         link status: UP          (some cards: ``link status : UP``;
                                                               values UP, DOWN, PARTIAL LINK, NA)
    hccn_tool -i 0 -net_health -g   net health status: Success
                                    (Success, Socket fail, Receive timeout, Unreachable, Time exceeded,
                                     Fault, Init, Thread error, Detect ip set, Unknown)
    hccn_tool -i 0 -ip -g           ipaddr:192.98.1.1
                                    netmask:255.255.255.0
    hccn_tool -i 0 -tls -g          dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1]...

and, instead, one of the lines of its error table (:data:`FAILURE_LINES`).  Values are matched
without regard to case and to the spaces around the colon; a value not in the tool's table is
refused (:class:`ToolOutputError`), so a truncated answer is never taken for a healthy one.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

from launcher.planning.health.devices.model import FAULTY, NOT_CHECKED, ToolOutputError, one_line
from launcher.planning.ranktable.hccn import is_ipv4

__all__ = [
    "FAILURE_LINES",
    "LINK_VALUES",
    "NET_HEALTH_PASS",
    "NET_HEALTH_VALUES",
    "NO_IP_LINE",
    "failure_line",
    "parse_ip",
    "parse_link",
    "parse_net_health",
    "parse_tls",
]

#: ``link status`` values; only UP is healthy.
LINK_VALUES = ("UP", "DOWN", "PARTIAL LINK", "NA")
#: ``net health status`` values (the tool's table), as printed.
NET_HEALTH_VALUES = (
    "Success",
    "Socket fail",
    "Receive timeout",
    "Unreachable",
    "Time exceeded",
    "Fault",
    "Init",
    "Thread error",
    "Detect ip set",
    "Unknown",
)
#: Values that pass: ``Init`` means no detect address is configured (Ascend's own checks pass it).
NET_HEALTH_PASS = ("Success", "Init")
#: ``-ip -g`` on a device without an address.
NO_IP_LINE = "Get ipconf failed, because no ip was preset there!"

#: Lines of the tool's error table and what they make of the check: ``faulty`` (the device or
#: its link is not usable) or ``not_checked`` (the tool could not answer).
FAILURE_LINES: Dict[str, str] = {
    "The device is not exist!": FAULTY,
    "Execute failed: Link status is down.": FAULTY,
    "Optical module is not present.": FAULTY,
    "Command execute failed!": NOT_CHECKED,
    "hccn_tool is busy, please try again.": NOT_CHECKED,
    "Control link unreachable.": NOT_CHECKED,
    "permission denied: pls check this cmd run permission.": NOT_CHECKED,
    NO_IP_LINE: FAULTY,
}

# One line each, no backtracking across spaces (outputs can be long): the value is the rest of
# the line, stripped in Python.
_LINK_RE = re.compile(r"^[ \t]*link[ \t]+status[ \t]*:([^\n]*)", re.IGNORECASE | re.MULTILINE)
_HEALTH_RE = re.compile(r"^[ \t]*net[ \t]+health[ \t]+status[ \t]*:([^\n]*)", re.IGNORECASE | re.MULTILINE)
_IPADDR_RE = re.compile(r"^[ \t]*ipaddr[ \t]*:([^\n]*)", re.IGNORECASE | re.MULTILINE)
_NETMASK_RE = re.compile(r"^[ \t]*netmask[ \t]*:([^\n]*)", re.IGNORECASE | re.MULTILINE)
_TLS_RE = re.compile(r"tls[ \t]+switch[ \t]*\[[ \t]*(\d{1,9})[ \t]*\]", re.IGNORECASE)


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def failure_line(text: str) -> Optional[Tuple[str, str]]:
    """The first line of the tool's error table found in ``text``, and its verdict
    (``faulty`` / ``not_checked``), or None."""
    flat = _norm(text)
    found = [(flat.find(_norm(line)), line, verdict) for line, verdict in FAILURE_LINES.items() if _norm(line) in flat]
    if not found:
        return None
    _, line, verdict = min(found)
    return line, verdict


def _value(regex: "re.Pattern[str]", text: str, what: str, command: str) -> str:
    match = regex.search(text.replace("\r", ""))
    if match is None:
        raise ToolOutputError(f"{command} printed no {what!r} line: {_first_line(text)}")
    return match.group(1).strip()


def _one_of(raw: str, values: Tuple[str, ...], unknown: str) -> str:
    """The value of ``values`` that ``raw`` spells (case and spacing aside); else ToolOutputError(``unknown``)."""
    for value in values:
        if _norm(raw) == _norm(value):
            return value
    raise ToolOutputError(unknown)


def parse_link(text: str, command: str = "hccn_tool -link -g") -> str:
    """The ``link status`` value (one of :data:`LINK_VALUES`, as listed there).

    Raises:
        ToolOutputError: no such line, or a value not in :data:`LINK_VALUES`.
    """
    raw = _value(_LINK_RE, text, "link status", command)
    return _one_of(
        raw, LINK_VALUES, f"{command}: unknown link status {one_line(raw, 40)!r} (known: {', '.join(LINK_VALUES)})"
    )


def parse_net_health(text: str, command: str = "hccn_tool -net_health -g") -> str:
    """The ``net health status`` value (one of :data:`NET_HEALTH_VALUES`, as listed there).

    Raises:
        ToolOutputError: no such line, or a value not in :data:`NET_HEALTH_VALUES`.
    """
    raw = _value(_HEALTH_RE, text, "net health status", command)
    return _one_of(raw, NET_HEALTH_VALUES, f"{command}: unknown net health status {one_line(raw, 40)!r}")


def parse_ip(text: str, command: str = "hccn_tool -ip -g") -> Tuple[str, str]:
    """``(ipaddr, netmask)``, both dotted-quad IPv4 addresses.

    Raises:
        ToolOutputError: a line missing, or a value that is not an IPv4 address.
    """
    ip = _value(_IPADDR_RE, text, "ipaddr", command)
    mask = _value(_NETMASK_RE, text, "netmask", command)
    for what, value in (("ipaddr", ip), ("netmask", mask)):
        if not is_ipv4(value):
            raise ToolOutputError(f"{command}: {what} {one_line(value, 40)!r} is not an IPv4 address")
    return ip, mask


def parse_tls(text: str, command: str = "hccn_tool -tls -g") -> str:
    """The ``tls switch[k]`` value ``k`` (``0``: disabled, ``1``: enabled), as printed.

    Raises:
        ToolOutputError: no ``tls switch[k]`` in the output.
    """
    match = _TLS_RE.search(text)
    if match is None:
        raise ToolOutputError(f"{command} printed no 'tls switch[k]': {_first_line(text)}")
    return str(int(match.group(1)))


def _first_line(text: str) -> str:
    for line in text.replace("\r", "").split("\n"):
        if line.strip():
            return one_line(line, 80)
    return "(nothing)"
