"""Rank table JSON out: stable key order, the seeds' layout, a fast indented encoder (pure)."""

from __future__ import annotations

import re
from typing import Any, Dict, Sequence, Tuple

from launcher.planning.text.jsontext import dumps_indented

_UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._:\-]")

_TOP_ORDER = ("version", "server_count", "server_list", "super_pod_list", "status")
_SERVER_ORDER = ("server_id", "host_ip", "device", "host_nic_ip")
_DEVICE_ORDER = (
    "device_id",
    "super_device_id",
    "device_ip",
    "device_port",
    "backup_device_ip",
    "backup_device_port",
    "host_port",
    "rank_id",
)
_POD_ORDER = ("super_pod_id", "server_list")


def _ordered(obj: Any, order: Sequence[str]) -> Any:
    """A copy of dict ``obj`` with the keys of ``order`` first (in that order), then the rest."""
    if not isinstance(obj, dict):
        return obj
    out = {k: obj[k] for k in order if k in obj}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out


class _InOrder:
    """Whether a dict's keys are already as :func:`_ordered` puts them, answered once per key
    sequence (a table has a few, repeated over thousands of devices).

    Args:
        order: the keys that go first, in this order.
    """

    def __init__(self, order: Sequence[str]) -> None:
        self.order = order
        self.known: Dict[Tuple[Any, ...], bool] = {}

    def __call__(self, obj: Dict[Any, Any]) -> bool:
        keys = tuple(obj)
        answer = self.known.get(keys)
        if answer is None:
            answer = self.known[keys] = tuple(_ordered(obj, self.order)) == keys
        return answer


def rank_table_json(table: Any) -> str:
    """Render a rank table as stable JSON text.

    Keys follow the seeds' order (version, server_count, server_list, [super_pod_list], status;
    per server server_id, [host_ip], device, host_nic_ip; per device device_id,
    [super_device_id], device_ip, rank_id), unknown keys after them; 2-space indent; a trailing
    newline.

    Args:
        table: a rank table (as built, merged or parsed).

    Returns:
        The text to write.
    """
    top = _ordered(table, _TOP_ORDER)
    if isinstance(top, dict):
        servers = top.get("server_list")
        if isinstance(servers, list):
            new_servers = []
            device_in_order = _InOrder(_DEVICE_ORDER)
            for server in servers:
                server = _ordered(server, _SERVER_ORDER)
                if isinstance(server, dict) and isinstance(server.get("device"), list):
                    server["device"] = [  # devices already in order are written as they are, not copied
                        d if type(d) is dict and device_in_order(d) else _ordered(d, _DEVICE_ORDER)
                        for d in server["device"]
                    ]
                new_servers.append(server)
            top["server_list"] = new_servers
        pods = top.get("super_pod_list")
        if isinstance(pods, list):
            top["super_pod_list"] = [_ordered(p, _POD_ORDER) for p in pods]
    return dumps_indented(top) + "\n"


def table_size(table: Any) -> Tuple[int, int]:
    """``(servers, devices)`` of a table (0 where the structure is not as expected; never raises)."""
    servers = table.get("server_list") if isinstance(table, dict) else None
    if not isinstance(servers, list):
        return 0, 0
    devices = 0
    for server in servers:
        if isinstance(server, dict) and isinstance(server.get("device"), list):
            devices += len(server["device"])
    return len(servers), devices


def default_table_name(table: Any) -> str:
    """The file name ``hccl_tools.py`` / the tutorials would use for ``table``.

    Args:
        table: a valid rank table.

    Returns:
        ``hccl_<N>p_<device ids concatenated>_<server_id>.json`` for one server (e.g.
        ``hccl_8p_01234567_10.0.0.1.json``), else ``rank_table_<N>pcs.json`` (``N``: devices).
        Characters other than letters, digits, ``. _ : -`` become ``_``.
    """
    servers, devices = table_size(table)
    if servers == 1 and isinstance(table["server_list"][0], dict):
        server = table["server_list"][0]
        entries = server["device"] if isinstance(server.get("device"), list) else []
        ids = "".join(str(d.get("device_id", "")) for d in entries if isinstance(d, dict))
        return _UNSAFE_NAME_RE.sub("_", f"hccl_{devices}p_{ids}_{server.get('server_id', '')}.json")
    return f"rank_table_{devices}pcs.json"
