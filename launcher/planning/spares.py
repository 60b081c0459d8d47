"""Bad hosts left out, spare hosts used (pure).

A *spare* is a host of the inventory the plan gives no rank: ranks fill hosts in order, so
``--np 24`` on 4 hosts x 8 slots leaves the last host spare.  Leaving a host out (the pre-flight
health check found it slow or faulty, or it failed too often in this job) re-plans the job on the
rest of the inventory with the same world size: the ranks move on to the spares, the scheduler
moves with them if it was on the host, and the rank table / hostfile are generated again.

*Elastic* (``--min-hosts N``): when the hosts left have fewer slots than the world size, the job
goes on with fewer ranks instead of stopping, as long as at least ``N`` hosts are left: every slot
of the hosts left gets a rank (dense, 0..n-1: rank table, hostfile and environments are planned
anew), and every process learns the job's planned size (``MSLAUNCH_PLANNED_WORLD_SIZE``) beside
the current one (``MSLAUNCH_WORLD_SIZE``): a data-parallel program keeps its global batch by
accumulating more micro-batches per step (the reference trainer does).  A host that comes back
is used again at a later restart (:func:`launcher.execution.supervision.hostfaults`'s cooldown):
the plan grows back to the planned size, never past it.

:func:`replan` is the one entry point both callers use (``run --preflight exclude`` before the
start, the supervisor's restart path between attempts); :func:`spare_hosts` names the spares of
a plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional, Sequence, Tuple

from launcher.errors import PlanError
from launcher.planning.build import build_plan
from launcher.planning.job.spec import Exclusion, JobSpec, Plan

__all__ = ["Exclusion", "replan", "spare_hosts", "without_hosts"]


def spare_hosts(spec: JobSpec, plan: Plan) -> Tuple[str, ...]:
    """Hosts of ``spec``'s inventory that ``plan`` gives no rank, in inventory order."""
    used = {p.host for p in plan.ranks}
    return tuple(h.name for h in spec.inventory.hosts if h.name not in used)


def without_hosts(
    spec: JobSpec, exclusions: Sequence[Exclusion], world_size: int, min_hosts: Optional[int] = None
) -> JobSpec:
    """``spec`` on its inventory minus the excluded hosts, asking for ``world_size`` ranks (the
    job's planned size); with ``min_hosts``, fewer when the hosts left have fewer slots (see the
    module doc), ``planned_np`` then keeping ``world_size``.

    ``--master-addr`` naming an excluded host is dropped (the scheduler goes to the first host
    that runs ranks).

    Raises:
        PlanError: every host is excluded, or the hosts left have fewer slots than ``world_size``
            (without ``min_hosts``), or fewer than ``min_hosts`` hosts are left (one line naming
            the excluded hosts and their reasons).
    """
    gone = {e.host for e in exclusions}
    kept = tuple(h for h in spec.inventory.hosts if h.name not in gone)
    room = [(h, h.slots if spec.per_host is None else min(h.slots, spec.per_host)) for h in kept]
    slots = sum(n for _, n in room)
    planned = world_size
    if slots < world_size:
        why = "; ".join(f"{e.host}: {e.reason}" for e in exclusions)
        usable = [h.name for h, n in room if n > 0]
        if min_hosts is not None and len(usable) >= min_hosts and slots > 0:
            world_size = slots
        elif min_hosts is not None:
            left = f"{len(usable)} host{'s' * (len(usable) != 1)} left ({', '.join(usable) or 'none'})"
            raise PlanError(
                f"{left}, fewer than --min-hosts {min_hosts}, without {', '.join(sorted(gone))} ({why}): "
                "bring hosts back or add some to the inventory, or lower --min-hosts",
                field="--min-hosts",
            )
        else:
            left = f"the other hosts have {slots} slot{'s' * (slots != 1)}" if kept else "no host is left"
            raise PlanError(
                f"no spare host for {world_size} ranks without {', '.join(sorted(gone))} ({why}); {left}: "
                "add hosts to the inventory, lower --np, or go on with fewer hosts (--min-hosts N)",
                field="--hosts",
            )
    master = spec.master_addr
    if master is not None and any(master in (h.name, h.reach_addr) for h in spec.inventory.hosts if h.name in gone):
        master = None
    return replace(
        spec,
        inventory=replace(spec.inventory, hosts=kept),
        np=world_size,
        master_addr=master,
        planned_np=planned if planned != world_size else None,
    )


def replan(spec: JobSpec, exclusions: Sequence[Exclusion], world_size: int, min_hosts: Optional[int] = None) -> Plan:
    """The plan of ``spec`` without the excluded hosts (see :func:`without_hosts`); its
    ``excluded`` lists every exclusion so far (``plan.json``'s ``excluded_hosts``).

    Raises:
        PlanError: see :func:`without_hosts` and :func:`launcher.planning.build.build_plan`.
    """
    merged: List[Exclusion] = []
    for e in exclusions:
        if all(m.host != e.host for m in merged):
            merged.append(e)
    plan = build_plan(without_hosts(spec, merged, world_size, min_hosts))
    return replace(plan, excluded=tuple(merged))
