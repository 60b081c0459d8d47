"""Which devices a job uses (pure): its device target, and the device ids the plan puts on each host.

The target comes, first match wins, from ``doctor --device-target``, the program's own
``--device-target X`` / ``--device_target X`` / ``--device-target=X`` (the last one before a
``--``, as argparse reads it), then ``DEVICE_TARGET`` in the job's environment.  MindSpore's
names are accepted in any case (``Ascend``, ``GPU``, ``CPU``; ``Davinci`` is its old name of
``Ascend``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from launcher.errors import PlanError
from launcher.planning.health.devices.model import ASCEND, CPU, GPU, TARGETS, HostDeviceSpec
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.job.spec import Plan

__all__ = [
    "TargetChoice",
    "device_target",
    "inventory_devices",
    "normalize_target",
    "planned_devices",
    "rank_table_device_ips",
]

_FLAGS = ("--device-target", "--device_target")
_NAMES = {"ascend": ASCEND, "davinci": ASCEND, "npu": ASCEND, "gpu": GPU, "cuda": GPU, "cpu": CPU}


@dataclass(frozen=True)
class TargetChoice:
    """The device target and where it came from.

    Attributes:
        target: ``ascend`` / ``gpu`` / ``cpu``, or None (none given, or one not known).
        source: ``--device-target`` (doctor's flag), ``program`` (the program's argument),
            ``DEVICE_TARGET``, or ``none``.
        given: the value as written, or None.
    """

    target: Optional[str]
    source: str
    given: Optional[str] = None

    def note(self) -> Optional[str]:
        """Why devices are not checked, or None when a target is known."""
        if self.target is not None:
            return None
        if self.given is None:
            return (
                "devices not checked: no device target (the program's --device-target, DEVICE_TARGET, "
                "or doctor --device-target ascend|gpu|cpu)"
            )
        return f"devices not checked: unknown device target {self.given!r} ({self.source}); known: Ascend, GPU, CPU"


def normalize_target(value: str) -> Optional[str]:
    """``ascend`` / ``gpu`` / ``cpu`` for a device name in any case, or None for another."""
    return _NAMES.get(value.strip().lower())


def device_target(program: Sequence[str], env: Mapping[str, str], flag: Optional[str] = None) -> TargetChoice:
    """The job's device target.

    Args:
        program: the program's arguments (script and its args, or module and its args).
        env: the job's environment as the ranks get it (``DEVICE_TARGET``).
        flag: ``doctor --device-target``'s value, or None.

    Returns:
        The choice; its ``target`` is None when nothing names a device or the program names
        one that is not known (the program is not refused for it).

    Raises:
        PlanError: ``flag`` is not one of ascend / gpu / cpu.
    """
    if flag is not None:
        target = normalize_target(flag)
        if target is None or flag.strip().lower() not in TARGETS:
            raise PlanError(f"unknown device target {flag!r}; use one of {', '.join(TARGETS)}", field="--device-target")
        return TargetChoice(target, "--device-target", flag)
    given: Optional[str] = None
    for i, arg in enumerate(program):
        if arg == "--":
            break
        if arg in _FLAGS and i + 1 < len(program):
            given = program[i + 1]
        for name in _FLAGS:
            if arg.startswith(name + "="):
                given = arg[len(name) + 1 :]
    if given is not None:
        return TargetChoice(normalize_target(given), "program", given)
    value = env.get("DEVICE_TARGET")
    if value:
        return TargetChoice(normalize_target(value), "DEVICE_TARGET", value)
    return TargetChoice(None, "none")


def planned_devices(
    plan: Plan, inventory: Optional[Inventory] = None, device_ips: Optional[Mapping[str, Mapping[int, str]]] = None
) -> List[HostDeviceSpec]:
    """What to check on every host: the devices the plan's ranks use, and on the hosts of
    ``inventory`` the plan gives no rank (spares, candidates of ``--preflight exclude``) the
    devices they offer.

    Args:
        plan: the built plan (its ranks' ``host`` and ``device_id``).
        inventory: every host that may run ranks (spares too), or None: the plan's hosts.
        device_ips: host name -> device id -> the device IP the job uses (the resolved
            hccn.conf / YAML IPs, or :func:`rank_table_device_ips`), or None.

    Returns:
        One spec per host, in inventory order (plan order without one).
    """
    used: Dict[str, List[int]] = {}
    for p in plan.ranks:
        if p.device_id is not None:
            used.setdefault(p.host, []).append(p.device_id)
        else:
            used.setdefault(p.host, [])
    hosts: Sequence[Host] = inventory.hosts if inventory is not None else plan.hosts
    ips = device_ips or {}
    out: List[HostDeviceSpec] = []
    for h in hosts:
        if h.name in used:
            ids, ranks = used[h.name], len(used[h.name])
        else:
            ids, ranks = list(h.device_ids), h.slots
        out.append(_spec(h.name, ids, ranks, ips.get(h.name, {})))
    return out


def inventory_devices(
    inventory: Inventory, device_ips: Optional[Mapping[str, Mapping[int, str]]] = None
) -> List[HostDeviceSpec]:
    """What ``doctor --health`` checks without a job: every host's devices (its slots)."""
    ips = device_ips or {}
    return [_spec(h.name, list(h.device_ids), h.slots, ips.get(h.name, {})) for h in inventory.hosts]


def _spec(host: str, ids: Sequence[int], ranks: int, ips: Mapping[int, str]) -> HostDeviceSpec:
    devices = tuple(sorted(set(ids)))
    return HostDeviceSpec(host, devices, ranks, tuple((d, ips[d]) for d in devices if d in ips))


def rank_table_device_ips(table: Any, hosts: Sequence[Host]) -> Dict[str, Dict[int, str]]:
    """Host name -> device id -> ``device_ip`` from a (validated) rank table, 1.0 or 1.2.

    A server is matched to the host whose name, address, ``server_id`` or ``host_ip`` is the
    server's ``server_id`` (1.2: or ``host_ip``); servers matching no host are left out.
    """
    out: Dict[str, Dict[int, str]] = {}
    servers = table.get("server_list") if isinstance(table, dict) else None
    for server in servers if isinstance(servers, list) else []:
        if not isinstance(server, dict):
            continue
        keys = {server.get("server_id"), server.get("host_ip")} - {None}
        host = next((h for h in hosts if keys & {h.name, h.reach_addr, h.rank_table_server_id, h.host_ip}), None)
        if host is None:
            continue
        for dev in server.get("device") or []:
            if (
                isinstance(dev, dict)
                and str(dev.get("device_id", "")).isdigit()
                and isinstance(dev.get("device_ip"), str)
            ):
                out.setdefault(host.name, {})[int(dev["device_id"])] = dev["device_ip"]
    return out
