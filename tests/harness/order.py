"""The order pytest-xdist hands the tests out in (``make test`` runs them with ``-n 4 --dist worksteal``).

The suite is bound by the machine's CPU, and a few MindSpore tests take minutes each.  Left in
collection order they start late and run on, one per worker, after every other test is done.
:func:`spread` puts the longest tests at the head of the workers' first hand-outs instead (worksteal
gives worker ``i`` the next ``len(pending) // (workers - i)`` tests, in order, and steals from the
*end* of a worker's list later), balanced by their measured times: they start at once, beside
the short tests, and are never stolen (so tests sharing a module fixture stay on one worker).
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

__all__ = ["LONG", "spread"]

#: ``(nodeid prefixes, seconds)`` of the longest tests, as measured in a ``make test`` run here
#: (CPU-bound, so under load).  Tests matched by one entry run one after the other on one worker.
LONG: Sequence[Tuple[Tuple[str, ...], float]] = (
    (("tests/integration/test_slurm_e2e.py::test_trainer_under_sbatch_is_preempted",), 113),
    (("tests/workloads/test_resnet50.py::test_training_run_logs", "tests/workloads/test_resnet50.py::test_resume_continues"), 106),
    (("tests/integration/test_hang_mindspore.py::test_trainer_killed_after_a_checkpoint",), 79),
    (("tests/integration/test_hang_cluster.py::test_hung_job_over_ssh",), 63),
    (("tests/integration/test_health_cluster.py::test_health_verdicts_and_preflight_modes",), 52),
    (("tests/integration/test_msrun_e2e.py::test_two_nodes_node_rank_like_msrun",), 49),
    (("tests/integration/test_hang_cluster.py::test_hung_job_under_slurm",), 47),
    (("tests/integration/test_hang_mindspore.py::test_collective_timeout_without_hang_watch",), 42),
    (("tests/integration/test_msrun_e2e.py::test_two_nodes_worker_failure_on_node1",), 40),
    (("tests/integration/test_msrun_e2e.py::test_single_node_docs_line",), 35),
)


def _sizes(n: int, workers: int) -> List[int]:
    sizes, left = [], n
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def spread(items: List[Any], workers: int) -> List[Any]:
    """``items`` reordered for ``workers`` worksteal workers (unchanged for fewer than 2)."""
    if workers < 2:
        return items
    groups: List[Tuple[float, List[Any]]] = []
    taken = set()
    for prefixes, seconds in LONG:
        members = [it for it in items if it.nodeid.startswith(prefixes) and id(it) not in taken]
        if members:
            groups.append((seconds, members))
            taken.update(id(m) for m in members)
    if not groups:
        return items
    rest = [it for it in items if id(it) not in taken]
    load = [0.0] * workers
    heads: List[List[Any]] = [[] for _ in range(workers)]
    for seconds, members in sorted(groups, key=lambda g: -g[0]):
        w = min(range(workers), key=lambda k: (load[k], k))
        heads[w].extend(members)
        load[w] += seconds
    out: List[Any] = []
    pos = 0
    for w, size in enumerate(_sizes(len(items), workers)):
        need = max(0, size - len(heads[w]))
        out.extend(heads[w])
        out.extend(rest[pos:pos + need])
        pos += need
    out.extend(rest[pos:])
    assert len(out) == len(items), (len(out), len(items))
    return out
