"""The CPU-tuning inputs of a job (:class:`~launcher.planning.cpu.tuning.CpuSpec`): the flags, this
machine's cores and, for a MindSpore CPU job with ranks here, this machine's cached CPU probe
(a step of :func:`launcher.cli.spec.build_spec`; the probe starts the ranks' interpreter).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from launcher.cli.options import JobOptions
from launcher.errors import MsLaunchError, PlanError
from launcher.planning.inventory.model import Inventory
from launcher.planning.job.kinds import Method

if TYPE_CHECKING:
    from launcher.planning.cpu.tuning import CpuSpec


def device_target(program: Tuple[str, ...], env: Dict[str, str]) -> Optional[str]:
    """The device the program is told to use (``--device-target X`` / ``--device_target=X``,
    else ``DEVICE_TARGET``), or None."""
    for i, arg in enumerate(program):
        for flag in ("--device-target", "--device_target"):
            if arg == flag and i + 1 < len(program):
                return program[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return env.get("DEVICE_TARGET") or None


def cpu_spec(
    opts: JobOptions, inventory: Inventory, program: Tuple[str, ...], env_pairs: Tuple[Tuple[str, str], ...]
) -> "CpuSpec":
    """CPU-tuning inputs: ``--cpu-tune``, ``--bind-core``, this machine's cores and, when the
    job is a MindSpore CPU job with ranks here, this machine's (cached) CPU probe.

    A job counts as a MindSpore CPU job when it is a Python program (not ``--no-python``), its
    rendezvous is ``dynamic`` (MindSpore's CPU collectives), nothing names another device
    (``--device-target``/``DEVICE_TARGET``), and the ranks' interpreter has MindSpore (the probe's
    ``--facts`` step says). ``--cpu-tune on`` skips the guess (for wrappers that run MindSpore).

    Steps: the flags; whether the job may be one (:func:`_may_run_mindspore_cpu`, no
    interpreter started); the ranks' interpreter's facts; the probe.

    Raises:
        PlanError: a bad ``--cpu-tune`` or ``--bind-core``.
    """
    from launcher.planning.cpu.tuning import CPU_TUNE_MODES, CpuSpec, parse_bind_core

    mode = opts.cpu_tune.strip().lower()
    if mode not in CPU_TUNE_MODES:
        raise PlanError(
            f"unknown --cpu-tune {opts.cpu_tune!r}; use one of {', '.join(CPU_TUNE_MODES)}", field="--cpu-tune"
        )
    bind = parse_bind_core(opts.bind_core)
    here = _local_cores()
    base = CpuSpec(
        mode=mode,
        bind_core=bind,
        local_cpus=tuple(here["cpus"]),
        local_quota=here["quota"],
        local_quota_source=here["quota_source"],
    )
    if mode == "off" or not _may_run_mindspore_cpu(opts, mode, program, env_pairs):
        return base
    base = replace(base, remote_tune=any(not h.is_local for h in inventory.hosts))
    local = next((h for h in inventory.hosts if h.is_local), None)
    if local is None:
        return base
    from launcher.execution.checks.cpu import cached_probe, local_runner, program_facts
    from launcher.jobs.jobfile import mslaunch_home

    runner = local_runner(local.python or opts.python or sys.executable)
    tail: Tuple[str, ...] = ()
    if program and mode == "auto":
        tail = ("--module", program[0]) if opts.module else ("--script", program[0])
    try:
        facts = program_facts(runner, tail)
    except MsLaunchError as exc:
        return replace(base, probe_note=str(exc))
    is_ms = mode == "on" or (bool(facts.get("mindspore")) and facts.get("imports_mindspore") is True)
    if not is_ms:
        return base
    import socket

    outcome = cached_probe(
        runner, mslaunch_home(), socket.gethostname(), on_probe=_announce, facts=facts, needed_only=True
    )
    return replace(base, mindspore_cpu=True, probe=outcome.probe, probe_note=outcome.note, isa_settled=outcome.needless)


def _local_cores() -> Dict[str, Any]:
    """The cores this process may run on: its affinity and its cgroup CPU quota
    (:func:`launcher.execution.probes.host_cores.read_host_cores`)."""
    from launcher.execution.probes.host_cores import read_host_cores

    return read_host_cores()


def _may_run_mindspore_cpu(
    opts: JobOptions, mode: str, program: Tuple[str, ...], env_pairs: Tuple[Tuple[str, str], ...]
) -> bool:
    """Whether the job may run MindSpore on CPU, from what is known without starting an
    interpreter: ``--cpu-tune on``; else a Python program, the dynamic method, no other device
    named, and (a script under ``auto``) a script whose source imports ``mindspore``."""
    env = dict(os.environ)
    env.update(env_pairs)
    target = device_target(program, env)
    candidate = mode == "on" or (
        not opts.no_python and opts.method == Method.DYNAMIC and (target is None or target.upper() == "CPU")
    )
    if not candidate:
        return False
    from launcher.execution.checks.cpu import script_imports_mindspore

    # the facts step would say the same of this script (it reads the file from the same
    # folder): not a MindSpore job, and no interpreter started to find that out
    return not (program and mode == "auto" and not opts.module and script_imports_mindspore(program[0]) is not True)


def _announce(msg: str) -> None:
    """The probe's progress line (it runs once per machine and interpreter, then is cached)."""
    sys.stderr.write(f"mslaunch: {msg}\n")
    sys.stderr.flush()
