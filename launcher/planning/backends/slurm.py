"""Slurm allocations as inventories, and the srun argv of the slurm backend (pure).

Values come in as arguments (the ``SLURM_*`` variables as a mapping, ``scontrol show node -o``
as text); nothing here reads ``os.environ`` or runs a command.

Inside an allocation (``salloc``, ``sbatch``, ``srun``) Slurm exports::

    SLURM_JOB_ID            the job id (its presence means "inside an allocation")
    SLURM_JOB_NODELIST      the nodes, as a hostlist (node[1-3]); older: SLURM_NODELIST
    SLURM_NTASKS_PER_NODE   only when --ntasks-per-node was given
    SLURM_TASKS_PER_NODE    tasks per node, compressed: 2(x3),1
    SLURM_JOB_CPUS_PER_NODE CPUs per node, compressed: 4(x3)

Slots per node: ``--per-host`` if given, else ``SLURM_NTASKS_PER_NODE``, else
``SLURM_TASKS_PER_NODE`` when it asks for more than one task on some node, else
``SLURM_JOB_CPUS_PER_NODE`` (an allocation of whole nodes: one rank per CPU at most).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import InventoryError, PlanError
from launcher.planning.inventory.hostlist import expand_hostlist
from launcher.planning.inventory.model import MAX_HOSTS, MAX_SLOTS, Host, Inventory

_COUNT_RE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


@dataclass(frozen=True)
class Allocation:
    """The Slurm allocation mslaunch runs in.

    Attributes:
        job_id: ``SLURM_JOB_ID``.
        nodes: node names in Slurm's order.
        slots: slots per node (same order), see the module doc.
        restart_count: ``SLURM_RESTART_COUNT`` (0 for the first run of a batch job).
    """

    job_id: str
    nodes: Tuple[str, ...]
    slots: Tuple[int, ...]
    restart_count: int = 0


def parse_counts(text: str, n: int, what: str) -> Tuple[int, ...]:
    """Slurm's compressed per-node counts (``2(x3),1``) as ``n`` integers.

    Raises:
        InventoryError: malformed, or not ``n`` values.
    """
    out: List[int] = []
    for part in text.split(","):
        m = _COUNT_RE.match(part.strip())
        if not m:
            raise InventoryError(f"{what}={text!r}: expected counts like 2(x3),1")
        reps = int(m.group(2) or 1)
        if reps > MAX_HOSTS or len(out) + reps > MAX_HOSTS:
            raise InventoryError(f"{what}={text!r} names more than {MAX_HOSTS} nodes")
        out.extend([int(m.group(1))] * reps)
    if len(out) != n:
        raise InventoryError(f"{what}={text!r} gives {len(out)} values for {n} nodes")
    return tuple(out)


def allocation_job_id(environ: Mapping[str, str]) -> str:
    """The Slurm job id of the allocation ``environ`` is inside (``SLURM_JOB_ID``, or the older
    ``SLURM_JOBID``); ``""`` outside one."""
    return environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""


def in_allocation(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` is that of a process inside a Slurm allocation."""
    return bool(allocation_job_id(environ))


def parse_allocation(environ: Mapping[str, str], per_host: Optional[int] = None) -> Allocation:
    """The allocation described by ``environ`` (see the module doc).

    Args:
        environ: the ``SLURM_*`` variables (any mapping; others are ignored).
        per_host: ``--per-host``: slots per node, overriding Slurm's counts.

    Raises:
        PlanError: not inside an allocation (says to use salloc or ``mslaunch sbatch``).
        InventoryError: a malformed variable.
    """
    job_id = allocation_job_id(environ)
    if not job_id:
        raise PlanError(
            "--launcher slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set); "
            "run it under salloc/sbatch, or submit with 'mslaunch sbatch ...'",
            field="--launcher",
        )
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise InventoryError("SLURM_JOB_NODELIST is not set inside the allocation; is this a Slurm job?")
    nodes = tuple(expand_hostlist(nodelist, limit=MAX_HOSTS, what="SLURM_JOB_NODELIST"))
    n = len(nodes)
    if per_host is not None:
        slots = (per_host,) * n
    elif environ.get("SLURM_NTASKS_PER_NODE"):
        slots = parse_counts(environ["SLURM_NTASKS_PER_NODE"], 1, "SLURM_NTASKS_PER_NODE") * n
    elif (
        environ.get("SLURM_TASKS_PER_NODE")
        and max(parse_counts(environ["SLURM_TASKS_PER_NODE"], n, "SLURM_TASKS_PER_NODE")) > 1
    ):
        slots = parse_counts(environ["SLURM_TASKS_PER_NODE"], n, "SLURM_TASKS_PER_NODE")
    elif environ.get("SLURM_JOB_CPUS_PER_NODE"):
        slots = parse_counts(environ["SLURM_JOB_CPUS_PER_NODE"], n, "SLURM_JOB_CPUS_PER_NODE")
    else:
        slots = (1,) * n
    slots = tuple(min(max(s, 1), MAX_SLOTS) for s in slots)
    restart = environ.get("SLURM_RESTART_COUNT", "0")
    return Allocation(job_id=job_id, nodes=nodes, slots=slots, restart_count=int(restart) if restart.isdigit() else 0)


def tasks_on_node(environ: Mapping[str, str]) -> Optional[Tuple[int, int]]:
    """``(tasks of this step on this node, this task's index among them)`` inside a Slurm task,
    from ``SLURM_STEP_TASKS_PER_NODE`` (``2(x2),1``, this node's entry at ``SLURM_NODEID``), else
    ``SLURM_NTASKS_PER_NODE``, else ``SLURM_TASKS_PER_NODE``, and ``SLURM_LOCALID``; None when
    they are missing or malformed."""
    local = environ.get("SLURM_LOCALID", "")
    node = environ.get("SLURM_NODEID", "0")
    if not local.isdigit() or not node.isdigit():
        return None
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        text = environ.get(name)
        if not text:
            continue
        counts: List[int] = []
        for part in text.split(","):
            m = _COUNT_RE.match(part.strip())
            if not m:
                return None
            counts.extend([int(m.group(1))] * min(int(m.group(2) or 1), MAX_HOSTS))
        index = int(node) if len(counts) > 1 else 0
        if index < len(counts) and int(local) < counts[index]:
            return counts[index], int(local)
        return None
    return None


def _node_field(text: str, key: str) -> Dict[str, str]:
    """Node name -> the value of ``key`` from ``scontrol show node -o`` (one node per line, ``Key=Value``)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        name, value = fields.get("NodeName"), fields.get(key)
        if name and value:
            out[name] = value
    return out


def parse_node_addrs(text: str) -> Dict[str, str]:
    """Node name -> NodeAddr from ``scontrol show node -o``."""
    return _node_field(text, "NodeAddr")


def parse_node_states(text: str) -> Dict[str, str]:
    """Node name -> ``State`` from ``scontrol show node -o`` (``MIXED+NOT_RESPONDING``: a base
    state and its flags, joined by ``+``)."""
    return _node_field(text, "State")


def node_lost(node: str, state: str) -> Optional[str]:
    """How Slurm says ``node`` is lost, from its ``State`` (see :func:`parse_node_states`): its
    base state is ``DOWN`` or it has the ``NOT_RESPONDING`` flag (its slurmd stopped answering
    slurmctld: ``sinfo`` shows it with a ``*``); None for a node in any other state (``DRAIN``
    and ``FAIL`` are an administrator's, the node still runs)."""
    parts = state.upper().split("+")
    if parts[0].rstrip("*") == "DOWN" or "NOT_RESPONDING" in parts[1:] or state.endswith("*"):
        return f"Slurm node {node} is {state}"
    return None


def allocation_inventory(
    alloc: Allocation, addrs: Mapping[str, str], narrow: Optional[Sequence[Tuple[str, Optional[int]]]] = None
) -> Inventory:
    """The inventory of ``alloc``: one host per node (name = node name, ``addr`` = its NodeAddr).

    Args:
        alloc: the allocation.
        addrs: node name -> address (missing: the name itself).
        narrow: ``-H``: ``(node, slots or None)`` pairs; only those nodes, in that order, with
            those slots (None: the allocation's).

    Raises:
        InventoryError: a ``-H`` node outside the allocation.
    """
    slots = dict(zip(alloc.nodes, alloc.slots))
    chosen: List[Tuple[str, int]]
    if narrow:
        chosen = []
        for name, n in narrow:
            if name not in slots:
                raise InventoryError(f"-H: node {name!r} is not in the allocation ({', '.join(alloc.nodes)})")
            chosen.append((name, n if n is not None else slots[name]))
    else:
        chosen = list(zip(alloc.nodes, alloc.slots))
    hosts = tuple(
        Host(name=name, slots=n, addr=addrs.get(name), source=f"SLURM job {alloc.job_id}") for name, n in chosen
    )
    return Inventory(hosts=hosts, source=f"SLURM job {alloc.job_id}")


def parse_narrow(text: str) -> List[Tuple[str, Optional[int]]]:
    """``-H`` for the slurm backend: ``node[1-2]:2,node3`` -> ``[(node1, 2), (node2, 2), (node3, None)]``.

    A ``:N`` after a hostlist element applies to every node it names.

    Raises:
        InventoryError: a bad hostlist or slot count.
    """
    from launcher.planning.inventory.hostlist import split_elements

    out: List[Tuple[str, Optional[int]]] = []
    for element in split_elements(text):
        name, sep, count = element.rpartition(":") if ":" in element.rsplit("]", 1)[-1] else (element, "", "")
        n: Optional[int] = None
        if sep:
            if not count.isdigit() or not 1 <= int(count) <= MAX_SLOTS:
                raise InventoryError(f"-H {text!r}: slots after ':' must be 1..{MAX_SLOTS}, got {count!r}")
            n = int(count)
        for node in expand_hostlist(name, limit=MAX_HOSTS, what="-H"):
            out.append((node, n))
    return out


@dataclass(frozen=True)
class SrunStep:
    """One srun job step of the slurm backend.

    Attributes:
        argv: the srun command line (the shim and its arguments at the end).
        hostfile: ``SLURM_HOSTFILE`` lines (one node per task, in task order) for
            ``--distribution=arbitrary``; empty when the step names its node with ``-w``.
    """

    argv: Tuple[str, ...]
    hostfile: Tuple[str, ...] = ()


def srun_steps(
    nodes_by_task: Sequence[str],
    scheduler_node: Optional[str],
    python: str,
    tasks_file: str,
    step_name: str,
    srun: str = "srun",
) -> Tuple[Optional[SrunStep], SrunStep]:
    """The scheduler's step (or None) and the workers' step (pure).

    Workers: ONE step of ``len(nodes_by_task)`` tasks, task ``i`` on ``nodes_by_task[i]``
    (``--distribution=arbitrary`` with ``SLURM_HOSTFILE``), ``--kill-on-bad-exit=1`` so a failing
    task ends the step at once; each task runs the shim (``python -m
    launcher.execution.slurm.shim TASKS_FILE workers``), which runs the rank ``SLURM_PROCID``.
    Both steps use ``--overlap`` (the scheduler shares the first node's CPUs with workers) and
    ``--overcommit`` (the plan, not Slurm's CPU count, decides how many ranks a node runs).

    Args:
        nodes_by_task: the node of each worker rank, rank order.
        scheduler_node: the scheduler's node, or None (no scheduler).
        python: interpreter that runs the shim on the nodes.
        tasks_file: the JSON file the shim reads (on the shared filesystem).
        step_name: the steps' name (``--job-name``), how cleanup finds them.
        srun: the srun executable.
    """
    common = (
        srun,
        f"--job-name={step_name}",
        "--overlap",
        "--overcommit",
        "--input=none",
        "--kill-on-bad-exit=1",
        "--cpu-bind=none",
        "--export=ALL",
    )
    sched = None
    if scheduler_node is not None:
        sched = SrunStep(
            common
            + (
                "--nodes=1",
                "--ntasks=1",
                f"--nodelist={scheduler_node}",
                python,
                "-m",
                "launcher.execution.slurm.shim",
                tasks_file,
                "scheduler",
            )
        )
    distinct = list(dict.fromkeys(nodes_by_task))
    workers = SrunStep(
        common
        + (
            f"--nodes={len(distinct)}",
            f"--ntasks={len(nodes_by_task)}",
            "--distribution=arbitrary",
            python,
            "-m",
            "launcher.execution.slurm.shim",
            tasks_file,
            "workers",
        ),
        hostfile=tuple(nodes_by_task),
    )
    return sched, workers


def parse_job_record(text: str) -> Dict[str, str]:
    """The fields of ``scontrol show job -o JOB`` (one line of ``Key=Value``) as a dict; the first
    of a repeated key wins. Values with spaces (a command line) are cut at the space: only the
    state fields (``JobState``, ``Reason``, ``Restarts``, ``PreemptTime``) are read."""
    fields: Dict[str, str] = {}
    for token in text.split():
        key, eq, value = token.partition("=")
        if eq and key and key not in fields:
            fields[key] = value
    return fields


def outside_stop(fields: Mapping[str, str], job_id: str, restart_count: int) -> Optional[Tuple[str, str]]:
    """Whether Slurm itself is ending the run of job ``job_id`` that mslaunch runs in (its
    ``scontrol show job`` fields, asked after a stop signal or a failure), as ``(status, message)``
    for the summary; None when Slurm is not (the failure is the job's own).

    - a preemption (``PreemptTime`` set, not before this run's ``StartTime``: Slurm signals the
      steps at once and ends the job after the partition's ``GraceTime``), or a requeue (``Restarts`` above this run's
      ``SLURM_RESTART_COUNT``, ``restart_count``): ``preempted`` — the job runs again;
    - the time limit (``Reason=TimeLimit``, ``TIMEOUT``, ``DEADLINE``): ``timeout``;
    - a cancel (``CANCELLED``, or ``COMPLETING`` while mslaunch still runs in it): ``stopped``.
    """
    state = fields.get("JobState", "")
    reason = fields.get("Reason", "None")
    preempt = fields.get("PreemptTime", "None")
    start = fields.get("StartTime", "")
    if preempt in ("None", "Unknown", "") or (start[:1].isdigit() and preempt < start):
        preempt = ""  # none, or that of an earlier run of a requeued job (ISO times compare as text)
    restarts_text = fields.get("Restarts", "0")
    restarts = int(restarts_text) if restarts_text.isdigit() else 0
    if preempt or state == "PREEMPTED":
        return "preempted", f"Slurm preempted job {job_id}" + (f" at {preempt}" if preempt else "")
    if restarts > restart_count or state.startswith("REQUEUE"):
        return "preempted", f"Slurm requeued job {job_id}"
    if state in ("TIMEOUT", "DEADLINE") or reason in ("TimeLimit", "DeadLine"):
        return "timeout", f"Slurm job {job_id} reached its time limit"
    if state in ("CANCELLED", "COMPLETING"):
        return "stopped", f"Slurm cancelled job {job_id}"
    return None
