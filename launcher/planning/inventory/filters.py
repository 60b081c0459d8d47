"""Host filters ``--include`` / ``--exclude`` in DeepSpeed's syntax ``host1:0,1@host2`` (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.inventory.model import DIGITS_RE, HOST_RE, MAX_DEVICE_ID, Host, Inventory, clip


def parse_filter(text: str, flag: str) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Parse ``host1:0,1@host2`` into ``{"host1": (0, 1), "host2": None}`` (None: whole host).

    Raises:
        InventoryError: ``field=flag`` for malformed text.
    """
    out: Dict[str, Optional[Tuple[int, ...]]] = {}
    if not text.strip():
        raise InventoryError("empty filter; write host1:0,1@host2", field=flag)
    for part in text.split("@"):
        part = part.strip()
        if not part:
            raise InventoryError(f"empty host in {clip(text)}; write host1:0,1@host2", field=flag)
        name, sep, ids = part.partition(":")
        if not name:
            raise InventoryError(f"missing host name in {clip(part)}", field=flag)
        if sep:
            texts = [s.strip() for s in ids.split(",")]
            if not all(DIGITS_RE.match(s) for s in texts):
                raise InventoryError(
                    f"slot ids in {clip(part)} must be integers, e.g. "
                    f"{name if len(name) <= 40 and HOST_RE.fullmatch(name) else 'host'}:0,1",
                    field=flag,
                )
            if any(len(s) > 9 or int(s) > MAX_DEVICE_ID for s in texts):
                raise InventoryError(f"slot ids in {clip(part)} must be in 0..{MAX_DEVICE_ID}", field=flag)
            slots = tuple(int(s) for s in texts)
            prev = out.get(name, ())
            out[name] = tuple(dict.fromkeys((prev or ()) + slots))
        else:
            out[name] = None
    return out


def apply_filters(inv: Inventory, include: Optional[str] = None, exclude: Optional[str] = None) -> Inventory:
    """Keep only included hosts/devices, then drop excluded ones (DeepSpeed semantics).

    Slot ids in a filter are device ids of that host.  ``include`` and ``exclude`` may not
    both be given (as in DeepSpeed).

    Raises:
        InventoryError: unknown host or device in a filter, both filters, or nothing left.
    """
    if include and exclude:
        raise InventoryError("--include and --exclude are mutually exclusive", field="--include")
    if not include and not exclude:
        return inv
    flag = "--include" if include else "--exclude"
    spec = parse_filter(include or exclude or "", flag)
    names = {h.name for h in inv.hosts}
    for name, ids in spec.items():
        if name not in names:
            shown = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
            raise InventoryError(f"host {clip(name)} is not in the inventory ({shown})", field=flag)
        host = inv.host(name)
        for d in ids or ():
            if d not in host.device_ids:
                raise InventoryError(f"host {name!r} has no device {d} (devices {list(host.device_ids)})", field=flag)
    kept: List[Host] = []
    for host in inv.hosts:
        if include:
            if host.name not in spec:
                continue
            ids = spec[host.name]
            devs = host.device_ids if ids is None else tuple(d for d in host.device_ids if d in ids)
        else:
            ids = spec.get(host.name, ())
            if host.name in spec and ids is None:
                continue
            devs = tuple(d for d in host.device_ids if d not in (ids or ()))
        if not devs:
            continue
        kept.append(replace(host, slots=len(devs), devices=devs, max_slots=None))
    if not kept:
        raise InventoryError("the filters leave no hosts", field=flag)
    return Inventory(tuple(kept), source=inv.source)
