"""The device checks of ``doctor --health`` and ``run --preflight`` (pure): what to run on each
host, the verdicts from what it printed, and how they join the host's health verdict.

The running part (a probe on every host, in parallel) does, per host::

    order = probe_order(target, spec)            # {"op": "devices", "commands": [...], "limit", "output_limit"}
    ... runs each command (see DeviceCommand, Outcome) ...
    outcomes = outcomes_from_json(answer)        # {"outcomes": [{"key", "status", ...}, ...]}

then, over every host at once, ``judge_hosts(target, specs, answers, failures)`` and, per host,
``with_devices(health_verdict, report, policy)``.

What the probe does with an order (standard library only):

* per command, the executable is the first candidate that is an absolute path to an executable
  file, else the first bare name found on the probe's ``PATH`` (``shutil.which``); none:
  ``{"key", "status": "not_found"}``;
* the commands of one ``tool`` run one after the other, in order (hccn_tool refuses a second
  caller); different tools may run at once; each with stdin from ``/dev/null``, in its own
  session, killed (its process group, SIGKILL) after its ``timeout``:
  ``{"key", "status": "timed_out", "seconds": timeout}``; after a timeout the tool's remaining
  commands are not run: ``{"key", "status": "skipped", "detail": "<key> timed out before it"}``;
* a command that ran: ``{"key", "status": "exited", "exit_code", "stdout", "stderr", "seconds"}``
  (UTF-8 with replacement, each stream cut to ``output_limit`` bytes; a negative exit code: the
  signal that ended it); one that could not start: ``{"key", "status": "error", "detail"}``;
* past ``limit`` seconds from the order, commands not yet started are ``skipped`` (detail
  ``the host's <limit> s for device checks were spent``) and the answer is sent:
  ``{"outcomes": [...]}``, one entry per command, in order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import PlanError
from launcher.planning.health.devices.ascend import ascend_commands, judge_ascend, tls_across_hosts
from launcher.planning.health.devices.commands import OUTPUT_LIMIT, ToolSetup, host_time_limit
from launcher.planning.health.devices.gpu import gpu_commands, judge_gpu
from launcher.planning.health.devices.model import (
    ASCEND,
    CPU,
    DEFAULT_POLICY,
    FAULTY,
    NOT_CHECKED,
    TARGETS,
    CheckResult,
    DeviceCommand,
    DeviceVerdict,
    HostDevices,
    HostDeviceSpec,
    Outcome,
    one_line,
)
from launcher.planning.health.policy import check_policy
from launcher.planning.health.rounds import Verdict

__all__ = [
    "check_policy",
    "device_commands",
    "devices_summary",
    "judge_host",
    "judge_hosts",
    "outcomes_from_json",
    "probe_order",
    "with_devices",
]


def _target(target: str) -> str:
    if target not in TARGETS:
        raise PlanError(f"unknown device target {target!r}; use one of {', '.join(TARGETS)}", field="--device-target")
    return target


def device_commands(
    target: str, spec: HostDeviceSpec, setup: ToolSetup = ToolSetup(), roce: bool = True
) -> Tuple[DeviceCommand, ...]:
    """The commands to run on ``spec.host`` (none for ``cpu`` or a host without planned devices).

    Args:
        target: ``ascend`` / ``gpu`` / ``cpu``.
        spec: the host and its planned devices.
        setup: tool locations and time limits.
        roce: Ascend: check the devices' NICs (``hccn_tool``); False leaves them out.

    Raises:
        PlanError: an unknown target.
    """
    if _target(target) == CPU or not spec.devices:
        return ()
    if target == ASCEND:
        return ascend_commands(spec, setup, roce)
    return gpu_commands(spec, setup)


def probe_order(target: str, spec: HostDeviceSpec, setup: ToolSetup = ToolSetup(), roce: bool = True) -> Dict[str, Any]:
    """The order sent to the host's probe: ``{"op": "devices", "commands": [...], "limit": s,
    "output_limit": bytes}`` (``limit``: seconds for all of them, see
    :func:`~launcher.planning.health.devices.commands.host_time_limit`; ``output_limit``: bytes kept of
    each stream, :data:`~launcher.planning.health.devices.commands.OUTPUT_LIMIT`)."""
    commands = device_commands(target, spec, setup, roce)
    return {
        "op": "devices",
        "commands": [c.to_json() for c in commands],
        "limit": host_time_limit(commands, setup),
        "output_limit": OUTPUT_LIMIT,
    }


def outcomes_from_json(answer: Any) -> Dict[str, Outcome]:
    """Command key -> outcome from a probe's answer ``{"outcomes": [{"key", "status", ...}]}``.

    Entries without a string ``key`` are dropped (their commands then read "no answer");
    malformed entries become ``error`` outcomes.  Never raises.
    """
    items = answer.get("outcomes") if isinstance(answer, Mapping) else answer
    out: Dict[str, Outcome] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out[item["key"]] = Outcome.from_json(item)
    return out


def judge_host(
    target: str,
    spec: HostDeviceSpec,
    outcomes: Mapping[str, Outcome],
    setup: ToolSetup = ToolSetup(),
    roce: bool = True,
) -> HostDevices:
    """One host's device verdicts from its commands' outcomes (TLS across hosts: :func:`judge_hosts`).

    Raises:
        PlanError: an unknown target.
    """
    if _target(target) == CPU:
        return HostDevices(spec.host, CPU, note="device target cpu: no device tools to run")
    if not spec.devices:
        return HostDevices(spec.host, target, note="no device planned on this host")
    if target == ASCEND:
        return judge_ascend(spec, outcomes, setup, roce)
    return judge_gpu(spec, outcomes, setup)


def judge_hosts(
    target: str,
    specs: Sequence[HostDeviceSpec],
    answers: Mapping[str, Mapping[str, Outcome]],
    failures: Optional[Mapping[str, str]] = None,
    setup: ToolSetup = ToolSetup(),
    roce: bool = True,
) -> List[HostDevices]:
    """Every host's device verdicts, in ``specs`` order, the TLS switch compared across them.

    Args:
        target: ``ascend`` / ``gpu`` / ``cpu``.
        specs: every host checked and its planned devices.
        answers: host -> its outcomes (:func:`outcomes_from_json`).
        failures: host -> why it did not answer at all (ssh, probe start); its devices are
            ``not_checked`` with that reason.
        setup, roce: as given to :func:`device_commands`.

    Raises:
        PlanError: an unknown target.
    """
    failed = failures or {}
    reports: List[HostDevices] = []
    for spec in specs:
        if spec.host in failed and _target(target) != CPU:
            why = f"{spec.host} did not answer: {one_line(failed[spec.host], 100)}"
            devices = tuple(DeviceVerdict(n, (CheckResult("answer", NOT_CHECKED, why),)) for n in spec.devices)
            reports.append(HostDevices(spec.host, target, devices, (), None if devices else why))
            continue
        reports.append(judge_host(target, spec, answers.get(spec.host, {}), setup, roce))
    return tls_across_hosts(reports)


def with_devices(verdict: Verdict, devices: Optional[HostDevices], policy: str = DEFAULT_POLICY) -> Verdict:
    """The host's health verdict with its device verdicts joined in.

    * a host failing its device checks (:meth:`HostDevices.failed`) is ``faulty``, the device
      finding first: ``faulty: NPU 3: link status: DOWN (hccn_tool -i 3 -link -g); compute 7.50 GFLOPS, ...``;
    * otherwise the status stays and the device finding follows:
      ``ok: compute 7.50 GFLOPS, network 240.6 MB/s; devices ok: NPU 0-7``;
    * a host already faulty (it did not answer) keeps its reason; a faulty device finding
      follows it.

    ``policy`` ``off`` (or no ``devices``) returns ``verdict`` unchanged.
    """
    if devices is None or policy == "off":
        return verdict
    finding = devices.reason()
    if verdict.status == FAULTY:
        reason = verdict.reason + (f"; {finding}" if devices.status == FAULTY else "")
        return replace(verdict, reason=reason, devices=devices)
    if devices.failed(policy):
        rest = verdict.reason[len("ok: ") :] if verdict.reason.startswith("ok: ") else verdict.reason
        return replace(verdict, status=FAULTY, reason=f"faulty: {finding}; {rest}", devices=devices)
    return replace(verdict, reason=f"{verdict.reason}; {finding}", devices=devices)


def devices_summary(
    target: Optional[str], policy: str = DEFAULT_POLICY, source: Optional[str] = None, note: Optional[str] = None
) -> Dict[str, Any]:
    """``doctor --health --json``'s ``"devices"``: ``{"target", "source", "checks", "note"}``
    (``target`` None: not checked, ``note`` says why; see
    :meth:`launcher.planning.health.devices.target.TargetChoice.note`)."""
    return {"target": target, "source": source, "checks": policy, "note": note}
