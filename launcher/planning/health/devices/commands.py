"""Where the device tools are, how long each may take, and what a command's outcome says before
its output is read (pure).

The tools are where installs put them (container images mount them at the same paths):
``npu-smi`` in ``/usr/local/bin``, ``hccn_tool`` in ``/usr/local/Ascend/driver/tools/`` (usually
not on ``PATH``), ``nvidia-smi`` on ``PATH``.  Each :class:`DeviceCommand` lists its candidates:
the install path first, then the bare name looked up on the probe's ``PATH``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from launcher.planning.health.devices.model import (
    ERROR,
    EXITED,
    NOT_FOUND,
    SKIPPED,
    TIMED_OUT,
    DeviceCommand,
    Outcome,
    one_line,
)

__all__ = [
    "HCCN_TOOL",
    "NPU_SMI",
    "NVIDIA_SMI",
    "OUTPUT_LIMIT",
    "ToolSetup",
    "first_line",
    "host_time_limit",
    "not_run_reason",
]

#: Bytes of each of a command's streams the probe returns (the rest is dropped; npu-smi info
#: of a 16-device host prints about 9 KB).
OUTPUT_LIMIT = 1 << 16

NPU_SMI = ("/usr/local/bin/npu-smi", "npu-smi")
HCCN_TOOL = ("/usr/local/Ascend/driver/tools/hccn_tool", "hccn_tool")
NVIDIA_SMI = ("nvidia-smi",)


@dataclass(frozen=True)
class ToolSetup:
    """Where the tools are looked for and the time limits of their commands.

    Attributes:
        npu_smi, hccn_tool, nvidia_smi: candidates, in order (absolute paths, then names
            looked up on ``PATH``).
        npu_smi_timeout, hccn_timeout, nvidia_timeout: seconds per command.
        host_limit: seconds all of a host's device commands may take together; the probe
            reports the commands it did not get to as ``skipped``.
    """

    npu_smi: Tuple[str, ...] = NPU_SMI
    hccn_tool: Tuple[str, ...] = HCCN_TOOL
    nvidia_smi: Tuple[str, ...] = NVIDIA_SMI
    npu_smi_timeout: float = 15.0
    hccn_timeout: float = 8.0
    nvidia_timeout: float = 15.0
    host_limit: float = 60.0


def host_time_limit(commands: Sequence[DeviceCommand], setup: ToolSetup = ToolSetup()) -> float:
    """How long the caller waits for a host's answer: the longest tool's commands one after the
    other, at most ``setup.host_limit`` (the probe stops there), 0 for no command."""
    per_tool: dict = {}
    for c in commands:
        per_tool[c.tool] = per_tool.get(c.tool, 0.0) + c.timeout
    return min(max(per_tool.values(), default=0.0), setup.host_limit)


def not_run_reason(command: DeviceCommand, outcome: Optional[Outcome], host: str) -> Optional[str]:
    """Why ``command`` gave no output to read, or None when it ran to its end (``exited``).

    ``npu-smi not found on h3 (looked for /usr/local/bin/npu-smi, npu-smi on PATH)``,
    ``hccn_tool -i 3 -link -g timed out after 8 s on h3``, ...
    """
    if outcome is None:
        return f"{command.key}: no answer from the probe on {host}"
    if outcome.status == EXITED and outcome.exit_code == 127:
        # a wrapper or shell that did not find the tool exits 127 ("command not found")
        return f"{command.tool} not found on {host} ({command.key} exited with 127: {first_line(outcome)})"
    if outcome.status == EXITED:
        return None
    if outcome.status == NOT_FOUND:
        return f"{command.tool} not found on {host} (looked for {_candidates(command.candidates)})"
    if outcome.status == TIMED_OUT:
        limit = outcome.seconds if outcome.seconds is not None else command.timeout
        return f"{command.key} timed out after {limit:g} s on {host}"
    if outcome.status == SKIPPED:
        return f"{command.key} not run on {host}: {one_line(outcome.detail or 'skipped', 100)}"
    if outcome.status == ERROR:
        return f"{command.key} could not run on {host}: {one_line(outcome.detail or 'unknown error', 100)}"
    return f"{command.key}: the probe on {host} reported an unknown outcome {one_line(repr(outcome.status), 40)}"


def first_line(outcome: Outcome) -> str:
    """The first line the command printed (stderr first), or ``(no output)``."""
    for text in (outcome.stderr, outcome.stdout):
        for line in text.replace("\r", "").split("\n"):
            if line.strip():
                return one_line(line, 100)
    return "(no output)"


def _candidates(candidates: Sequence[str]) -> str:
    return ", ".join(c if c.startswith("/") else f"{c} on PATH" for c in candidates)
