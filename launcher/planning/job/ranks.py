"""Rank assignment: the pure function from an inventory to rank slots (Horovod ``hosts.py`` style)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar

from launcher.errors import PlanError
from launcher.planning.inventory.model import Host, Inventory

#: Most ranks one job may have: 16,384 hosts x 8 devices (10,000 x 8 plans in about a second;
#: each rank costs a few KB of plan).
MAX_WORLD_SIZE = 131072


T = TypeVar("T")


def new_frozen(cls: Type[T], **fields: Any) -> T:
    """``cls(**fields)`` for a frozen dataclass without ``__post_init__``, given every field:
    the same value, built about 4x faster than through the generated ``__init__`` (which sets
    each field with ``object.__setattr__``); for loops that build one per rank."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


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
    hosts = list(inventory.hosts)
    caps = [min(h.slots, per_host) if per_host is not None else h.slots for h in hosts]
    wanted = _ranks_wanted(hosts, caps, np, per_host)
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
                new_frozen(
                    RankSlot,
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


def _ranks_wanted(hosts: List[Host], caps: List[int], np: Optional[int], per_host: Optional[int]) -> int:
    """How many ranks the job has: ``np``, or every slot (``caps``: usable slots per host).

    Raises:
        PlanError: see :func:`assign_ranks`.
    """
    if np is not None and np < 1:
        raise PlanError(f"--np must be at least 1, got {np}", field="--np")
    if np is not None and np > MAX_WORLD_SIZE:
        raise PlanError(f"--np must be in 1..{MAX_WORLD_SIZE}, got {np}", field="--np")
    if per_host is not None and per_host < 1:
        raise PlanError(f"--per-host must be at least 1, got {per_host}", field="--per-host")
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
    return wanted


def used_inventory(inventory: Inventory, slots: Tuple[RankSlot, ...]) -> Inventory:
    """The inventory restricted to the hosts and devices that ``slots`` use (for rank tables).

    One pass over ``slots`` and one over the hosts (linear in ranks + hosts)."""
    by_host: Dict[str, List[int]] = {}
    for s in slots:
        by_host.setdefault(s.host, []).append(s.device_id)
    used: List[Host] = []
    for host in inventory.hosts:
        devices = by_host.get(host.name)
        if devices:
            fields = dict(vars(host), slots=len(devices), devices=tuple(devices), max_slots=None)
            used.append(new_frozen(Host, **fields))
    return Inventory(tuple(used), source=inventory.source)


def node_slots(
    worker_num: int, local_worker_num: int, node_rank: Optional[int], host: str = "localhost"
) -> Tuple[RankSlot, ...]:
    """Per-node mode (msrun's model): the ranks one node of a multi-node job runs.

    Every node runs ``local_worker_num`` workers; node ``k`` runs global ranks
    ``k*local_worker_num + i`` for ``i`` in ``0..local_worker_num-1`` (msrun assumes the same
    number of workers on every node, and so does this).  Device ids are the local indexes.

    Args:
        worker_num: workers in the whole job (``--worker_num``).
        local_worker_num: workers on this node (``--local_worker_num``).
        node_rank: this node's index, or None when the job runs on one node only
            (``local_worker_num == worker_num``; msrun then ignores ``--node_rank``) or when the
            ranks are left to MindSpore (msrun without ``--node_rank``: the slots then carry the
            local index as ``rank``; see :func:`launcher.planning.build.build_plan`).
        host: the inventory name of this node.

    Returns:
        One :class:`RankSlot` per local worker, ordered by local index.

    Raises:
        PlanError: counts below 1, more local than total workers, or a node rank whose ranks
            would pass ``worker_num``.
    """
    if worker_num < 1:
        raise PlanError(f"--worker_num must be at least 1, got {worker_num}", field="--worker_num")
    if local_worker_num < 1:
        raise PlanError(f"--local_worker_num must be at least 1, got {local_worker_num}", field="--local_worker_num")
    if local_worker_num > worker_num:
        raise PlanError(
            f"--local_worker_num {local_worker_num} is more than --worker_num {worker_num}", field="--local_worker_num"
        )
    single = local_worker_num == worker_num
    base = 0
    if node_rank is not None and not single:
        if node_rank < 0:
            raise PlanError(f"--node_rank must be >= 0, got {node_rank}", field="--node_rank")
        base = node_rank * local_worker_num
        if base + local_worker_num > worker_num:
            nodes = -(-worker_num // local_worker_num)
            raise PlanError(
                f"--node_rank {node_rank} with --local_worker_num {local_worker_num} gives ranks "
                f"{base}..{base + local_worker_num - 1}, "
                f"but --worker_num is {worker_num} (node ranks 0..{nodes - 1})",
                field="--node_rank",
            )
    return tuple(
        RankSlot(
            rank=base + i,
            local_rank=i,
            node_rank=0 if single or node_rank is None else node_rank,
            host=host,
            device_id=i,
            world_size=worker_num,
            local_world_size=local_worker_num,
        )
        for i in range(local_worker_num)
    )
