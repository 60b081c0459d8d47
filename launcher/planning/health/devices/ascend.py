"""Ascend device checks (pure): the commands per planned device, and their verdicts.

For each planned device N (its ``DEVICE_ID``):

* ``npu-smi info``: N is listed and its Health is ``OK``; no process row on it (a leftover
  process is named by pid and name);
* ``hccn_tool -i N -link -g``: ``link status: UP``;
* ``hccn_tool -i N -net_health -g``: ``Success`` or ``Init`` (no detect address configured);
* ``hccn_tool -i N -ip -g``: ``ipaddr`` is the device IP the job uses (a mismatch names both);
  without a planned IP, any address passes and a device without one is faulty;
* ``hccn_tool -i N -tls -g``: the ``tls switch`` value, compared across every host by
  :func:`tls_across_hosts`.

The ``hccn_tool`` checks (the devices' RoCE NICs) run unless ``roce`` is false (for a caller
that knows the job's devices do not talk over their NICs; by default they run: on 910 servers
the two 4-device groups of one server talk over them too).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.planning.health.devices import hccntool
from launcher.planning.health.devices.commands import ToolSetup, first_line, not_run_reason
from launcher.planning.health.devices.model import (
    ASCEND,
    FAULTY,
    NOT_CHECKED,
    OK,
    CheckResult,
    DeviceCommand,
    DeviceVerdict,
    HostDevices,
    HostDeviceSpec,
    Outcome,
    ToolOutputError,
    id_ranges,
)
from launcher.planning.health.devices.npusmi import NpuSmiInfo, parse_npu_smi_info

__all__ = ["HCCN_CHECKS", "ascend_commands", "judge_ascend", "tls_across_hosts"]

#: hccn_tool's checks per device, in the order they run: (check, option).
HCCN_CHECKS = (("link", "-link"), ("net_health", "-net_health"), ("ip", "-ip"), ("tls", "-tls"))


def ascend_commands(
    spec: HostDeviceSpec, setup: ToolSetup = ToolSetup(), roce: bool = True
) -> Tuple[DeviceCommand, ...]:
    """``npu-smi info`` once, then per planned device the four ``hccn_tool`` queries (with ``roce``)."""
    out = [DeviceCommand("npu-smi info", "npu-smi", ("info",), setup.npu_smi, setup.npu_smi_timeout, "info")]
    if roce:
        for n in spec.devices:
            for check, option in HCCN_CHECKS:
                argv = ("-i", str(n), option, "-g")
                out.append(
                    DeviceCommand(
                        f"hccn_tool {' '.join(argv)}", "hccn_tool", argv, setup.hccn_tool, setup.hccn_timeout, check, n
                    )
                )
    return tuple(out)


def judge_ascend(
    spec: HostDeviceSpec, outcomes: Mapping[str, Outcome], setup: ToolSetup = ToolSetup(), roce: bool = True
) -> HostDevices:
    """Every planned device's verdict on one host (TLS provisional: see :func:`tls_across_hosts`).

    Args:
        spec: the host and its planned devices (and their planned IPs).
        outcomes: command key -> outcome, as the probe reported them.
        setup, roce: as given to :func:`ascend_commands`.
    """
    commands = ascend_commands(spec, setup, roce)
    info_cmd = commands[0]
    info, info_why = _npu_smi(info_cmd, outcomes.get(info_cmd.key), spec.host)
    by_key = {c.key: c for c in commands}
    devices: List[DeviceVerdict] = []
    for n in spec.devices:
        checks = _npu_checks(n, info, info_why, info_cmd.key)
        if roce:
            for check, option in HCCN_CHECKS:
                cmd = by_key[f"hccn_tool -i {n} {option} -g"]
                checks.append(_hccn_check(cmd, outcomes.get(cmd.key), spec))
        devices.append(DeviceVerdict(n, tuple(checks)))
    note = None if roce else "device NICs (hccn_tool) not checked"
    return HostDevices(spec.host, ASCEND, tuple(devices), (), note)


def _npu_smi(cmd: DeviceCommand, outcome: Optional[Outcome], host: str) -> Tuple[Optional[NpuSmiInfo], Optional[str]]:
    why = not_run_reason(cmd, outcome, host)
    if why is not None:
        return None, why
    assert outcome is not None
    if outcome.exit_code != 0:
        return None, f"{cmd.key} exited with {outcome.exit_code} on {host}: {first_line(outcome)}"
    try:
        return parse_npu_smi_info(outcome.stdout), None
    except ToolOutputError as exc:
        return None, f"{exc.message} (on {host})"


def _npu_checks(n: int, info: Optional[NpuSmiInfo], why: Optional[str], key: str) -> List[CheckResult]:
    if info is None:
        text = why or "npu-smi info gave no table"
        return [CheckResult("health", NOT_CHECKED, text, key), CheckResult("process", NOT_CHECKED, text, key)]
    dev = info.device(n)
    if dev is None:
        listed = id_ranges(d.device for d in info.devices)
        return [CheckResult("health", FAULTY, f"not listed by npu-smi info (it lists {listed})", key)]
    health = CheckResult("health", OK if dev.health == "OK" else FAULTY, f"Health {dev.health}", key)
    procs = info.processes_on(dev)
    if procs:
        held = ", ".join(f"pid {p.pid} ({p.name or 'no process name'}, {p.memory_mb or '?'} MB)" for p in procs)
        process = CheckResult("process", FAULTY, f"held by {held}", key)
    else:
        process = CheckResult("process", OK, "no running process", key)
    return [health, process]


def _hccn_check(cmd: DeviceCommand, outcome: Optional[Outcome], spec: HostDeviceSpec) -> CheckResult:
    why = not_run_reason(cmd, outcome, spec.host)
    if why is not None:
        return CheckResult(cmd.check, NOT_CHECKED, why, cmd.key)
    assert outcome is not None and cmd.device is not None
    text = outcome.stdout + "\n" + outcome.stderr
    expected = spec.ip_of(cmd.device)
    try:
        status, evidence, value = _read_hccn(cmd.check, text, cmd.key, expected)
    except ToolOutputError as exc:
        failure = hccntool.failure_line(text)
        if failure is not None:
            line, verdict = failure
            if line == hccntool.NO_IP_LINE and expected is not None:
                line = f"{line} (the job uses {expected})"
            return CheckResult(cmd.check, verdict, line, cmd.key)
        if outcome.exit_code != 0:
            return CheckResult(
                cmd.check, NOT_CHECKED, f"{cmd.key} exited with {outcome.exit_code}: {first_line(outcome)}", cmd.key
            )
        return CheckResult(cmd.check, NOT_CHECKED, exc.message, cmd.key)
    if status == OK and outcome.exit_code != 0:
        return CheckResult(
            cmd.check, NOT_CHECKED, f"{cmd.key} exited with {outcome.exit_code}: {first_line(outcome)}", cmd.key
        )
    return CheckResult(cmd.check, status, evidence, cmd.key, value)


def _read_hccn(check: str, text: str, key: str, expected: Optional[str]) -> Tuple[str, str, Optional[str]]:
    """``(verdict, evidence, value)`` of one hccn_tool answer; raises ToolOutputError when unreadable."""
    if check == "link":
        value = hccntool.parse_link(text, key)
        return (OK if value == "UP" else FAULTY), f"link status: {value}", None
    if check == "net_health":
        value = hccntool.parse_net_health(text, key)
        return (OK if value in hccntool.NET_HEALTH_PASS else FAULTY), f"net health status: {value}", None
    if check == "ip":
        ip, _mask = hccntool.parse_ip(text, key)
        if expected is None:
            return OK, f"ipaddr:{ip} (no device IP planned to compare)", None
        if ip != expected:
            return FAULTY, f"ipaddr:{ip}, the job uses {expected}", None
        return OK, f"ipaddr:{ip}", None
    value = hccntool.parse_tls(text, key)
    return OK, f"tls switch[{value}]", value


def tls_across_hosts(reports: Sequence[HostDevices]) -> List[HostDevices]:
    """Compare the ``tls switch`` of every checked device on every host (a mix breaks HCCL links).

    When the values differ, the devices whose value differs from the majority's are faulty
    (``tls switch[1], 14 of 16 devices have tls switch[0]``); without a majority, every device
    is (``tls switch[1]; the devices differ: 0 on h1 vs 1 on h2``).  Reports of other targets and
    devices whose TLS was not read are returned as they are.

    Returns:
        The reports, in order, with their TLS checks settled.
    """
    values: List[Tuple[str, int, str]] = []
    for r in reports:
        if r.target != ASCEND:
            continue
        for d in r.devices:
            for c in d.checks:
                if c.check == "tls" and c.status == OK and c.value is not None:
                    values.append((r.host, d.device, c.value))
    counts = Counter(v for _, _, v in values)
    if len(counts) <= 1:
        return list(reports)
    ranked = counts.most_common()
    majority: Optional[str] = ranked[0][0] if ranked[0][1] > ranked[1][1] else None
    hosts_of: Dict[str, List[str]] = {}
    for host, _, v in values:
        if host not in hosts_of.setdefault(v, []):
            hosts_of[v].append(host)
    mixed = " vs ".join(f"{v} on {', '.join(hosts_of[v])}" for v in sorted(hosts_of))
    total = len(values)

    def settle(c: CheckResult) -> CheckResult:
        if c.check != "tls" or c.status != OK or c.value is None or c.value == majority:
            return c
        if majority is None:
            words = f"tls switch[{c.value}]; the devices differ: {mixed}"
        else:
            words = (
                f"tls switch[{c.value}], {counts[majority]} of {total} devices have tls switch[{majority}] ({mixed})"
            )
        return CheckResult(c.check, FAULTY, words, c.command, c.value)

    out: List[HostDevices] = []
    for r in reports:
        if r.target != ASCEND:
            out.append(r)
            continue
        devices = tuple(DeviceVerdict(d.device, tuple(settle(c) for c in d.checks)) for d in r.devices)
        out.append(HostDevices(r.host, r.target, devices, r.host_checks, r.note))
    return out
