"""Merge per-host rank tables into one (what ``merge_hccl.py`` does, order-independent; pure)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from launcher.errors import RankTableError
from launcher.planning.ranktable.build import check_rank_table
from launcher.planning.ranktable.common import VERSIONS, json_kind, pod_key, pod_list


def merge_rank_tables(tables: Sequence[Tuple[str, Any]], chip: str = "910") -> Dict[str, Any]:
    """Merge per-host rank tables into one (what ``merge_hccl.py`` does, order-independent).

    Args:
        tables: ``(file name, parsed table)`` pairs; each table holds one or more servers.
        chip: the chip whose rules the result must pass (``"910"`` or ``"910b"``).

    Returns:
        One table: servers sorted (see module docstring), ranks renumbered 0..N-1, device entries
        otherwise copied, ``server_count`` recomputed, ``status`` ``"completed"`` if every input's is,
        else ``"initializing"``; for 1.2 the ``super_pod_list`` rebuilt from the inputs' pods.

    Raises:
        RankTableError: no tables; an input that is not a rank table (naming file and field);
            inputs of different versions; a server_id in two inputs (naming both files); a 1.2
            server in no SuperPoD of its input; or a merged table that fails validation.
    """
    if not tables:
        raise RankTableError("nothing to merge; pass at least one rank table")
    version: Optional[str] = None
    version_file = ""
    owner: Dict[str, str] = {}
    entries: List[_Entry] = []
    statuses: List[str] = []
    for path, table in tables:
        if not isinstance(table, dict):
            raise RankTableError("not a rank table: the top level must be a JSON object", path=path)
        ver = table.get("version")
        if ver not in VERSIONS:
            raise RankTableError(f'version must be "1.0" or "1.2", got {json_kind(ver)}', path=path, field="version")
        if version is None:
            version, version_file = ver, path
        elif ver != version:
            raise RankTableError(
                f"version {ver} cannot be merged with version {version} of {version_file}; "
                "regenerate the tables with one --version",
                path=path,
                field="version",
            )
        status = table.get("status")
        statuses.append(status if isinstance(status, str) else "")
        entries.extend(_servers_of(path, table, ver == "1.2", owner))

    if version == "1.2":
        entries.sort(key=lambda e: (pod_key(e[0]), e[1]))
    else:
        entries.sort(key=lambda e: e[1])
    merged: Dict[str, Any] = {
        "version": version,
        "server_count": str(len(entries)),
        "server_list": _renumbered(entries),
    }
    if version == "1.2":
        merged["super_pod_list"] = pod_list([(pod, sid) for pod, sid, _ in entries])
    merged["status"] = "completed" if all(s == "completed" for s in statuses) else "initializing"
    check_rank_table(merged, chip=chip, what="merged rank table")
    return merged


#: ``(super_pod_id or "", server_id, server entry)`` of one input server.
_Entry = Tuple[str, str, Dict[str, Any]]


def _servers_of(path: str, table: Dict[str, Any], v12: bool, owner: Dict[str, str]) -> List[_Entry]:
    """The servers of one input table; ``owner`` (server_id -> file) gains them.

    Raises:
        RankTableError: a malformed ``server_list`` entry, a server_id already in another input,
            or (1.2) a server in no SuperPoD.
    """
    servers = table.get("server_list")
    if not isinstance(servers, list) or not servers:
        raise RankTableError("must be a non-empty list of servers", path=path, field="server_list")
    pods = _pods_of(table, path) if v12 else {}
    out: List[_Entry] = []
    for i, server in enumerate(servers):
        sp = f"server_list[{i}]"
        if not isinstance(server, dict):
            raise RankTableError("must be an object", path=path, field=sp)
        sid = server.get("server_id")
        if not isinstance(sid, str):
            raise RankTableError(f"must be a string, got {json_kind(sid)}", path=path, field=f"{sp}.server_id")
        devices = server.get("device")
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise RankTableError("must be a list of device objects", path=path, field=f"{sp}.device")
        if sid in owner:
            raise RankTableError(
                f"server_id {sid!r} is in both {owner[sid]} and {path}; each server belongs in one table",
                path=path,
                field=f"{sp}.server_id",
            )
        owner[sid] = path
        if v12 and sid not in pods:
            raise RankTableError(f"server {sid!r} is in no super_pod_list entry", path=path, field=f"{sp}.server_id")
        out.append((pods[sid] if v12 else "", sid, server))
    return out


def _renumbered(entries: Sequence[_Entry]) -> List[Dict[str, Any]]:
    """Copies of the servers, in order, with ``rank_id`` renumbered 0..N-1 through them."""
    rank = 0
    servers: List[Dict[str, Any]] = []
    for _pod, _sid, server in entries:
        devices = []
        for dev in server["device"]:
            new = dict(dev)
            new["rank_id"] = str(rank)
            rank += 1
            devices.append(new)
        new_server = dict(server)
        new_server["device"] = devices
        servers.append(new_server)
    return servers


def _pods_of(table: Dict[str, Any], path: str) -> Dict[str, str]:
    """server_id -> super_pod_id of a 1.2 input table, raising on a malformed super_pod_list."""
    pods = table.get("super_pod_list")
    if not isinstance(pods, list):
        raise RankTableError("must be a list (rank table 1.2)", path=path, field="super_pod_list")
    out: Dict[str, str] = {}
    for p, pod in enumerate(pods):
        pp = f"super_pod_list[{p}]"
        if not isinstance(pod, dict) or not isinstance(pod.get("super_pod_id"), str):
            raise RankTableError("must be an object with a string super_pod_id", path=path, field=pp)
        members = pod.get("server_list")
        if not isinstance(members, list):
            raise RankTableError("must be a list", path=path, field=f"{pp}.server_list")
        for k, member in enumerate(members):
            sid = member.get("server_id") if isinstance(member, dict) else None
            if not isinstance(sid, str):
                raise RankTableError(
                    "must be an object with a string server_id", path=path, field=f"{pp}.server_list[{k}]"
                )
            out.setdefault(sid, pod["super_pod_id"])
    return out
