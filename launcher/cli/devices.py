"""The device checks of ``doctor --health`` and ``run --preflight`` on the command line: which
target, which devices on which host, where the tools are, and the verdicts joined into the
health check's (see docs/health.md, "Device checks"; the pure part is
:mod:`launcher.planning.health.devices`).

The tools are looked for where installs put them (:mod:`launcher.planning.health.devices.commands`).
``MSLAUNCH_DEVICE_TOOLS_DIR`` (read on this machine) puts ``<dir>/npu-smi``,
``<dir>/hccn_tool`` and ``<dir>/nvidia-smi`` first in the candidates on every host: for
installs in another place, and for the tests' fake tools.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Tuple

from launcher.planning.health.devices import (
    CPU,
    DEFAULT_POLICY,
    HostDeviceSpec,
    TargetChoice,
    ToolSetup,
    check_policy,
    device_target,
    devices_summary,
    inventory_devices,
    judge_hosts,
    outcomes_from_json,
    planned_devices,
    probe_order,
    rank_table_device_ips,
    with_devices,
)
from launcher.planning.inventory.model import Inventory
from launcher.planning.job.spec import JobSpec, Plan

__all__ = ["TOOLS_DIR_ENV", "DeviceCheck", "doctor_devices", "job_device_ips", "run_devices", "tool_setup"]

#: A folder whose ``npu-smi``, ``hccn_tool`` and ``nvidia-smi`` are tried first on every host.
TOOLS_DIR_ENV = "MSLAUNCH_DEVICE_TOOLS_DIR"


def tool_setup(environ: Mapping[str, str]) -> ToolSetup:
    """The tool locations: the defaults, after ``$MSLAUNCH_DEVICE_TOOLS_DIR``'s tools when set."""
    folder = environ.get(TOOLS_DIR_ENV)
    setup = ToolSetup()
    if not folder:
        return setup
    return replace(
        setup,
        npu_smi=(posixpath.join(folder, "npu-smi"),) + setup.npu_smi,
        hccn_tool=(posixpath.join(folder, "hccn_tool"),) + setup.hccn_tool,
        nvidia_smi=(posixpath.join(folder, "nvidia-smi"),) + setup.nvidia_smi,
    )


@dataclass(frozen=True)
class DeviceCheck:
    """What the device step of one health check does.

    Attributes:
        choice: the device target and where it came from.
        policy: ``off`` / ``try`` / ``require`` (``--device-checks``).
        specs: every checked host and its planned devices, in inventory order.
        setup: tool locations and time limits.
    """

    choice: TargetChoice
    policy: str = DEFAULT_POLICY
    specs: Tuple[HostDeviceSpec, ...] = ()
    setup: ToolSetup = ToolSetup()

    @property
    def active(self) -> bool:
        """Whether the step runs: a known target and checks not ``off``."""
        return self.choice.target is not None and self.policy != "off"

    def orders(self) -> Optional[Dict[str, Dict[str, Any]]]:
        """Host -> the probe's device order, or None when the step does not run."""
        target = self.choice.target
        if target is None or self.policy == "off":
            return None
        return {s.host: probe_order(target, s, self.setup) for s in self.specs}

    def join(self, result: Any) -> Any:
        """``result`` (a :class:`~launcher.execution.checks.health.HealthResult`) with every
        host's device verdicts joined into its health verdict (unchanged when the step did not run)."""
        target = self.choice.target
        if target is None or self.policy == "off":
            return result
        answers = {h: outcomes_from_json(a) for h, a in result.device_answers.items()}
        failures = dict(result.device_failures)
        checked = {s.host for s in self.specs}
        for v in result.verdicts:  # a host that never answered: its reason
            if v.host in checked and v.host not in answers and v.host not in failures:
                failures[v.host] = v.reason
        reports = judge_hosts(target, self.specs, answers, failures, self.setup)
        report_of = {r.host: r for r in reports}
        verdicts = tuple(with_devices(v, report_of.get(v.host), self.policy) for v in result.verdicts)
        return replace(result, verdicts=verdicts)

    def summary(self) -> Dict[str, Any]:
        """``--json``'s ``"devices"`` (:func:`launcher.planning.health.devices.devices_summary`)."""
        note = self.choice.note()
        if note is None and self.policy == "off":
            note = "devices not checked: --device-checks off"
        return devices_summary(self.choice.target, self.policy, self.choice.source, note)


def job_device_ips(spec: JobSpec, inventory: Inventory) -> Dict[str, Dict[int, str]]:
    """Host -> device id -> the device IP the job uses: the resolved hccn.conf / YAML IPs of
    the ranktable method (``spec.device_ips``), else a given rank table's
    (``--rank_table_file``), else the YAML inventory's ``device_ips:``.

    Raises:
        RankTableError: the rank table cannot be read.
    """
    if spec.device_ips:
        return {h: {int(d): str(ip) for d, ip in dict(ips).items()} for h, ips in spec.device_ips.items()}
    if spec.rank_table_file:
        from launcher.planning.ranktable.parse import read_rank_table

        return rank_table_device_ips(read_rank_table(spec.rank_table_file), inventory.hosts)
    return {h.name: dict(h.device_ips) for h in inventory.hosts if h.device_ips}


def _env(spec: JobSpec) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(dict(spec.env))
    return env


def doctor_devices(spec: JobSpec, flag: Optional[str], checks: str) -> DeviceCheck:
    """``doctor --health``'s device step: ``--device-target`` (else the program's, else
    ``DEVICE_TARGET``), every inventory host's devices (its slots).

    Raises:
        PlanError: an unknown ``--device-target`` or ``--device-checks``.
        RankTableError: the rank table cannot be read.
    """
    policy = check_policy(checks)
    choice = device_target(spec.program, _env(spec), flag)
    if choice.target is None or choice.target == CPU or policy == "off":
        return DeviceCheck(choice, policy)
    inventory = spec.inventory
    return DeviceCheck(
        choice, policy, tuple(inventory_devices(inventory, job_device_ips(spec, inventory))), tool_setup(os.environ)
    )


def run_devices(spec: JobSpec, plan: Plan, checks: str) -> DeviceCheck:
    """``run --preflight``'s device step: the program's device target (or ``DEVICE_TARGET``),
    the devices the plan puts ranks on, and the spares' devices.

    Raises:
        PlanError: an unknown ``--device-checks``.
        RankTableError: the rank table cannot be read.
    """
    policy = check_policy(checks)
    choice = device_target(spec.program, _env(spec))
    if choice.target is None or choice.target == CPU or policy == "off":
        return DeviceCheck(choice, policy)
    inventory = spec.inventory
    return DeviceCheck(
        choice, policy, tuple(planned_devices(plan, inventory, job_device_ips(spec, inventory))), tool_setup(os.environ)
    )
