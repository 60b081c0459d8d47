"""What every part of the rank table package shares: versions, chips, the problem record and
small helpers for messages and SuperPoD order (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import RankTableError
from launcher.planning.inventory.model import Host

#: Rank table versions mslaunch writes and checks.
VERSIONS: Tuple[str, ...] = ("1.0", "1.2")
#: Chips :func:`~launcher.planning.ranktable.validate_rank_table` knows the per-server device rules of.
CHIPS: Tuple[str, ...] = ("910", "910b")
#: Accepted ``status`` values.
STATUSES: Tuple[str, ...] = ("completed", "initializing")
#: How many problems a RankTableError about an invalid built/merged table quotes.
MAX_QUOTED = 5

UINT_RE = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
_SOURCE_RE = re.compile(r"(.*):([0-9]+)\Z")

#: host name -> ``{device_id: ip}``
DeviceIps = Mapping[str, Mapping[int, str]]


@dataclass(frozen=True)
class Violation:
    """One problem :func:`validate_rank_table` found.

    Attributes:
        json_path: where, e.g. ``server_list[1].device[0].rank_id``; ``$`` is the whole document.
        message: what is wrong and, where it helps, what to write instead.
    """

    json_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.json_path}: {self.message}"


class RankTableJSONError(RankTableError):
    """A rank table file is not valid JSON; :meth:`where` gives ``path:line:column``.

    Args:
        message: the JSON decoder's complaint.
        path: the file.
        line: 1-based line.
        column: 1-based column.
    """

    def __init__(self, message: str, *, path: Optional[str], line: int, column: int) -> None:
        super().__init__(message, path=path, line=line)
        self.column = column

    def where(self) -> str:
        """``path:line:column``."""
        return f"{self.path if self.path is not None else '<json>'}:{self.line}:{self.column}"


def host_where(host: Host) -> Dict[str, Any]:
    """Error location kwargs (path/line or field) for a host from its ``source``."""
    if host.source is None:
        return {}
    match = _SOURCE_RE.match(host.source)
    if match:
        return {"path": match.group(1), "line": int(match.group(2))}
    return {"field": host.source}


def pod_key(pod_id: str) -> Tuple[int, int, str]:
    """Natural order of SuperPoD ids: numbers by value first, then other ids as strings."""
    if UINT_RE.match(pod_id):
        return (0, int(pod_id), pod_id)
    return (1, 0, pod_id)


def host_pod(host: Host) -> str:
    return host.super_pod_id if host.super_pod_id is not None else "0"


def pod_list(pairs: Sequence[Tuple[str, str]]) -> List[Dict[str, Any]]:
    """``super_pod_list`` from ``(super_pod_id, server_id)`` pairs already in server order."""
    pods: Dict[str, List[Dict[str, str]]] = {}
    for pod, sid in pairs:
        pods.setdefault(pod, []).append({"server_id": sid})
    return [{"super_pod_id": pod, "server_list": members} for pod, members in pods.items()]


def json_kind(value: Any) -> str:
    """A short, safe description of a JSON value for messages (never raises)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        try:
            text = repr(value)
        except ValueError:  # ints beyond the str-conversion digit limit
            return "a number"
        return f"number {text}" if len(text) <= 24 else "a number"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40] + "...")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def canonical_uint(text: Optional[str]) -> Optional[int]:
    """``int`` of a canonical non-negative decimal string (no sign, no leading zeros), else None."""
    if text is None or not UINT_RE.match(text):
        return None
    return int(text)


def clip(text: str, limit: int = 40) -> str:
    """``repr`` of ``text`` shortened for messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
