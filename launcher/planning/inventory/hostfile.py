"""OpenMPI hostfiles, read as OpenMPI 4.1 reads them (pure).

The grammar (docs/inventories.md has it with examples; OpenMPI's own is the flex lexer
``orte/util/hostfile/hostfile_lex.l`` and ``hostfile.c``)::

    file     := line*
    line     := host item* [comment]
    host     := [user "@"] name [":" N]      # name may be a Slurm hostlist: node[01-04]
    item     := key [ws] "=" [ws] value
    comment  := "#" ... | "//" ...           # to the end of the line
                "/*" ... "*/"                # may span lines; each end ends a host line

Keys (case-sensitive, as OpenMPI's):

* slots: ``slots``, ``cpu``, ``count`` (and ``slot``, which OpenMPI refuses);
* most slots: ``max_slots``, ``max-slots``, ``slots_max``, ``slots-max``, and the same with
  ``cpu`` or ``count`` for ``slots``; alone it also sets the slots, as in OpenMPI;
* SSH user: ``username``, ``user_name``, ``user-name`` (or ``user@host``), port: ``port``.

A host listed again on a later line gets one more slot (the machinefile habit of one line per
slot); such a line may not set ``slots=`` (OpenMPI refuses it too). ``host:N`` means N slots.

Deliberately stricter than OpenMPI 4.1.4 (each refused with one line naming ``path:line``):
words that are not ``key=value`` (OpenMPI ignores them), ``slots=0``, ``port=0``, a final
``max_slots`` below ``slots``, ``^host`` lines, rankfile ``rank N=host`` lines, relative
``+n0`` / ``+e`` nodes, quoted values, an empty ``username=``. Different meaning: a host written
without ``slots=`` has 1 slot (OpenMPI: the host's cores, learned when its daemon starts), and
names are kept as written (OpenMPI cuts a domain: ``node1.example.com`` is ``node1``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.inventory.hostlist import expand_hostlist, is_hostlist_name
from launcher.planning.inventory.model import (
    MAX_HOSTS,
    Host,
    Inventory,
    SshOptions,
    check_host_name,
    clip,
    positive_int,
)

#: Keys that set a host's slots.
SLOTS_KEYS = frozenset({"slots", "cpu", "count", "slot"})
#: Keys that set a host's most slots (OpenMPI's aliases).
MAX_SLOTS_KEYS = frozenset(
    f"{a}{sep}{b}"
    for word in ("slots", "cpu", "count")
    for sep in ("_", "-")
    for a, b in ((word, "max"), ("max", word))
)
#: Keys that set a host's SSH user.
USER_KEYS = frozenset({"username", "user_name", "user-name"})
#: Keys that set a host's SSH port.
PORT_KEYS = frozenset({"port"})

#: A user name mslaunch passes to ssh: no leading ``-`` (it would read as an option).
USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}\Z")

#: A line whose first non-blank character starts something other than a ``#`` comment.
_CONTENT_LINE_RE = re.compile(r"^[^\S\n]*([^#\s][^\n]*)", re.MULTILINE)
_EQUALS_RE = re.compile(r"\s*=\s*")
_SPACED_EQUALS_RE = re.compile(r"\s=|=\s")
_BLOCK_RE = re.compile(r"/\*|\*/")


@dataclass
class _Entry:
    """A host being read: what its lines said so far."""

    name: str
    line: int
    slots: int = 1
    slots_given: bool = False
    max_slots: Optional[int] = None
    user: Optional[str] = None
    port: Optional[int] = None
    source: str = ""


def _cut_line_comment(text: str) -> str:
    return text.split("#", 1)[0].split("//", 1)[0]


def _logical_lines(text: str) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of each host line, comments removed (blank ones skipped).

    Without ``/*`` in the file, blank and ``#`` lines are skipped by one regex (in C)."""
    if "/*" not in text:
        lineno, counted = 1, 0
        for match in _CONTENT_LINE_RE.finditer(text):
            lineno += text.count("\n", counted, match.start())
            counted = match.start()
            line = _cut_line_comment(match.group(1)).strip()
            if line:
                yield lineno, line
        return
    in_block = False
    for lineno, physical in enumerate(text.split("\n"), start=1):
        rest = physical
        while True:  # each /* and */ ends the host line before it (as in OpenMPI's lexer)
            if in_block:
                end = rest.find("*/")
                if end < 0:
                    break
                rest, in_block = rest[end + 2 :], False
                continue
            block = _BLOCK_RE.search(rest)
            head = rest if block is None else rest[: block.start()]
            cut = _cut_line_comment(head)
            if cut.strip():
                yield lineno, cut.strip()
            if block is None or len(cut) < len(head):  # no block, or it is inside a line comment
                break
            if block.group(0) == "*/":
                raise InventoryError("'*/' without an opening '/*'", line=lineno)
            rest, in_block = rest[block.end() :], True


def _host_spec(spec: str, where: str, lineno: int) -> Tuple[List[str], Optional[str], Optional[int]]:
    """The names, user and ``:N`` slots of a line's first word."""
    if spec.startswith("^"):
        raise InventoryError(
            f"{clip(spec)}: '^host' lines are not read (OpenMPI 4.1 does not exclude with them); use --exclude",
            path=where,
            line=lineno,
        )
    if spec.startswith("+"):
        raise InventoryError(
            f"{clip(spec)}: relative nodes (+n0, +e) need an existing allocation; name the hosts",
            path=where,
            line=lineno,
        )
    if spec == "rank":
        raise InventoryError(
            "'rank N=host' is a rankfile line; list hosts here (mslaunch assigns the ranks)", path=where, line=lineno
        )
    user: Optional[str] = None
    if "@" in spec:
        user, _, spec = spec.partition("@")
        if "@" in spec or not USER_RE.match(user):
            raise InventoryError(
                f"invalid user@host {clip(user + '@' + spec)}; write user@host", path=where, line=lineno
            )
    slots: Optional[int] = None
    if ":" in spec and not spec.startswith("[") and spec.count(":") == 1:
        spec, count = spec.split(":", 1)
        slots = positive_int(count, "slot count after ':'", where, lineno)
    names = [spec]
    if "[" in spec and is_hostlist_name(spec):
        try:
            names = expand_hostlist(spec, limit=MAX_HOSTS, what="hostlist")
        except InventoryError as exc:
            raise InventoryError(exc.message, path=where, line=lineno) from None
    for name in names:
        check_host_name(name, where, lineno)
    return names, user, slots


def _apply(entry: _Entry, items: List[str], where: str, lineno: int, repeat: bool) -> None:
    """Apply a line's ``key=value`` items to ``entry`` (OpenMPI's order-dependent rules)."""
    got_max = False
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InventoryError(f"expected key=value, got {clip(item)} (e.g. 'slots=8')", path=where, line=lineno)
        if '"' in value:
            raise InventoryError(
                f"{key}: quoted values are not read, got {clip(value)}; write {key}=value", path=where, line=lineno
            )
        if key in SLOTS_KEYS:
            if entry.slots_given:
                again = (
                    f"host {entry.name!r} is listed again (first at line {entry.line}) with slots=: a repeated line "
                    "adds one slot; "
                    "list each host once with its total slots"
                )
                raise InventoryError(again if repeat else "slots given twice", path=where, line=lineno)
            entry.slots, entry.slots_given = positive_int(value, "slots", where, lineno), True
        elif key in MAX_SLOTS_KEYS:
            most = positive_int(value, "max_slots", where, lineno)
            if most < entry.slots:
                raise InventoryError(f"max_slots={most} is below slots={entry.slots}", path=where, line=lineno)
            entry.max_slots, got_max = most, True
        elif key in USER_KEYS:
            if not USER_RE.match(value):
                raise InventoryError(
                    f"{key} must be a user name (letters, digits, '_', '.', '-'), got {clip(value)}",
                    path=where,
                    line=lineno,
                )
            entry.user = value
        elif key in PORT_KEYS:
            entry.port = positive_int(value, "port", where, lineno, limit=65535)
        else:
            raise InventoryError(
                f"unknown hostfile key {clip(key)}; use slots=N, max_slots=N, username=U or port=P",
                path=where,
                line=lineno,
            )
    if got_max and not entry.slots_given:
        entry.slots, entry.slots_given = entry.max_slots or entry.slots, True


def parse_hostfile(text: str, path: Optional[str] = None) -> Inventory:
    """Parse an OpenMPI hostfile (grammar: this module's docstring).

    Raises:
        InventoryError: naming ``path:line`` for any malformed line, numbers out of range, more
            than :data:`MAX_HOSTS` hosts, a final ``max_slots`` below ``slots``, or an empty file.
    """
    where = path or "<hostfile>"
    entries: Dict[str, _Entry] = {}
    lines = _logical_lines(text)
    while True:
        try:
            item = next(lines)
        except StopIteration:
            break
        except InventoryError as exc:
            raise InventoryError(exc.message, path=where, line=exc.line) from None
        lineno, line = item
        parts = (_EQUALS_RE.sub("=", line) if _SPACED_EQUALS_RE.search(line) else line).split()
        names, user, colon_slots = _host_spec(parts[0], where, lineno)
        for name in names:
            entry = entries.get(name)
            repeat = entry is not None
            if entry is None:
                if len(entries) >= MAX_HOSTS:
                    raise InventoryError(f"more than {MAX_HOSTS} hosts", path=where, line=lineno)
                entry = entries[name] = _Entry(name=name, line=lineno, source=f"{where}:{lineno}")
                entry.user = user
            else:
                if colon_slots is not None:
                    raise InventoryError(
                        f"host {name!r} is listed again (first at line {entry.line}): a repeated line adds one slot",
                        path=where,
                        line=lineno,
                    )
                if user is not None and user != entry.user:
                    raise InventoryError(
                        f"host {name!r} is listed again (first at line {entry.line}) with another user",
                        path=where,
                        line=lineno,
                    )
                entry.slots, entry.slots_given = entry.slots + 1, True
            if colon_slots is not None:
                entry.slots, entry.slots_given = colon_slots, True
            before = (entry.user, entry.port)
            _apply(entry, parts[1:], where, lineno, repeat)
            changed = [old for old, new in zip(before, (entry.user, entry.port)) if old is not None and new != old]
            if repeat and changed:
                raise InventoryError(
                    f"host {name!r} is listed again (first at line {entry.line}) with another user or port",
                    path=where,
                    line=lineno,
                )
    if not entries:
        raise InventoryError("no hosts in hostfile; add lines like 'node1 slots=8'", path=where)
    hosts = []
    for e in entries.values():
        if e.max_slots is not None and e.max_slots < e.slots:
            raise InventoryError(
                f"max_slots={e.max_slots} is below slots={e.slots} of host {e.name!r}", path=where, line=e.line
            )
        hosts.append(
            Host(
                name=e.name,
                slots=e.slots,
                max_slots=e.max_slots,
                ssh=SshOptions(user=e.user, port=e.port),
                source=e.source,
            )
        )
    return Inventory(tuple(hosts), source=path)
