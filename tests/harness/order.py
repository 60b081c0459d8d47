"""The order pytest-xdist hands the tests out in (``make test`` runs them with ``-n 4 --dist worksteal``).

The suite is bound by the machine's CPU, and a few MindSpore tests take minutes each.  Left in
collection order they start late and run on, one per worker, after every other test is done.
:func:`spread` puts the longest tests at the head of the workers' first hand-outs instead (worksteal
gives worker ``i`` the next ``len(pending) // (workers - i)`` tests, in order, and steals from the
*end* of a worker's list later), balanced by their measured times: they start at once, beside
the short tests, and are never stolen (so tests sharing a module fixture stay on one worker).

A long test says how long it is itself, with ``@pytest.mark.cost(seconds)`` (see :func:`cost_of`):
the time moves with the test when it is renamed or moved, and goes when it is deleted.  A table
of test ids here went stale without a sound on a rename (the test ran last again, unnoticed).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

__all__ = ["cost_of", "spread"]


def cost_of(item: Any) -> Tuple[str, float]:
    """The group key and measured seconds of a test marked ``pytest.mark.cost(seconds, group=None)``.

    The seconds are those of a ``make test`` run here (CPU-bound, so under load).  Tests of one
    module marked with the same ``group`` (e.g. the users of one module fixture that does the
    work) are one group: they run one after the other on one worker, and the group's seconds are
    the sum of its members'.  Without a group a test is a group of its own.

    Raises:
        ValueError: the marker's arguments are not one positive number and an optional group name.
    """
    marker = item.get_closest_marker("cost")
    ok = (
        marker is not None
        and len(marker.args) == 1
        and isinstance(marker.args[0], (int, float))
        and not isinstance(marker.args[0], bool)
        and marker.args[0] > 0
        and set(marker.kwargs) <= {"group"}
    )
    if not ok:
        raise ValueError(
            f"{item.nodeid}: write the cost marker as pytest.mark.cost(SECONDS, group=NAME), with SECONDS > 0"
            f" (got {marker.args if marker else None} {marker.kwargs if marker else ''})"
        )
    group = marker.kwargs.get("group")
    module = item.nodeid.split("::", 1)[0]
    return (f"{module}::[{group}]" if group else item.nodeid), float(marker.args[0])


def _sizes(n: int, workers: int) -> List[int]:
    sizes, left = [], n
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def spread(items: List[Any], workers: int) -> List[Any]:
    """``items`` reordered for ``workers`` worksteal workers (unchanged for fewer than 2)."""
    by_key: Dict[str, Tuple[float, List[Any]]] = {}
    for it in items:
        if it.get_closest_marker("cost") is None:
            continue
        key, seconds = cost_of(it)
        total, members = by_key.get(key, (0.0, []))
        by_key[key] = (total + seconds, members + [it])
    groups = list(by_key.values())
    if workers < 2 or not groups:  # (the markers are checked on every run all the same)
        return items
    taken = {id(m) for _, members in groups for m in members}
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
        out.extend(rest[pos : pos + need])
        pos += need
    out.extend(rest[pos:])
    assert len(out) == len(items), (len(out), len(items))
    return out
