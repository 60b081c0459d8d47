"""Validate a parsed rank table: every problem, with its JSON path (pure).

:func:`validate_rank_table` walks the table once, in named checks (top level, servers, devices,
device counts, ranks, SuperPoDs, server order) that record :class:`Violation`s on a
:class:`_Checker`; it never raises for any JSON value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from launcher.errors import RankTableError
from launcher.planning.ranktable.common import CHIPS, STATUSES, UINT_RE, VERSIONS, Violation, canonical_uint, json_kind
from launcher.planning.ranktable.hccn import IPV4_RE, is_ipv4

_DIGITS_RE = re.compile(r"[0-9]{1,20}\Z")
_UINT_MATCH = UINT_RE.match
_IPV4_MATCH = IPV4_RE.match
_V12_OPTIONAL_DEVICE_KEYS = ("device_port", "backup_device_ip", "backup_device_port", "host_port")


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
            described = json_kind(value)
            if isinstance(value, int) and not isinstance(value, bool) and described.startswith("number "):
                hint = f' (write "{described[len("number ") :]}")'
            self.bad(path, f"must be a JSON string, got {json_kind(value)}{hint}")
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

    The checks run in this order: the top level (:func:`_check_top`), each server and its
    devices (:func:`_check_server`, :func:`_check_device`, :func:`_check_device_count`), rank
    ids across servers (:func:`_check_ranks`), SuperPoDs (1.2, :func:`_check_super_pods`), and
    server order (:func:`_check_server_order`).

    Args:
        obj: any JSON value (as from :func:`~launcher.planning.ranktable.parse_rank_table_json`).
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
        ck.bad("$", f"a rank table must be a JSON object, got {json_kind(obj)}")
        return ck.found
    version, servers = _check_top(ck, obj)
    if servers is None:
        return ck.found
    v12 = version == "1.2"
    table = _TableScan(chip=chip, v12=v12, multi=len(servers) > 1)
    server_ids: List[Optional[str]] = []
    server_ranks: List[List[Optional[int]]] = []
    for i, server in enumerate(servers):
        sid, ranks = _check_server(ck, table, i, server)
        server_ids.append(sid)
        server_ranks.append(ranks)
    _check_ranks(ck, server_ranks)
    pod_of = _check_super_pods(ck, obj, server_ids) if v12 else None
    _check_server_order(ck, server_ids, pod_of)
    return ck.found


def _check_top(ck: _Checker, obj: Dict[Any, Any]) -> Tuple[Optional[str], Optional[List[Any]]]:
    """``version``, ``status``, ``server_count`` and ``server_list``; returns the version and the
    server list (None when there is no list to walk)."""
    version = ck.string(obj, "version", "")
    if version is not None and version not in VERSIONS:
        ck.bad("version", f'must be "1.0" or "1.2", got {json_kind(version)}')
    status = ck.string(obj, "status", "")
    if status is not None and status not in STATUSES:
        ck.bad("status", f'must be "completed" or "initializing", got {json_kind(status)}')
    count_text = ck.string(obj, "server_count", "", required=version != "1.2")

    servers = obj.get("server_list")
    if "server_list" not in obj:
        ck.bad("server_list", "missing required field")
        servers = None
    elif not isinstance(servers, list):
        ck.bad("server_list", f"must be a list of servers, got {json_kind(servers)}")
        servers = None
    elif not servers:
        ck.bad("server_list", "is empty; a rank table needs at least one server")

    if count_text is not None:
        count = canonical_uint(count_text)
        if count is None:
            ck.bad("server_count", f"must be a non-negative integer in a string, got {json_kind(count_text)}")
        elif servers is not None and count != len(servers):
            ck.bad("server_count", f"is {count_text} but server_list has {len(servers)} servers")
    return version, servers


@dataclass
class _TableScan:
    """What the per-server checks share while walking one table."""

    chip: str
    v12: bool
    #: more than one server (Ascend 910 then needs 8 devices on each)
    multi: bool
    #: server_id -> index of the server that has it first
    sid_first: Dict[str, int] = field(default_factory=dict)
    #: device IP -> (server index, device index) of the device that has it first
    ip_first: Dict[str, Tuple[int, int]] = field(default_factory=dict)

    @property
    def max_device(self) -> int:
        return 15 if self.v12 else 7


def _device_path(i: int, k: int) -> str:
    """The JSON path of device ``k`` of server ``i``."""
    return f"server_list[{i}].device[{k}]"


def _check_server(ck: _Checker, table: _TableScan, i: int, server: Any) -> Tuple[Optional[str], List[Optional[int]]]:
    """One ``server_list`` entry and its devices; returns its server_id (None when unusable)
    and the rank id of each device (None when missing or malformed)."""
    sp = f"server_list[{i}]"
    ranks: List[Optional[int]] = []
    if not isinstance(server, dict):
        ck.bad(sp, f"must be an object, got {json_kind(server)}")
        return None, ranks
    sid = ck.string(server, "server_id", sp)
    if sid is not None:
        if not sid:
            ck.bad(f"{sp}.server_id", "is empty")
        elif sid in table.sid_first:
            ck.bad(f"{sp}.server_id", f"server_id {json_kind(sid)} is also server_list[{table.sid_first[sid]}]")
        else:
            table.sid_first[sid] = i
    if table.v12:
        host_ip = ck.string(server, "host_ip", sp)
        if host_ip == "":
            ck.bad(f"{sp}.host_ip", "is empty")
    ck.string(server, "host_nic_ip", sp, required=False)

    devices = server.get("device")
    if "device" not in server:
        ck.bad(f"{sp}.device", "missing required field")
        return sid, ranks
    if not isinstance(devices, list):
        ck.bad(f"{sp}.device", f"must be a list of devices, got {json_kind(devices)}")
        return sid, ranks
    ids_here: Dict[int, int] = {}
    for k, dev in enumerate(devices):
        rid = _device_ok(table, i, k, dev, ids_here)
        ranks.append(rid if rid is not _PROBLEM else _check_device(ck, table, i, k, dev, ids_here))
    _check_device_count(ck, f"{sp}.device", len(devices), list(ids_here), table.chip, table.v12, table.multi)
    return sid, ranks


#: What :func:`_device_ok` returns for a device it leaves to :func:`_check_device`.
_PROBLEM: Any = object()


def _device_ok(table: _TableScan, i: int, k: int, dev: Any, ids_here: Dict[int, int]) -> Any:
    """The rank id of device ``k`` of server ``i`` when the device has no problem at all (the
    common case, checked without building a JSON path), recording its device id and IP as
    :func:`_check_device` does; else :data:`_PROBLEM`, having recorded nothing."""
    if type(dev) is not dict:
        return _PROBLEM
    did_text = dev.get("device_id")
    ip = dev.get("device_ip")
    rid_text = dev.get("rank_id")
    if (
        type(did_text) is not str
        or type(ip) is not str
        or type(rid_text) is not str
        or not _UINT_MATCH(did_text)
        or not _UINT_MATCH(rid_text)
        or not _IPV4_MATCH(ip)
        or ip in table.ip_first
    ):
        return _PROBLEM
    did = int(did_text)
    if did > table.max_device or did in ids_here:
        return _PROBLEM
    if table.v12:
        sdid = dev.get("super_device_id")
        if type(sdid) is not str or not _DIGITS_RE.match(sdid):
            return _PROBLEM
        if len(dev) != 4:  # optional keys present: each must be a string
            for key in _V12_OPTIONAL_DEVICE_KEYS:
                if key in dev and type(dev[key]) is not str:
                    return _PROBLEM
    ids_here[did] = k
    table.ip_first[ip] = (i, k)
    return int(rid_text)


def _check_device(ck: _Checker, table: _TableScan, i: int, k: int, dev: Any, ids_here: Dict[int, int]) -> Optional[int]:
    """Device ``k`` of server ``i``: ids, IP and rank, every problem recorded; records its device
    id in ``ids_here`` and its IP in ``table.ip_first``.

    Returns:
        The rank (None when missing or malformed).
    """
    sp = f"server_list[{i}]"
    dp = _device_path(i, k)
    if not isinstance(dev, dict):
        ck.bad(dp, f"must be an object, got {json_kind(dev)}")
        return None
    did_text = ck.string(dev, "device_id", dp)
    did = canonical_uint(did_text)
    if did_text is not None:
        if did is None:
            ck.bad(f"{dp}.device_id", f'must be a device number in a string, e.g. "0", got {json_kind(did_text)}')
        elif did > table.max_device:
            ck.bad(f"{dp}.device_id", f"device {did} is out of range 0..{table.max_device}")
        elif did in ids_here:
            ck.bad(f"{dp}.device_id", f"device {did} is also {sp}.device[{ids_here[did]}]")
        else:
            ids_here[did] = k
    ip = ck.string(dev, "device_ip", dp)
    if ip is not None:
        if not is_ipv4(ip):
            ck.bad(f"{dp}.device_ip", f"{json_kind(ip)} is not an IPv4 address")
        elif ip in table.ip_first:
            ck.bad(f"{dp}.device_ip", f"device IP {ip} is also used by {_device_path(*table.ip_first[ip])}")
        else:
            table.ip_first[ip] = (i, k)
    rid_text = ck.string(dev, "rank_id", dp)
    rid = canonical_uint(rid_text)
    if rid_text is not None and rid is None:
        ck.bad(f"{dp}.rank_id", f'must be a rank number in a string, e.g. "0", got {json_kind(rid_text)}')
    if table.v12:
        sdid = ck.string(dev, "super_device_id", dp)
        if sdid is not None and not _DIGITS_RE.match(sdid):
            ck.bad(f"{dp}.super_device_id", f"must be a number in a string, got {json_kind(sdid)}")
        for key in _V12_OPTIONAL_DEVICE_KEYS:
            ck.string(dev, key, dp, required=False)
    return rid


def _check_device_count(ck: _Checker, path: str, count: int, ids: List[int], chip: str, v12: bool, multi: bool) -> None:
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
        ck.bad(
            path, f"a multi-server Ascend 910 job needs 8 devices on every server, got {count} (--chip 910b allows 1-8)"
        )
    elif count in (2, 4) and any(d < 4 for d in ids) and any(d >= 4 for d in ids):
        ck.bad(
            path,
            f"devices {sorted(ids)} mix devices 0-3 and 4-7, two separate networks on Ascend 910; "
            "use devices from one group",
        )


def _check_ranks(ck: _Checker, per_server: List[List[Optional[int]]]) -> None:
    """Rank ids unique, covering 0..N-1, consecutive within servers, increasing in server order
    (``per_server[i][k]``: the rank of device ``k`` of server ``i``, None when malformed)."""
    flat = [rid for ranks in per_server for rid in ranks]
    if flat == list(range(len(flat))):  # 0..N-1 in order: every rule below holds
        return

    def path(i: int, k: int) -> str:
        return f"{_device_path(i, k)}.rank_id"

    first: Dict[int, Tuple[int, int]] = {}
    complete = True
    for i, ranks in enumerate(per_server):
        for k, rid in enumerate(ranks):
            if rid is None:
                complete = False
            elif rid in first:
                ck.bad(path(i, k), f"rank_id {rid} is also {path(*first[rid])}")
            else:
                first[rid] = (i, k)
    if not complete:
        return
    total = len(flat)
    for i, ranks in enumerate(per_server):
        for k, rid in enumerate(ranks):
            if rid is not None and rid >= total:
                ck.bad(path(i, k), f"rank_id {rid} is outside 0..{total - 1} (the table has {total} devices)")
    missing = [r for r in range(total) if r not in first]
    if missing:
        shown = ", ".join(str(r) for r in missing[:10]) + (", ..." if len(missing) > 10 else "")
        ck.bad("server_list", f"rank ids must cover 0..{total - 1}; missing {shown}")
    previous_last: Optional[int] = None
    previous_index = -1
    for i, ranks in enumerate(per_server):
        if not ranks:
            continue
        r0 = ranks[0]
        if previous_last is None:
            if r0 != 0:
                ck.bad(path(i, 0), f"the first server's ranks must start at 0, got {r0}")
        elif r0 != previous_last + 1:
            ck.bad(
                path(i, 0),
                f"ranks must continue in server order: server_list[{previous_index}] ends at {previous_last}, "
                f"so this server starts at {previous_last + 1}, got {r0}",
            )
        for k in range(1, len(ranks)):
            rid, prev = ranks[k], ranks[k - 1]
            if prev is not None and rid != prev + 1:
                ck.bad(
                    path(i, k),
                    f"rank ids within a server must be consecutive: expected {prev + 1} after {prev}, got {rid}",
                )
                break
        previous_last, previous_index = ranks[-1], i


def _check_super_pods(ck: _Checker, obj: Dict[Any, Any], server_ids: List[Optional[str]]) -> Dict[str, str]:
    """Check ``super_pod_list`` against ``server_list``; returns server_id -> super_pod_id."""
    pod_of: Dict[str, str] = {}
    pods = obj.get("super_pod_list")
    if "super_pod_list" not in obj:
        ck.bad("super_pod_list", "missing required field (rank table 1.2 lists the SuperPoD of every server)")
        return pod_of
    if not isinstance(pods, list):
        ck.bad("super_pod_list", f"must be a list of SuperPoDs, got {json_kind(pods)}")
        return pod_of
    if not pods:
        ck.bad("super_pod_list", "is empty; list every server's SuperPoD")
    known = {sid for sid in server_ids if sid}
    where_of: Dict[str, str] = {}
    pod_first: Dict[str, int] = {}
    for p, pod in enumerate(pods):
        _check_pod(ck, p, pod, known, pod_first, pod_of, where_of)
    for i, sid in enumerate(server_ids):
        if sid and sid not in pod_of:
            ck.bad(f"server_list[{i}].server_id", f"server {json_kind(sid)} is in no super_pod_list entry")
    _check_pods_together(ck, server_ids, pod_of)
    return pod_of


def _check_pod(
    ck: _Checker,
    p: int,
    pod: Any,
    known: Set[str],
    pod_first: Dict[str, int],
    pod_of: Dict[str, str],
    where_of: Dict[str, str],
) -> None:
    """``super_pod_list[p]``: its id (unique) and members (known servers, each in one pod only);
    records each member's pod in ``pod_of`` / ``where_of``."""
    pp = f"super_pod_list[{p}]"
    if not isinstance(pod, dict):
        ck.bad(pp, f"must be an object, got {json_kind(pod)}")
        return
    pid = ck.string(pod, "super_pod_id", pp)
    if pid is not None:
        if pid in pod_first:
            ck.bad(f"{pp}.super_pod_id", f"SuperPoD {json_kind(pid)} is also super_pod_list[{pod_first[pid]}]")
        else:
            pod_first[pid] = p
    members = pod.get("server_list")
    if "server_list" not in pod:
        ck.bad(f"{pp}.server_list", "missing required field")
        return
    if not isinstance(members, list):
        ck.bad(f"{pp}.server_list", f"must be a list, got {json_kind(members)}")
        return
    if not members:
        ck.bad(f"{pp}.server_list", "is empty")
    for k, member in enumerate(members):
        mp = f"{pp}.server_list[{k}]"
        if not isinstance(member, dict):
            ck.bad(mp, f"must be an object, got {json_kind(member)}")
            continue
        sid = ck.string(member, "server_id", mp)
        if sid is None:
            continue
        if sid not in known:
            ck.bad(f"{mp}.server_id", f"server {json_kind(sid)} is not in server_list")
        elif sid in pod_of:
            ck.bad(f"{mp}.server_id", f"server {json_kind(sid)} is already in {where_of[sid]}")
        else:
            pod_of[sid] = pid if pid is not None else f"#{p}"
            where_of[sid] = pp


def _check_pods_together(ck: _Checker, server_ids: List[Optional[str]], pod_of: Dict[str, str]) -> None:
    """The servers of one SuperPoD are listed next to each other in ``server_list``."""
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
                f"servers of SuperPoD {json_kind(pod)} must be listed together (server_list[{closed[pod]}] is in it "
                "too)",
            )
        if current is not None:
            closed.setdefault(current, current_start)
        current, current_start = pod, i


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
                scope = f" within SuperPoD {json_kind(group)}" if pod_of is not None else ""
                ck.bad(
                    f"server_list[{i}].server_id",
                    f"servers must be in lexicographic order of server_id{scope}: {json_kind(sid)} sorts before "
                    f"{json_kind(prev)} (server_list[{j}])",
                )
                continue
        last[group] = (i, sid)
