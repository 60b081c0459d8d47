"""YAML cluster files: hosts with per-host SSH, devices, device IPs, NICs and env (pure).

See :func:`parse_cluster_yaml` for the keys; the YAML itself is read by the bounded composer
of :mod:`launcher.planning.inventory.yamltree`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.inventory.model import (
    CONTROL_RE,
    DIGITS_RE,
    ENV_KEY_RE,
    MAX_DEVICE_ID,
    MAX_HOSTS,
    MAX_SLOTS,
    Host,
    Inventory,
    SshOptions,
    check_host_name,
    check_unique_hosts,
    clip,
    env_problem,
    show,
)
from launcher.planning.inventory.yamltree import Node, YamlMap, yaml_tree

_HOST_KEYS = frozenset(
    {
        "host",
        "slots",
        "max_slots",
        "devices",
        "server_id",
        "addr",
        "host_ip",
        "super_pod_id",
        "hccn_conf",
        "device_ips",
        "super_device_ids",
        "env",
        "nic",
        "python",
        "ssh",
    }
)
_DEFAULT_KEYS = frozenset({"slots", "ssh", "env", "nic", "python", "super_pod_id"})
_SSH_KEYS = frozenset({"user", "port", "key"})
_TOP_KEYS = frozenset({"defaults", "hosts"})
#: Optional text keys of a host entry, each read by :func:`_scalar_str`.
_HOST_TEXT_KEYS = ("server_id", "addr", "host_ip", "super_pod_id", "hccn_conf", "nic", "python")
_control = CONTROL_RE.search


def _expect(value: Any, line: Optional[int], kind: type, what: str, where: str) -> Any:
    """``value`` (a YAML value starting on ``line``) if it is a ``kind``, else a one-line error."""
    if kind is int and isinstance(value, bool):
        raise InventoryError(f"{what} must be an integer", path=where, line=line)
    if not isinstance(value, kind):
        names = {dict: "a mapping", list: "a list", int: "an integer", str: "a string"}
        raise InventoryError(f"{what} must be {names.get(kind, kind.__name__)}", path=where, line=line)
    return value


def _scalar_str(value: Any, line: Optional[int], what: str, where: str, plain: bool = True) -> str:
    """A scalar as text; ``plain`` (names, paths, users: everything but env values) also refuses
    control characters, which would let a value break out of an ssh config or hostfile line."""
    if type(value) is str and not (plain and _control(value)):  # the common case, checked alike
        return value
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, bytes)):
        raise InventoryError(f"{what} must be a string or number", path=where, line=line)
    text = str(value)
    if plain and _control(text):
        raise InventoryError(f"{what} must not contain control characters, got {clip(text)}", path=where, line=line)
    return text


def _int_key(key: Any, what: str, where: str, line: int) -> int:
    """A device id written as a mapping key (``0:`` or ``"0":``), in ``0..MAX_DEVICE_ID``."""
    if type(key) is int and 0 <= key <= MAX_DEVICE_ID:  # the common case, checked alike
        return key
    if isinstance(key, bool) or not isinstance(key, (int, str)) or (isinstance(key, str) and not DIGITS_RE.match(key)):
        raise InventoryError(f"{what}: device id must be an integer, got {show(key)}", path=where, line=line)
    if isinstance(key, int) and key < 0:
        raise InventoryError(f"{what}: device id must be >= 0, got {key}", path=where, line=line)
    if len(str(key)) > 9 or int(key) > MAX_DEVICE_ID:
        raise InventoryError(f"{what}: device id must be in 0..{MAX_DEVICE_ID}, got {show(key)}", path=where, line=line)
    return int(key)


def _key_text(key: Any) -> str:
    """A mapping key for a message: as written when it is a plain word, else :func:`show`."""
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_\-]{1,40}", key) else show(key)


def _unknown_key(mapping: YamlMap, known: frozenset, what: str, where: str) -> None:
    """Refuse the first key of ``mapping`` not in ``known`` (``what``: the mapping's name)."""
    if known.issuperset(mapping):
        return
    for key in mapping:
        if key not in known:
            raise InventoryError(
                f"unknown key {what}.{_key_text(key)}; expected one of {sorted(known)}",
                path=where,
                line=mapping.lines[key],
            )


def _env_map(value: Any, line: Optional[int], what: str, where: str) -> Tuple[Tuple[str, str], ...]:
    mapping = _expect(value, line, dict, what, where)
    out = []
    for key, item in mapping.items():
        item_line = mapping.lines[key]
        if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
            raise InventoryError(f"{what}: invalid variable name {show(key)}", path=where, line=item_line)
        text = _scalar_str(item, item_line, f"{what}.{key}", where, plain=False)
        problem = env_problem(key, text)
        if problem is not None:
            raise InventoryError(f"{what}.{key}: {problem}", path=where, line=item_line)
        out.append((key, text))
    return tuple(out)


def _ssh_options(value: Any, line: Optional[int], what: str, where: str, base: SshOptions) -> SshOptions:
    mapping = _expect(value, line, dict, what, where)
    _unknown_key(mapping, _SSH_KEYS, what, where)
    lines = mapping.lines
    user, port, key_path = base.user, base.port, base.key
    if "user" in mapping:
        user = _scalar_str(mapping["user"], lines["user"], f"{what}.user", where)
    if "port" in mapping:
        port = _expect(mapping["port"], lines["port"], int, f"{what}.port", where)
        if not 0 < port < 65536:
            raise InventoryError(f"{what}.port must be 1..65535", path=where, line=lines["port"])
    if "key" in mapping:
        key_path = _scalar_str(mapping["key"], lines["key"], f"{what}.key", where)
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

    Steps: the bounded YAML tree (:func:`~launcher.planning.inventory.yamltree.yaml_tree`), the top level
    (:func:`_top_level`), ``defaults:`` (:meth:`_Defaults.parse`), each host entry
    (:func:`_host_entry`), unique host names.

    Raises:
        InventoryError: ``path:line: what`` for bad YAML (see :func:`~launcher.planning.inventory.yamltree.yaml_tree`:
        size, depth, aliases, tags, control characters), unknown keys, wrong types, numbers out of
        bounds (slots, device ids, hosts, ports), devices not matching slots, env values no process
        can take, control characters in names and paths, or duplicate hosts.
    """
    where = path or "<cluster.yaml>"
    root = yaml_tree(text, where)
    if root is None:
        raise InventoryError("empty cluster file; it needs a 'hosts:' list", path=where)
    defaults_map, entries = _top_level(root, where)
    defaults = _Defaults.parse(defaults_map, where)
    lines = entries.lines
    hosts = [_host_entry(idx, entry, lines[idx], defaults, where, base_dir) for idx, entry in enumerate(entries)]
    check_unique_hosts(hosts, where)
    return Inventory(tuple(hosts), source=path)


def _top_level(root: Node, where: str) -> Tuple[YamlMap, Any]:
    """The ``defaults:`` mapping (empty when absent) and the ``hosts:`` entries (a
    :class:`~launcher.planning.inventory.yamltree.YamlSeq`).

    Raises:
        InventoryError: unknown top-level or ``defaults`` keys; ``hosts:`` missing, empty, not a
            list, or longer than :data:`MAX_HOSTS`.
    """
    top = _expect(root.value, root.line, dict, "the cluster file", where)
    for key in top:
        if key not in _TOP_KEYS:
            raise InventoryError(
                f"unknown top-level key {show(key)}; expected 'defaults' and 'hosts'", path=where, line=top.lines[key]
            )
    defaults = YamlMap()
    defaults.lines = {}
    if "defaults" in top and top["defaults"] is not None:
        defaults = _expect(top["defaults"], top.lines["defaults"], dict, "defaults", where)
        _unknown_key(defaults, _DEFAULT_KEYS, "defaults", where)
    if "hosts" not in top:
        raise InventoryError("missing 'hosts:' list", path=where, line=root.line)
    entries = _expect(top["hosts"], top.lines["hosts"], list, "hosts", where)
    if not entries:
        raise InventoryError("'hosts:' is empty; add at least one '- host: NAME'", path=where, line=top.lines["hosts"])
    if len(entries) > MAX_HOSTS:
        raise InventoryError(f"more than {MAX_HOSTS} hosts", path=where, line=entries.lines[MAX_HOSTS])
    return defaults, entries


@dataclass(frozen=True)
class _Defaults:
    """The ``defaults:`` section: what every host entry starts from."""

    ssh: SshOptions = SshOptions()
    env: Tuple[Tuple[str, str], ...] = ()
    slots: Optional[int] = None
    slots_line: Optional[int] = None
    nic: Optional[str] = None
    python: Optional[str] = None
    super_pod_id: Optional[str] = None

    @classmethod
    def parse(cls, defaults: YamlMap, where: str) -> "_Defaults":
        """Read ``defaults:`` (already checked for unknown keys).

        Raises:
            InventoryError: a value of the wrong type.
        """
        lines = defaults.lines

        def text(key: str) -> Optional[str]:
            return _scalar_str(defaults[key], lines[key], f"defaults.{key}", where) if key in defaults else None

        return cls(
            ssh=_ssh_options(defaults["ssh"], lines["ssh"], "defaults.ssh", where, SshOptions())
            if "ssh" in defaults
            else SshOptions(),
            env=_env_map(defaults["env"], lines["env"], "defaults.env", where) if "env" in defaults else (),
            slots=_expect(defaults["slots"], lines["slots"], int, "defaults.slots", where)
            if "slots" in defaults
            else None,
            slots_line=lines["slots"] if "slots" in defaults else None,
            nic=text("nic"),
            python=text("python"),
            super_pod_id=text("super_pod_id"),
        )


def _host_entry(idx: int, entry: Any, line: int, defaults: _Defaults, where: str, base_dir: Optional[str]) -> Host:
    """``hosts[idx]`` (starting on ``line``): one host, its own keys over ``defaults``.

    Raises:
        InventoryError: naming ``where:line`` for any problem of the entry.
    """
    what = f"hosts[{idx}]"
    if isinstance(entry, str):  # "- node1" shorthand
        entry = YamlMap(host=entry)
        entry.lines = {"host": line}
    item = _expect(entry, line, dict, what, where)
    _unknown_key(item, _HOST_KEYS, what, where)
    lines = item.lines
    if "host" not in item:
        raise InventoryError(f"{what} has no 'host:'", path=where, line=line)
    name = _scalar_str(item["host"], lines["host"], f"{what}.host", where)
    check_host_name(name, where, lines["host"])
    slots = _host_slots(item, what, name, line, defaults, where)
    max_slots = _host_max_slots(item, what, slots, where) if "max_slots" in item else None
    devices = _host_devices(item, what, slots, where) if "devices" in item else None
    env = defaults.env
    if "env" in item:
        merged = dict(env)
        merged.update(_env_map(item["env"], lines["env"], f"{what}.env", where))
        env = tuple(merged.items())
    ssh = _ssh_options(item["ssh"], lines["ssh"], f"{what}.ssh", where, defaults.ssh) if "ssh" in item else defaults.ssh
    text: Dict[str, Optional[str]] = {
        "super_pod_id": defaults.super_pod_id,
        "nic": defaults.nic,
        "python": defaults.python,
    }
    for key in _HOST_TEXT_KEYS:  # in this order (and the id maps after hccn_conf): the first problem is reported
        if key in item:
            text[key] = _scalar_str(item[key], lines[key], f"{what}.{key}", where)
        if key == "hccn_conf":
            device_ips = _id_map(item, "device_ips", what, where) if "device_ips" in item else None
            super_device_ids = _id_map(item, "super_device_ids", what, where) if "super_device_ids" in item else None
    hccn = text.get("hccn_conf")
    return Host(
        name=name,
        slots=slots,
        max_slots=max_slots,
        devices=devices,
        server_id=text.get("server_id"),
        addr=text.get("addr"),
        host_ip=text.get("host_ip"),
        super_pod_id=text["super_pod_id"],
        hccn_conf=_resolve(hccn, base_dir) if hccn is not None else None,
        device_ips=device_ips,
        super_device_ids=super_device_ids,
        env=env,
        nic=text["nic"],
        python=text["python"],
        ssh=ssh,
        source=f"{where}:{line}",
    )


def _host_slots(item: YamlMap, what: str, name: str, line: int, defaults: _Defaults, where: str) -> int:
    """A host's slots: its ``slots:``, else ``defaults.slots``, else the length of its ``devices:``."""
    if "slots" in item:
        slots_line: Optional[int] = item.lines["slots"]
        slots = _expect(item["slots"], slots_line, int, f"{what}.slots", where)
    elif defaults.slots is not None:
        slots, slots_line = defaults.slots, defaults.slots_line
    elif "devices" in item:
        slots_line = item.lines["devices"]
        slots = len(_expect(item["devices"], slots_line, list, f"{what}.devices", where))
    else:
        raise InventoryError(f"{what} ({name}) has no 'slots:'", path=where, line=line)
    if slots < 1:
        raise InventoryError(f"{what}.slots must be a positive integer, got {slots}", path=where, line=slots_line)
    if slots > MAX_SLOTS:
        raise InventoryError(f"{what}.slots must be in 1..{MAX_SLOTS}, got {show(slots)}", path=where, line=slots_line)
    return slots


def _host_max_slots(item: YamlMap, what: str, slots: int, where: str) -> int:
    """A host's ``max_slots:`` (OpenMPI's), at least its slots."""
    line = item.lines["max_slots"]
    max_slots = _expect(item["max_slots"], line, int, f"{what}.max_slots", where)
    if max_slots > MAX_SLOTS:
        raise InventoryError(
            f"{what}.max_slots must be in 1..{MAX_SLOTS}, got {show(max_slots)}", path=where, line=line
        )
    if max_slots < slots:
        raise InventoryError(f"{what}.max_slots is below slots", path=where, line=line)
    return max_slots


def _host_devices(item: YamlMap, what: str, slots: int, where: str) -> Tuple[int, ...]:
    """A host's ``devices:``: distinct ids in ``0..MAX_DEVICE_ID``, one per slot."""
    line = item.lines["devices"]
    listed = _expect(item["devices"], line, list, f"{what}.devices", where)
    devs = []
    for d, d_line in zip(listed, listed.lines):
        d = _expect(d, d_line, int, f"{what}.devices entry", where)
        if d < 0:
            raise InventoryError(f"{what}.devices: device id must be >= 0, got {d}", path=where, line=d_line)
        if d > MAX_DEVICE_ID:
            raise InventoryError(
                f"{what}.devices: device id must be in 0..{MAX_DEVICE_ID}, got {show(d)}", path=where, line=d_line
            )
        devs.append(d)
    if len(set(devs)) != len(devs):
        raise InventoryError(f"{what}.devices has duplicates", path=where, line=line)
    if len(devs) != slots:
        raise InventoryError(
            f"{what}.devices lists {len(devs)} devices but slots is {slots}; make them agree",
            path=where,
            line=line,
        )
    return tuple(devs)


def _id_map(item: YamlMap, key: str, what: str, where: str) -> Tuple[Tuple[int, str], ...]:
    """``device_ips:`` / ``super_device_ids:``: device id -> text, sorted by device id."""
    mapping = _expect(item[key], item.lines[key], dict, f"{what}.{key}", where)
    lines = mapping.lines
    out = []
    for k, v in mapping.items():
        if type(k) is int and type(v) is str and 0 <= k <= MAX_DEVICE_ID and not _control(v):
            out.append((k, v))  # the common case: what _int_key and _scalar_str return for it
        else:
            out.append(
                (_int_key(k, f"{what}.{key}", where, lines[k]), _scalar_str(v, lines[k], f"{what}.{key}.{k}", where))
            )
    out.sort()
    return tuple(out)
