"""Build a rank table from an inventory and its device IPs (pure)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from launcher.errors import RankTableError
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.ranktable.common import (
    MAX_QUOTED,
    VERSIONS,
    DeviceIps,
    host_pod,
    host_where,
    pod_key,
    pod_list,
)
from launcher.planning.ranktable.validate import validate_rank_table


def rank_table_host_order(hosts: Sequence[Host], version: str = "1.0") -> List[Host]:
    """The hosts in the order their servers take ranks in a rank table of ``version``.

    1.0: lexicographic (string) order of ``server_id``.  1.2: by SuperPoD (natural order of
    ``super_pod_id``, default ``"0"``), then lexicographic ``server_id``.  Anything that assigns
    ``RANK_ID``s for a rank table (the ranktable launch method) must use this order.

    Args:
        hosts: the hosts (any order).
        version: ``"1.0"`` or ``"1.2"``.

    Returns:
        A new list, sorted.
    """
    if version == "1.2":
        return sorted(hosts, key=lambda h: (pod_key(host_pod(h)), h.rank_table_server_id))
    return sorted(hosts, key=lambda h: h.rank_table_server_id)


def build_rank_table(inventory: Inventory, device_ips: DeviceIps, version: str = "1.0") -> Dict[str, Any]:
    """Build the rank table of ``inventory``.

    Args:
        inventory: the hosts, already filtered; each host's ``device_ids`` are its devices in order.
        device_ips: host name -> ``{device_id: ip}`` (see :func:`resolve_device_ips`).
        version: ``"1.0"`` (Ascend 910/910B) or ``"1.2"`` (Atlas A3 SuperPoD; needs ``host_ip``
            and ``super_device_ids`` on every host, ``super_pod_id`` defaults to ``"0"``).

    Returns:
        The table as a JSON-ready dict (every value a string), ordered as described in the module
        docstring; render it with :func:`rank_table_json`.  It is not validated against a chip's
        device-count rules; use :func:`check_rank_table` for that.

    Raises:
        RankTableError: unknown version, an empty inventory, two hosts with one ``server_id``, a
            device without an IP, or (1.2) a host without ``host_ip`` / a device without
            ``super_device_id``.
    """
    if version not in VERSIONS:
        raise RankTableError(
            f"unknown rank table version {version!r}; use 1.0 (Ascend 910/910B) or 1.2 (Atlas A3 SuperPoD)",
            field="--version",
        )
    if not inventory.hosts:
        raise RankTableError("the inventory has no hosts", path=inventory.source)
    _check_unique_server_ids(inventory.hosts)
    v12 = version == "1.2"
    order = rank_table_host_order(inventory.hosts, version)
    servers: List[Dict[str, Any]] = []
    rank = 0
    for host in order:
        ips = device_ips.get(host.name)
        if ips is None:
            raise RankTableError(f"no device IPs for host {host.name!r}", **host_where(host))
        server = _server_entry(host, ips, rank, v12)
        rank += len(server["device"])
        servers.append(server)

    table: Dict[str, Any] = {"version": version, "server_count": str(len(servers)), "server_list": servers}
    if v12:
        table["super_pod_list"] = pod_list([(host_pod(h), h.rank_table_server_id) for h in order])
    table["status"] = "completed"
    return table


def _check_unique_server_ids(hosts: Sequence[Host]) -> None:
    """Raise when two hosts would be one server (same ``server_id``)."""
    seen: Dict[str, Host] = {}
    for host in hosts:
        sid = host.rank_table_server_id
        if sid in seen:
            raise RankTableError(
                f"hosts {seen[sid].name!r} and {host.name!r} have the same server_id {sid!r}; "
                "give each its own server_id",
                **host_where(host),
            )
        seen[sid] = host


def _server_entry(host: Host, ips: Mapping[int, str], first_rank: int, v12: bool) -> Dict[str, Any]:
    """One ``server_list`` entry: ``host``'s devices in order, ranks from ``first_rank``.

    Raises:
        RankTableError: a device without an IP; (1.2) no ``host_ip`` or a device without
            ``super_device_id``.
    """
    if v12 and host.host_ip is None:
        raise RankTableError(
            f"host {host.name!r} has no host_ip; rank table 1.2 needs one per server: "
            "add 'host_ip: <address>' to its entry in the cluster YAML",
            **host_where(host),
        )
    super_ids = dict(host.super_device_ids or ())
    devices: List[Dict[str, str]] = []
    for rank, device_id in enumerate(host.device_ids, first_rank):
        ip = ips.get(device_id)
        if ip is None:
            raise RankTableError(f"host {host.name!r}: device {device_id} has no device IP", **host_where(host))
        if not v12:
            devices.append({"device_id": str(device_id), "device_ip": ip, "rank_id": str(rank)})
            continue
        sdid = super_ids.get(device_id)
        if sdid is None:
            raise RankTableError(
                f"host {host.name!r}: device {device_id} has no super_device_id; rank table 1.2 "
                f'needs one per device: add "{device_id}": <id> to its super_device_ids in the '
                "cluster YAML (npu-smi info -t spod-info prints it)",
                **host_where(host),
            )
        devices.append({"device_id": str(device_id), "super_device_id": sdid, "device_ip": ip, "rank_id": str(rank)})
    if v12:
        return {"server_id": host.rank_table_server_id, "host_ip": host.host_ip, "device": devices}
    return {"server_id": host.rank_table_server_id, "device": devices, "host_nic_ip": "reserve"}


def check_rank_table(table: Any, chip: str = "910", what: str = "rank table") -> None:
    """Raise unless ``table`` passes :func:`validate_rank_table`.

    Args:
        table: the table.
        chip: ``"910"`` or ``"910b"``.
        what: how to name the table in the message (``"merged rank table"``).

    Raises:
        RankTableError: quoting the first :data:`MAX_QUOTED` problems (and how many more).
    """
    problems = validate_rank_table(table, chip=chip)
    if not problems:
        return
    quoted = "; ".join(str(p) for p in problems[:MAX_QUOTED])
    more = f" (and {len(problems) - MAX_QUOTED} more)" if len(problems) > MAX_QUOTED else ""
    raise RankTableError(f"the {what} is invalid: {quoted}{more}")
