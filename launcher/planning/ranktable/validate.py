"""HCCL rank tables: build from an inventory, merge per-host tables, validate, render.

A rank table is kept as the plain JSON value HCCL reads (``dict`` / ``list`` / ``str``), so what is
validated is exactly what is written.  Formats (see ``DESIGN.md`` §4):

Version ``"1.0"`` (Ascend 910 / 910B)::

    {"version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.1.27.6", "rank_id": "0"}, ...],
                      "host_nic_ip": "reserve"}, ...],
     "status": "completed"}

Version ``"1.2"`` (Atlas A3 SuperPoD)::

    {"version": "1.2", "server_count": "2",
     "server_list": [{"server_id": "node0", "host_ip": "172.16.0.100",
                      "device": [{"device_id": "0", "super_device_id": "0",
                                  "device_ip": "192.168.1.6", "rank_id": "0"}, ...]}, ...],
     "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "node0"}, ...]}],
     "status": "completed"}

Ordering rules enforced by :func:`build_rank_table` and :func:`merge_rank_tables` and checked
by :func:`validate_rank_table`:

* every value is a JSON string;
* servers are in lexicographic (string) order of ``server_id``; for 1.2, servers are grouped by
  SuperPoD (pods in natural order of ``super_pod_id``: ``"2"`` before ``"10"``) and
  lexicographic within a pod;
* ``rank_id`` runs 0..N-1 through the servers in that order, devices of a server in the order
  the inventory lists them.

Everything here is pure except :func:`read_rank_table` (reads one file) and the default
``read`` / ``exists`` callables of :func:`resolve_device_ips`, which can be replaced.
"""
from __future__ import annotations

import json
import json.encoder
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import RankTableError
from launcher.planning.hccn import is_ipv4, read_hccn_conf
from launcher.planning.inventory import Host, Inventory
from launcher.planning.textfile import read_text

__all__ = [
    "CHIPS",
    "VERSIONS",
    "RankTableJSONError",
    "Violation",
    "build_rank_table",
    "check_rank_table",
    "default_table_name",
    "merge_rank_tables",
    "parse_rank_table_json",
    "rank_table_host_order",
    "rank_table_json",
    "read_rank_table",
    "resolve_device_ips",
    "table_size",
    "validate_rank_table",
]

#: Rank table versions mslaunch writes and checks.
VERSIONS: Tuple[str, ...] = ("1.0", "1.2")
#: Chips :func:`validate_rank_table` knows the per-server device rules of.
CHIPS: Tuple[str, ...] = ("910", "910b")
#: Accepted ``status`` values.
STATUSES: Tuple[str, ...] = ("completed", "initializing")
#: How many problems a RankTableError about an invalid built/merged table quotes.
MAX_QUOTED = 5

_UINT_RE = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
_DIGITS_RE = re.compile(r"[0-9]{1,20}\Z")
_SOURCE_RE = re.compile(r"(.*):([0-9]+)\Z")
_UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._:\-]")

_TOP_ORDER = ("version", "server_count", "server_list", "super_pod_list", "status")
_SERVER_ORDER = ("server_id", "host_ip", "device", "host_nic_ip")
_DEVICE_ORDER = (
    "device_id", "super_device_id", "device_ip", "device_port",
    "backup_device_ip", "backup_device_port", "host_port", "rank_id",
)
_POD_ORDER = ("super_pod_id", "server_list")
_V12_OPTIONAL_DEVICE_KEYS = ("device_port", "backup_device_ip", "backup_device_port", "host_port")

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


# --------------------------------------------------------------------------------------------
# device IPs


def _host_where(host: Host) -> Dict[str, Any]:
    """Error location kwargs (path/line or field) for a host from its ``source``."""
    if host.source is None:
        return {}
    match = _SOURCE_RE.match(host.source)
    if match:
        return {"path": match.group(1), "line": int(match.group(2))}
    return {"field": host.source}


def resolve_device_ips(
    inventory: Inventory,
    hccn_dir: Optional[str] = None,
    hccn_files: Optional[Mapping[str, str]] = None,
    read: Callable[[str], Mapping[int, str]] = read_hccn_conf,
    exists: Optional[Callable[[str], bool]] = None,
) -> Dict[str, Dict[int, str]]:
    """Find every device's IP address, host by host.

    Sources, first match wins per host:

    1. ``hccn_files[host]`` (``--hccn HOST=PATH``),
    2. the host's YAML ``hccn_conf:``,
    3. ``<hccn_dir>/<host>`` or ``<hccn_dir>/<host>.conf`` (host as written in the inventory),
    4. the host's YAML ``device_ips:``.

    Args:
        inventory: the (already filtered) hosts.
        hccn_dir: a folder of hccn.conf copies named after the hosts, or None.
        hccn_files: host name -> hccn.conf path, or None.
        read: reads one hccn.conf into ``{device_id: ip}`` (default :func:`read_hccn_conf`).
        exists: whether a candidate file in ``hccn_dir`` exists; default: its name is in one
            listing of ``hccn_dir`` (one ``os.listdir`` instead of two ``stat`` calls per host).

    Returns:
        host name -> ``{device_id: ip}`` holding exactly the host's devices, in device order.

    Raises:
        RankTableError: ``hccn_files`` names a host not in the inventory; ``hccn_dir`` cannot be
            listed (default ``exists`` only); both ``<host>`` and
            ``<host>.conf`` exist in ``hccn_dir``; a host has no source; a device has no address
            in its host's source; or ``read`` fails.
    """
    files = dict(hccn_files or {})
    names = [h.name for h in inventory.hosts]
    for name in files:
        if name not in names:
            raise RankTableError(
                f"--hccn names host {name!r}, which is not in the inventory ({', '.join(names)})",
                field="--hccn",
            )
    if exists is None and hccn_dir is not None:
        exists = _dir_lister(hccn_dir)
    out: Dict[str, Dict[int, str]] = {}
    for host in inventory.hosts:
        ips: Optional[Mapping[int, str]] = None
        origin = ""
        origin_path: Optional[str] = None
        looked: List[str] = []
        if host.name in files:
            origin_path = files[host.name]
            ips, origin = read(origin_path), f"{origin_path} (--hccn {host.name}=...)"
        elif host.hccn_conf is not None:
            origin_path = host.hccn_conf
            ips, origin = read(origin_path), f"{origin_path} (hccn_conf of host {host.name!r})"
        else:
            if hccn_dir is not None and exists is not None:
                looked = [os.path.join(hccn_dir, host.name), os.path.join(hccn_dir, host.name + ".conf")]
                found = [p for p in looked if exists(p)]
                if len(found) == 2:
                    raise RankTableError(
                        f"both {found[0]} and {found[1]} exist for host {host.name!r}; keep one of them",
                        field="--hccn-dir",
                    )
                if found:
                    origin_path = found[0]
                    ips, origin = read(origin_path), origin_path
            if ips is None and host.device_ips is not None:
                ips, origin = dict(host.device_ips), f"device_ips of host {host.name!r}"
        if ips is None:
            tried = f" (looked for {' and '.join(looked)})" if looked else ""
            raise RankTableError(
                f"host {host.name!r} has no device IPs{tried}; pass --hccn {host.name}=PATH or "
                f"--hccn-dir DIR holding DIR/{host.name}.conf, or give it 'hccn_conf:' or 'device_ips:' "
                "in a YAML cluster file",
                **_host_where(host),
            )
        chosen: Dict[int, str] = {}
        for device_id in host.device_ids:
            ip = ips.get(device_id)
            if ip is None:
                fix = (
                    f"add address_{device_id}=<IP> to it"
                    if origin_path is not None
                    else f"add \"{device_id}\": <IP> to its device_ips"
                )
                raise RankTableError(
                    f"host {host.name!r}: device {device_id} has no address in {origin}; {fix}, "
                    f"or leave the device out with --exclude {host.name}:{device_id}",
                    **({"path": origin_path} if origin_path is not None else _host_where(host)),
                )
            chosen[device_id] = ip
        out[host.name] = chosen
    return out


def _dir_lister(folder: str) -> Callable[[str], bool]:
    """``exists(path)`` for paths directly in ``folder``, answered from one lazy listing of it.

    Raises (when first called):
        RankTableError: ``folder`` is missing, not a folder, or unreadable.
    """
    listing: Optional[FrozenSet[str]] = None

    def exists(path: str) -> bool:
        nonlocal listing
        if listing is None:
            try:
                listing = frozenset(os.listdir(folder))
            except FileNotFoundError:
                raise RankTableError(f"no such folder {folder}", field="--hccn-dir") from None
            except NotADirectoryError:
                raise RankTableError(f"{folder} is not a folder", field="--hccn-dir") from None
            except OSError as exc:
                raise RankTableError(f"cannot list {folder}: {exc.strerror or exc}", field="--hccn-dir") from None
        return os.path.basename(path) in listing

    return exists


# --------------------------------------------------------------------------------------------
# build


def _pod_key(pod_id: str) -> Tuple[int, int, str]:
    """Natural order of SuperPoD ids: numbers by value first, then other ids as strings."""
    if _UINT_RE.match(pod_id):
        return (0, int(pod_id), pod_id)
    return (1, 0, pod_id)


def _pod_of(host: Host) -> str:
    return host.super_pod_id if host.super_pod_id is not None else "0"


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
        return sorted(hosts, key=lambda h: (_pod_key(_pod_of(h)), h.rank_table_server_id))
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
    v12 = version == "1.2"
    seen: Dict[str, Host] = {}
    for host in inventory.hosts:
        sid = host.rank_table_server_id
        if sid in seen:
            raise RankTableError(
                f"hosts {seen[sid].name!r} and {host.name!r} have the same server_id {sid!r}; "
                "give each its own server_id",
                **_host_where(host),
            )
        seen[sid] = host

    order = rank_table_host_order(inventory.hosts, version)

    servers: List[Dict[str, Any]] = []
    rank = 0
    for host in order:
        ips = device_ips.get(host.name)
        if ips is None:
            raise RankTableError(f"no device IPs for host {host.name!r}", **_host_where(host))
        if v12 and host.host_ip is None:
            raise RankTableError(
                f"host {host.name!r} has no host_ip; rank table 1.2 needs one per server: "
                "add 'host_ip: <address>' to its entry in the cluster YAML",
                **_host_where(host),
            )
        super_ids = dict(host.super_device_ids or ())
        devices: List[Dict[str, str]] = []
        for device_id in host.device_ids:
            ip = ips.get(device_id)
            if ip is None:
                raise RankTableError(
                    f"host {host.name!r}: device {device_id} has no device IP", **_host_where(host)
                )
            if v12:
                sdid = super_ids.get(device_id)
                if sdid is None:
                    raise RankTableError(
                        f"host {host.name!r}: device {device_id} has no super_device_id; rank table 1.2 "
                        f"needs one per device: add \"{device_id}\": <id> to its super_device_ids in the "
                        "cluster YAML (npu-smi info -t spod-info prints it)",
                        **_host_where(host),
                    )
                devices.append(
                    {"device_id": str(device_id), "super_device_id": sdid, "device_ip": ip, "rank_id": str(rank)}
                )
            else:
                devices.append({"device_id": str(device_id), "device_ip": ip, "rank_id": str(rank)})
            rank += 1
        if v12:
            servers.append({"server_id": host.rank_table_server_id, "host_ip": host.host_ip, "device": devices})
        else:
            servers.append({"server_id": host.rank_table_server_id, "device": devices, "host_nic_ip": "reserve"})

    table: Dict[str, Any] = {"version": version, "server_count": str(len(servers)), "server_list": servers}
    if v12:
        table["super_pod_list"] = _pod_list([(_pod_of(h), h.rank_table_server_id) for h in order])
    table["status"] = "completed"
    return table


def _pod_list(pairs: Sequence[Tuple[str, str]]) -> List[Dict[str, Any]]:
    """``super_pod_list`` from ``(super_pod_id, server_id)`` pairs already in server order."""
    pods: Dict[str, List[Dict[str, str]]] = {}
    for pod, sid in pairs:
        pods.setdefault(pod, []).append({"server_id": sid})
    return [{"super_pod_id": pod, "server_list": members} for pod, members in pods.items()]


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


# --------------------------------------------------------------------------------------------
# merge


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
    entries: List[Tuple[str, str, Dict[str, Any]]] = []  # (pod, server_id, server)
    statuses: List[str] = []
    for path, table in tables:
        if not isinstance(table, dict):
            raise RankTableError("not a rank table: the top level must be a JSON object", path=path)
        ver = table.get("version")
        if ver not in VERSIONS:
            raise RankTableError(f"version must be \"1.0\" or \"1.2\", got {_kind(ver)}", path=path, field="version")
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
        servers = table.get("server_list")
        if not isinstance(servers, list) or not servers:
            raise RankTableError("must be a non-empty list of servers", path=path, field="server_list")
        pods = _pods_of(table, path) if ver == "1.2" else {}
        for i, server in enumerate(servers):
            sp = f"server_list[{i}]"
            if not isinstance(server, dict):
                raise RankTableError("must be an object", path=path, field=sp)
            sid = server.get("server_id")
            if not isinstance(sid, str):
                raise RankTableError(f"must be a string, got {_kind(sid)}", path=path, field=f"{sp}.server_id")
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
            pod = ""
            if ver == "1.2":
                if sid not in pods:
                    raise RankTableError(
                        f"server {sid!r} is in no super_pod_list entry", path=path, field=f"{sp}.server_id"
                    )
                pod = pods[sid]
            entries.append((pod, sid, server))

    if version == "1.2":
        entries.sort(key=lambda e: (_pod_key(e[0]), e[1]))
    else:
        entries.sort(key=lambda e: e[1])
    rank = 0
    merged_servers: List[Dict[str, Any]] = []
    for _pod, _sid, server in entries:
        devices = []
        for dev in server["device"]:
            new = dict(dev)
            new["rank_id"] = str(rank)
            rank += 1
            devices.append(new)
        new_server = dict(server)
        new_server["device"] = devices
        merged_servers.append(new_server)
    merged: Dict[str, Any] = {"version": version, "server_count": str(len(merged_servers)), "server_list": merged_servers}
    if version == "1.2":
        merged["super_pod_list"] = _pod_list([(pod, sid) for pod, sid, _ in entries])
    merged["status"] = "completed" if all(s == "completed" for s in statuses) else "initializing"
    check_rank_table(merged, chip=chip, what="merged rank table")
    return merged


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
                raise RankTableError("must be an object with a string server_id", path=path, field=f"{pp}.server_list[{k}]")
            out.setdefault(sid, pod["super_pod_id"])
    return out


# --------------------------------------------------------------------------------------------
# validate


def _kind(value: Any) -> str:
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


def _uint(text: Optional[str]) -> Optional[int]:
    """``int`` of a canonical non-negative decimal string (no sign, no leading zeros), else None."""
    if text is None or not _UINT_RE.match(text):
        return None
    return int(text)


class _Checker:
    """Collects violations while walking one table (used by :func:`validate_rank_table`)."""

    def __init__(self) -> None:
        self.found: List[Violation] = []

    def bad(self, path: str, message: str) -> None:
        self.found.append(Violation(path, message))

    def string(self, obj: Dict[Any, Any], key: str, prefix: str, required: bool = True) -> Optional[str]:
        """The string at ``obj[key]``; records a violation and returns None when missing / not a string."""
        path = f"{prefix}.{key}" if prefix else key
        if key not in obj:
            if required:
                self.bad(path, "missing required field")
            return None
        value = obj[key]
        if not isinstance(value, str):
            hint = ""
            described = _kind(value)
            if isinstance(value, int) and not isinstance(value, bool) and described.startswith("number "):
                hint = f' (write "{described[len("number "):]}")'
            self.bad(path, f"must be a JSON string, got {_kind(value)}{hint}")
            return None
        return value


def validate_rank_table(obj: Any, chip: str = "910") -> List[Violation]:
    """Check a parsed rank table and report every problem found.

    Checks: every field that must be a string is one; required fields are present; ``version``
    is ``"1.0"``/``"1.2"``; ``status`` is ``completed``/``initializing``; ``server_count`` (required
    in 1.0) equals the number of servers; server ids are unique and in lexicographic order (1.2:
    within each SuperPoD, and a pod's servers listed together); device ids are canonical integers,
    in range (0-7; 1.2: 0-15) and unique per server; device IPs are IPv4 and unique in the table;
    rank ids are unique, cover 0..N-1, are consecutive within a server and increase in server
    order; devices per server: 910 takes 1, 2, 4 or 8 (8 on every server of a multi-server job,
    and a 2/4-device server stays within devices 0-3 or 4-7), 910b takes 1-8, 1.2 (A3) takes
    1-16; 1.2 servers have ``host_ip``, devices ``super_device_id``, and ``super_pod_list`` puts
    every server in exactly one pod.

    Args:
        obj: any JSON value (as from :func:`parse_rank_table_json`).
        chip: ``"910"`` or ``"910b"``; selects the device-count rules of 1.0 tables.

    Returns:
        Every violation found, in document order per check (empty: the table is valid).  Never
        raises for any JSON value.

    Raises:
        RankTableError: only for an unknown ``chip``.
    """
    if chip not in CHIPS:
        raise RankTableError(f"unknown chip {chip!r}; use one of {', '.join(CHIPS)}", field="--chip")
    ck = _Checker()
    if not isinstance(obj, dict):
        ck.bad("$", f"a rank table must be a JSON object, got {_kind(obj)}")
        return ck.found

    version = ck.string(obj, "version", "")
    if version is not None and version not in VERSIONS:
        ck.bad("version", f"must be \"1.0\" or \"1.2\", got {_kind(version)}")
    v12 = version == "1.2"
    status = ck.string(obj, "status", "")
    if status is not None and status not in STATUSES:
        ck.bad("status", f"must be \"completed\" or \"initializing\", got {_kind(status)}")
    count_text = ck.string(obj, "server_count", "", required=not v12)

    servers = obj.get("server_list")
    if "server_list" not in obj:
        ck.bad("server_list", "missing required field")
        servers = None
    elif not isinstance(servers, list):
        ck.bad("server_list", f"must be a list of servers, got {_kind(servers)}")
        servers = None
    elif not servers:
        ck.bad("server_list", "is empty; a rank table needs at least one server")

    if count_text is not None:
        count = _uint(count_text)
        if count is None:
            ck.bad("server_count", f"must be a non-negative integer in a string, got {_kind(count_text)}")
        elif servers is not None and count != len(servers):
            ck.bad("server_count", f"is {count_text} but server_list has {len(servers)} servers")

    if servers is None:
        return ck.found

    max_device = 15 if v12 else 7
    multi = len(servers) > 1
    server_ids: List[Optional[str]] = []
    sid_first: Dict[str, int] = {}
    ip_first: Dict[str, str] = {}
    rank_paths: List[List[Tuple[str, Optional[int]]]] = []
    for i, server in enumerate(servers):
        sp = f"server_list[{i}]"
        if not isinstance(server, dict):
            ck.bad(sp, f"must be an object, got {_kind(server)}")
            server_ids.append(None)
            rank_paths.append([])
            continue
        sid = ck.string(server, "server_id", sp)
        if sid is not None:
            if not sid:
                ck.bad(f"{sp}.server_id", "is empty")
            elif sid in sid_first:
                ck.bad(f"{sp}.server_id", f"server_id {_kind(sid)} is also server_list[{sid_first[sid]}]")
            else:
                sid_first[sid] = i
        server_ids.append(sid)
        if v12:
            host_ip = ck.string(server, "host_ip", sp)
            if host_ip == "":
                ck.bad(f"{sp}.host_ip", "is empty")
        ck.string(server, "host_nic_ip", sp, required=False)

        ranks: List[Tuple[str, Optional[int]]] = []
        rank_paths.append(ranks)
        devices = server.get("device")
        if "device" not in server:
            ck.bad(f"{sp}.device", "missing required field")
            continue
        if not isinstance(devices, list):
            ck.bad(f"{sp}.device", f"must be a list of devices, got {_kind(devices)}")
            continue
        ids_here: Dict[int, int] = {}
        for k, dev in enumerate(devices):
            dp = f"{sp}.device[{k}]"
            if not isinstance(dev, dict):
                ck.bad(dp, f"must be an object, got {_kind(dev)}")
                ranks.append((f"{dp}.rank_id", None))
                continue
            did_text = ck.string(dev, "device_id", dp)
            did = _uint(did_text)
            if did_text is not None:
                if did is None:
                    ck.bad(f"{dp}.device_id", f"must be a device number in a string, e.g. \"0\", got {_kind(did_text)}")
                elif did > max_device:
                    ck.bad(f"{dp}.device_id", f"device {did} is out of range 0..{max_device}")
                elif did in ids_here:
                    ck.bad(f"{dp}.device_id", f"device {did} is also {sp}.device[{ids_here[did]}]")
                else:
                    ids_here[did] = k
            ip = ck.string(dev, "device_ip", dp)
            if ip is not None:
                if not is_ipv4(ip):
                    ck.bad(f"{dp}.device_ip", f"{_kind(ip)} is not an IPv4 address")
                elif ip in ip_first:
                    ck.bad(f"{dp}.device_ip", f"device IP {ip} is also used by {ip_first[ip]}")
                else:
                    ip_first[ip] = dp
            rid_text = ck.string(dev, "rank_id", dp)
            rid = _uint(rid_text)
            if rid_text is not None and rid is None:
                ck.bad(f"{dp}.rank_id", f"must be a rank number in a string, e.g. \"0\", got {_kind(rid_text)}")
            ranks.append((f"{dp}.rank_id", rid))
            if v12:
                sdid = ck.string(dev, "super_device_id", dp)
                if sdid is not None and not _DIGITS_RE.match(sdid):
                    ck.bad(f"{dp}.super_device_id", f"must be a number in a string, got {_kind(sdid)}")
                for key in _V12_OPTIONAL_DEVICE_KEYS:
                    ck.string(dev, key, dp, required=False)
        _check_device_count(ck, f"{sp}.device", len(devices), list(ids_here), chip, v12, multi)

    _check_ranks(ck, rank_paths)
    if v12:
        pod_of = _check_super_pods(ck, obj, server_ids)
    else:
        pod_of = {}
    _check_server_order(ck, server_ids, pod_of if v12 else None)
    return ck.found


def _check_device_count(
    ck: _Checker, path: str, count: int, ids: List[int], chip: str, v12: bool, multi: bool
) -> None:
    """Per-server device-count rules (see :func:`validate_rank_table`)."""
    if count == 0:
        ck.bad(path, "is empty; a server needs at least one device")
    elif v12:
        if count > 16:
            ck.bad(path, f"an Atlas A3 server has at most 16 devices, got {count}")
    elif chip == "910b":
        if count > 8:
            ck.bad(path, f"an Ascend 910B server takes 1 to 8 devices, got {count}")
    elif count not in (1, 2, 4, 8):
        ck.bad(path, f"an Ascend 910 server takes 1, 2, 4 or 8 devices, got {count} (--chip 910b allows 1-8)")
    elif multi and count != 8:
        ck.bad(path, f"a multi-server Ascend 910 job needs 8 devices on every server, got {count} (--chip 910b allows 1-8)")
    elif count in (2, 4) and any(d < 4 for d in ids) and any(d >= 4 for d in ids):
        ck.bad(
            path,
            f"devices {sorted(ids)} mix devices 0-3 and 4-7, two separate networks on Ascend 910; "
            "use devices from one group",
        )


def _check_ranks(ck: _Checker, per_server: List[List[Tuple[str, Optional[int]]]]) -> None:
    """Rank ids unique, covering 0..N-1, consecutive within servers, increasing in server order."""
    first: Dict[int, str] = {}
    complete = True
    for ranks in per_server:
        for path, rid in ranks:
            if rid is None:
                complete = False
            elif rid in first:
                ck.bad(path, f"rank_id {rid} is also {first[rid]}")
            else:
                first[rid] = path
    if not complete:
        return
    total = sum(len(r) for r in per_server)
    for ranks in per_server:
        for path, rid in ranks:
            if rid is not None and rid >= total:
                ck.bad(path, f"rank_id {rid} is outside 0..{total - 1} (the table has {total} devices)")
    missing = [r for r in range(total) if r not in first]
    if missing:
        shown = ", ".join(str(r) for r in missing[:10]) + (", ..." if len(missing) > 10 else "")
        ck.bad("server_list", f"rank ids must cover 0..{total - 1}; missing {shown}")
    previous_last: Optional[int] = None
    previous_index = -1
    for i, ranks in enumerate(per_server):
        if not ranks:
            continue
        path0, r0 = ranks[0]
        if previous_last is None:
            if r0 != 0:
                ck.bad(path0, f"the first server's ranks must start at 0, got {r0}")
        elif r0 != previous_last + 1:
            ck.bad(
                path0,
                f"ranks must continue in server order: server_list[{previous_index}] ends at {previous_last}, "
                f"so this server starts at {previous_last + 1}, got {r0}",
            )
        for k in range(1, len(ranks)):
            path, rid = ranks[k]
            prev = ranks[k - 1][1]
            if prev is not None and rid != prev + 1:
                ck.bad(path, f"rank ids within a server must be consecutive: expected {prev + 1} after {prev}, got {rid}")
                break
        previous_last, previous_index = ranks[-1][1], i


def _check_super_pods(ck: _Checker, obj: Dict[Any, Any], server_ids: List[Optional[str]]) -> Dict[str, str]:
    """Check ``super_pod_list`` against ``server_list``; returns server_id -> super_pod_id."""
    known = {sid for sid in server_ids if sid}
    pod_of: Dict[str, str] = {}
    where_of: Dict[str, str] = {}
    pods = obj.get("super_pod_list")
    if "super_pod_list" not in obj:
        ck.bad("super_pod_list", "missing required field (rank table 1.2 lists the SuperPoD of every server)")
        return pod_of
    if not isinstance(pods, list):
        ck.bad("super_pod_list", f"must be a list of SuperPoDs, got {_kind(pods)}")
        return pod_of
    if not pods:
        ck.bad("super_pod_list", "is empty; list every server's SuperPoD")
    pod_first: Dict[str, int] = {}
    for p, pod in enumerate(pods):
        pp = f"super_pod_list[{p}]"
        if not isinstance(pod, dict):
            ck.bad(pp, f"must be an object, got {_kind(pod)}")
            continue
        pid = ck.string(pod, "super_pod_id", pp)
        if pid is not None:
            if pid in pod_first:
                ck.bad(f"{pp}.super_pod_id", f"SuperPoD {_kind(pid)} is also super_pod_list[{pod_first[pid]}]")
            else:
                pod_first[pid] = p
        members = pod.get("server_list")
        if "server_list" not in pod:
            ck.bad(f"{pp}.server_list", "missing required field")
            continue
        if not isinstance(members, list):
            ck.bad(f"{pp}.server_list", f"must be a list, got {_kind(members)}")
            continue
        if not members:
            ck.bad(f"{pp}.server_list", "is empty")
        for k, member in enumerate(members):
            mp = f"{pp}.server_list[{k}]"
            if not isinstance(member, dict):
                ck.bad(mp, f"must be an object, got {_kind(member)}")
                continue
            sid = ck.string(member, "server_id", mp)
            if sid is None:
                continue
            if sid not in known:
                ck.bad(f"{mp}.server_id", f"server {_kind(sid)} is not in server_list")
            elif sid in pod_of:
                ck.bad(f"{mp}.server_id", f"server {_kind(sid)} is already in {where_of[sid]}")
            else:
                pod_of[sid] = pid if pid is not None else f"#{p}"
                where_of[sid] = pp
    for i, sid in enumerate(server_ids):
        if sid and sid not in pod_of:
            ck.bad(f"server_list[{i}].server_id", f"server {_kind(sid)} is in no super_pod_list entry")
    closed: Dict[str, int] = {}
    current: Optional[str] = None
    current_start = -1
    for i, sid in enumerate(server_ids):
        pod = pod_of.get(sid) if sid else None
        if pod is None or pod == current:
            continue
        if pod in closed:
            ck.bad(
                f"server_list[{i}]",
                f"servers of SuperPoD {_kind(pod)} must be listed together (server_list[{closed[pod]}] is in it too)",
            )
        if current is not None:
            closed.setdefault(current, current_start)
        current, current_start = pod, i
    return pod_of


def _check_server_order(ck: _Checker, server_ids: List[Optional[str]], pod_of: Optional[Dict[str, str]]) -> None:
    """Servers in lexicographic order of server_id (within a SuperPoD for 1.2)."""
    last: Dict[Optional[str], Tuple[int, str]] = {}
    for i, sid in enumerate(server_ids):
        if not sid:
            continue
        group = pod_of.get(sid) if pod_of is not None else None
        if pod_of is not None and group is None:
            continue
        if group in last:
            j, prev = last[group]
            if sid < prev:
                scope = f" within SuperPoD {_kind(group)}" if pod_of is not None else ""
                ck.bad(
                    f"server_list[{i}].server_id",
                    f"servers must be in lexicographic order of server_id{scope}: {_kind(sid)} sorts before "
                    f"{_kind(prev)} (server_list[{j}])",
                )
                continue
        last[group] = (i, sid)


# --------------------------------------------------------------------------------------------
# JSON in and out


def parse_rank_table_json(text: str, path: Optional[str] = None) -> Any:
    """Parse rank table JSON text (no checks beyond JSON syntax; see :func:`validate_rank_table`).

    Strict JSON: ``NaN`` / ``Infinity``, numbers that overflow a float or have more digits than
    Python converts, a key repeated in one object, nesting deeper than :data:`MAX_JSON_DEPTH`,
    and strings holding a NUL character or a lone surrogate (``"\\ud800"``) are refused.

    Args:
        text: the file's text.
        path: its name, for messages.

    Returns:
        The parsed JSON value.

    Raises:
        RankTableJSONError: ``path:line:column`` for invalid JSON.
        RankTableError: for each of the refusals above (one line, naming ``path``).
    """
    where = path if path is not None else "<json>"

    def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise RankTableError(f"key {_kind(key)} appears twice in one object; keep one", path=where)
            out[key] = value
        return out

    def no_constant(name: str) -> Any:
        raise RankTableError(f"invalid JSON: {name} is not a JSON number", path=where)

    def finite(literal: str) -> float:
        value = float(literal)
        if value in (float("inf"), float("-inf")):
            raise RankTableError(f"invalid JSON: number {_clip(literal)} is too large", path=where)
        return value

    def integer(literal: str) -> int:
        if len(literal) > 100:
            raise RankTableError(f"invalid JSON: number {_clip(literal)} has too many digits", path=where)
        return int(literal)

    values = text.count(",") + text.count("[") + text.count("{")
    if values > MAX_JSON_VALUES:
        raise RankTableError(
            f"invalid rank table: about {values} JSON values, more than the {MAX_JSON_VALUES} a table of "
            f"{MAX_TABLE_DEVICES} devices needs",
            path=where,
        )
    try:
        value = json.loads(
            text, object_pairs_hook=no_duplicates, parse_constant=no_constant, parse_float=finite, parse_int=integer,
        )
    except json.JSONDecodeError as exc:
        raise RankTableJSONError(f"invalid JSON: {exc.msg}", path=where, line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise RankTableError(f"invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels", path=where) from None
    except ValueError as exc:  # e.g. an integer literal beyond the digit limit
        raise RankTableError(f"invalid JSON: {str(exc).splitlines()[0] if str(exc) else exc!r}", path=where) from None
    _check_json_value(value, where)
    return value


#: Most devices a rank table may list (the most ranks one job may have).
MAX_TABLE_DEVICES = 16384
#: Most JSON values (counted as commas and opening brackets, an upper bound) a rank table may
#: hold: a 16384-device table has about 90,000.
MAX_JSON_VALUES = 300_000
#: Deepest nesting :func:`parse_rank_table_json` accepts (a rank table needs 5).
MAX_JSON_DEPTH = 64
#: Largest rank table file read (bytes): a 16384-device table (the most ranks a job may have) is about 2 MB.
MAX_RANK_TABLE_BYTES = 4 << 20

_BAD_TEXT_RE = re.compile("[\0\ud800-\udfff]")


def _check_json_value(value: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` and strings with NUL or surrogates.

    Iterative (a stack of iterators, one per open container), so nothing recurses into the value
    before its depth is known, and the JSON path is only built for the error.
    """
    names: List[str] = []
    stack: List[Any] = []

    def path(last: Optional[str]) -> str:
        parts = names + ([last] if last is not None else [])
        text = ""
        for part in parts:
            text = text + part if part.startswith("[") or not text else f"{text}.{part}"
        return text or "$"

    def visit(item: Any, name: Optional[str]) -> None:
        if isinstance(item, str):
            bad = _BAD_TEXT_RE.search(item)
            if bad is not None:
                what = "a NUL character" if bad.group() == "\0" else "a lone surrogate (not Unicode text)"
                raise RankTableError(f"{path(name)}: string {_clip(item)} holds {what}", path=where)
        elif isinstance(item, (dict, list)):
            if len(stack) >= MAX_JSON_DEPTH:
                raise RankTableError(f"invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels", path=where)
            if name is not None:
                names.append(name)
            stack.append((name is not None, iter(item.items()) if isinstance(item, dict) else enumerate(item), isinstance(item, dict)))

    visit(value, None)
    while stack:
        named, items, is_dict = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            if named:
                names.pop()
            continue
        key, child = entry
        if is_dict:
            name = key if _PLAIN_KEY_RE.match(key) else "[key]"
            visit(key, name)
        else:
            name = f"[{key}]"
        visit(child, name)


_PLAIN_KEY_RE = re.compile(r"[A-Za-z0-9_]{1,40}\Z")


def _clip(text: str, limit: int = 40) -> str:
    """``repr`` of ``text`` shortened for messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def read_rank_table(path: str) -> Any:
    """Read and parse one rank table file.

    Args:
        path: the JSON file.

    Returns:
        The parsed JSON value (validate it with :func:`validate_rank_table`).

    Raises:
        RankTableError: the file is missing, a directory, unreadable, not UTF-8, or not JSON.
    """
    text = read_text(path, RankTableError, "no such rank table file", "a rank table file", limit=MAX_RANK_TABLE_BYTES)
    return parse_rank_table_json(text, path=path)


def _ordered(obj: Any, order: Sequence[str]) -> Any:
    """A copy of dict ``obj`` with the keys of ``order`` first (in that order), then the rest."""
    if not isinstance(obj, dict):
        return obj
    out = {k: obj[k] for k in order if k in obj}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out


_encode_str = json.encoder.encode_basestring_ascii  # the C function when _json is available


def _render(value: Any, indent: str, out: List[str]) -> None:
    """Append ``json.dumps(value, indent=2)`` text to ``out`` (same bytes, without the slow
    pure-Python encoder that ``json`` falls back to whenever ``indent`` is set).

    Raises:
        TypeError: a dict key that is not a string (the caller falls back to ``json.dumps``).
    """
    if isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        sep = "{\n" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError("non-string key")
            out.append(sep)
            out.append(_encode_str(key))
            out.append(": ")
            _render(item, inner, out)
            sep = ",\n" + inner
        out.append("\n" + indent + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        sep = "[\n" + inner
        for item in value:
            out.append(sep)
            _render(item, inner, out)
            sep = ",\n" + inner
        out.append("\n" + indent + "]")
    else:
        out.append(json.dumps(value))


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
            for server in servers:
                server = _ordered(server, _SERVER_ORDER)
                if isinstance(server, dict) and isinstance(server.get("device"), list):
                    server["device"] = [_ordered(d, _DEVICE_ORDER) for d in server["device"]]
                new_servers.append(server)
            top["server_list"] = new_servers
        pods = top.get("super_pod_list")
        if isinstance(pods, list):
            top["super_pod_list"] = [_ordered(p, _POD_ORDER) for p in pods]
    parts: List[str] = []
    try:
        _render(top, "", parts)
    except TypeError:
        return json.dumps(top, indent=2) + "\n"
    return "".join(parts) + "\n"


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
