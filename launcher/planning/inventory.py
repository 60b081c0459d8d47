"""Inventories: which hosts a job may use, with how many slots, and what is known of each.

Three sources, each with a pure ``parse_*`` on text and a thin ``read_*`` on a path:

* an OpenMPI hostfile (``host slots=N [max_slots=M]``, ``host:N``, bare ``host`` = 1 slot,
  ``#`` comments and blank lines),
* a ``-H h1:8,h2:8`` list,
* a YAML cluster file (see :func:`parse_cluster_yaml` for its keys).

Host filters (``--include`` / ``--exclude``) use DeepSpeed's syntax ``host1:0,1@host2`` and are
applied before anything is generated.

Bad input never gets further than one :class:`~launcher.errors.InventoryError` naming
``path:line`` (or the flag): numbers are ASCII digits within :data:`MAX_SLOTS`,
:data:`MAX_DEVICE_ID` and :data:`MAX_HOSTS`; YAML is bounded in size, depth and alias expansion
(see :func:`_yaml_tree`); env values are checked by :func:`env_problem`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.textfile import read_text

#: Hostnames mslaunch considers "this machine" (the local launcher is chosen for them).
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


def is_local(name: str) -> bool:
    """Whether host ``name`` (as written in an inventory or a plan) is this machine: the one
    answer every layer uses (:data:`LOCAL_NAMES`)."""
    return name in LOCAL_NAMES

_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-:\[\]%]+$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIGITS_RE = re.compile(r"[0-9]+\Z")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")

#: Most slots (processes) one host may claim: far above any accelerator server, low enough that
#: rank assignment never allocates much.
MAX_SLOTS = 1024
#: Largest device id a host may list.
MAX_DEVICE_ID = 1023
#: Most hosts one inventory may hold.
MAX_HOSTS = 16384
#: Longest ``NAME=VALUE`` string Linux passes to a new process (MAX_ARG_STRLEN, 32 pages).
MAX_ENV_ENTRY_BYTES = 128 * 1024 - 1


def env_problem(key: str, value: str) -> Optional[str]:
    """What makes ``key=value`` unusable as an environment variable of a process, or None.

    A name must be an identifier (``[A-Za-z_][A-Za-z0-9_]*``); a value must be a string without
    NUL characters or lone surrogates (it is passed to the OS as UTF-8), and ``NAME=VALUE``
    must fit in Linux's limit for one string of a new process (:data:`MAX_ENV_ENTRY_BYTES`).
    """
    if not isinstance(key, str) or not _ENV_KEY_RE.fullmatch(key):
        return f"invalid variable name {_show(key)}; use letters, digits and _ (not starting with a digit)"
    if not isinstance(value, str):
        return f"the value must be a string, got {type(value).__name__}"
    if "\0" in value:
        return "the value contains a NUL character, which no process environment can hold"
    if _SURROGATE_RE.search(value):
        return "the value contains a lone surrogate (\\ud800-\\udfff), which is not UTF-8 text"
    if len(key) + 1 + len(value.encode("utf-8")) > MAX_ENV_ENTRY_BYTES:
        return f"NAME=VALUE is longer than {MAX_ENV_ENTRY_BYTES} bytes, the most Linux passes to a process"
    return None


@dataclass(frozen=True)
class SshOptions:
    """Per-host SSH settings from a YAML inventory; ``None`` means "ssh config / default"."""

    user: Optional[str] = None
    port: Optional[int] = None
    key: Optional[str] = None


@dataclass(frozen=True)
class Host:
    """One host of an inventory.

    Attributes:
        name: host name or IP as written in the inventory (what SSH / mpirun are given).
        slots: number of processes (devices) this host may run.
        max_slots: OpenMPI's ``max_slots``, kept for rendering hostfiles.
        devices: device ids to use, in order; ``None`` means ``0..slots-1``.
        server_id: rank-table ``server_id``; ``None`` means ``name``.
        addr: an address every host can reach this one at (``MS_SCHED_HOST``); ``None``: ``name``.
        host_ip: rank table v1.2 ``host_ip``.
        super_pod_id: rank table v1.2 SuperPoD this server belongs to.
        hccn_conf: path of this host's hccn.conf copy (device IPs), relative paths already
            resolved against the inventory's folder.
        device_ips: device id -> device IP, given inline instead of an hccn.conf.
        super_device_ids: device id -> rank table v1.2 ``super_device_id``.
        env: extra environment for every rank on this host, in order.
        nic: network interface for MPI / NCCL traffic on this host.
        python: interpreter to run Python workloads with on this host (remote hosts).
        ssh: SSH settings.
        source: ``path:line`` the host was read from, for error messages.
    """

    name: str
    slots: int
    max_slots: Optional[int] = None
    devices: Optional[Tuple[int, ...]] = None
    server_id: Optional[str] = None
    addr: Optional[str] = None
    host_ip: Optional[str] = None
    super_pod_id: Optional[str] = None
    hccn_conf: Optional[str] = None
    device_ips: Optional[Tuple[Tuple[int, str], ...]] = None
    super_device_ids: Optional[Tuple[Tuple[int, str], ...]] = None
    env: Tuple[Tuple[str, str], ...] = ()
    nic: Optional[str] = None
    python: Optional[str] = None
    ssh: SshOptions = field(default_factory=SshOptions)
    source: Optional[str] = None

    @property
    def device_ids(self) -> Tuple[int, ...]:
        """The device ids of this host's slots, in slot order."""
        return self.devices if self.devices is not None else tuple(range(self.slots))

    @property
    def rank_table_server_id(self) -> str:
        return self.server_id if self.server_id is not None else self.name

    @property
    def reach_addr(self) -> str:
        return self.addr if self.addr is not None else self.name

    @property
    def is_local(self) -> bool:
        return is_local(self.name)


@dataclass(frozen=True)
class Inventory:
    """An ordered set of hosts (names unique)."""

    hosts: Tuple[Host, ...]
    source: Optional[str] = None

    @property
    def all_local(self) -> bool:
        return all(h.is_local for h in self.hosts)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise InventoryError(f"host {name!r} is not in the inventory", path=self.source)


# --------------------------------------------------------------------------------------------
# OpenMPI hostfile and -H


def _positive_int(text: str, what: str, path: Optional[str], line: Optional[int], limit: int = MAX_SLOTS) -> int:
    """``text`` as an integer in ``1..limit`` (ASCII digits only: no sign, ``_`` or spaces)."""
    if not _DIGITS_RE.match(text):
        raise InventoryError(f"{what} must be a positive integer, got {_clip(text)}", path=path, line=line)
    if len(text) <= 9 and int(text) < 1:
        raise InventoryError(f"{what} must be a positive integer, got {_clip(text)}", path=path, line=line)
    if len(text) > 9 or int(text) > limit:
        raise InventoryError(f"{what} must be in 1..{limit}, got {_clip(text)}", path=path, line=line)
    return int(text)


def _check_host_name(name: str, path: Optional[str], line: Optional[int]) -> None:
    if not name or len(name) > 255 or not _HOST_RE.fullmatch(name):
        raise InventoryError(f"invalid host name {_clip(name)}", path=path, line=line)


def _check_unique(hosts: List[Host], path: Optional[str]) -> None:
    seen: Dict[str, Host] = {}
    for h in hosts:
        if h.name in seen:
            first = seen[h.name].source
            line = int(h.source.rsplit(":", 1)[1]) if h.source and h.source.rsplit(":", 1)[-1].isdigit() else None
            raise InventoryError(
                f"duplicate host {h.name!r} (first at {first}); list each host once with its total slots",
                path=path,
                line=line,
            )
        seen[h.name] = h


def parse_hostfile(text: str, path: Optional[str] = None) -> Inventory:
    """Parse an OpenMPI hostfile.

    Accepted lines: ``host``, ``host slots=N``, ``host slots=N max_slots=M``, ``host:N``;
    ``#`` starts a comment; blank lines are skipped.

    Raises:
        InventoryError: naming ``path:line`` for any malformed line, slots outside
            ``1..MAX_SLOTS``, more than :data:`MAX_HOSTS` hosts, a duplicate host, or an empty file.
    """
    hosts: List[Host] = []
    where = path or "<hostfile>"
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(hosts) >= MAX_HOSTS:
            raise InventoryError(f"more than {MAX_HOSTS} hosts", path=where, line=lineno)
        parts = line.split()
        name = parts[0]
        slots: Optional[int] = None
        max_slots: Optional[int] = None
        if ":" in name and not name.startswith("[") and name.count(":") == 1:
            name, count = name.split(":", 1)
            slots = _positive_int(count, "slot count after ':'", where, lineno)
        _check_host_name(name, where, lineno)
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if not sep:
                raise InventoryError(f"expected key=value, got {_clip(item)} (e.g. 'slots=8')", path=where, line=lineno)
            if key in ("slots", "slot", "cpu", "count"):
                if slots is not None:
                    raise InventoryError("slots given twice", path=where, line=lineno)
                slots = _positive_int(value, "slots", where, lineno)
            elif key in ("max_slots", "max-slots"):
                max_slots = _positive_int(value, "max_slots", where, lineno)
            else:
                raise InventoryError(f"unknown hostfile key {_clip(key)}; use slots=N or max_slots=N", path=where, line=lineno)
        if slots is None:
            slots = 1
        if max_slots is not None and max_slots < slots:
            raise InventoryError(f"max_slots={max_slots} is below slots={slots}", path=where, line=lineno)
        hosts.append(Host(name=name, slots=slots, max_slots=max_slots, source=f"{where}:{lineno}"))
    if not hosts:
        raise InventoryError("no hosts in hostfile; add lines like 'node1 slots=8'", path=where)
    _check_unique(hosts, where)
    return Inventory(tuple(hosts), source=path)


def parse_host_list(text: str) -> Inventory:
    """Parse ``-H h1:8,h2:8`` (``h`` alone = 1 slot; mpirun's syntax).

    Raises:
        InventoryError: with ``field='-H'`` for malformed entries or duplicates.
    """
    hosts: List[Host] = []
    items = [i.strip() for i in text.split(",")]
    if len(items) > MAX_HOSTS:
        raise InventoryError(f"more than {MAX_HOSTS} hosts", field="-H")
    for idx, item in enumerate(items):
        if not item:
            raise InventoryError(f"empty entry #{idx + 1} in host list {_clip(text)}; write h1:8,h2:8", field="-H")
        name, sep, count = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        if not sep:
            name = item
        try:
            slots = _positive_int(count, f"slot count of {_clip(name)}", None, None) if sep else 1
            _check_host_name(name, None, None)
        except InventoryError as exc:
            raise InventoryError(exc.message + " (write h1:8,h2:8)", field="-H") from None
        hosts.append(Host(name=name, slots=slots, source=f"-H entry {idx + 1}"))
    seen = set()
    for h in hosts:
        if h.name in seen:
            raise InventoryError(f"duplicate host {h.name!r}; list each host once with its total slots", field="-H")
        seen.add(h.name)
    return Inventory(tuple(hosts), source=None)


# --------------------------------------------------------------------------------------------
# YAML cluster file

_HOST_KEYS = {
    "host", "slots", "max_slots", "devices", "server_id", "addr", "host_ip", "super_pod_id",
    "hccn_conf", "device_ips", "super_device_ids", "env", "nic", "python", "ssh",
}
_DEFAULT_KEYS = {"slots", "ssh", "env", "nic", "python", "super_pod_id"}
_SSH_KEYS = {"user", "port", "key"}
_TOP_KEYS = {"defaults", "hosts"}


class _Node:
    """A YAML value with the 1-based line it started on (and, for the node budget, its size)."""

    __slots__ = ("value", "line", "size")

    def __init__(self, value: Any, line: int, size: int = 1) -> None:
        self.value = value
        self.line = line
        self.size = size


#: Largest YAML cluster file accepted (characters): thousands of hosts, parsed well within 2 s.
MAX_YAML_CHARS = 512 * 1024
#: Deepest nesting of YAML collections accepted (a cluster file needs 4).
MAX_YAML_DEPTH = 32
#: Most YAML nodes a cluster file may expand to, counting an alias once per use.
MAX_YAML_NODES = 200_000

_PLAIN_INT_RE = re.compile(r"(?:0|[1-9][0-9]{0,17})\Z")
_PLAIN_WORD_RE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*\Z")
#: Plain words YAML 1.1 resolves to something other than a string (booleans, null, .inf, ...).
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", ".inf", ".nan"})
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


def _check_str(value: str, what: str, where: str, line: int) -> None:
    """Refuse a string the OS cannot take (a NUL byte) or that is not Unicode text (a surrogate)."""
    if "\0" in value:
        raise InventoryError(f"{what} contains a NUL character", path=where, line=line)
    if _SURROGATE_RE.search(value):
        raise InventoryError(f"{what} contains a lone surrogate (\\ud800-\\udfff); write valid Unicode", path=where, line=line)


def _yaml_tree(text: str, where: str) -> Optional[_Node]:
    """Compose ``text`` into a tree of :class:`_Node` (dicts, lists, scalars) without recursion.

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
        raise InventoryError(f"larger than {MAX_YAML_CHARS // 1024} KiB; is this a cluster file?", path=where)
    bad = _SURROGATE_RE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise InventoryError("not Unicode text (lone surrogate)", path=where, line=line)

    loader_cls = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    resolver = yaml.resolver.Resolver()
    constructor = yaml.SafeLoader("")

    anchors: Dict[str, _Node] = {}
    open_anchors: Dict[str, int] = {}
    # Frames: [node, anchor, pending key (mappings; no_key when none), key line]
    stack: List[List[Any]] = []
    root: Optional[_Node] = None
    documents = 0
    no_key = object()

    def fail(message: str, line: Optional[int]) -> "InventoryError":
        return InventoryError(message, path=where, line=line)

    def add(node: _Node, line: int) -> None:
        nonlocal root
        if not stack:
            root = node
            return
        frame = stack[-1]
        parent: _Node = frame[0]
        parent.size += node.size
        if parent.size > MAX_YAML_NODES:
            raise fail(f"the document expands to more than {MAX_YAML_NODES} YAML nodes (aliases count each time they are used)", line)
        if isinstance(parent.value, list):
            parent.value.append(node)
            return
        if frame[2] is no_key:
            if isinstance(node.value, (dict, list)):
                raise fail("mapping keys must be plain values", line)
            key = node.value
            try:
                hash(key)
            except TypeError:
                raise fail("mapping keys must be plain values", line) from None
            if key in parent.value:
                raise fail(f"duplicate key {_show(key)}", line)
            frame[2], frame[3] = key, line
        else:
            parent.value[frame[2]] = node
            frame[2] = no_key

    def scalar(event: Any, line: int) -> _Node:
        tag = event.tag
        if tag is None and event.implicit[0]:  # fast path for the common plain words and numbers
            text = event.value
            if _PLAIN_INT_RE.match(text):
                return _Node(int(text), line)
            if _PLAIN_WORD_RE.match(text) and text.lower() not in _YAML_WORDS:
                return _Node(text, line)
        if tag is None or tag == "!":
            tag = resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        try:
            value = constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise fail(f"invalid YAML value: {exc.problem or exc.context or 'cannot construct it'}", line) from None
        except Exception as exc:  # odd scalars: '!!float y', '!!int 9...9' beyond the digit limit
            short = tag.replace("tag:yaml.org,2002:", "!!")
            if tag == "tag:yaml.org,2002:int" and len(event.value) > 1000 and isinstance(exc, ValueError):
                raise fail(f"integer {_clip(event.value)} has too many digits", line) from None
            raise fail(f"invalid YAML value {_clip(event.value)} for tag {short}: {_first_line(exc)}", line) from None
        if isinstance(value, str):
            _check_str(value, f"value {_clip(event.value)}", where, line)
        return _Node(value, line)

    try:
        for event in yaml.parse(text, Loader=loader_cls):
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise fail("more than one YAML document ('---'); a cluster file is one document", line)
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor in open_anchors:
                    raise fail(f"recursive alias *{event.anchor} (it is used inside its own anchor)", line)
                target = anchors.get(event.anchor)
                if target is None:
                    raise fail(f"undefined alias *{event.anchor}", line)
                add(_Node(target.value, line, target.size), line)
            elif isinstance(event, yaml.ScalarEvent):
                node = scalar(event, line)
                if event.anchor is not None:
                    anchors[event.anchor] = node
                add(node, line)
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                if event.tag not in _COLLECTION_TAGS:
                    raise fail(f"unsupported tag {_clip(event.tag)} on a collection", line)
                if len(stack) >= MAX_YAML_DEPTH:
                    raise fail(f"nested deeper than {MAX_YAML_DEPTH} levels", line)
                value: Any = [] if isinstance(event, yaml.SequenceStartEvent) else {}
                if event.anchor is not None:
                    open_anchors[event.anchor] = line
                stack.append([_Node(value, line), event.anchor, no_key, None])
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                node, anchor, _, _ = stack.pop()
                if anchor is not None:
                    open_anchors.pop(anchor, None)
                    anchors[anchor] = node
                add(node, node.line)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise fail(f"invalid YAML: {exc.problem or exc.context or 'syntax error'}", mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise fail(f"invalid YAML: character U+{char:04X} is not allowed in YAML (control character)", line) from None
    except yaml.YAMLError as exc:
        raise fail(f"invalid YAML: {_first_line(exc)}", None) from None
    return root


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _clip(text: str, limit: int = 40) -> str:
    """``repr`` of ``text`` shortened for messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _expect(node: _Node, kind: type, what: str, where: str) -> Any:
    if kind is int and isinstance(node.value, bool):
        raise InventoryError(f"{what} must be an integer", path=where, line=node.line)
    if not isinstance(node.value, kind):
        names = {dict: "a mapping", list: "a list", int: "an integer", str: "a string"}
        raise InventoryError(f"{what} must be {names.get(kind, kind.__name__)}", path=where, line=node.line)
    return node.value


def _scalar_str(node: _Node, what: str, where: str, plain: bool = True) -> str:
    """A scalar as text; ``plain`` (names, paths, users: everything but env values) also refuses
    control characters, which would let a value break out of an ssh config or hostfile line."""
    if isinstance(node.value, bool) or node.value is None or isinstance(node.value, (dict, list, bytes)):
        raise InventoryError(f"{what} must be a string or number", path=where, line=node.line)
    text = str(node.value)
    if plain and _CONTROL_RE.search(text):
        raise InventoryError(f"{what} must not contain control characters, got {_clip(text)}", path=where, line=node.line)
    return text


def _int_key(key: Any, what: str, where: str, line: int) -> int:
    """A device id written as a mapping key (``0:`` or ``"0":``), in ``0..MAX_DEVICE_ID``."""
    if isinstance(key, bool) or not isinstance(key, (int, str)) or (isinstance(key, str) and not _DIGITS_RE.match(key)):
        raise InventoryError(f"{what}: device id must be an integer, got {_show(key)}", path=where, line=line)
    if isinstance(key, int) and key < 0:
        raise InventoryError(f"{what}: device id must be >= 0, got {key}", path=where, line=line)
    if len(str(key)) > 9 or int(key) > MAX_DEVICE_ID:
        raise InventoryError(f"{what}: device id must be in 0..{MAX_DEVICE_ID}, got {_show(key)}", path=where, line=line)
    return int(key)


def _show(value: Any) -> str:
    """A one-line, short ``repr`` of any value for messages."""
    return _clip(value) if isinstance(value, str) else _clip(repr(value))[1:-1]


def _key_text(key: Any) -> str:
    """A mapping key for a message: as written when it is a plain word, else :func:`_show`."""
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_\-]{1,40}", key) else _show(key)


def _env_map(node: _Node, what: str, where: str) -> Tuple[Tuple[str, str], ...]:
    mapping = _expect(node, dict, what, where)
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str) or not _ENV_KEY_RE.fullmatch(key):
            raise InventoryError(f"{what}: invalid variable name {_show(key)}", path=where, line=value.line)
        text = _scalar_str(value, f"{what}.{key}", where, plain=False)
        problem = env_problem(key, text)
        if problem is not None:
            raise InventoryError(f"{what}.{key}: {problem}", path=where, line=value.line)
        out.append((key, text))
    return tuple(out)


def _ssh_options(node: _Node, what: str, where: str, base: SshOptions) -> SshOptions:
    mapping = _expect(node, dict, what, where)
    for key, value in mapping.items():
        if key not in _SSH_KEYS:
            raise InventoryError(f"unknown key {what}.{_key_text(key)}; expected one of {sorted(_SSH_KEYS)}", path=where, line=value.line)
    user, port, key_path = base.user, base.port, base.key
    if "user" in mapping:
        user = _scalar_str(mapping["user"], f"{what}.user", where)
    if "port" in mapping:
        port = _expect(mapping["port"], int, f"{what}.port", where)
        if not 0 < port < 65536:
            raise InventoryError(f"{what}.port must be 1..65535", path=where, line=mapping["port"].line)
    if "key" in mapping:
        key_path = _scalar_str(mapping["key"], f"{what}.key", where)
    return SshOptions(user=user, port=port, key=key_path)


def _resolve(path_text: str, base_dir: Optional[str]) -> str:
    if os.path.isabs(path_text) or path_text.startswith("~") or base_dir is None:
        return path_text
    return os.path.normpath(os.path.join(base_dir, path_text))


def parse_cluster_yaml(text: str, path: Optional[str] = None, base_dir: Optional[str] = None) -> Inventory:
    """Parse a YAML cluster file.

    Layout::

        defaults:            # optional; applies to every host
          slots: 8
          ssh: {user: root, port: 22, key: ~/.ssh/id_ed25519}
          env: {GLOG_v: "2"}
          nic: eth0
          python: /usr/bin/python3
        hosts:
          - host: 10.0.0.1                 # required
            slots: 8                       # required unless in defaults
            devices: [0,1,2,3,4,5,6,7]     # default 0..slots-1
            server_id: 10.0.0.1            # rank table server_id (default: host)
            addr: 10.0.0.1                 # address other hosts reach it at (default: host)
            hccn_conf: hccn/10.0.0.1.conf  # relative to the YAML file's folder
            device_ips: {"0": 192.1.27.6}  # instead of hccn_conf
            host_ip: 10.0.0.1              # rank table v1.2
            super_pod_id: "0"              # rank table v1.2
            super_device_ids: {"0": "0"}   # rank table v1.2
            env: {NCCL_SOCKET_IFNAME: en5} # per-host env, merged over defaults.env
            nic: en5
            ssh: {port: 2222}              # merged over defaults.ssh

    Raises:
        InventoryError: ``path:line: what`` for bad YAML (see :func:`_yaml_tree`: size, depth,
        aliases, tags, control characters), unknown keys, wrong types, numbers out of bounds
        (slots, device ids, hosts, ports), devices not matching slots, env values no process can
        take, control characters in names and paths, or duplicate hosts.
    """
    where = path or "<cluster.yaml>"
    root = _yaml_tree(text, where)
    if root is None:
        raise InventoryError("empty cluster file; it needs a 'hosts:' list", path=where)
    top = _expect(root, dict, "the cluster file", where)
    for key, value in top.items():
        if key not in _TOP_KEYS:
            raise InventoryError(f"unknown top-level key {_show(key)}; expected 'defaults' and 'hosts'", path=where, line=value.line)
    defaults: Dict[str, _Node] = {}
    if "defaults" in top and top["defaults"].value is not None:
        defaults = _expect(top["defaults"], dict, "defaults", where)
        for key, value in defaults.items():
            if key not in _DEFAULT_KEYS:
                raise InventoryError(f"unknown key defaults.{_key_text(key)}; expected one of {sorted(_DEFAULT_KEYS)}", path=where, line=value.line)
    if "hosts" not in top:
        raise InventoryError("missing 'hosts:' list", path=where, line=root.line)
    entries = _expect(top["hosts"], list, "hosts", where)
    if not entries:
        raise InventoryError("'hosts:' is empty; add at least one '- host: NAME'", path=where, line=top["hosts"].line)
    if len(entries) > MAX_HOSTS:
        raise InventoryError(f"more than {MAX_HOSTS} hosts", path=where, line=entries[MAX_HOSTS].line)

    base_ssh = _ssh_options(defaults["ssh"], "defaults.ssh", where, SshOptions()) if "ssh" in defaults else SshOptions()
    base_env = _env_map(defaults["env"], "defaults.env", where) if "env" in defaults else ()
    base_slots = _expect(defaults["slots"], int, "defaults.slots", where) if "slots" in defaults else None
    base_nic = _scalar_str(defaults["nic"], "defaults.nic", where) if "nic" in defaults else None
    base_python = _scalar_str(defaults["python"], "defaults.python", where) if "python" in defaults else None
    base_pod = _scalar_str(defaults["super_pod_id"], "defaults.super_pod_id", where) if "super_pod_id" in defaults else None

    hosts: List[Host] = []
    for idx, entry in enumerate(entries):
        what = f"hosts[{idx}]"
        if isinstance(entry.value, str):  # "- node1" shorthand
            entry = _Node({"host": _Node(entry.value, entry.line)}, entry.line)
        item = _expect(entry, dict, what, where)
        for key, value in item.items():
            if key not in _HOST_KEYS:
                raise InventoryError(f"unknown key {what}.{_key_text(key)}; expected one of {sorted(_HOST_KEYS)}", path=where, line=value.line)
        if "host" not in item:
            raise InventoryError(f"{what} has no 'host:'", path=where, line=entry.line)
        name = _scalar_str(item["host"], f"{what}.host", where)
        _check_host_name(name, where, item["host"].line)
        if "slots" in item:
            slots = _expect(item["slots"], int, f"{what}.slots", where)
            slots_line = item["slots"].line
        elif base_slots is not None:
            slots, slots_line = base_slots, defaults["slots"].line
        elif "devices" in item:
            slots, slots_line = len(_expect(item["devices"], list, f"{what}.devices", where)), item["devices"].line
        else:
            raise InventoryError(f"{what} ({name}) has no 'slots:'", path=where, line=entry.line)
        if slots < 1:
            raise InventoryError(f"{what}.slots must be a positive integer, got {slots}", path=where, line=slots_line)
        if slots > MAX_SLOTS:
            raise InventoryError(f"{what}.slots must be in 1..{MAX_SLOTS}, got {_show(slots)}", path=where, line=slots_line)
        max_slots = None
        if "max_slots" in item:
            max_slots = _expect(item["max_slots"], int, f"{what}.max_slots", where)
            if max_slots > MAX_SLOTS:
                raise InventoryError(f"{what}.max_slots must be in 1..{MAX_SLOTS}, got {_show(max_slots)}", path=where, line=item["max_slots"].line)
            if max_slots < slots:
                raise InventoryError(f"{what}.max_slots is below slots", path=where, line=item["max_slots"].line)
        devices = None
        if "devices" in item:
            dev_nodes = _expect(item["devices"], list, f"{what}.devices", where)
            devs = []
            for dn in dev_nodes:
                d = _expect(dn, int, f"{what}.devices entry", where)
                if d < 0:
                    raise InventoryError(f"{what}.devices: device id must be >= 0, got {d}", path=where, line=dn.line)
                if d > MAX_DEVICE_ID:
                    raise InventoryError(f"{what}.devices: device id must be in 0..{MAX_DEVICE_ID}, got {_show(d)}", path=where, line=dn.line)
                devs.append(d)
            if len(set(devs)) != len(devs):
                raise InventoryError(f"{what}.devices has duplicates", path=where, line=item["devices"].line)
            if len(devs) != slots:
                raise InventoryError(
                    f"{what}.devices lists {len(devs)} devices but slots is {slots}; make them agree",
                    path=where, line=item["devices"].line,
                )
            devices = tuple(devs)

        def id_map(key: str) -> Optional[Tuple[Tuple[int, str], ...]]:
            if key not in item:
                return None
            mapping = _expect(item[key], dict, f"{what}.{key}", where)
            out = []
            for k, v in mapping.items():
                out.append((_int_key(k, f"{what}.{key}", where, v.line), _scalar_str(v, f"{what}.{key}.{k}", where)))
            return tuple(sorted(out))

        env = dict(base_env)
        if "env" in item:
            env.update(_env_map(item["env"], f"{what}.env", where))
        ssh = _ssh_options(item["ssh"], f"{what}.ssh", where, base_ssh) if "ssh" in item else base_ssh
        opt = lambda key: _scalar_str(item[key], f"{what}.{key}", where) if key in item else None  # noqa: E731
        hccn = opt("hccn_conf")
        hosts.append(
            Host(
                name=name,
                slots=slots,
                max_slots=max_slots,
                devices=devices,
                server_id=opt("server_id"),
                addr=opt("addr"),
                host_ip=opt("host_ip"),
                super_pod_id=opt("super_pod_id") if "super_pod_id" in item else base_pod,
                hccn_conf=_resolve(hccn, base_dir) if hccn is not None else None,
                device_ips=id_map("device_ips"),
                super_device_ids=id_map("super_device_ids"),
                env=tuple(env.items()),
                nic=opt("nic") if "nic" in item else base_nic,
                python=opt("python") if "python" in item else base_python,
                ssh=ssh,
                source=f"{where}:{entry.line}",
            )
        )
    _check_unique(hosts, where)
    return Inventory(tuple(hosts), source=path)


def read_inventory(path: str) -> Inventory:
    """Read a hostfile or, for ``.yaml``/``.yml`` files, a YAML cluster file."""
    missing = "no such file; pass an existing hostfile or cluster YAML"
    if path.endswith((".yaml", ".yml")):
        text = read_text(path, InventoryError, missing, "a cluster file", limit=MAX_YAML_CHARS)
        return parse_cluster_yaml(text, path=path, base_dir=os.path.dirname(os.path.abspath(path)))
    return parse_hostfile(read_text(path, InventoryError, missing, "a hostfile"), path=path)


# --------------------------------------------------------------------------------------------
# include / exclude filters (DeepSpeed syntax)


def parse_filter(text: str, flag: str) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Parse ``host1:0,1@host2`` into ``{"host1": (0, 1), "host2": None}`` (None: whole host).

    Raises:
        InventoryError: ``field=flag`` for malformed text.
    """
    out: Dict[str, Optional[Tuple[int, ...]]] = {}
    if not text.strip():
        raise InventoryError("empty filter; write host1:0,1@host2", field=flag)
    for part in text.split("@"):
        part = part.strip()
        if not part:
            raise InventoryError(f"empty host in {_clip(text)}; write host1:0,1@host2", field=flag)
        name, sep, ids = part.partition(":")
        if not name:
            raise InventoryError(f"missing host name in {_clip(part)}", field=flag)
        if sep:
            texts = [s.strip() for s in ids.split(",")]
            if not all(_DIGITS_RE.match(s) for s in texts):
                raise InventoryError(f"slot ids in {_clip(part)} must be integers, e.g. {name if len(name) <= 40 and _HOST_RE.fullmatch(name) else 'host'}:0,1", field=flag)
            if any(len(s) > 9 or int(s) > MAX_DEVICE_ID for s in texts):
                raise InventoryError(f"slot ids in {_clip(part)} must be in 0..{MAX_DEVICE_ID}", field=flag)
            slots = tuple(int(s) for s in texts)
            prev = out.get(name, ())
            out[name] = tuple(dict.fromkeys((prev or ()) + slots))
        else:
            out[name] = None
    return out


def apply_filters(inv: Inventory, include: Optional[str] = None, exclude: Optional[str] = None) -> Inventory:
    """Keep only included hosts/devices, then drop excluded ones (DeepSpeed semantics).

    Slot ids in a filter are device ids of that host.  ``include`` and ``exclude`` may not
    both be given (as in DeepSpeed).

    Raises:
        InventoryError: unknown host or device in a filter, both filters, or nothing left.
    """
    if include and exclude:
        raise InventoryError("--include and --exclude are mutually exclusive", field="--include")
    if not include and not exclude:
        return inv
    flag = "--include" if include else "--exclude"
    spec = parse_filter(include or exclude or "", flag)
    names = {h.name for h in inv.hosts}
    for name, ids in spec.items():
        if name not in names:
            shown = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
            raise InventoryError(f"host {_clip(name)} is not in the inventory ({shown})", field=flag)
        host = inv.host(name)
        for d in ids or ():
            if d not in host.device_ids:
                raise InventoryError(f"host {name!r} has no device {d} (devices {list(host.device_ids)})", field=flag)
    kept: List[Host] = []
    for host in inv.hosts:
        if include:
            if host.name not in spec:
                continue
            ids = spec[host.name]
            devs = host.device_ids if ids is None else tuple(d for d in host.device_ids if d in ids)
        else:
            ids = spec.get(host.name, ())
            if host.name in spec and ids is None:
                continue
            devs = tuple(d for d in host.device_ids if d not in (ids or ()))
        if not devs:
            continue
        kept.append(replace(host, slots=len(devs), devices=devs, max_slots=None))
    if not kept:
        raise InventoryError("the filters leave no hosts", field=flag)
    return Inventory(tuple(kept), source=inv.source)


def local_inventory(slots: int) -> Inventory:
    """The default inventory: this machine with ``slots`` slots.

    Raises:
        InventoryError: ``slots`` outside ``1..MAX_SLOTS`` (field ``--np``).
    """
    if not 1 <= slots <= MAX_SLOTS:
        raise InventoryError(f"this machine alone takes 1..{MAX_SLOTS} ranks, got {slots}", field="--np")
    return Inventory((Host(name="localhost", slots=slots, source="default"),), source=None)
