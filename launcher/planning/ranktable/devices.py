"""Device IPs of every host of a rank table: hccn.conf copies, ``--hccn``, the YAML inventory.

Pure except the default ``read`` / ``exists`` callables of :func:`resolve_device_ips` (one
hccn.conf read, one listing of ``--hccn-dir``), which can be replaced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional

from launcher.errors import RankTableError
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.ranktable.common import host_where
from launcher.planning.ranktable.hccn import read_hccn_conf


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
        source = _host_source(host, files, hccn_dir, read, exists)
        out[host.name] = _host_device_ips(host, source)
    return out


@dataclass(frozen=True)
class _Source:
    """Where one host's device IPs were found.

    Attributes:
        ips: device id -> IP as the source lists them.
        origin: how to name the source in messages.
        path: the hccn.conf file, or None for inline ``device_ips:``.
    """

    ips: Mapping[int, str]
    origin: str
    path: Optional[str]


def _host_source(
    host: Host,
    files: Mapping[str, str],
    hccn_dir: Optional[str],
    read: Callable[[str], Mapping[int, str]],
    exists: Optional[Callable[[str], bool]],
) -> _Source:
    """The first source of ``host``'s device IPs (see :func:`resolve_device_ips` for the order).

    Raises:
        RankTableError: both ``<host>`` and ``<host>.conf`` in ``hccn_dir``; no source at all.
    """
    if host.name in files:
        path = files[host.name]
        return _Source(read(path), f"{path} (--hccn {host.name}=...)", path)
    if host.hccn_conf is not None:
        return _Source(read(host.hccn_conf), f"{host.hccn_conf} (hccn_conf of host {host.name!r})", host.hccn_conf)
    looked: List[str] = []
    if hccn_dir is not None and exists is not None:
        looked = [os.path.join(hccn_dir, host.name), os.path.join(hccn_dir, host.name + ".conf")]
        found = [p for p in looked if exists(p)]
        if len(found) == 2:
            raise RankTableError(
                f"both {found[0]} and {found[1]} exist for host {host.name!r}; keep one of them",
                field="--hccn-dir",
            )
        if found:
            return _Source(read(found[0]), found[0], found[0])
    if host.device_ips is not None:
        return _Source(dict(host.device_ips), f"device_ips of host {host.name!r}", None)
    tried = f" (looked for {' and '.join(looked)})" if looked else ""
    raise RankTableError(
        f"host {host.name!r} has no device IPs{tried}; pass --hccn {host.name}=PATH or "
        f"--hccn-dir DIR holding DIR/{host.name}.conf, or give it 'hccn_conf:' or 'device_ips:' "
        "in a YAML cluster file",
        **host_where(host),
    )


def _host_device_ips(host: Host, source: _Source) -> Dict[int, str]:
    """The IPs of exactly ``host``'s devices, in device order.

    Raises:
        RankTableError: a device the source has no address for.
    """
    chosen: Dict[int, str] = {}
    for device_id in host.device_ids:
        ip = source.ips.get(device_id)
        if ip is None:
            fix = (
                f"add address_{device_id}=<IP> to it"
                if source.path is not None
                else f'add "{device_id}": <IP> to its device_ips'
            )
            raise RankTableError(
                f"host {host.name!r}: device {device_id} has no address in {source.origin}; {fix}, "
                f"or leave the device out with --exclude {host.name}:{device_id}",
                **({"path": source.path} if source.path is not None else host_where(host)),
            )
        chosen[device_id] = ip
    return chosen


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
