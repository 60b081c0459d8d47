"""Rank assignment: the pure function from an inventory to rank slots (Horovod ``hosts.py`` style)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from launcher.errors import PlanError
from launcher.planning.inventory import Host, Inventory

#: Most ranks one job may have (a plan of this size is built in seconds and tens of MB).
MAX_WORLD_SIZE = 16384


@dataclass(frozen=True)
class RankSlot:
    """Where one rank runs.

    Attributes:
        rank: global rank, 0..world_size-1.
        local_rank: index of the rank on its host.
        node_rank: index of its host among the hosts that run ranks.
        host: host name as in the inventory.
        device_id: the device (accelerator) id on that host.
        world_size: number of ranks in the job.
        local_world_size: number of ranks on this host.
    """

    rank: int
    local_rank: int
    node_rank: int
    host: str
    device_id: int
    world_size: int
    local_world_size: int


def assign_ranks(
    inventory: Inventory,
    np: Optional[int] = None,
    per_host: Optional[int] = None,
) -> Tuple[RankSlot, ...]:
    """Fill hosts in order, slot by slot (mpirun's by-slot mapping).

    Args:
        inventory: hosts with slots (after include/exclude filters).
        np: total number of ranks; ``None`` means every available slot.
        per_host: cap of ranks per host; ``None`` means the host's slots.
        (Hosts are filled in inventory order; the ranktable method reorders the inventory
        first, see :func:`launcher.planning.ranktable.rank_table_host_order`.)

    Returns:
        One :class:`RankSlot` per rank, ordered by rank.

    Raises:
        PlanError: ``np`` or ``per_host`` below 1, more ranks asked than slots, or more than
            :data:`MAX_WORLD_SIZE` ranks (asked, or every slot of a larger inventory).
    """
    if np is not None and np < 1:
        raise PlanError(f"--np must be at least 1, got {np}", field="--np")
    if np is not None and np > MAX_WORLD_SIZE:
        raise PlanError(f"--np must be in 1..{MAX_WORLD_SIZE}, got {np}", field="--np")
    if per_host is not None and per_host < 1:
        raise PlanError(f"--per-host must be at least 1, got {per_host}", field="--per-host")
    hosts = list(inventory.hosts)
    caps = [min(h.slots, per_host) if per_host is not None else h.slots for h in hosts]
    available = sum(caps)
    wanted = available if np is None else np
    if wanted > MAX_WORLD_SIZE:
        raise PlanError(
            f"the inventory has {available} slots, more than the {MAX_WORLD_SIZE} ranks one job may have; "
            "pass --np, --per-host or --include",
            field="--np",
        )
    if wanted > available:
        detail = ", ".join(f"{h.name}:{c}" for h, c in zip(hosts, caps))
        cap = f" with --per-host {per_host}" if per_host is not None else ""
        raise PlanError(
            f"requested {wanted} ranks but the inventory has only {available} slots{cap} ({detail}); "
            "lower --np or add hosts/slots",
            field="--np",
        )
    counts: List[int] = []
    left = wanted
    for cap in caps:
        take = min(cap, left)
        counts.append(take)
        left -= take
    slots: List[RankSlot] = []
    node_rank = 0
    for host, count in zip(hosts, counts):
        if count == 0:
            continue
        devices = host.device_ids[:count]
        for local_rank, device in enumerate(devices):
            slots.append(
                RankSlot(
                    rank=len(slots),
                    local_rank=local_rank,
                    node_rank=node_rank,
                    host=host.name,
                    device_id=device,
                    world_size=wanted,
                    local_world_size=count,
                )
            )
        node_rank += 1
    return tuple(slots)


def used_inventory(inventory: Inventory, slots: Tuple[RankSlot, ...]) -> Inventory:
    """The inventory restricted to the hosts and devices that ``slots`` use (for rank tables)."""
    used: List[Host] = []
    for host in inventory.hosts:
        devices = tuple(s.device_id for s in slots if s.host == host.name)
        if devices:
            used.append(replace(host, slots=len(devices), devices=devices, max_slots=None))
    return Inventory(tuple(used), source=inventory.source)
