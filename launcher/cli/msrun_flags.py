"""msrun's flags that need parsing: ``--join``, ``--node_rank auto``, ``--bind_numa``,
``--tail_worker_log`` (pure functions; :mod:`launcher.cli.options` uses them)."""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Tuple

from launcher.errors import PlanError

#: Where ``--node_rank auto`` finds this node's index, first match wins: the Ascend
#: Kubernetes operator (and msrun users by hand) set ``MS_NODE_RANK``; Slurm sets
#: ``SLURM_NODEID`` in a step; OpenMPI sets ``OMPI_COMM_WORLD_RANK`` (start one mslaunch per
#: node, e.g. ``mpirun --map-by ppr:1:node``); a Kubernetes Indexed Job sets
#: ``JOB_COMPLETION_INDEX``, Volcano's ``env`` plugin ``VC_TASK_INDEX``.
NODE_RANK_VARS = ("MS_NODE_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_RANK", "JOB_COMPLETION_INDEX", "VC_TASK_INDEX")


def parse_msrun_bool(text: str, field: str) -> bool:
    """msrun's booleans (``--join=True``): ``True``/``False`` (also lower case, ``1``/``0``).

    Raises:
        PlanError: any other value, naming ``field``.
    """
    value = {"true": True, "false": False, "1": True, "0": False}.get(text.strip().lower())
    if value is None:
        raise PlanError(f"expected True or False, got {text!r}", field=field)
    return value


def node_rank_from_env(environ: Mapping[str, str]) -> Tuple[int, str]:
    """``--node_rank auto``: this node's index from a cluster manager's environment.

    Returns:
        ``(node_rank, variable it came from)``.

    Raises:
        PlanError: none of :data:`NODE_RANK_VARS` is set, or the value is not an integer >= 0.
    """
    for name in NODE_RANK_VARS:
        text = environ.get(name)
        if text is None or text == "":
            continue
        try:
            value = int(text)
        except ValueError:
            raise PlanError(f"{name}={text!r} is not a node index", field="--node_rank") from None
        if value < 0:
            raise PlanError(f"{name}={text!r} is not a node index", field="--node_rank")
        return value, name
    raise PlanError(
        f"--node_rank auto: none of {', '.join(NODE_RANK_VARS)} is set; pass --node_rank N", field="--node_rank"
    )


def parse_bind_numa(text: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """msrun's ``--bind_numa``: ``True``/``False``, a JSON dict ``{"device0": ["0"], "scheduler": ["1"]}``
    or a bind JSON file.  Returns the dict form as ``(key, nodes)`` pairs, which become a
    ``numactl --membind N --cpunodebind N`` prefix; ``True`` and files only bind through device
    (NPU) topology msrun reads from the Ascend driver, so on other machines they bind nothing
    (as with msrun there).

    Raises:
        PlanError: a value msrun would refuse.
    """
    import json
    import re

    if text is None or text.strip().lower() in ("true", "false"):
        return ()
    if text.lower().endswith(".json"):
        if not os.path.isfile(text):
            raise PlanError(f"no such bind_numa json file {text}", field="--bind_numa")
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise PlanError(
            f"expected True, False, a JSON dict or a .json file, got {text!r}", field="--bind_numa"
        ) from None
    if not isinstance(value, dict):
        raise PlanError(f"expected a JSON dict, got {text!r}", field="--bind_numa")
    if any(k in value for k in ("bind_config", "bind_cpu", "bind_memory")):
        return ()
    out: List[Tuple[str, str]] = []
    for key, nodes in value.items():
        if not re.fullmatch(r"device\d+|scheduler", key):
            raise PlanError(f"key {key!r} must be 'scheduler' or 'deviceN'", field="--bind_numa")
        if not isinstance(nodes, list) or not all(
            isinstance(n, str) and re.fullmatch(r"\d+-\d+|\d+(,\d+)*", re.sub(r"\s+", "", n)) for n in nodes
        ):
            raise PlanError(
                f'{key}: expected a list of NUMA ids like ["0"] or ["0-1"], got {nodes!r}', field="--bind_numa"
            )
        out.append((key, ",".join(re.sub(r"\s+", "", n) for n in nodes)))
    return tuple(out)


def tail_ranks(text: str) -> Optional[Tuple[int, ...]]:
    """msrun's ``--tail_worker_log``: ``-1`` (every rank: None) or ``0,3``.

    Raises:
        PlanError: anything else.
    """
    if text.strip() == "-1":
        return None
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise PlanError(f"expected -1 or ranks like 0,3, got {text!r}", field="--tail_worker_log") from None
