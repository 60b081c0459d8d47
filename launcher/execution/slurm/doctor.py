"""``mslaunch doctor --launcher slurm``: is Slurm usable for this job?

Checks, each ✓ or ✗ with a detail:

* ``sinfo`` / ``squeue``: the Slurm client reaches slurmctld;
* ``partitions``: each partition is up (``sinfo -o %P %a``);
* ``nodes``: no node of the allocation (or of the cluster, outside one) is down, drained or failing;
* ``allocation``: inside one (``SLURM_JOB_ID``), its slots hold the requested ranks (``--np``);
* ``python@<node>``: one task per node (``srun --overlap --ntasks-per-node=1``) reports the
  node's Python and MindSpore versions; they must match this machine's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from launcher.execution.probes import program_source

#: Node states that make a node unusable.
BAD_STATES = ("down", "drain", "fail", "not_responding", "unknown", "maint")


@dataclass(frozen=True)
class SlurmCheck:
    """One row of ``doctor --launcher slurm``."""

    name: str
    ok: bool
    detail: str

    def to_json(self) -> Dict[str, object]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def _run(argv: List[str], timeout: float = 30.0) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]} not found (apt-get install slurm-client)")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer within {timeout:g} s")


def _last(res: "subprocess.CompletedProcess[str]") -> str:
    return (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]


def slurm_checks(environ: Mapping[str, str], np: Optional[int], python: str = sys.executable) -> List[SlurmCheck]:
    """Run every check (see the module doc); never raises for a broken cluster."""
    from launcher.errors import MsLaunchError
    from launcher.planning.backends.slurm import in_allocation, parse_allocation

    out: List[SlurmCheck] = []
    parts = _run(["sinfo", "-h", "-o", "%P %a"])
    out.append(
        SlurmCheck("sinfo", parts.returncode == 0, "slurmctld answers" if parts.returncode == 0 else _last(parts))
    )
    queue = _run(["squeue", "-h", "-o", "%i"])
    out.append(
        SlurmCheck(
            "squeue",
            queue.returncode == 0,
            f"{len(queue.stdout.split())} job(s) queued" if queue.returncode == 0 else _last(queue),
        )
    )
    if parts.returncode != 0:
        return out
    rows = [line.split() for line in parts.stdout.splitlines() if line.strip()]
    down = [p for p, a in rows if a != "up"]
    out.append(
        SlurmCheck("partitions", bool(rows) and not down, ", ".join(f"{p} {a}" for p, a in rows) or "no partition")
    )
    alloc = None
    if in_allocation(environ):
        try:
            alloc = parse_allocation(environ)
        except MsLaunchError as exc:
            out.append(SlurmCheck("allocation", False, str(exc)))
    nodes_arg = ["-n", ",".join(alloc.nodes)] if alloc is not None else []
    states = _run(["sinfo", "-h", "-N", "-o", "%N %t", *nodes_arg])
    if states.returncode == 0:
        pairs = sorted({tuple(line.split()[:2]) for line in states.stdout.splitlines() if len(line.split()) >= 2})
        bad = [f"{n} {s}" for n, s in pairs if any(s.lower().startswith(b[:4]) for b in BAD_STATES) or s.endswith("*")]
        out.append(
            SlurmCheck(
                "nodes",
                not bad and bool(pairs),
                ", ".join(bad) if bad else f"{len(pairs)} node(s): " + ", ".join(f"{n} {s}" for n, s in pairs),
            )
        )
    if alloc is None:
        if not in_allocation(environ):
            out.append(
                SlurmCheck(
                    "allocation",
                    True,
                    "not inside an allocation: 'mslaunch run --launcher slurm' needs salloc/sbatch "
                    "or 'mslaunch sbatch'; per-node checks skipped",
                )
            )
        return out
    slots = sum(alloc.slots)
    want = np if np is not None else slots
    out.append(
        SlurmCheck(
            "allocation",
            want <= slots,
            f"job {alloc.job_id}: {len(alloc.nodes)} node(s), {slots} slot(s)"
            + (
                f"; --np {np} needs more: salloc more nodes or --ntasks-per-node"
                if want > slots
                else f" for {want} rank(s)"
            ),
        )
    )
    probe = _run(
        [
            "srun",
            "--overlap",
            "--overcommit",
            f"--nodes={len(alloc.nodes)}",
            "--ntasks-per-node=1",
            f"--ntasks={len(alloc.nodes)}",
            "--input=none",
            python,
            "-c",
            program_source("launcher.execution.probes.node_facts"),
        ],
        timeout=120,
    )
    seen: Dict[str, Dict[str, object]] = {}
    for line in probe.stdout.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "node" in data:
            seen[str(data["node"])] = data
    import platform

    local_ms = None
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            local_ms = version("mindspore")
        except PackageNotFoundError:
            local_ms = None
    except ImportError:  # pragma: no cover
        pass
    for node in alloc.nodes:
        data = seen.get(node)
        if data is None:
            out.append(SlurmCheck(f"python@{node}", False, f"no answer from the srun probe: {_last(probe)}"))
            continue
        same = data.get("python") == platform.python_version() and data.get("mindspore") == local_ms
        out.append(
            SlurmCheck(
                f"python@{node}",
                same,
                f"Python {data.get('python')}, MindSpore {data.get('mindspore') or 'not installed'}"
                + (
                    ""
                    if same
                    else f" (here: Python {platform.python_version()}, MindSpore {local_ms or 'not installed'})"
                ),
            )
        )
    return out
