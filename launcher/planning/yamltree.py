"""A bounded, non-recursive YAML composer for cluster files (see :func:`yaml_tree`)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from launcher.errors import InventoryError
from launcher.planning.hosts import SURROGATE_RE, clip, show


class Node:
    """A YAML value with the 1-based line it started on (and, for the node budget, its size)."""

    __slots__ = ("value", "line", "size")

    def __init__(self, value: Any, line: int, size: int = 1) -> None:
        self.value = value
        self.line = line
        self.size = size


#: Largest YAML cluster file accepted (characters): 16,384 hosts with devices, device IPs and env.
#: (Parse time follows the YAML nodes, bounded below, not the characters.)
MAX_YAML_CHARS = 4 * 1024 * 1024
#: Deepest nesting of YAML collections accepted (a cluster file needs 4).
MAX_YAML_DEPTH = 32
#: Most YAML nodes a cluster file may expand to, counting an alias once per use.
#: (300,000: 16,384 hosts with a device list each, or 10,000 with device lists and inline device
#: IPs; the worst file is refused in about 1.5 s.)
MAX_YAML_NODES = 300_000

_PLAIN_INT_RE = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
_PLAIN_WORD_RE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*\Z")
#: Plain words YAML 1.1 resolves to something other than a string (booleans, null, .inf, ...).
_IPV4_RE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}\Z")
_QUOTES = ("'", '"')
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", ".inf", ".nan"})
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


def _check_str(value: str, what: str, where: str, line: int) -> None:
    """Refuse a string the OS cannot take (a NUL byte) or that is not Unicode text (a surrogate)."""
    if "\0" in value:
        raise InventoryError(f"{what} contains a NUL character", path=where, line=line)
    if SURROGATE_RE.search(value):
        raise InventoryError(f"{what} contains a lone surrogate (\\ud800-\\udfff); write valid Unicode", path=where, line=line)


def yaml_tree(text: str, where: str) -> Optional[Node]:
    """Compose ``text`` into a tree of :class:`Node` (dicts, lists, scalars) without recursion.

    PyYAML's composer recurses once per nesting level and expands every alias each time it is
    used, so a 100k-deep flow list raises RecursionError (libyaml's composer crashes the
    process) and nine levels of nine aliases take minutes and gigabytes.  This reads the event
    stream of libyaml's parser (PyYAML's pure parser if libyaml is missing; neither recurses) and
    builds the tree with an explicit stack, refusing nesting deeper than :data:`MAX_YAML_DEPTH`,
    a document that expands to more than :data:`MAX_YAML_NODES` nodes (an alias counts as
    many nodes as it stands for, wherever it is, used or not), recursive and undefined aliases,
    tagged collections, non-scalar keys, duplicate keys and strings holding NUL or surrogates.
    Scalars are resolved and constructed as ``yaml.safe_load`` does.

    Raises:
        InventoryError: ``where:line`` and one line of text for each of the above and any
            YAML syntax error.
    """
    import yaml  # lazy: only YAML inventories pay for it

    if len(text) > MAX_YAML_CHARS:
        raise InventoryError(f"larger than {MAX_YAML_CHARS >> 20} MiB; is this a cluster file?", path=where)
    bad = SURROGATE_RE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise InventoryError("not Unicode text (lone surrogate)", path=where, line=line)

    loader_cls = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    composer = _Composer(yaml, where)
    try:
        for event in yaml.parse(text, Loader=loader_cls):
            composer.feed(event)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise composer.fail(f"invalid YAML: {exc.problem or exc.context or 'syntax error'}", mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise composer.fail(f"invalid YAML: character U+{char:04X} is not allowed in YAML (control character)", line) from None
    except yaml.YAMLError as exc:
        raise composer.fail(f"invalid YAML: {_first_line(exc)}", None) from None
    return composer.root


_NO_KEY = object()


class _Composer:
    """Builds the :class:`Node` tree from parser events (the state of one :func:`yaml_tree` call).

    Args:
        yaml: the ``yaml`` module (imported lazily by :func:`yaml_tree`).
        where: the file name for messages.
    """

    def __init__(self, yaml: Any, where: str) -> None:
        self.yaml = yaml
        self.where = where
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.SafeLoader("")
        self.anchors: Dict[str, Node] = {}
        self.open_anchors: Dict[str, int] = {}
        # Frames: [node, anchor, pending key (mappings; _NO_KEY when none), key line]
        self.stack: List[List[Any]] = []
        self.root: Optional[Node] = None
        self.documents = 0
        self.scalar_event = yaml.ScalarEvent

    def fail(self, message: str, line: Optional[int]) -> InventoryError:
        """The error to raise for ``message`` at ``line``."""
        return InventoryError(message, path=self.where, line=line)

    def feed(self, event: Any) -> None:
        """Take one parser event.

        Raises:
            InventoryError: see :func:`yaml_tree`.
        """
        yaml = self.yaml
        mark = event.start_mark
        line = mark.line + 1 if mark is not None else None
        if type(event) is self.scalar_event:  # the common case first (exact class: libyaml's events)
            node = self.scalar(event, line)
            if event.anchor is not None:
                self.anchors[event.anchor] = node
            self.add(node, line)
        elif isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise self.fail("more than one YAML document ('---'); a cluster file is one document", line)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise self.fail(f"recursive alias *{event.anchor} (it is used inside its own anchor)", line)
            target = self.anchors.get(event.anchor)
            if target is None:
                raise self.fail(f"undefined alias *{event.anchor}", line)
            self.add(Node(target.value, line, target.size), line)
        elif isinstance(event, yaml.ScalarEvent):
            node = self.scalar(event, line)
            if event.anchor is not None:
                self.anchors[event.anchor] = node
            self.add(node, line)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if event.tag not in _COLLECTION_TAGS:
                raise self.fail(f"unsupported tag {clip(event.tag)} on a collection", line)
            if len(self.stack) >= MAX_YAML_DEPTH:
                raise self.fail(f"nested deeper than {MAX_YAML_DEPTH} levels", line)
            value: Any = [] if isinstance(event, yaml.SequenceStartEvent) else {}
            if event.anchor is not None:
                self.open_anchors[event.anchor] = line
            self.stack.append([Node(value, line), event.anchor, _NO_KEY, None])
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            node, anchor, _, _ = self.stack.pop()
            if anchor is not None:
                self.open_anchors.pop(anchor, None)
                self.anchors[anchor] = node
            self.add(node, node.line)

    def add(self, node: Node, line: int) -> None:
        """Put a finished node into its parent (a list item, a mapping key, or a key's value)."""
        if not self.stack:
            self.root = node
            return
        frame = self.stack[-1]
        parent: Node = frame[0]
        parent.size += node.size
        if parent.size > MAX_YAML_NODES:
            raise self.fail(f"the document expands to more than {MAX_YAML_NODES} YAML nodes (aliases count each time they are used)", line)
        if isinstance(parent.value, list):
            parent.value.append(node)
            return
        if frame[2] is _NO_KEY:
            if isinstance(node.value, (dict, list)):
                raise self.fail("mapping keys must be plain values", line)
            key = node.value
            try:
                hash(key)
            except TypeError:
                raise self.fail("mapping keys must be plain values", line) from None
            if key in parent.value:
                raise self.fail(f"duplicate key {show(key)}", line)
            frame[2], frame[3] = key, line
        else:
            parent.value[frame[2]] = node
            frame[2] = _NO_KEY

    def scalar(self, event: Any, line: int) -> Node:
        """A scalar event as ``yaml.safe_load`` would construct it (plain words and ints on a fast path)."""
        yaml = self.yaml
        tag = event.tag
        if tag is None and event.implicit[0]:  # fast path for the common plain words and numbers
            text = event.value
            if _PLAIN_INT_RE.match(text):
                return Node(int(text), line)
            if _PLAIN_WORD_RE.match(text) and text.lower() not in _YAML_WORDS:
                return Node(text, line)
            if _IPV4_RE.match(text):  # never an int, float or timestamp in YAML 1.1
                return Node(text, line)
        elif tag is None and event.style in _QUOTES and event.implicit[1]:  # '...' and "...": strings
            _check_str(event.value, f"value {clip(event.value)}", self.where, line)
            return Node(event.value, line)
        if tag is None or tag == "!":
            tag = self.resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise self.fail(f"invalid YAML value: {exc.problem or exc.context or 'cannot construct it'}", line) from None
        except Exception as exc:  # odd scalars: '!!float y', '!!int 9...9' beyond the digit limit
            short = tag.replace("tag:yaml.org,2002:", "!!")
            if tag == "tag:yaml.org,2002:int" and len(event.value) > 1000 and isinstance(exc, ValueError):
                raise self.fail(f"integer {clip(event.value)} has too many digits", line) from None
            raise self.fail(f"invalid YAML value {clip(event.value)} for tag {short}: {_first_line(exc)}", line) from None
        if isinstance(value, str):
            _check_str(value, f"value {clip(event.value)}", self.where, line)
        return Node(value, line)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
