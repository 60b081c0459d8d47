"""``npu-smi info``: the Ascend device table and its process table (pure parser).

The output is a ``|``-separated table framed by ``+---+`` borders (a ``[WARNING]...`` line may
come first).  Column sets differ by chip and driver, so cells are found by their header, never
by position::

    +------------------------------------------------------------------------------------------------+
    | npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
    +---------------------------+---------------+----------------------------------------------------+
    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    +===========================+===============+====================================================+
    | 0     910B3               | OK            | 93.1        38                0    / 0             |
    | 0                         | 0000:C1:00.0  | 0           0    / 0          3378 / 65536         |
    +===========================+===============+====================================================+
    +---------------------------+---------------+----------------------------------------------------+
    | NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
    +===========================+===============+====================================================+
    | 0       0                 | 30496         | python3                  | 61440                   |
    +===========================+===============+====================================================+
    | No running processes found in NPU 1                                                            |
    +===========================+===============+====================================================+

* The device header is the row with a ``Health`` cell plus the rows under it up to the next
  border (one or two; 910_93 names the second ``Chip  Phy-ID``, 310P ``Chip  Device``, newer
  drivers leave its first cell empty and give the name its own ``Name`` cell after ``NPU ID``).
  Each device has as many rows as the header: the first starts with the NPU id (and the chip's
  name), the ``Health`` cell is the device's health; the second starts with the chip index
  (and, where the header says ``Phy-ID`` / ``Device``, the chip's physical id).
* A device's id (``DEVICE_ID``) is the NPU id, or the chip's Phy-ID where the layout shows one
  (910_93: two chips per NPU, one device each).
* The process table's header has a ``Process id`` cell; a row starts with the NPU id (and the
  chip), then the pid, the process name (empty inside containers), the memory, and on newer
  drivers the pid in the container.  A free NPU has a ``No running processes found in NPU N``
  row (newer drivers: a row of ``NA``).  Every NPU of the device table must be in the process
  table (a process row or a free row), else the output was cut short at a row's end.

An output without both tables, or whose last line is not a whole border, is refused
(:class:`ToolOutputError`): a truncated answer is never taken for a healthy one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Sequence, Tuple

from launcher.planning.health.devices.model import ToolOutputError, one_line

__all__ = ["NpuDevice", "NpuProcess", "NpuSmiInfo", "parse_npu_smi_info"]

_BORDER_RE = re.compile(r"\+[-=+]*\+\Z")
_FREE_RE = re.compile(r"no running processes? found in npu\s+(\d+)", re.IGNORECASE)
_INT_RE = re.compile(r"\d{1,9}\Z")
_MAX_HEADER_ROWS = 4


@dataclass(frozen=True)
class NpuDevice:
    """One device row group of the table.

    Attributes:
        device: the device id (the NPU id, or the chip's Phy-ID where shown).
        npu: the NPU id.
        chip: the chip index (None when the layout has no chip row).
        name: the chip's name (``910B3``), or ``""``.
        health: the Health cell (``OK``, ``Warning``, ...).
    """

    device: int
    npu: int
    chip: Optional[int]
    name: str
    health: str


@dataclass(frozen=True)
class NpuProcess:
    """One process row: a process holding memory on a device."""

    npu: int
    chip: Optional[int]
    pid: int
    name: str
    memory_mb: str


@dataclass(frozen=True)
class NpuSmiInfo:
    """The parsed table.

    Attributes:
        devices: every device listed, in order.
        processes: every process row, in order.
        free_npus: NPU ids with a ``No running processes found`` row.
    """

    devices: Tuple[NpuDevice, ...]
    processes: Tuple[NpuProcess, ...]
    free_npus: FrozenSet[int]

    def device(self, device_id: int) -> Optional[NpuDevice]:
        return next((d for d in self.devices if d.device == device_id), None)

    def processes_on(self, device: NpuDevice) -> List[NpuProcess]:
        """The process rows of ``device`` (its NPU, and its chip where both rows name one)."""
        return [
            p
            for p in self.processes
            if p.npu == device.npu and (p.chip is None or device.chip is None or p.chip == device.chip)
        ]


def _cells(line: str) -> Optional[List[str]]:
    """The cells of a ``| a | b |`` row, stripped; None for anything else."""
    if len(line) < 2 or not (line.startswith("|") and line.endswith("|")):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info``'s output (see the module doc).

    Args:
        text: the command's standard output.

    Returns:
        The devices and processes listed.

    Raises:
        ToolOutputError: no device table, no process table, the output ends before the
            table's last border, an NPU the process table does not mention, or a device row
            that is not in the layout its header gives.
    """
    lines = [ln.strip() for ln in text.replace("\r", "").split("\n")]
    lines = [ln for ln in lines if ln]
    head = next((i for i, ln in enumerate(lines) if _health_index(_cells(ln)) is not None), None)
    if head is None:
        raise ToolOutputError(f"npu-smi info printed no device table (no Health column): {_first(lines)}")
    proc = next((i for i in range(head + 1, len(lines)) if _process_header(_cells(lines[i]))), None)
    if proc is None:
        raise ToolOutputError("npu-smi info printed no process table (its output ends early)")
    _check_complete(lines, proc)
    header_rows: List[List[str]] = []
    i = head
    while i < proc and _cells(lines[i]) is not None and len(header_rows) < _MAX_HEADER_ROWS:
        header_rows.append(_cells(lines[i]) or [])
        i += 1
    health_at = _health_index(header_rows[0])
    assert health_at is not None
    chip_head = header_rows[1][0].lower() if len(header_rows) > 1 else ""
    phy = "phy" in chip_head or "device" in chip_head
    devices = _device_rows(lines[i:proc], len(header_rows), health_at, phy, bool(chip_head))
    processes, free = _process_rows(lines[proc:], _cells(lines[proc]) or [])
    mentioned = set(free) | {p.npu for p in processes}
    missing = sorted({d.npu for d in devices} - mentioned)
    if missing:
        raise ToolOutputError(
            f"npu-smi info's process table does not mention NPU {', '.join(map(str, missing))} "
            "(a free NPU has a 'No running processes found' row): its output ends early"
        )
    return NpuSmiInfo(tuple(devices), tuple(processes), frozenset(free))


def _health_index(cells: Optional[List[str]]) -> Optional[int]:
    if not cells:
        return None
    return next((k for k, c in enumerate(cells) if c.split()[:1] == ["Health"]), None)


def _process_header(cells: Optional[List[str]]) -> bool:
    return bool(cells) and any(c.lower().startswith("process id") for c in cells or [])


def _check_complete(lines: Sequence[str], proc: int) -> None:
    """The output must end with a border as wide as the process table's own."""
    above = next((lines[k] for k in range(proc - 1, -1, -1) if _BORDER_RE.match(lines[k])), None)
    last = lines[-1]
    if not _BORDER_RE.match(last) or (above is not None and len(last) < len(above)):
        raise ToolOutputError(f"npu-smi info's output ends early, inside its process table: {one_line(last, 60)}")


def _ints(cell: str) -> Optional[List[int]]:
    """The cell's whitespace-separated integers, or None when a token is not one."""
    tokens = cell.split()
    if not tokens or not all(_INT_RE.match(t) for t in tokens):
        return None
    return [int(t) for t in tokens]


def _device_rows(lines: Sequence[str], per_device: int, health_at: int, phy: bool, chips: bool) -> List[NpuDevice]:
    """The device groups between the header and the process table, section by section."""
    out: List[NpuDevice] = []
    section: List[List[str]] = []
    for line in [*lines, "+"]:
        cells = _cells(line)
        if cells is not None:
            section.append(cells)
            continue
        if not _BORDER_RE.match(line) and line != "+":
            raise ToolOutputError(f"npu-smi info: a line in its device table is not a row: {one_line(line, 80)}")
        if len(section) % per_device:
            raise ToolOutputError(
                f"npu-smi info: a device has {len(section) % per_device} row(s), its header {per_device}: "
                f"{one_line(' | '.join(section[-1]), 80)}"
            )
        for k in range(0, len(section), per_device):
            out.append(_device(section[k : k + per_device], health_at, phy, chips))
        section = []
    return out


def _device(rows: Sequence[List[str]], health_at: int, phy: bool, chips: bool) -> NpuDevice:
    first = rows[0]
    tokens = first[0].split()
    if not tokens or not _INT_RE.match(tokens[0]) or len(first) <= health_at or not first[health_at]:
        raise ToolOutputError(
            f"npu-smi info: a device row is not in its header's layout: {one_line(' | '.join(first), 80)}"
        )
    npu = int(tokens[0])
    name = " ".join(tokens[1:]) or (first[1] if health_at > 1 else "")
    chip: Optional[int] = None
    device = npu
    if len(rows) > 1 and (chips or rows[1][0]):
        ids = _ints(rows[1][0])
        if ids is None:
            raise ToolOutputError(
                f"npu-smi info: the chip row of NPU {npu} has no chip index: {one_line(' | '.join(rows[1]), 80)}"
            )
        chip = ids[0]
        if phy and len(ids) > 1:
            device = ids[1]
    return NpuDevice(device=device, npu=npu, chip=chip, name=name, health=first[health_at].split()[0])


def _process_rows(lines: Sequence[str], header: List[str]) -> Tuple[List[NpuProcess], List[int]]:
    lower = [c.lower() for c in header]
    pid_at = next(k for k, c in enumerate(lower) if c.startswith("process id"))
    name_at = next((k for k, c in enumerate(lower) if c.startswith("process name")), None)
    mem_at = next((k for k, c in enumerate(lower) if c.startswith("process memory")), None)
    processes: List[NpuProcess] = []
    free: List[int] = []
    for line in lines[1:]:
        cells = _cells(line)
        if cells is None:
            continue
        joined = " ".join(cells)
        match = _FREE_RE.search(joined)
        if match:
            free.append(int(match.group(1)))
            continue
        ids = _ints(cells[0])
        if ids is not None and len(cells) > pid_at and cells[pid_at].upper() == "NA":
            free.append(ids[0])  # newer layouts: a free NPU's row reads NA in every column
            continue
        if ids is None or len(cells) <= pid_at or not _INT_RE.match(cells[pid_at]):
            raise ToolOutputError(f"npu-smi info: a process row is not in its header's layout: {one_line(joined, 80)}")
        processes.append(
            NpuProcess(
                npu=ids[0],
                chip=ids[1] if len(ids) > 1 else None,
                pid=int(cells[pid_at]),
                name=cells[name_at] if name_at is not None and name_at < len(cells) else "",
                memory_mb=cells[mem_at] if mem_at is not None and mem_at < len(cells) else "",
            )
        )
    return processes, free


def _first(lines: Sequence[str]) -> str:
    return one_line(lines[0], 80) if lines else "(nothing)"
