"""``hccn.conf``: the device (NPU NIC) IP addresses of one Ascend server.

Layout of the file (``/etc/hccn.conf`` on the server, written by ``hccn_tool``)::

    address_0=192.1.27.6
    netmask_0=255.255.255.0
    netdetect_0=192.1.27.1
    gateway_0=192.1.27.1
    address_1=192.2.27.6
    ...

Only ``address_<device_id>=<IPv4>`` lines matter here; every other ``key=value`` line is
ignored.  ``#`` starts a comment; blank lines and whitespace around ``=`` and at either end of a
line are tolerated.

:func:`parse_hccn_conf` is pure; :func:`read_hccn_conf` only reads the file and calls it.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

from launcher.errors import RankTableError
from launcher.planning.text.textfile import read_text

__all__ = ["IPV4_RE", "is_ipv4", "parse_hccn_conf", "read_hccn_conf"]

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
#: A dotted-quad IPv4 address (what :func:`is_ipv4` accepts).
IPV4_RE = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}\Z")
_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_ADDRESS_RE = re.compile(r"address_([0-9]{1,6})\Z")

#: The hint appended to errors about a device address line.
_FIX = "write it as address_<device_id>=<IPv4>, e.g. address_0=192.1.27.6 (hccn_tool -i <id> -ip -g prints it)"


def is_ipv4(text: object) -> bool:
    """Whether ``text`` is a dotted-quad IPv4 address (``0``-``255`` per octet, no leading zeros).

    Args:
        text: any value; non-strings are never addresses.

    Returns:
        True for strings such as ``"192.1.27.6"``; False otherwise (never raises).
    """
    return isinstance(text, str) and IPV4_RE.match(text) is not None


def parse_hccn_conf(text: str, path: Optional[str] = None) -> Dict[int, str]:
    """Parse the text of an ``hccn.conf`` into ``{device_id: device_ip}``.

    Args:
        text: the whole file.
        path: where it came from, for error messages (``<hccn.conf>`` if None).

    Returns:
        device id -> IPv4 address, in the order the ``address_N`` lines appear.  A file with no
        ``address_N`` line gives ``{}`` (the caller reports which device lacks an address).

    Raises:
        RankTableError: ``path:line`` for a line that is not ``key=value``, a malformed
            ``address`` key, an address that is not an IPv4 address, or a device id given twice.
    """
    where = path if path is not None else "<hccn.conf>"
    out: Dict[int, str] = {}
    first_line: Dict[int, int] = {}
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not _KEY_RE.match(key):
            raise RankTableError(
                f"expected key=value, got {_clip(line)}; hccn.conf lines look like address_0=192.1.27.6",
                path=where,
                line=lineno,
            )
        if not key.lower().startswith("address"):
            continue  # netmask_N, netdetect_N, gateway_N, ...
        match = _ADDRESS_RE.match(key)
        if match is None:
            raise RankTableError(f"malformed address key {key!r}; {_FIX}", path=where, line=lineno)
        device_id = int(match.group(1))
        if not is_ipv4(value):
            raise RankTableError(f"{key}: {_clip(value)} is not an IPv4 address; {_FIX}", path=where, line=lineno)
        if device_id in out:
            raise RankTableError(
                f"device {device_id} has a second address (first at line {first_line[device_id]}); "
                "keep one address_N line per device",
                path=where,
                line=lineno,
            )
        out[device_id] = value
        first_line[device_id] = lineno
    return out


def read_hccn_conf(path: str) -> Dict[int, str]:
    """Read and parse one ``hccn.conf`` copy.

    Args:
        path: the file (a copy of a server's ``/etc/hccn.conf``).

    Returns:
        device id -> IPv4 address (see :func:`parse_hccn_conf`).

    Raises:
        RankTableError: naming ``path`` when it is missing, a directory, unreadable or not UTF-8
            text, or (with the line) when its content is malformed.
    """
    text = read_text(
        path,
        RankTableError,
        "no such hccn.conf; copy /etc/hccn.conf from that server here, or point --hccn HOST=PATH at it",
        "an hccn.conf file",
    )
    return parse_hccn_conf(text, path=path)


def _clip(text: str, limit: int = 60) -> str:
    """``repr`` of ``text``, shortened to about ``limit`` characters for error messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
