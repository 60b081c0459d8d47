"""OpenMPI hostfiles (read by :mod:`launcher.planning.inventory.hostfile`) and mpirun's ``-H`` host lists (pure)."""

from __future__ import annotations

from typing import List

from launcher.errors import InventoryError
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import MAX_HOSTS, Host, Inventory, check_host_name, clip, positive_int

__all__ = ["MAX_HOSTFILE_BYTES", "parse_host_list", "parse_hostfile"]

#: Largest hostfile read (bytes): 16,384 hosts with long names and comments.  Parsing is linear,
#: lines are read one at a time, and host lines stop at :data:`MAX_HOSTS`.
MAX_HOSTFILE_BYTES = 8 << 20


def parse_host_list(text: str, default_slots: int = 1, field: str = "-H") -> Inventory:
    """Parse ``-H h1:8,h2:8`` (``h`` alone = ``default_slots``; mpirun's syntax), where a host may
    be a Slurm hostlist: ``node[1-4]:8``, ``node[01-02,07]``, ``$SLURM_JOB_NODELIST``.

    A hostlist's hosts share its slot count and come in the order written (see
    :func:`launcher.planning.inventory.hostlist.expand_hostlist`); ``[fe80::1]`` and other names starting
    with ``[`` stay host names.

    Raises:
        InventoryError: with ``field`` for malformed entries, bad hostlists, more than
            :data:`MAX_HOSTS` hosts (refused before expanding) or duplicates.
    """
    from launcher.planning.inventory.hostlist import expand_hostlist, is_hostlist_name, split_elements

    hosts: List[Host] = []
    try:
        items = [i.strip() for i in split_elements(text)] if "[" in text else [i.strip() for i in text.split(",")]
    except InventoryError as exc:
        raise InventoryError(exc.message, field=field) from None
    if len(items) > MAX_HOSTS:
        raise InventoryError(f"more than {MAX_HOSTS} hosts", field=field)
    for idx, item in enumerate(items):
        if not item:
            raise InventoryError(f"empty entry #{idx + 1} in host list {clip(text)}; write h1:8,h2:8", field=field)
        name, sep, count = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        if not sep:
            name = item
        try:
            slots = positive_int(count, f"slot count of {clip(name)}", None, None) if sep else default_slots
            names = [name]
            if is_hostlist_name(name):
                names = expand_hostlist(name, limit=MAX_HOSTS - len(hosts), what=f"hostlist {idx + 1}")
            for one in names:
                check_host_name(one, None, None)
        except InventoryError as exc:
            hint = " (write h1:8,h2:8 or node[1-4]:8)" if is_hostlist_name(name) else " (write h1:8,h2:8)"
            raise InventoryError(exc.message + hint, field=field) from None
        hosts.extend(Host(name=one, slots=slots, source=f"{field} entry {idx + 1}") for one in names)
    seen = set()
    for h in hosts:
        if h.name in seen:
            raise InventoryError(f"duplicate host {h.name!r}; list each host once with its total slots", field=field)
        seen.add(h.name)
    return Inventory(tuple(hosts), source=None)
