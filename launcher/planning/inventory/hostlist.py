"""Slurm hostlists: expand ``node[01-04,07],gpu-[1-2]a`` to host names and fold them back (pure).

Expansion and folding are ClusterShell's :class:`~ClusterShell.NodeSet.NodeSet` (a maintained
library that reads Slurm's syntax, zero padding included), not a pattern of our own. Around it
this module adds what an inventory needs:

- the order written is kept, as ``scontrol show hostnames`` keeps it: elements in order
  (``b1,a[1-2]`` gives ``b1, a1, a2``), ranges inside brackets in order (``n[3,1-2]`` gives
  ``n3, n1, n2``; each range is read by ClusterShell's ``RangeSet``), the first bracket of
  ``a[1-2]b[5-6]`` varying slowest;
- zero padding as Slurm reads it: the width is the low end's, as written (``n[01-2]`` gives
  ``n01, n02``; ``n[1-02]`` gives ``n1, n2``; ``n[98-101]`` and ``n[05-101]`` run past the width
  as Slurm does). ClusterShell refuses ends of unequal padding, so such a range is rewritten
  into ranges it reads (:func:`slurm_ranges`) before it is expanded;
- ClusterShell's own extensions that Slurm does not have (``@group`` lookups, which read files
  under /etc, the set operators ``!``, ``&``, ``^`` and range steps ``/N``) are refused, so an
  expansion never depends on this machine's configuration;
- a bound: a list naming more than ``limit`` hosts is refused before anything is expanded
  (``node[1-100000000]`` costs nothing to refuse).
"""

from __future__ import annotations

from typing import Iterable, List

from launcher.errors import InventoryError

#: Characters ClusterShell treats as group or set operators; Slurm hostlists never contain them.
NOT_SLURM = frozenset("@!&^*?/")
#: Longest hostlist text accepted (a 10k-node allocation's folded list is far shorter).
MAX_TEXT = 1 << 20


def has_brackets(text: str) -> bool:
    """Whether ``text`` uses hostlist ranges (``[...]``) and so needs expanding."""
    return "[" in text


def split_elements(text: str) -> List[str]:
    """``text`` split at the commas outside brackets (``a[1,2],b`` → ``['a[1,2]', 'b']``).

    Raises:
        InventoryError: unbalanced or nested brackets.
    """
    parts: List[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise InventoryError(f"nested '[' at character {i + 1} of hostlist {clip(text)}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InventoryError(f"']' without '[' at character {i + 1} of hostlist {clip(text)}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise InventoryError(f"missing ']' in hostlist {clip(text)}")
    parts.append(text[start:])
    return parts


def expand_hostlist(text: str, *, limit: int, what: str = "hostlist") -> List[str]:
    """The host names a Slurm hostlist names, in the order written (as ``scontrol show hostnames``).

    Args:
        text: ``node[01-04,07]``, ``gpu[1-2]-ib[0-1]``, ``a1,b[2-3]``, or a plain name.
        limit: the most names accepted (refused before expanding).
        what: how messages name the source (a flag, ``file:line``...).

    Returns:
        The names; duplicates are kept (an inventory refuses them, naming the host).

    Raises:
        InventoryError: empty elements, bad ranges (``x[3-1]``, ``x[a-b]``), unbalanced brackets,
            Slurm-foreign syntax, or more than ``limit`` names.
    """
    if len(text) > MAX_TEXT:
        raise InventoryError(f"{what} is longer than {MAX_TEXT} characters")
    bad = sorted(set(text) & NOT_SLURM)
    if bad or any(ch.isspace() for ch in text):
        shown = repr(bad[0]) if bad else "white space"
        raise InventoryError(f"{what} {clip(text)} contains {shown}, which no Slurm hostlist has")
    names: List[str] = []
    for element in split_elements(text):
        if not element:
            raise InventoryError(f"{what} {clip(text)} has an empty element (check the commas)")
        if not has_brackets(element):
            names.append(element)
        else:
            if len(names) + bound(element) > limit:
                raise InventoryError(f"{what} {clip(text)} names more than {limit} hosts")
            names.extend(_expand_element(element, what, text))
        if len(names) > limit:
            raise InventoryError(f"{what} {clip(text)} names more than {limit} hosts")
    return names


def _expand_element(element: str, what: str, text: str) -> List[str]:
    """One bracketed element (``a[1-2]b[5,3]`` -> a1b5 a1b3 a2b5 a2b3): each range is read by
    ClusterShell's :class:`~ClusterShell.RangeSet.RangeSet` (numbers, zero padding), ranges are
    taken in the order written, the first bracket varying slowest, as Slurm does."""
    from ClusterShell.RangeSet import RangeSet, RangeSetParseError

    head, _, rest = element.partition("[")
    names = [head]
    while True:
        group, _, rest = rest.partition("]")
        values: List[str] = []
        for piece in group.split(","):
            try:
                for part in slurm_ranges(piece):
                    values.extend(RangeSet(part))
            except (RangeSetParseError, ValueError, TypeError) as exc:
                detail = str(exc).split(" : ")[0] if str(exc) else "not a range"
                raise InventoryError(
                    f"{what} {clip(text)}: bad range {piece!r} in {clip(element)} ({detail})"
                ) from None
        literal, _, rest = rest.partition("[")
        names = [name + value + literal for name in names for value in values]
        if not rest:
            return names


def slurm_ranges(piece: str) -> List[str]:
    """One range of a bracket (``N`` or ``LO-HI``) as ranges ClusterShell's ``RangeSet`` reads with
    Slurm's meaning: the names are zero padded to the width of ``LO`` as written, whatever ``HI``'s
    width (``01-2`` -> ``01-02``; ``1-02`` -> ``1-2``; ``05-101`` -> ``05-99, 100-101``).
    Anything else (``3-1``, ``a-b``) is left for ``RangeSet`` to refuse."""
    lo, dash, hi = piece.partition("-")
    if not (dash and lo.isdigit() and hi.isdigit()) or len(lo) > 18 or len(hi) > 18:
        return [piece]
    if int(hi) < int(lo):  # refused by RangeSet for what it is, not for its padding
        return [f"{int(lo)}-{int(hi)}"]
    width, top = len(lo), int(hi)
    if len(str(top)) <= width:
        return [f"{lo}-{str(top).zfill(width)}"]
    return [f"{lo}-{'9' * width}", f"{10**width}-{top}"]


def is_hostlist_name(name: str) -> bool:
    """Whether ``name`` written as a host is a Slurm hostlist to expand (``node[1-4]``,
    ``n[01,03]x``), not a host name: it has ranges of digits in brackets and does not start
    with ``[`` (``[fe80::1]`` and ``[::1]`` are bracketed addresses)."""
    if "[" not in name or name.startswith("["):
        return False
    for group in name.split("[")[1:]:
        inside, sep, _ = group.partition("]")
        if not sep or not inside or not set(inside) <= _RANGE_CHARS:
            return False
    return True


_RANGE_CHARS = frozenset("0123456789-,")


def bound(element: str) -> int:
    """An upper bound of the names one element (``a[1-4,7]b[01-02]``) expands to, computed from
    its ranges' ends without expanding them: ClusterShell materialises every name of a range, so
    ``node[1-100000000]`` must be refused before it reaches it. Pieces that are not ``N`` or
    ``N-M`` count 1 (ClusterShell refuses them)."""
    total = 1
    for group in element.split("[")[1:]:
        count = 0
        for piece in group.split("]", 1)[0].split(","):
            lo, _, hi = piece.partition("-")
            if hi and lo.isdigit() and hi.isdigit() and len(lo) < 19 and len(hi) < 19:
                count += max(int(hi) - int(lo) + 1, 1)
            elif hi and lo.isdigit() and hi.isdigit():
                count += 1 << 62
            else:
                count += 1
        total *= max(count, 1)
    return total


def fold_hostlist(names: Iterable[str]) -> str:
    """The shortest Slurm hostlist ClusterShell folds ``names`` into (sorted, padding kept)."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    return str(NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP))


def clip(text: str, limit: int = 60) -> str:
    """``repr`` of ``text`` shortened for messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


__all__ = ["expand_hostlist", "fold_hostlist", "has_brackets", "is_hostlist_name", "slurm_ranges", "split_elements"]
