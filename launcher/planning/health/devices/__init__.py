"""Device checks before a job (pure): NPU and GPU health from the tools the hosts already have.

* :mod:`~launcher.planning.health.devices.model`: commands, outcomes, verdicts, their JSON and reasons;
* :mod:`~launcher.planning.health.devices.npusmi`, :mod:`~launcher.planning.health.devices.hccntool`,
  :mod:`~launcher.planning.health.devices.nvsmi`: parsers of the tools' published formats;
* :mod:`~launcher.planning.health.devices.ascend`, :mod:`~launcher.planning.health.devices.gpu`: the checks
  per device target;
* :mod:`~launcher.planning.health.devices.target`: which target and which device ids a job has;
* :mod:`~launcher.planning.health.devices.checks`: the entry points the health check calls.
"""

from launcher.planning.health.devices.checks import (
    check_policy,
    device_commands,
    devices_summary,
    judge_host,
    judge_hosts,
    outcomes_from_json,
    probe_order,
    with_devices,
)
from launcher.planning.health.devices.commands import ToolSetup, host_time_limit
from launcher.planning.health.devices.model import (
    ASCEND,
    CPU,
    DEFAULT_POLICY,
    DEVICE_CHECK_POLICIES,
    FAULTY,
    GPU,
    NOT_CHECKED,
    OK,
    TARGETS,
    CheckResult,
    DeviceCommand,
    DeviceVerdict,
    HostDevices,
    HostDeviceSpec,
    Outcome,
    ToolOutputError,
)
from launcher.planning.health.devices.target import (
    TargetChoice,
    device_target,
    inventory_devices,
    normalize_target,
    planned_devices,
    rank_table_device_ips,
)

__all__ = [
    "ASCEND",
    "CPU",
    "DEFAULT_POLICY",
    "DEVICE_CHECK_POLICIES",
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
    "TargetChoice",
    "ToolOutputError",
    "ToolSetup",
    "check_policy",
    "device_commands",
    "device_target",
    "devices_summary",
    "host_time_limit",
    "inventory_devices",
    "judge_host",
    "judge_hosts",
    "normalize_target",
    "outcomes_from_json",
    "planned_devices",
    "probe_order",
    "rank_table_device_ips",
    "with_devices",
]
