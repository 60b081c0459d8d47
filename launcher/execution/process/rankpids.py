"""Each rank's pid on its own host, written there by what starts it (mpirun's rank wrapper, the
Slurm task shim), read here for ``status`` (stdlib only: the shim imports it on the nodes).

``<attempt dir>/rank-pids/<name>``: one line, the pid of the rank's program as its host sees it;
``<name>`` is ``rank<N>`` for rank N, ``scheduler`` for the scheduler.  Written to a temporary
name and renamed, so a reader sees the whole line or nothing.  The job dir is on a filesystem
every host sees (as for ``host-threads/``).
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

__all__ = ["FOLDER", "file_name", "named", "read_pids", "write_pid"]

FOLDER = "rank-pids"


def file_name(rank: Optional[int]) -> str:
    """``rank<N>``, or ``scheduler`` for no rank."""
    return "scheduler" if rank is None else f"rank{rank}"


def write_pid(attempt_dir: str, rank: Optional[int], pid: int) -> None:
    """Record ``pid`` for ``rank`` (best effort: never raises)."""
    folder = os.path.join(attempt_dir, FOLDER)
    path = os.path.join(folder, file_name(rank))
    tmp = os.path.join(folder, f".{file_name(rank)}.{os.getpid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(f"{pid}\n")
        os.replace(tmp, path)
    except OSError:
        pass


def read_pids(attempt_dir: str) -> Dict[Optional[int], int]:
    """rank (None: the scheduler) -> its pid, for every well-formed record of the attempt."""
    folder = os.path.join(attempt_dir, FOLDER)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    out: Dict[Optional[int], int] = {}
    for name in names:
        rank = _rank_of(name)
        if rank is None and name != "scheduler":
            continue
        try:
            with open(os.path.join(folder, name), "r", encoding="ascii") as fh:
                text = fh.read(32).strip()
        except (OSError, ValueError):
            continue
        if text.isdigit():
            out[rank] = int(text)
    return out


def _rank_of(name: str) -> Optional[int]:
    digits = name[4:] if name.startswith("rank") else ""
    return int(digits) if digits.isdigit() else None


def named(
    attempt_dir: str, procs: Tuple[Tuple[str, Optional[int], str], ...]
) -> Dict[str, Tuple[Optional[int], str, Optional[int]]]:
    """``procs`` (name, rank, host) -> ``(rank, host, pid)`` for those with a record."""
    pids = read_pids(attempt_dir)
    return {name: (rank, host, pids[rank]) for name, rank, host in procs if rank in pids}
