"""GPU device checks (pure): two ``nvidia-smi`` queries per host, and their verdicts.

For each planned GPU N (its index as nvidia-smi numbers it):

* ``nvidia-smi --query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending,
  remapped_rows.pending --format=csv,noheader,nounits``: N is listed; no uncorrected ECC error
  since the driver loaded; no retired page and no remapped row pending (each waits for a GPU
  reset).  ``[N/A]`` / ``[Not Supported]`` fields are unsupported, not faults;
* ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits``:
  no compute process on N (a leftover process is named by pid and name);
* the host lists at least as many GPUs as the ranks the plan puts on it.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

from launcher.planning.health.devices.commands import ToolSetup, first_line, not_run_reason
from launcher.planning.health.devices.model import (
    FAULTY,
    GPU,
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
    one_line,
)
from launcher.planning.health.devices.nvsmi import (
    APPS_QUERY,
    EXIT_STATUS,
    GPU_QUERY,
    GpuApp,
    GpuRow,
    field_state,
    parse_compute_apps,
    parse_gpu_query,
)

__all__ = ["gpu_commands", "judge_gpu"]

_FORMAT = "--format=csv,noheader,nounits"
#: (check, field index in GpuRow order, kind, what a bad value means)
_FIELDS = (
    ("ecc", "ecc_uncorrected", "count", "uncorrected ECC errors (volatile)"),
    ("retired_pages", "retired_pending", "flag", "retired pages pending (reset the GPU)"),
    ("remapped_rows", "remapped_pending", "flag", "remapped rows pending (reset the GPU)"),
)


def gpu_commands(spec: HostDeviceSpec, setup: ToolSetup = ToolSetup()) -> Tuple[DeviceCommand, ...]:
    """The two queries (the same for every host)."""
    gpus = ("--query-gpu=" + GPU_QUERY, _FORMAT)
    apps = ("--query-compute-apps=" + APPS_QUERY, _FORMAT)
    return (
        DeviceCommand("nvidia-smi --query-gpu", "nvidia-smi", gpus, setup.nvidia_smi, setup.nvidia_timeout, "gpus"),
        DeviceCommand(
            "nvidia-smi --query-compute-apps", "nvidia-smi", apps, setup.nvidia_smi, setup.nvidia_timeout, "apps"
        ),
    )


def judge_gpu(spec: HostDeviceSpec, outcomes: Mapping[str, Outcome], setup: ToolSetup = ToolSetup()) -> HostDevices:
    """Every planned GPU's verdict on one host, and the host's GPU count.

    Args:
        spec: the host, its planned GPUs and its rank count.
        outcomes: command key -> outcome, as the probe reported them.
        setup: as given to :func:`gpu_commands`.
    """
    gpus_cmd, apps_cmd = gpu_commands(spec, setup)
    rows, rows_why = _read(gpus_cmd, outcomes.get(gpus_cmd.key), spec.host, parse_gpu_query)
    apps, apps_why = _read(apps_cmd, outcomes.get(apps_cmd.key), spec.host, parse_compute_apps)
    host_checks: Tuple[CheckResult, ...] = ()
    if rows is not None:
        listed = id_ranges(r.index for r in rows)
        enough = len(rows) >= spec.ranks
        host_checks = (
            CheckResult(
                "count",
                OK if enough else FAULTY,
                f"{len(rows)} GPU(s) for {spec.ranks} rank(s): nvidia-smi lists {listed}",
                gpus_cmd.key,
            ),
        )
    devices: List[DeviceVerdict] = []
    for n in spec.devices:
        devices.append(DeviceVerdict(n, tuple(_gpu_checks(n, rows, rows_why, apps, apps_why, gpus_cmd, apps_cmd))))
    return HostDevices(spec.host, GPU, tuple(devices), host_checks)


def _read(cmd: DeviceCommand, outcome: Optional[Outcome], host: str, parse):
    """``(parsed, None)`` or ``(None, (verdict, why))``."""
    why = not_run_reason(cmd, outcome, host)
    if why is not None:
        return None, (NOT_CHECKED, why)
    assert outcome is not None
    if outcome.exit_code != 0:
        verdict, meaning = EXIT_STATUS.get(outcome.exit_code or 0, (NOT_CHECKED, "unknown exit status"))
        return None, (
            verdict,
            f"{cmd.key} exited with {outcome.exit_code} ({meaning}) on {host}: {first_line(outcome)}",
        )
    try:
        return parse(outcome.stdout), None
    except ToolOutputError as exc:
        return None, (NOT_CHECKED, f"{exc.message} (on {host})")


def _gpu_checks(
    n: int,
    rows: Optional[Tuple[GpuRow, ...]],
    rows_why: Optional[Tuple[str, str]],
    apps: Optional[Tuple[GpuApp, ...]],
    apps_why: Optional[Tuple[str, str]],
    gpus_cmd: DeviceCommand,
    apps_cmd: DeviceCommand,
) -> List[CheckResult]:
    if rows is None:
        assert rows_why is not None
        verdict, why = rows_why
        return [
            CheckResult("health", verdict, why, gpus_cmd.key),
            CheckResult(
                "process",
                apps_why[0] if apps_why else NOT_CHECKED,
                apps_why[1] if apps_why else "cannot tell which GPU a process is on without the GPU list",
                apps_cmd.key,
            ),
        ]
    row = next((r for r in rows if r.index == n), None)
    if row is None:
        listed = id_ranges(r.index for r in rows)
        return [CheckResult("listed", FAULTY, f"not listed by nvidia-smi (it lists {listed})", gpus_cmd.key)]
    out: List[CheckResult] = []
    for check, attr, kind, meaning in _FIELDS:
        value = getattr(row, attr)
        state, _count = field_state(value, kind)
        if state == "bad":
            out.append(CheckResult(check, FAULTY, f"{meaning}: {value}", gpus_cmd.key))
        elif state == "unreadable":
            out.append(
                CheckResult(check, NOT_CHECKED, f"unreadable {check} field {one_line(value, 30)!r}", gpus_cmd.key)
            )
        else:
            out.append(CheckResult(check, OK, "not supported" if state == "unsupported" else value, gpus_cmd.key))
    if apps is None:
        assert apps_why is not None
        out.append(CheckResult("process", apps_why[0], apps_why[1], apps_cmd.key))
    else:
        mine = [a for a in apps if a.gpu_uuid == row.uuid]
        if mine:
            held = ", ".join(f"pid {a.pid} ({a.name or 'no process name'}, {a.used_memory or '?'} MiB)" for a in mine)
            out.append(CheckResult("process", FAULTY, f"held by {held}", apps_cmd.key))
        else:
            out.append(CheckResult("process", OK, "no compute process", apps_cmd.key))
    return out
