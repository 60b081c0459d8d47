"""Stack dumps of a Slurm step's ranks, made on their nodes (see :mod:`launcher.execution.ssh.dump`
for the ssh channel)."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from launcher.execution.process.stackdump import dump_each, remote_dump
from launcher.execution.process.stackdump import targets as _targets
from launcher.execution.slurm.shim import record_key


def srun_dump(
    job_id: str, node: str, targets: Sequence[Tuple[str, int]], folder: str, python: Optional[str] = None
) -> Dict[Optional[int], List[str]]:
    """Dump processes on a Slurm node with an ``srun`` step of the allocation on that node."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "-N1",
        "-n1",
        f"--nodelist={node}",
        "--job-name=mslaunch-stackdump",
        python or sys.executable,
        "-m",
        "launcher.execution.process.stackdump",
        "--stdout",
        *_targets(targets),
    ]
    return remote_dump(argv, folder)


def slurm_step_dump(
    job_id: str, status_dir: str, ranks: Sequence[Optional[int]], folder: str
) -> Dict[Optional[int], List[str]]:
    """Dump the running processes of one Slurm step: the shims' start records give each rank's
    node and pid; one ``srun`` per node, every node at once."""
    by_node: Dict[str, List[Tuple[str, int]]] = {}
    for rank in ranks:
        key = record_key(rank)
        try:
            with open(os.path.join(status_dir, f"{key}.start.json"), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        if os.path.exists(os.path.join(status_dir, f"{key}.exit.json")) or not isinstance(rec.get("pid"), int):
            continue
        by_node.setdefault(str(rec.get("node")), []).append((key.replace("_", ""), rec["pid"]))
    return dump_each(by_node, lambda node, targets: srun_dump(job_id, node, targets, folder))
