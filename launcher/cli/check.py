"""``mslaunch check``: the collective sanity check over the chosen launcher and method.

Each rank contributes its rank id to an AllGather (``launcher.workloads.allgather_check``) and
prints ``mslaunch-check rank=<r> size=<n> gathered=<ids>``; this command reads every rank's
line from its log and says which ranks are missing or saw a wrong vector.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

import typer

from launcher.cli.docs import epilog
from launcher.cli.options import JobOptions, with_job_options
from launcher.cli.spec import build_spec
from launcher.errors import PlanError
from launcher.planning.build import build_plan
from launcher.planning.job import layout

CHECK_MODULE = "launcher.workloads.allgather_check"
_LINE_RE = re.compile(r"^mslaunch-check rank=(\d+) size=(\d+) gathered=([\d,]*)\s*$")


def register(app: typer.Typer) -> None:
    app.command("check", epilog=epilog("workload"))(check_cmd)


def parse_check_lines(text: str) -> Optional[Tuple[int, int, List[int]]]:
    """The ``(rank, size, gathered)`` a rank reported in its log, or None."""
    for line in text.splitlines():
        m = _LINE_RE.match(line.strip())
        if m:
            gathered = [int(x) for x in m.group(3).split(",") if x]
            return int(m.group(1)), int(m.group(2)), gathered
    return None


def judge(world: int, reports: Dict[int, Optional[Tuple[int, int, List[int]]]]) -> List[str]:
    """Problems with the reports of ranks ``0..world-1`` (empty: the check passed)."""
    expected = list(range(world))
    problems = []
    for rank in expected:
        rep = reports.get(rank)
        if rep is None:
            problems.append(f"rank {rank}: no result (see its log)")
            continue
        got_rank, size, gathered = rep
        if got_rank != rank:
            problems.append(f"rank {rank}: reports itself as rank {got_rank}")
        if size != world:
            problems.append(f"rank {rank}: sees a world of {size}, expected {world}")
        if gathered != expected:
            missing = sorted(set(expected) - set(gathered))
            problems.append(f"rank {rank}: gathered {gathered}" + (f", missing {missing}" if missing else ""))
    return problems


@with_job_options
def check_cmd(
    timeout: float = typer.Option(300.0, "--timeout", help="Bound on the check, s."),
    *,
    opts: JobOptions,
) -> None:
    """Run the collective sanity check (AllGather of rank ids) on every rank; exit 1 if any rank is missing or wrong."""
    if opts.program or opts.module or opts.no_python:
        raise PlanError("check runs its own program; pass only inventory and job options", field="SCRIPT")
    from launcher.execution.runner import run_plan
    from launcher.execution.settings import SuperviseOptions

    opts = dataclasses.replace(opts, module=CHECK_MODULE, program=())
    plan = build_plan(build_spec(opts))
    result = run_plan(plan, SuperviseOptions(timeout=timeout, grace=2.0), sys.argv)
    folder = layout.attempt_dir(plan.job_dir, result.attempts - 1)
    reports = {}
    for proc in plan.ranks:
        path = os.path.join(folder, os.path.basename(proc.log))
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as fh:
                reports[proc.rank] = parse_check_lines(fh.read())
        except OSError:
            reports[proc.rank] = None
    problems = judge(plan.world_size, reports)  # type: ignore[arg-type]  # keyed by plan.ranks' ranks: ints, never None
    hosts = ",".join(h.name for h in plan.hosts)
    if not problems and result.exit_code == 0:
        vector = ",".join(str(r) for r in range(plan.world_size))
        sys.stdout.write(
            f"✓ {plan.world_size} ranks on {hosts} ({plan.method}, {plan.launcher}): AllGather gave [{vector}] on "
            "every rank\n"
        )
        return
    sys.stdout.write(
        f"✗ check failed ({plan.method}, {plan.launcher}, {plan.world_size} ranks on {hosts}); logs in {plan.job_dir}\n"
    )
    for line in problems:
        sys.stdout.write(f"  {line}\n")
    if result.root_cause is not None:
        rc = result.root_cause
        sys.stdout.write(f"  root cause: {rc.name} on {rc.host}: {rc.reason} ({rc.log})\n")
    raise typer.Exit(1)
