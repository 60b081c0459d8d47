"""``nvidia-smi --query-gpu=...`` and ``--query-compute-apps=...`` in CSV (pure parsers).

The queries mslaunch runs (:data:`GPU_QUERY`, :data:`APPS_QUERY`), with
``--format=csv,noheader,nounits``, print one line per GPU / per compute process, values
separated by ``, ``::

    0, GPU-6f1c0b8e-4b7a-2d3e-9a51-0c2d4f6e8a10, 0, No, No
    1, GPU-0e9d..., [N/A], [N/A], [N/A]

    GPU-6f1c0b8e-4b7a-2d3e-9a51-0c2d4f6e8a10, 30496, python3, 1024

A field the GPU does not support reads ``[N/A]`` or ``[Not Supported]``: unsupported, not a
fault.  A header line (the same query without ``noheader``) is skipped, and a unit after a
number (``1024 MiB``) is tolerated.  nvidia-smi's exit statuses are documented in its manual
(:data:`EXIT_STATUS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from launcher.planning.health.devices.model import FAULTY, NOT_CHECKED, ToolOutputError, one_line

__all__ = [
    "APPS_QUERY",
    "EXIT_STATUS",
    "GPU_QUERY",
    "GpuApp",
    "GpuRow",
    "field_state",
    "parse_compute_apps",
    "parse_gpu_query",
]

GPU_QUERY = "index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"

#: nvidia-smi's documented exit statuses (its manual, RETURN VALUE) other than 0, and what they
#: make of the checks: the driver or a GPU is broken (``faulty``), or the tool could not answer.
EXIT_STATUS: Dict[int, Tuple[str, str]] = {
    2: (NOT_CHECKED, "a supplied argument or flag is invalid"),
    3: (NOT_CHECKED, "the requested operation is not available on the target device"),
    4: (NOT_CHECKED, "the current user does not have permission to access this device or perform this operation"),
    6: (NOT_CHECKED, "a query to find an object was unsuccessful"),
    8: (FAULTY, "a device's external power cables are not properly attached"),
    9: (FAULTY, "NVIDIA driver is not loaded"),
    10: (FAULTY, "NVIDIA kernel detected an interrupt issue with a GPU"),
    12: (NOT_CHECKED, "NVML shared library could not be found or loaded"),
    13: (NOT_CHECKED, "local version of NVML does not implement this function"),
    14: (FAULTY, "infoROM is corrupted"),
    15: (FAULTY, "the GPU has fallen off the bus or has otherwise become inaccessible"),
    255: (NOT_CHECKED, "other error or internal driver error"),
}

_UNSUPPORTED = ("[n/a]", "n/a", "[not supported]", "not supported")
_NUMBER_RE = re.compile(r"(\d{1,12})(?:\s*[A-Za-z]+)?\Z")
_UUID_RE = re.compile(r"(GPU|MIG)-[0-9A-Za-z/\-]+\Z")
_YES = ("yes", "true", "1")
_NO = ("no", "false", "0")


@dataclass(frozen=True)
class GpuRow:
    """One GPU: its index and UUID, and the three health fields as printed."""

    index: int
    uuid: str
    ecc_uncorrected: str
    retired_pending: str
    remapped_pending: str


@dataclass(frozen=True)
class GpuApp:
    """One compute process: the GPU it is on (by UUID), pid, name (may be empty), memory (MiB)."""

    gpu_uuid: str
    pid: int
    name: str
    used_memory: str


def field_state(value: str, kind: str) -> Tuple[str, Optional[int]]:
    """What one health field says.

    Args:
        value: the field as printed.
        kind: ``count`` (ECC errors: an integer) or ``flag`` (pending: Yes / No).

    Returns:
        ``("unsupported", None)`` for ``[N/A]`` / ``[Not Supported]``; ``("ok", 0)`` /
        ``("bad", n)`` for a count of 0 / n > 0 or a flag No / Yes; ``("unreadable", None)``
        for anything else.
    """
    low = value.strip().lower()
    if low in _UNSUPPORTED:
        return "unsupported", None
    if kind == "flag":
        if low in _YES:
            return "bad", 1
        if low in _NO:
            return "ok", 0
        return "unreadable", None
    match = _NUMBER_RE.match(value.strip())
    if match is None:
        return "unreadable", None
    n = int(match.group(1))
    return ("bad" if n > 0 else "ok"), n


def _rows(text: str) -> List[List[str]]:
    return [[c.strip() for c in line.split(",")] for line in text.replace("\r", "").split("\n") if line.strip()]


def parse_gpu_query(text: str) -> Tuple[GpuRow, ...]:
    """Parse the :data:`GPU_QUERY` CSV (one line per GPU; a header line is skipped).

    Raises:
        ToolOutputError: a line without five fields, or whose index or UUID is not one.
    """
    out: List[GpuRow] = []
    for cells in _rows(text):
        if cells and cells[0].lower() == "index":
            continue
        if len(cells) != 5 or not cells[0].isdigit() or len(cells[0]) > 6 or not _UUID_RE.match(cells[1]):
            raise ToolOutputError(
                f"nvidia-smi --query-gpu printed a line that is not index, uuid and three fields: "
                f"{one_line(', '.join(cells), 80)}"
            )
        out.append(GpuRow(int(cells[0]), cells[1], cells[2], cells[3], cells[4]))
    return tuple(out)


def parse_compute_apps(text: str) -> Tuple[GpuApp, ...]:
    """Parse the :data:`APPS_QUERY` CSV (one line per process; no line: no process).

    A process name holding commas keeps them (the fields around it are fixed).

    Raises:
        ToolOutputError: a line with fewer than four fields, or whose UUID or pid is not one.
    """
    out: List[GpuApp] = []
    for cells in _rows(text):
        if cells and cells[0].lower() == "gpu_uuid":
            continue
        if len(cells) < 4 or not _UUID_RE.match(cells[0]) or not cells[1].isdigit() or len(cells[1]) > 12:
            raise ToolOutputError(
                f"nvidia-smi --query-compute-apps printed a line that is not uuid, pid, name, memory: "
                f"{one_line(', '.join(cells), 80)}"
            )
        out.append(GpuApp(cells[0], int(cells[1]), ", ".join(cells[2:-1]), cells[-1]))
    return tuple(out)
