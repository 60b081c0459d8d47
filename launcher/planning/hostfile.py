"""OpenMPI hostfiles and mpirun's ``-H`` host lists (pure)."""
from __future__ import annotations

import re
from typing import List, Optional

from launcher.errors import InventoryError
from launcher.planning.hosts import MAX_HOSTS, Host, Inventory, check_host_name, check_unique_hosts, clip, positive_int

#: Largest hostfile read (bytes): 16,384 hosts with long names and comments.  Parsing is linear,
#: lines are read one at a time, and host lines stop at :data:`MAX_HOSTS`.
MAX_HOSTFILE_BYTES = 8 << 20

#: A line whose first non-blank character starts something other than a comment.
_CONTENT_LINE_RE = re.compile(r"^[^\S\n]*([^#\s][^\n]*)", re.MULTILINE)


def parse_hostfile(text: str, path: Optional[str] = None) -> Inventory:
    """Parse an OpenMPI hostfile.

    Accepted lines: ``host``, ``host slots=N``, ``host slots=N max_slots=M``, ``host:N``;
    ``#`` starts a comment; blank lines are skipped.

    Raises:
        InventoryError: naming ``path:line`` for any malformed line, slots outside
            ``1..MAX_SLOTS``, more than :data:`MAX_HOSTS` hosts, a duplicate host, or an empty file.
    """
    hosts: List[Host] = []
    where = path or "<hostfile>"
    lineno, counted = 1, 0
    for match in _CONTENT_LINE_RE.finditer(text):  # blank and comment lines are skipped in C
        lineno += text.count("\n", counted, match.start())
        counted = match.start()
        line = match.group(1).split("#", 1)[0].strip()
        if len(hosts) >= MAX_HOSTS:
            raise InventoryError(f"more than {MAX_HOSTS} hosts", path=where, line=lineno)
        parts = line.split()
        name = parts[0]
        slots: Optional[int] = None
        max_slots: Optional[int] = None
        if ":" in name and not name.startswith("[") and name.count(":") == 1:
            name, count = name.split(":", 1)
            slots = positive_int(count, "slot count after ':'", where, lineno)
        check_host_name(name, where, lineno)
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if not sep:
                raise InventoryError(f"expected key=value, got {clip(item)} (e.g. 'slots=8')", path=where, line=lineno)
            if key in ("slots", "slot", "cpu", "count"):
                if slots is not None:
                    raise InventoryError("slots given twice", path=where, line=lineno)
                slots = positive_int(value, "slots", where, lineno)
            elif key in ("max_slots", "max-slots"):
                max_slots = positive_int(value, "max_slots", where, lineno)
            else:
                raise InventoryError(f"unknown hostfile key {clip(key)}; use slots=N or max_slots=N", path=where, line=lineno)
        if slots is None:
            slots = 1
        if max_slots is not None and max_slots < slots:
            raise InventoryError(f"max_slots={max_slots} is below slots={slots}", path=where, line=lineno)
        hosts.append(Host(name=name, slots=slots, max_slots=max_slots, source=f"{where}:{lineno}"))
    if not hosts:
        raise InventoryError("no hosts in hostfile; add lines like 'node1 slots=8'", path=where)
    check_unique_hosts(hosts, where)
    return Inventory(tuple(hosts), source=path)


def parse_host_list(text: str, default_slots: int = 1, field: str = "-H") -> Inventory:
    """Parse ``-H h1:8,h2:8`` (``h`` alone = ``default_slots``; mpirun's syntax), where a host may
    be a Slurm hostlist: ``node[1-4]:8``, ``node[01-02,07]``, ``$SLURM_JOB_NODELIST``.

    A hostlist's hosts share its slot count and come in the order written (see
    :func:`launcher.planning.hostlist.expand_hostlist`); ``[fe80::1]`` and other names starting
    with ``[`` stay host names.

    Raises:
        InventoryError: with ``field`` for malformed entries, bad hostlists, more than
            :data:`MAX_HOSTS` hosts (refused before expanding) or duplicates.
    """
    from launcher.planning.hostlist import expand_hostlist, is_hostlist_name, split_elements

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
