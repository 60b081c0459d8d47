"""Each rank's pid on its own host, written there by mpirun's rank wrapper
(``templates/mslaunch-rank.sh``), read here for ``status`` (the supervisor's ``pid`` events).

``<attempt dir>/rank-pids/<name>``: one line, the pid of the rank's program as its host sees it;
``<name>`` is ``rank<N>`` for rank N, ``scheduler`` for the scheduler.  Written to a temporary
name (``.<name>.<wrapper's pid>``) and renamed, so a reader sees the whole line or nothing.  The
job dir is on a filesystem every host sees (as for ``host-threads/``).  (The Slurm task shim has
its own start records: :mod:`launcher.execution.slurm.shim`.)
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

__all__ = ["FOLDER", "file_name", "named", "read_pids"]

FOLDER = "rank-pids"


def file_name(rank: Optional[int]) -> str:
    """``rank<N>``, or ``scheduler`` for no rank."""
    return "scheduler" if rank is None else f"rank{rank}"


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
