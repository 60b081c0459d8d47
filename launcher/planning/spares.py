"""Bad hosts left out, spare hosts used (pure).

A *spare* is a host of the inventory the plan gives no rank: ranks fill hosts in order, so
``--np 24`` on 4 hosts x 8 slots leaves the last host spare.  Leaving a host out (the pre-flight
health check found it slow or faulty, or it failed too often in this job) re-plans the job on the
rest of the inventory with the same world size: the ranks move on to the spares, the scheduler
moves with them if it was on the host, and the rank table / hostfile are generated again.

:func:`replan` is the one entry point both callers use (``run --preflight exclude`` before the
start, the supervisor's restart path between attempts); :func:`spare_hosts` names the spares of
a plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Sequence, Tuple

from launcher.errors import PlanError
from launcher.planning.build import build_plan
from launcher.planning.job.spec import Exclusion, JobSpec, Plan

__all__ = ["Exclusion", "replan", "spare_hosts", "without_hosts"]


def spare_hosts(spec: JobSpec, plan: Plan) -> Tuple[str, ...]:
    """Hosts of ``spec``'s inventory that ``plan`` gives no rank, in inventory order."""
    used = {p.host for p in plan.ranks}
    return tuple(h.name for h in spec.inventory.hosts if h.name not in used)


def without_hosts(spec: JobSpec, exclusions: Sequence[Exclusion], world_size: int) -> JobSpec:
    """``spec`` on its inventory minus the excluded hosts, asking for ``world_size`` ranks.

    ``--master-addr`` naming an excluded host is dropped (the scheduler goes to the first host
    that runs ranks).

    Raises:
        PlanError: every host is excluded, or the hosts left have fewer slots than ``world_size``
            (one line naming the excluded hosts and their reasons).
    """
    gone = {e.host for e in exclusions}
    kept = tuple(h for h in spec.inventory.hosts if h.name not in gone)
    slots = sum(h.slots if spec.per_host is None else min(h.slots, spec.per_host) for h in kept)
    if slots < world_size:
        why = "; ".join(f"{e.host}: {e.reason}" for e in exclusions)
        left = f"the other hosts have {slots} slot{'s' * (slots != 1)}" if kept else "no host is left"
        raise PlanError(
            f"no spare host for {world_size} ranks without {', '.join(sorted(gone))} ({why}); {left}: "
            "add hosts to the inventory or lower --np",
            field="--hosts",
        )
    master = spec.master_addr
    if master is not None and any(master in (h.name, h.reach_addr) for h in spec.inventory.hosts if h.name in gone):
        master = None
    return replace(spec, inventory=replace(spec.inventory, hosts=kept), np=world_size, master_addr=master)


def replan(spec: JobSpec, exclusions: Sequence[Exclusion], world_size: int) -> Plan:
    """The plan of ``spec`` without the excluded hosts (see :func:`without_hosts`); its
    ``excluded`` lists every exclusion so far (``plan.json``'s ``excluded_hosts``).

    Raises:
        PlanError: see :func:`without_hosts` and :func:`launcher.planning.build.build_plan`.
    """
    merged: List[Exclusion] = []
    for e in exclusions:
        if all(m.host != e.host for m in merged):
            merged.append(e)
    plan = build_plan(without_hosts(spec, merged, world_size))
    return replace(plan, excluded=tuple(merged))
