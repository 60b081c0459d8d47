"""A bounded, non-recursive YAML composer for cluster files (see :func:`yaml_tree`)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.inventory.model import SURROGATE_RE, clip, show


class Node:
    """A YAML value with the 1-based line it started on: the document's root (values inside
    collections have their lines in the collection's ``lines``)."""

    __slots__ = ("value", "line")

    def __init__(self, value: Any, line: Optional[int]) -> None:
        self.value = value
        self.line = line


class YamlMap(dict):
    """A YAML mapping: a plain ``dict`` of the constructed keys and values, plus ``lines``,
    key -> the 1-based line its value starts on (for messages)."""

    __slots__ = ("lines",)
    lines: Dict[Any, int]


class YamlSeq(list):
    """A YAML sequence: a plain ``list`` of the constructed items, plus ``lines``, the 1-based
    line each item starts on (for messages)."""

    __slots__ = ("lines",)
    lines: List[int]


#: Largest YAML cluster file accepted (characters): 16,384 hosts with devices, device IPs and env.
#: (Parse time follows the YAML nodes, bounded below, not the characters.)
MAX_YAML_CHARS = 4 * 1024 * 1024
#: Deepest nesting of YAML collections accepted (a cluster file needs 4).
MAX_YAML_DEPTH = 32
#: Most YAML nodes a cluster file may expand to, counting an alias once per use.
#: (300,000: 16,384 hosts with a device list each, or 10,000 with device lists and inline device
#: IPs; the worst file is refused in about 1.5 s.)
MAX_YAML_NODES = 300_000

#: Plain scalars YAML 1.1 resolves to an int that ``int()`` reads alike (no sign, ``_``, base or
#: leading zero), short enough to stay clear of the integer digit limit.
_MAX_FAST_INT_DIGITS = 18
_IPV4_RE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}\Z")  # never an int, float or timestamp in YAML 1.1
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}
_BUDGET_MESSAGE = (
    f"the document expands to more than {MAX_YAML_NODES} YAML nodes (aliases count each time they are used)"
)


def _check_str(value: str, what: str, where: str, line: int) -> None:
    """Refuse a string the OS cannot take (a NUL byte) or that is not Unicode text (a surrogate)."""
    if "\0" in value:
        raise InventoryError(f"{what} contains a NUL character", path=where, line=line)
    if SURROGATE_RE.search(value):
        raise InventoryError(
            f"{what} contains a lone surrogate (\\ud800-\\udfff); write valid Unicode", path=where, line=line
        )


def yaml_tree(text: str, where: str) -> Optional[Node]:
    """Compose ``text`` into plain values without recursion: the root as a :class:`Node`.

    Mappings are :class:`YamlMap` (a ``dict``), sequences :class:`YamlSeq` (a ``list``), each
    with the line of every value in ``lines``; scalars are resolved and constructed as
    ``yaml.safe_load`` does (an alias is the very value of its anchor).  None when the text
    holds no document.

    PyYAML's composer recurses once per nesting level and expands every alias each time it is
    used, so a 100k-deep flow list raises RecursionError (libyaml's composer crashes the
    process) and nine levels of nine aliases take minutes and gigabytes.  This reads the event
    stream of libyaml's parser (PyYAML's pure parser if libyaml is missing; neither recurses) and
    builds the values with an explicit stack, refusing nesting deeper than :data:`MAX_YAML_DEPTH`,
    a document that expands to more than :data:`MAX_YAML_NODES` nodes (an alias counts as
    many nodes as it stands for, wherever it is, used or not), recursive and undefined aliases,
    tagged collections, non-scalar keys, duplicate keys and strings holding NUL or surrogates.

    Raises:
        InventoryError: ``where:line`` and one line of text for each of the above and any
            YAML syntax error.
    """
    import yaml  # lazy: only YAML inventories pay for it

    if len(text) > MAX_YAML_CHARS:
        raise InventoryError(f"larger than {MAX_YAML_CHARS >> 20} MiB; is this a cluster file?", path=where)
    bad = SURROGATE_RE.search(text)
    if bad is not None:
        raise InventoryError("not Unicode text (lone surrogate)", path=where, line=text.count("\n", 0, bad.start()) + 1)

    loader_cls = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    composer = _Composer(yaml, where)
    loader = None
    try:
        loader = loader_cls(text)  # the pure-Python reader already checks the characters here
        return composer.compose(loader.get_event)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        if "maximum nesting depth" in str(exc.problem):  # libyaml's own bound (1,000 levels), met while it scans ahead
            raise composer.fail(f"nested deeper than {MAX_YAML_DEPTH} levels", line) from None
        raise composer.fail(f"invalid YAML: {exc.problem or exc.context or 'syntax error'}", line) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise composer.fail(
            f"invalid YAML: character U+{char:04X} is not allowed in YAML (control character)", line
        ) from None
    except yaml.YAMLError as exc:
        raise composer.fail(f"invalid YAML: {_first_line(exc)}", None) from None
    finally:
        if loader is not None:
            loader.dispose()


_NO_KEY = object()


class _Composer:
    """Builds the values from parser events (the state of one :func:`yaml_tree` call).

    Args:
        yaml: the ``yaml`` module (imported lazily by :func:`yaml_tree`).
        where: the file name for messages.
    """

    def __init__(self, yaml: Any, where: str) -> None:
        self.yaml = yaml
        self.where = where
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.SafeLoader("")
        resolvers = self.resolver.yaml_implicit_resolvers
        #: first character -> the implicit resolvers YAML 1.1 tries for plain scalars starting
        #: with it (PyYAML's own table); a plain scalar whose first character has none is a string.
        self.first: Optional[Dict[str, List[Tuple[str, Any]]]] = None if resolvers.get(None) else resolvers

    def fail(self, message: str, line: Optional[int]) -> InventoryError:
        """The error to raise for ``message`` at ``line``."""
        return InventoryError(message, path=self.where, line=line)

    def compose(self, get_event: Any) -> Optional[Node]:
        """Read every event from ``get_event`` (None at the end) and return the root.

        One loop with the open collection in local variables: this runs once per YAML node
        (about 200,000 for 4,096 A3 servers), so it avoids a call per event where it can.

        Raises:
            InventoryError: see :func:`yaml_tree`.
        """
        yaml = self.yaml
        scalar_cls, alias_cls = yaml.ScalarEvent, yaml.AliasEvent
        map_start, seq_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
        map_end, seq_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
        doc_start = yaml.DocumentStartEvent
        first = self.first
        ipv4 = _IPV4_RE.match
        surrogate = SURROGATE_RE.search
        fail = self.fail
        no_key = _NO_KEY
        budget = MAX_YAML_NODES
        # anchor -> (value, nodes it stands for); anchors of collections still open -> line
        anchors: Dict[str, Tuple[Any, int]] = {}
        open_anchors: Dict[str, int] = {}
        # the open collections above the current one: (collection, lines, is mapping, pending
        # key, anchor, node count before it, line)
        stack: List[Tuple[Any, Any, bool, Any, Optional[str], int, int]] = []
        cur: Any = None  # the collection being filled (None: at the top)
        cur_lines: Any = None
        cur_map = False
        key: Any = no_key  # a mapping's key waiting for its value
        cur_anchor: Optional[str] = None
        cur_before = 0
        cur_line = 0
        count = 0
        documents = 0
        root: Optional[Node] = None
        while True:
            event = get_event()
            if event is None:
                return root
            cls = type(event)  # exact classes: libyaml's events are these, never subclasses
            if cls is scalar_cls:
                line = event.start_mark.line + 1
                count += 1
                if count > budget:
                    raise fail(_BUDGET_MESSAGE, line)
                text = event.value
                value: Any = None
                done = False
                if event.tag is None:
                    if event.implicit[0]:  # plain: resolved by its first character's rules
                        if first is not None:
                            rules = first.get(text[:1]) if text else None
                            if text and rules is None:
                                value, done = text, True
                            elif (
                                text.isdigit()
                                and text.isascii()
                                and len(text) <= _MAX_FAST_INT_DIGITS
                                and (text[0] != "0" or len(text) == 1)
                            ):
                                value, done = int(text), True
                            elif ipv4(text):
                                value, done = text, True
                            elif rules is not None:
                                for _, rule in rules:
                                    if rule.match(text):
                                        break
                                else:
                                    value, done = text, True
                    elif event.implicit[1]:  # quoted or block: a string, escapes only in "..."
                        if "\0" in text or (event.style == '"' and surrogate(text)):
                            _check_str(text, f"value {clip(text)}", self.where, line)
                        value, done = text, True
                if not done:
                    value = self.construct(event, line)
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1)
                is_collection = False
            elif cls is map_start or cls is seq_start:
                line = event.start_mark.line + 1
                if event.tag not in _COLLECTION_TAGS:
                    raise fail(f"unsupported tag {clip(event.tag)} on a collection", line)
                if len(stack) >= MAX_YAML_DEPTH:
                    raise fail(f"nested deeper than {MAX_YAML_DEPTH} levels", line)
                stack.append((cur, cur_lines, cur_map, key, cur_anchor, cur_before, cur_line))
                cur_before = count
                count += 1
                if count > budget:
                    raise fail(_BUDGET_MESSAGE, line)
                if cls is map_start:
                    cur, cur_map = YamlMap(), True
                    cur.lines = cur_lines = {}
                else:
                    cur, cur_map = YamlSeq(), False
                    cur.lines = cur_lines = []
                key, cur_anchor, cur_line = no_key, event.anchor, line
                if cur_anchor is not None:
                    open_anchors[cur_anchor] = line
                continue
            elif cls is map_end or cls is seq_end:
                value, line = cur, cur_line
                if cur_anchor is not None:
                    open_anchors.pop(cur_anchor, None)
                    anchors[cur_anchor] = (value, count - cur_before)
                cur, cur_lines, cur_map, key, cur_anchor, cur_before, cur_line = stack.pop()
                is_collection = True
            elif cls is alias_cls:
                line = event.start_mark.line + 1
                name = event.anchor
                if name in open_anchors:
                    raise fail(f"recursive alias *{name} (it is used inside its own anchor)", line)
                target = anchors.get(name)
                if target is None:
                    raise fail(f"undefined alias *{name}", line)
                value, size = target
                count += size
                if count > budget:
                    raise fail(_BUDGET_MESSAGE, line)
                is_collection = isinstance(value, (dict, list))
            elif cls is doc_start:
                documents += 1
                if documents > 1:
                    mark = event.start_mark
                    raise fail(
                        "more than one YAML document ('---'); a cluster file is one document",
                        mark.line + 1 if mark else None,
                    )
                continue
            else:  # stream start/end, document end
                continue
            # put the finished value into the open collection
            if cur_map:
                if key is no_key:
                    if is_collection:
                        raise fail("mapping keys must be plain values", line)
                    try:
                        duplicate = value in cur
                    except TypeError:
                        raise fail("mapping keys must be plain values", line) from None
                    if duplicate:
                        raise fail(f"duplicate key {show(value)}", line)
                    key = value
                else:
                    cur[key] = value
                    cur_lines[key] = line
                    key = no_key
            elif cur is not None:
                cur.append(value)
                cur_lines.append(line)
            else:
                root = Node(value, line)

    def construct(self, event: Any, line: int) -> Any:
        """A scalar the fast paths of :meth:`compose` leave (tags, booleans, nulls, floats, ...)
        as ``yaml.safe_load`` would construct it.

        Raises:
            InventoryError: the value cannot be constructed, or is a string holding NUL or
                surrogates.
        """
        yaml = self.yaml
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise self.fail(
                f"invalid YAML value: {exc.problem or exc.context or 'cannot construct it'}", line
            ) from None
        except Exception as exc:  # odd scalars: '!!float y', '!!int 9...9' beyond the digit limit
            short = tag.replace("tag:yaml.org,2002:", "!!")
            if tag == "tag:yaml.org,2002:int" and len(event.value) > 1000 and isinstance(exc, ValueError):
                raise self.fail(f"integer {clip(event.value)} has too many digits", line) from None
            raise self.fail(
                f"invalid YAML value {clip(event.value)} for tag {short}: {_first_line(exc)}", line
            ) from None
        if isinstance(value, str):
            _check_str(value, f"value {clip(event.value)}", self.where, line)
        return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
