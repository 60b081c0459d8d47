"""The pre-flight health check on the command line: ``doctor --health`` and ``run --preflight MODE``.

See docs/health.md: every host of the inventory (spares too) runs a short compute kernel and
paired transfers; each gets a verdict (ok / slow / faulty).  ``run --preflight exclude`` plans
around the slow and faulty hosts when the inventory has spares for ``--np``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, List, Optional, Tuple

from launcher.cli.devices import DeviceCheck, run_devices
from launcher.errors import PlanError
from launcher.planning.health.policy import DEFAULT_POLICY, DEFAULT_THRESHOLD
from launcher.planning.health.rounds import KERNELS
from launcher.planning.job.events import Preflight, PreflightHost
from launcher.planning.job.spec import JobSpec, Plan


def check_kernel(kernel: str) -> str:
    if kernel not in KERNELS:
        raise PlanError(f"unknown --health-kernel {kernel!r}; use one of {', '.join(KERNELS)}", field="--health-kernel")
    return kernel


def check_hosts(
    spec: JobSpec,
    ssh: Any,
    kernel: str = "numpy",
    threshold: float = DEFAULT_THRESHOLD,
    devices: Optional[DeviceCheck] = None,
) -> Any:
    """Run the check on every host of ``spec``'s inventory; a
    :class:`~launcher.execution.checks.health.HealthResult`, with ``devices``' verdicts joined
    into the hosts' (:meth:`~launcher.cli.devices.DeviceCheck.join`) when given."""
    from dataclasses import replace

    from launcher.execution.checks.health import run_health

    if spec.launcher == "slurm":
        return check_slurm(spec.python, kernel, threshold, devices)
    hosts = spec.inventory.hosts
    python = {h.name: h.python if h.python is not None else spec.python for h in hosts}
    result = run_health(
        hosts,
        python,
        replace(ssh, config=spec.ssh_config),
        kernel=kernel,
        threshold=threshold,
        devices=devices.orders() if devices is not None else None,
    )
    return devices.join(result) if devices is not None else result


def check_slurm(
    python: Optional[str],
    kernel: str = "numpy",
    threshold: float = DEFAULT_THRESHOLD,
    devices: Optional[DeviceCheck] = None,
) -> Any:
    """The check on every node of the Slurm allocation this runs in (one srun step per node),
    with ``devices``' verdicts joined in when given."""
    import os

    from launcher.execution.slurm.health import slurm_health

    need_allocation()
    result = slurm_health(
        os.environ,
        python or sys.executable,
        kernel=kernel,
        threshold=threshold,
        devices=devices.orders() if devices is not None else None,
    )
    return devices.join(result) if devices is not None else result


def need_allocation() -> None:
    """Raises PlanError when this does not run inside a Slurm allocation (salloc, sbatch)."""
    import os

    from launcher.planning.backends.slurm import in_allocation

    if not in_allocation(os.environ):
        raise PlanError("the health check over Slurm runs inside an allocation (salloc, sbatch)", field="--launcher")


def print_result(result: Any, prefix: str = "") -> None:
    """One line per host (``h2 slow: compute 0.9 GFLOPS, median 7.5; threshold 0.5``), then a total."""
    out = sys.stderr if prefix else sys.stdout
    for v in result.verdicts:
        out.write(f"{prefix}{v.line()}\n")
    for line in result.refused:
        out.write(f"{prefix}{line}\n")
    bad = [v for v in result.verdicts if not v.ok]
    total = (
        f"{len(bad)} of {len(result.verdicts)} host(s) slow or faulty"
        if bad
        else f"all {len(result.verdicts)} host(s) ok"
    )
    out.write(f"{prefix}{total}; network {result.network_note}; {result.seconds:.1f} s\n")


def result_json(result: Any, kernel: str, threshold: float, devices: Optional[DeviceCheck] = None) -> str:
    """``doctor --health --json`` (with ``"devices"``: what the device step checked, when given)."""
    from launcher.planning.health.rounds import health_json

    out = health_json(
        result.verdicts,
        kernel=kernel,
        threshold=threshold,
        seconds=result.seconds,
        network_note=result.network_note,
        devices=devices.summary() if devices is not None else None,
    )
    if result.refused:
        out["refused"] = list(result.refused)
    return json.dumps(out, indent=2)


def preflight(
    mode: str,
    spec: JobSpec,
    plan: Plan,
    ssh: Any,
    device_checks: str = DEFAULT_POLICY,
    min_hosts: Optional[int] = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Tuple[Plan, Preflight]:
    """``run --preflight MODE``: check every inventory host (and, for an Ascend or GPU job, the
    devices the plan and the spares offer; ``device_checks``: ``--device-checks``), then keep,
    re-plan or stop; with ``min_hosts`` (``--min-hosts``) ``exclude`` starts smaller when the
    spares are too few.

    Returns:
        the plan to run (re-planned without slow/faulty hosts for ``exclude``) and the event
        (``events.jsonl`` kind ``preflight``).

    Raises:
        PlanError: ``fail`` and a host is slow or faulty; ``exclude`` and the hosts left have too
            few slots, or per-node mode (``--node_rank``: the node checks itself and cannot hand
            its ranks to another node) and this node is slow or faulty (one line naming the hosts
            and why).
    """
    from dataclasses import replace

    from launcher.planning.job.spec import Exclusion
    from launcher.planning.spares import replan, spare_hosts

    devices = run_devices(spec, plan, device_checks)
    note = devices.choice.note()
    if note is not None and devices.choice.given is not None:  # the program names a device not known
        sys.stderr.write(f"mslaunch: preflight: {note}\n")
    result = check_hosts(spec, ssh, threshold=threshold, devices=devices)
    for line in result.refused:
        sys.stderr.write(f"mslaunch: preflight: {line}\n")
    bad = [v for v in result.verdicts if not v.ok]
    used = {p.host for p in plan.ranks}
    event = Preflight(
        mode,
        round(result.seconds, 2),
        result.network_note,
        tuple(PreflightHost(v.host, v.status, v.reason) for v in result.verdicts),
        devices.summary(),
        refused=tuple(result.refused),
    )
    if not bad:
        sys.stderr.write(f"mslaunch: preflight: all {len(result.verdicts)} host(s) ok ({result.seconds:.1f} s)\n")
        return plan, event
    if mode == "fail":
        raise PlanError(
            "; ".join(v.line() for v in bad) + "; fix or leave out these hosts (--preflight exclude uses spare hosts)",
            field="--preflight",
        )
    if mode == "warn":
        for v in bad:
            sys.stderr.write(
                f"mslaunch: preflight: warning: {v.line()}{'' if v.host in used else ' (spare, not used)'}\n"
            )
        return plan, event
    if spec.node is not None:  # per-node mode: this node plans only its own ranks
        import socket

        raise PlanError(
            f"this node ({socket.gethostname()}) is {bad[0].reason}; in per-node mode (--node_rank) its ranks cannot "
            "move to "
            "another node: fix it, or let the cluster manager start this node's part elsewhere",
            field="--preflight",
        )
    exclusions = [Exclusion(v.host, v.reason, "preflight", 0) for v in bad]
    new = replan(spec, exclusions, plan.world_size, min_hosts)
    spares = set(spare_hosts(spec, plan))
    for v in bad:
        sys.stderr.write(f"mslaunch: preflight: leaving out {v.line()}{_moved(v.host, plan, new, spares)}\n")
    return new, replace(event, excluded=tuple(exclusions))


def _moved(host: str, old: Plan, new: Plan, spares: Any) -> str:
    """``; ranks 2-3 now on h4 (spare)`` for a host that had ranks; `` (spare, not used)`` else."""
    ranks = [p.rank for p in old.ranks if p.host == host]
    if not ranks:
        return " (spare, not used)"
    where: List[str] = []
    for r in ranks:
        h = next((p.host for p in new.ranks if p.rank == r), "?")
        if h not in where:
            where.append(h)
    span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    return f"; {span} now on " + ", ".join(f"{h} (spare)" if h in spares else h for h in where)
