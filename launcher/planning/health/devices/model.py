"""The values of the device checks (pure): commands to run, their outcomes, per-device verdicts.

A device check runs the tools a host already has (``npu-smi``, ``hccn_tool``, ``nvidia-smi``)
and judges every device the plan puts a rank on.  The running part (a probe on every host) gets
:class:`DeviceCommand` values and returns one :class:`Outcome` per command, keyed by
:attr:`DeviceCommand.key`; everything else happens here.

Verdicts, per check and per device:

* ``ok``: the tool was asked and its answer is healthy;
* ``faulty``: the tool's own words say the device is not usable (``link status: DOWN``, a
  leftover process holding it, uncorrected ECC errors...);
* ``not_checked``: the tool could not answer (not installed, timed out, busy, an answer that
  is not in its published format).  A missing tool is not a fault of the device.

A device is ``faulty`` when any of its checks is, else ``not_checked`` when any is, else ``ok``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import MsLaunchError
from launcher.planning.health.policy import DEFAULT_POLICY, DEVICE_CHECK_POLICIES

__all__ = [
    "ASCEND",
    "CPU",
    "DEVICE_CHECK_POLICIES",
    "DEFAULT_POLICY",
    "FAULTY",
    "GPU",
    "NOT_CHECKED",
    "OK",
    "TARGETS",
    "CheckResult",
    "DeviceCommand",
    "DeviceVerdict",
    "HostDeviceSpec",
    "HostDevices",
    "Outcome",
    "ToolOutputError",
    "combine",
    "id_ranges",
    "one_line",
]

ASCEND, GPU, CPU = "ascend", "gpu", "cpu"
#: The device targets (as ``doctor --device-target`` takes them, lower case).
TARGETS = (ASCEND, GPU, CPU)

OK, FAULTY, NOT_CHECKED = "ok", "faulty", "not_checked"


#: Outcome statuses (what the probe says happened to a command).
EXITED, NOT_FOUND, TIMED_OUT, ERROR, SKIPPED = "exited", "not_found", "timed_out", "error", "skipped"
OUTCOME_STATUSES = (EXITED, NOT_FOUND, TIMED_OUT, ERROR, SKIPPED)


class ToolOutputError(MsLaunchError):
    """A tool's output is not in its published format (the check becomes ``not_checked``)."""


@dataclass(frozen=True)
class DeviceCommand:
    """One command the probe runs on a host.

    Attributes:
        key: unique among the host's commands (``npu-smi info``, ``hccn_tool -i 3 -link -g``);
            the probe answers per key.
        tool: the tool's name (``npu-smi``, ``hccn_tool``, ``nvidia-smi``); also the group: the
            commands of one tool run one after the other, different tools may run at once.
        argv: the arguments after the executable.
        candidates: where the executable may be, in order: absolute paths (used when the file
            exists and is executable) and bare names (looked up on the probe's ``PATH``).
        timeout: seconds the command may take; then it is killed and reported ``timed_out``.
        check: what it checks (``info``, ``link``, ``net_health``, ``ip``, ``tls``, ``gpus``,
            ``apps``).
        device: the device it is about, or None (every device of the host).
    """

    key: str
    tool: str
    argv: Tuple[str, ...]
    candidates: Tuple[str, ...]
    timeout: float
    check: str
    device: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        """What the probe is sent: ``{"key", "tool", "candidates", "argv", "timeout"}``."""
        return {
            "key": self.key,
            "tool": self.tool,
            "candidates": list(self.candidates),
            "argv": list(self.argv),
            "timeout": self.timeout,
        }


@dataclass(frozen=True)
class Outcome:
    """What happened to one command on a host (the probe's answer).

    Attributes:
        status: ``exited`` (it ran to its end), ``not_found`` (no executable among the
            candidates), ``timed_out`` (killed after its time limit), ``error`` (could not be
            started: permission, exec format...), ``skipped`` (not run: an earlier command of
            the same tool timed out, or the host's time for device checks was spent).
        exit_code: with ``exited``: the exit status (negative: killed by that signal).
        stdout, stderr: with ``exited`` (and what came before a timeout): the output, decoded
            as UTF-8 with replacement.
        seconds: how long it ran (``timed_out``: its limit).
        detail: with ``error`` / ``skipped``: why, one line.
    """

    status: str
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    seconds: Optional[float] = None
    detail: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Any) -> "Outcome":
        """An outcome from the probe's JSON; a malformed one becomes ``error`` saying so (never raises)."""
        if not isinstance(obj, Mapping):
            return cls(ERROR, detail=f"the probe's answer is not an object: {one_line(repr(obj))}")
        status = obj.get("status")
        if status not in OUTCOME_STATUSES:
            return cls(ERROR, detail=f"the probe's answer has no known status: {one_line(repr(status))}")
        code = obj.get("exit_code")
        if status == EXITED and (not isinstance(code, int) or isinstance(code, bool)):
            return cls(ERROR, detail=f"the probe's answer has no exit code: {one_line(repr(code))}")
        seconds, stdout, stderr = obj.get("seconds"), obj.get("stdout"), obj.get("stderr")
        return cls(
            status=status,
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            stdout=stdout if isinstance(stdout, str) else "",
            stderr=stderr if isinstance(stderr, str) else "",
            seconds=float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None,
            detail=obj.get("detail") if isinstance(obj.get("detail"), str) else None,
        )


@dataclass(frozen=True)
class CheckResult:
    """One check of one device (or of the host): its verdict and the tool's words.

    Attributes:
        check: ``health``, ``process``, ``link``, ``net_health``, ``ip``, ``tls``, ``ecc``,
            ``retired_pages``, ``remapped_rows``, ``listed``, ``count``.
        status: ``ok`` / ``faulty`` / ``not_checked``.
        evidence: the tool's own words (``link status: DOWN``), or why it was not checked.
        command: the command it came from (its key), or None.
        value: a value other checks compare across hosts (the TLS switch), or None.
    """

    check: str
    status: str
    evidence: str
    command: Optional[str] = None
    value: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "check": self.check,
            "verdict": self.status,
            "evidence": self.evidence,
            "command": self.command,
        }
        if self.value is not None:
            out["value"] = self.value
        return out


def combine(statuses: Iterable[str]) -> str:
    """``faulty`` if any is, else ``not_checked`` if any is, else ``ok`` (``ok`` for none)."""
    seen = set(statuses)
    if FAULTY in seen:
        return FAULTY
    if NOT_CHECKED in seen:
        return NOT_CHECKED
    return OK


@dataclass(frozen=True)
class DeviceVerdict:
    """One planned device's verdict and its checks, in the order they were made."""

    device: int
    checks: Tuple[CheckResult, ...]

    @property
    def status(self) -> str:
        return combine(c.status for c in self.checks) if self.checks else NOT_CHECKED

    def to_json(self) -> Dict[str, Any]:
        return {"device": self.device, "verdict": self.status, "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class HostDeviceSpec:
    """What to check on one host.

    Attributes:
        host: the host's name as in the inventory.
        devices: the device ids the plan puts a rank on (a spare: the ids it offers), sorted,
            each once.
        ranks: how many ranks the plan puts on the host (a spare: its slots).
        device_ips: device id -> the device IP the job uses there (rank table, hccn.conf), for
            the devices that have one.
    """

    host: str
    devices: Tuple[int, ...]
    ranks: int
    device_ips: Tuple[Tuple[int, str], ...] = ()

    def ip_of(self, device: int) -> Optional[str]:
        return dict(self.device_ips).get(device)


@dataclass(frozen=True)
class HostDevices:
    """One host's device verdicts: per planned device, plus the host-wide checks (the GPU count).

    Attributes:
        host: the host's name.
        target: ``ascend`` / ``gpu`` / ``cpu``.
        devices: one verdict per planned device, in device order.
        host_checks: checks about the host as a whole.
        note: what was not checked and why (``cpu``: no device tools; the NICs left out), or None.
    """

    host: str
    target: str
    devices: Tuple[DeviceVerdict, ...] = ()
    host_checks: Tuple[CheckResult, ...] = field(default=())
    note: Optional[str] = None

    @property
    def status(self) -> str:
        """``faulty`` / ``not_checked`` / ``ok`` over every device and host check."""
        if self.target == CPU:
            return OK
        statuses = [d.status for d in self.devices] + [c.status for c in self.host_checks]
        return combine(statuses) if statuses else NOT_CHECKED

    def failed(self, policy: str = DEFAULT_POLICY) -> bool:
        """Whether the host fails its device checks under ``policy`` (see :data:`DEVICE_CHECK_POLICIES`)."""
        if policy == "off":
            return False
        status = self.status
        return status == FAULTY or (policy == "require" and status == NOT_CHECKED)

    def reason(self) -> str:
        """One line: ``devices ok: NPU 0-7``, ``NPU 3: link status: DOWN (hccn_tool -link -g);
        ...``, ``devices not checked: NPU 0-7: npu-smi not found on h3 (...)``."""
        name = _DEVICE_WORD.get(self.target, "device")
        if self.target == CPU:
            return "devices not checked: device target cpu"
        status = self.status
        if status == OK:
            ok = f"devices ok: {name} {id_ranges(d.device for d in self.devices)}"
            return f"{ok}; {self.note}" if self.note else ok
        wanted = FAULTY if status == FAULTY else NOT_CHECKED
        parts: List[str] = [_evidence(c) for c in self.host_checks if c.status == wanted]
        for group, ids in _grouped(self.devices, wanted):
            parts.append(f"{name} {id_ranges(ids)}: {group}")
        if not parts and self.note:
            parts.append(self.note)
        head = "" if status == FAULTY else "devices not checked: "
        parts = _dedup(parts)
        if len(parts) > MAX_FINDINGS:
            parts = parts[:MAX_FINDINGS] + [f"and {len(parts) - MAX_FINDINGS} more finding(s)"]
        return head + "; ".join(parts)

    def to_json(self) -> Dict[str, Any]:
        """``{"target", "verdict", "reason", "devices": [...], "host_checks": [...]}`` (+ ``note``)."""
        out: Dict[str, Any] = {
            "target": self.target,
            "verdict": self.status,
            "reason": self.reason(),
            "devices": [d.to_json() for d in self.devices],
            "host_checks": [c.to_json() for c in self.host_checks],
        }
        if self.note:
            out["note"] = self.note
        return out


_DEVICE_WORD = {ASCEND: "NPU", GPU: "GPU"}


#: At most this many findings in a reason line; the rest are counted (``--json`` has them all).
MAX_FINDINGS = 4


def _words(c: CheckResult, device: Optional[int] = None) -> Tuple[str, Optional[str]]:
    """The check's words and the command to name after them (None when the words already name
    it, or say its tool is not found); the device's ``-i N`` is left out of both (the line
    names the device), so devices with the same finding share one part."""
    text, command = c.evidence, c.command
    if command and (command in text or text.startswith(f"{command.split()[0]} not found")):
        command = None
    if device is not None:
        text = text.replace(f"-i {device} ", "")
        command = command.replace(f"-i {device} ", "") if command else None
    return text, command


def _evidence(c: CheckResult, device: Optional[int] = None) -> str:
    """``link status: DOWN (hccn_tool -link -g)``: the words and the command they came from."""
    return _joined([_words(c, device)])


def _joined(items: Sequence[Tuple[str, Optional[str]]]) -> str:
    """Words joined by ``; ``, each command named once after the last words that came from it:
    ``uncorrected ECC errors (volatile): 2; retired pages pending: Yes (nvidia-smi --query-gpu)``."""
    out: List[str] = []
    items = list(dict.fromkeys(items))
    for k, (text, command) in enumerate(items):
        last = k + 1 == len(items) or items[k + 1][1] != command
        out.append(f"{text} ({command})" if command and last else text)
    return "; ".join(out)


def _grouped(devices: Sequence[DeviceVerdict], wanted: str) -> List[Tuple[str, List[int]]]:
    """The devices whose verdict is ``wanted``, grouped by identical evidence (one part per kind
    of finding, naming the devices that have it), in order of first appearance."""
    groups: Dict[str, List[int]] = {}
    for d in devices:
        if d.status != wanted:
            continue
        text = _joined([_words(c, d.device) for c in d.checks if c.status == wanted])
        groups.setdefault(text, []).append(d.device)
    return [(text, ids) for text, ids in groups.items()]


def _dedup(items: Iterable[str]) -> List[str]:
    seen: Dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


def id_ranges(ids: Iterable[int]) -> str:
    """``0-3,6`` for 0, 1, 2, 3, 6 (sorted, each once); ``none`` for no ids."""
    values = sorted(set(ids))
    if not values:
        return "none"
    parts: List[str] = []
    start = prev = values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def one_line(text: str, limit: int = 120) -> str:
    """One line of at most about ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
