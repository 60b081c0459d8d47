"""The allocation ``mslaunch sbatch`` asks Slurm for, and its stand-in at submit time (pure).

The job's shape is ``--nodes`` (N), ``--ntasks`` (n) and ``--ntasks-per-node`` (T); the run's
is ``--np`` and ``--per-host`` (P).  What the user leaves out is derived (:func:`derive_shape`):

=================================  ==============================================================
given                              derived (``#SBATCH`` lines)
=================================  ==============================================================
none of N, n, T                    ``T = P`` (else ``--np``: one node), ``N = ceil(np / T)``
N only                             ``T = P`` (else ``ceil(np / N)``)
T only                             ``N = ceil(np / min(T, P))``
n, or N and T                      nothing
=================================  ==============================================================

so ``--np 16 --per-host 8`` asks for ``--nodes=2 --ntasks-per-node=8``.  A shape that cannot
hold ``--np`` ranks, or a ``--per-host`` above ``--ntasks-per-node``, is refused.

At submit time the run options are checked against a stand-in of that allocation: nodes
``node1..nodeN`` (the least N of a ``MIN-MAX`` range) with the ``SLURM_*`` variables Slurm
would export (:func:`stand_in_environ`), read by the same
:func:`~launcher.planning.backends.slurm.parse_allocation` the run uses inside the allocation.
Checks that need the real node names (``-H``, ``--include``/``--exclude``, the hccn.conf
files named after the nodes) are left to the run in the allocation; only their syntax is
checked here (:func:`stand_in_inventory`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from launcher.errors import PlanError
from launcher.planning.backends.slurm import Allocation, allocation_inventory, parse_allocation, parse_narrow
from launcher.planning.inventory.filters import parse_filter
from launcher.planning.inventory.model import MAX_HOSTS, MAX_SLOTS, Inventory

_NODES_RE = re.compile(r"^(\d{1,6})(?:-(\d{1,6}))?$")
#: The job id of the stand-in allocation.
STAND_IN_JOB = "submit-check"


@dataclass(frozen=True)
class Shape:
    """The allocation asked for.

    Attributes:
        nodes: ``--nodes`` as Slurm reads it (``"2"``, ``"2-4"``), or None (Slurm's default).
        ntasks: ``--ntasks``, or None.
        ntasks_per_node: ``--ntasks-per-node``, or None.
        derived: the options mslaunch filled in (``"--nodes"``, ``"--ntasks-per-node"``).
    """

    nodes: Optional[str] = None
    ntasks: Optional[int] = None
    ntasks_per_node: Optional[int] = None
    derived: Tuple[str, ...] = ()

    @property
    def min_nodes(self) -> Optional[int]:
        """The fewest nodes Slurm may give (the low end of a range), or None."""
        return parse_nodes(self.nodes)[0] if self.nodes is not None else None

    def directives(self) -> List[str]:
        """The ``#SBATCH`` option texts of the shape, in the order N, n, T."""
        out = []
        for flag, value in (
            ("--nodes", self.nodes),
            ("--ntasks", self.ntasks),
            ("--ntasks-per-node", self.ntasks_per_node),
        ):
            if value is not None:
                out.append(f"{flag}={value}")
        return out

    def describe(self) -> str:
        """``-N 2 --ntasks-per-node 2`` as given or derived (for messages)."""
        return " ".join(d.replace("=", " ") for d in self.directives()) or "Slurm's default of one task"


#: A ``#SBATCH`` value written as it is; any other is double-quoted (:func:`directive`).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:@%+,=~^-]*")
#: What no ``#SBATCH`` line can hold: a newline ends the line (and its rest would be a command of
#: the script, after which sbatch reads no more directives); CR and NUL are as bad.
_LINE_BREAKERS = ("\n", "\r", "\0")


def check_directive_text(text: str, field: str) -> str:
    """``text`` if it can go on one ``#SBATCH`` line.

    Raises:
        PlanError: ``text`` holds a newline, a carriage return or a NUL (naming ``field``).
    """
    if any(c in text for c in _LINE_BREAKERS):
        raise PlanError(
            f"{text!r} holds a newline, carriage return or NUL, which no #SBATCH line can hold; remove it",
            field=field,
        )
    return text


def quote_directive_value(value: str) -> str:
    """``value`` as sbatch's ``#SBATCH`` parser reads it back whole.

    That parser (Slurm's ``src/sbatch/opt.c``, ``_get_argument``) splits a line at blanks outside
    double quotes, takes ``\\`` as escaping the next character (inside quotes too) and an unescaped
    ``#`` as the start of a comment (in older Slurm releases even inside quotes).  So a value of only
    ``[A-Za-z0-9_./:@%+,=~^-]`` is written as it is; any other in double quotes, with ``\\``, ``"``
    and ``#`` escaped by a backslash.
    """
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return '"' + re.sub(r'([\\"#])', r"\\\1", value) + '"'


def directive(flag: str, value: str, field: Optional[str] = None) -> str:
    """The ``#SBATCH`` option text ``flag=value``, the value quoted for sbatch (:func:`quote_directive_value`).

    Args:
        flag: the sbatch option (``--job-name``).
        value: its value, as the user gave it.
        field: the option to name in an error (default ``flag``; ``--log-dir`` for ``--output``).

    Raises:
        PlanError: ``value`` holds a newline, a carriage return or a NUL.
    """
    check_directive_text(value, field or flag)
    return f"{flag}={quote_directive_value(value)}"


def parse_nodes(text: str) -> Tuple[int, Optional[int]]:
    """``--nodes``: ``N`` or ``MIN-MAX`` as ``(min, max or None)``.

    Raises:
        PlanError: another form, or a count below 1 or above :data:`MAX_HOSTS`.
    """
    m = _NODES_RE.match(text.strip())
    if not m:
        raise PlanError(f"expected a node count N or MIN-MAX, got {text!r}", field="--nodes")
    low, high = int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
    if not 1 <= low <= MAX_HOSTS or (high is not None and not low <= high <= MAX_HOSTS):
        raise PlanError(f"node counts must be 1..{MAX_HOSTS} (MIN <= MAX), got {text!r}", field="--nodes")
    return low, high


def _positive(value: Optional[int], flag: str, limit: int) -> Optional[int]:
    if value is not None and not 1 <= value <= limit:
        raise PlanError(f"must be 1..{limit}, got {value}", field=flag)
    return value


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def derive_shape(
    nodes: Optional[str],
    ntasks: Optional[int],
    ntasks_per_node: Optional[int],
    np: Optional[int],
    per_host: Optional[int],
) -> Shape:
    """The shape asked for, with what is missing derived from ``np`` and ``per_host`` (module doc).

    ``np`` / ``per_host`` below 1 are ignored here: the run's own check refuses them.

    Raises:
        PlanError: a malformed ``--nodes``, a count below 1, a ``--per-host`` above
            ``--ntasks-per-node``, or a shape that cannot hold ``np`` ranks.
    """
    if nodes is not None:
        parse_nodes(nodes)
    _positive(ntasks, "--ntasks", MAX_HOSTS * MAX_SLOTS)
    _positive(ntasks_per_node, "--ntasks-per-node", MAX_SLOTS)
    np = np if np is not None and np >= 1 else None
    per_host = per_host if per_host is not None and per_host >= 1 else None
    if per_host is not None and ntasks_per_node is not None and per_host > ntasks_per_node:
        raise PlanError(
            f"--per-host {per_host} is more than the --ntasks-per-node {ntasks_per_node} asked for; "
            "raise --ntasks-per-node or leave it out (derived from --per-host)",
            field="--per-host",
        )
    derived: List[str] = []
    if nodes is None and ntasks is None and ntasks_per_node is None:
        per_node = per_host if per_host is not None else np
        if per_node is not None:
            ntasks_per_node = per_node
            nodes = str(_ceil(np, per_node) if np is not None else 1)
            derived = ["--nodes", "--ntasks-per-node"]
    elif nodes is not None and ntasks is None and ntasks_per_node is None:  # -N only
        if per_host is not None or np is not None:
            ntasks_per_node = per_host if per_host is not None else _ceil(np or 1, parse_nodes(nodes)[0])
            derived = ["--ntasks-per-node"]
    elif ntasks_per_node is not None and nodes is None and ntasks is None and np is not None:  # --ntasks-per-node only
        nodes = str(_ceil(np, min(ntasks_per_node, per_host or ntasks_per_node)))
        derived = ["--nodes"]
    if ntasks_per_node is not None and ntasks_per_node > MAX_SLOTS:
        raise PlanError(f"--np {np} on one node is more than {MAX_SLOTS} tasks; give --per-host or -N", field="--np")
    shape = Shape(nodes=nodes, ntasks=ntasks, ntasks_per_node=ntasks_per_node, derived=tuple(derived))
    check_capacity(shape, np, per_host)
    return shape


def _tasks_per_node(shape: Shape) -> Tuple[int, ...]:
    """Tasks on each stand-in node, as Slurm spreads them (``-N 2 -n 3``: 2, 1)."""
    n_nodes = shape.min_nodes
    if shape.ntasks_per_node is not None:
        if n_nodes is None:
            n_nodes = _ceil(shape.ntasks, shape.ntasks_per_node) if shape.ntasks is not None else 1
        return (shape.ntasks_per_node,) * n_nodes
    if shape.ntasks is not None:
        n_nodes = min(n_nodes or 1, shape.ntasks)
        base, extra = divmod(shape.ntasks, n_nodes)
        return tuple(base + 1 if i < extra else base for i in range(n_nodes))
    return (1,) * (n_nodes or 1)


def stand_in_environ(shape: Shape) -> Dict[str, str]:
    """The ``SLURM_*`` variables of the allocation ``shape`` asks for, on nodes ``node1..nodeN``.

    Without tasks asked for, Slurm gives one task per node and the run counts each node's CPUs
    (unknown here): the stand-in gives each node one slot then.
    """
    tasks = _tasks_per_node(shape)
    env = {
        "SLURM_JOB_ID": STAND_IN_JOB,
        "SLURM_JOB_NODELIST": f"node[1-{len(tasks)}]" if len(tasks) > 1 else "node1",
        "SLURM_TASKS_PER_NODE": ",".join(str(t) for t in tasks),
        "SLURM_JOB_CPUS_PER_NODE": ",".join(str(t) for t in tasks),
    }
    if shape.ntasks_per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(shape.ntasks_per_node)
    return env


def check_capacity(shape: Shape, np: Optional[int], per_host: Optional[int]) -> None:
    """Refuse a shape whose stand-in allocation has fewer slots than ``np`` ranks.

    Raises:
        PlanError: naming the shape and what to change.
    """
    if np is None:
        return
    alloc = parse_allocation(stand_in_environ(shape), per_host)
    slots = sum(alloc.slots)
    if np > slots:
        cap = f" at --per-host {per_host}" if per_host is not None else ""
        raise PlanError(
            f"{np} ranks do not fit the allocation asked for ({shape.describe()}: {slots} slots{cap}); "
            "ask for more, or leave -N/--ntasks/--ntasks-per-node out to have them derived from --np and --per-host",
            field="--np",
        )


def stand_in_inventory(
    alloc: Allocation, host_list: Optional[str], include: Optional[str], exclude: Optional[str]
) -> Inventory:
    """The stand-in allocation as an inventory (node names as addresses).

    ``-H``, ``--include`` and ``--exclude`` name real nodes, unknown at submit time: only their
    syntax is checked (as the run reads them), and they are not applied.  Device IPs come from
    hccn.conf files named after the real nodes (``--hccn-dir``): each stand-in device has a
    placeholder address (198.18.0.0/15, never dialled), used where no file names the stand-in.

    Raises:
        InventoryError: a malformed ``-H``, ``--include`` or ``--exclude``, or both filters.
    """
    if host_list:
        parse_narrow(host_list)
    if include and exclude:
        from launcher.errors import InventoryError

        raise InventoryError("--include and --exclude are mutually exclusive", field="--include")
    for flag, text in (("--include", include), ("--exclude", exclude)):
        if text:  # an empty filter filters nothing (as in the run)
            parse_filter(text, flag)
    inv = allocation_inventory(alloc, {}, None)
    base = int(ipaddress.IPv4Address("198.18.0.0"))  # unique per device (a rank table refuses repeats)
    hosts = tuple(
        replace(
            h,
            device_ips=tuple(
                (d, str(ipaddress.IPv4Address(base + (i * len(h.device_ids) + k) % (1 << 17))))
                for k, d in enumerate(h.device_ids)
            ),
        )
        for i, h in enumerate(inv.hosts)
    )
    return Inventory(hosts, source=inv.source)
