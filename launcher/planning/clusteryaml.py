"""YAML cluster files: hosts with per-host SSH, devices, device IPs, NICs and env (pure).

See :func:`parse_cluster_yaml` for the keys; the YAML itself is read by the bounded composer
of :mod:`launcher.planning.yamltree`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import InventoryError
from launcher.planning.hosts import (
    CONTROL_RE, DIGITS_RE, ENV_KEY_RE, MAX_DEVICE_ID, MAX_HOSTS, MAX_SLOTS, Host, Inventory, SshOptions,
    check_host_name, check_unique_hosts, clip, show, env_problem,
)
from launcher.planning.yamltree import Node, yaml_tree

_HOST_KEYS = {
    "host", "slots", "max_slots", "devices", "server_id", "addr", "host_ip", "super_pod_id",
    "hccn_conf", "device_ips", "super_device_ids", "env", "nic", "python", "ssh",
}
_DEFAULT_KEYS = {"slots", "ssh", "env", "nic", "python", "super_pod_id"}
_SSH_KEYS = {"user", "port", "key"}
_TOP_KEYS = {"defaults", "hosts"}


def _expect(node: Node, kind: type, what: str, where: str) -> Any:
    if kind is int and isinstance(node.value, bool):
        raise InventoryError(f"{what} must be an integer", path=where, line=node.line)
    if not isinstance(node.value, kind):
        names = {dict: "a mapping", list: "a list", int: "an integer", str: "a string"}
        raise InventoryError(f"{what} must be {names.get(kind, kind.__name__)}", path=where, line=node.line)
    return node.value


def _scalar_str(node: Node, what: str, where: str, plain: bool = True) -> str:
    """A scalar as text; ``plain`` (names, paths, users: everything but env values) also refuses
    control characters, which would let a value break out of an ssh config or hostfile line."""
    if isinstance(node.value, bool) or node.value is None or isinstance(node.value, (dict, list, bytes)):
        raise InventoryError(f"{what} must be a string or number", path=where, line=node.line)
    text = str(node.value)
    if plain and CONTROL_RE.search(text):
        raise InventoryError(f"{what} must not contain control characters, got {clip(text)}", path=where, line=node.line)
    return text


def _int_key(key: Any, what: str, where: str, line: int) -> int:
    """A device id written as a mapping key (``0:`` or ``"0":``), in ``0..MAX_DEVICE_ID``."""
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


def _env_map(node: Node, what: str, where: str) -> Tuple[Tuple[str, str], ...]:
    mapping = _expect(node, dict, what, where)
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
            raise InventoryError(f"{what}: invalid variable name {show(key)}", path=where, line=value.line)
        text = _scalar_str(value, f"{what}.{key}", where, plain=False)
        problem = env_problem(key, text)
        if problem is not None:
            raise InventoryError(f"{what}.{key}: {problem}", path=where, line=value.line)
        out.append((key, text))
    return tuple(out)


def _ssh_options(node: Node, what: str, where: str, base: SshOptions) -> SshOptions:
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

    Steps: the bounded YAML tree (:func:`~launcher.planning.yamltree.yaml_tree`), the top level
    (:func:`_top_level`), ``defaults:`` (:meth:`_Defaults.parse`), each host entry
    (:func:`_host_entry`), unique host names.

    Raises:
        InventoryError: ``path:line: what`` for bad YAML (see :func:`~launcher.planning.yamltree.yaml_tree`:
        size, depth, aliases, tags, control characters), unknown keys, wrong types, numbers out of
        bounds (slots, device ids, hosts, ports), devices not matching slots, env values no process
        can take, control characters in names and paths, or duplicate hosts.
    """
    where = path or "<cluster.yaml>"
    root = yaml_tree(text, where)
    if root is None:
        raise InventoryError("empty cluster file; it needs a 'hosts:' list", path=where)
    defaults_node, entries = _top_level(root, where)
    defaults = _Defaults.parse(defaults_node, where)
    hosts = [_host_entry(idx, entry, defaults, where, base_dir) for idx, entry in enumerate(entries)]
    check_unique_hosts(hosts, where)
    return Inventory(tuple(hosts), source=path)


def _top_level(root: Node, where: str) -> Tuple[Dict[str, Node], List[Node]]:
    """The ``defaults:`` mapping (empty when absent) and the ``hosts:`` entries.

    Raises:
        InventoryError: unknown top-level or ``defaults`` keys; ``hosts:`` missing, empty, not a
            list, or longer than :data:`MAX_HOSTS`.
    """
    top = _expect(root, dict, "the cluster file", where)
    for key, value in top.items():
        if key not in _TOP_KEYS:
            raise InventoryError(f"unknown top-level key {show(key)}; expected 'defaults' and 'hosts'", path=where, line=value.line)
    defaults: Dict[str, Node] = {}
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
    def parse(cls, defaults: Dict[str, Node], where: str) -> "_Defaults":
        """Read ``defaults:`` (already checked for unknown keys).

        Raises:
            InventoryError: a value of the wrong type.
        """
        def text(key: str) -> Optional[str]:
            return _scalar_str(defaults[key], f"defaults.{key}", where) if key in defaults else None

        return cls(
            ssh=_ssh_options(defaults["ssh"], "defaults.ssh", where, SshOptions()) if "ssh" in defaults else SshOptions(),
            env=_env_map(defaults["env"], "defaults.env", where) if "env" in defaults else (),
            slots=_expect(defaults["slots"], int, "defaults.slots", where) if "slots" in defaults else None,
            slots_line=defaults["slots"].line if "slots" in defaults else None,
            nic=text("nic"),
            python=text("python"),
            super_pod_id=text("super_pod_id"),
        )


def _host_entry(idx: int, entry: Node, defaults: _Defaults, where: str, base_dir: Optional[str]) -> Host:
    """``hosts[idx]``: one host, its own keys over ``defaults``.

    Raises:
        InventoryError: naming ``where:line`` for any problem of the entry.
    """
    what = f"hosts[{idx}]"
    if isinstance(entry.value, str):  # "- node1" shorthand
        entry = Node({"host": Node(entry.value, entry.line)}, entry.line)
    item = _expect(entry, dict, what, where)
    for key, value in item.items():
        if key not in _HOST_KEYS:
            raise InventoryError(f"unknown key {what}.{_key_text(key)}; expected one of {sorted(_HOST_KEYS)}", path=where, line=value.line)
    if "host" not in item:
        raise InventoryError(f"{what} has no 'host:'", path=where, line=entry.line)
    name = _scalar_str(item["host"], f"{what}.host", where)
    check_host_name(name, where, item["host"].line)
    slots = _host_slots(item, what, name, entry.line, defaults, where)
    max_slots = _host_max_slots(item, what, slots, where)
    devices = _host_devices(item, what, slots, where)
    env = dict(defaults.env)
    if "env" in item:
        env.update(_env_map(item["env"], f"{what}.env", where))
    ssh = _ssh_options(item["ssh"], f"{what}.ssh", where, defaults.ssh) if "ssh" in item else defaults.ssh

    def opt(key: str, default: Optional[str] = None) -> Optional[str]:
        return _scalar_str(item[key], f"{what}.{key}", where) if key in item else default

    hccn = opt("hccn_conf")
    return Host(
        name=name,
        slots=slots,
        max_slots=max_slots,
        devices=devices,
        server_id=opt("server_id"),
        addr=opt("addr"),
        host_ip=opt("host_ip"),
        super_pod_id=opt("super_pod_id", defaults.super_pod_id),
        hccn_conf=_resolve(hccn, base_dir) if hccn is not None else None,
        device_ips=_id_map(item, "device_ips", what, where),
        super_device_ids=_id_map(item, "super_device_ids", what, where),
        env=tuple(env.items()),
        nic=opt("nic", defaults.nic),
        python=opt("python", defaults.python),
        ssh=ssh,
        source=f"{where}:{entry.line}",
    )


def _host_slots(item: Dict[str, Node], what: str, name: str, line: int, defaults: _Defaults, where: str) -> int:
    """A host's slots: its ``slots:``, else ``defaults.slots``, else the length of its ``devices:``."""
    if "slots" in item:
        slots = _expect(item["slots"], int, f"{what}.slots", where)
        slots_line = item["slots"].line
    elif defaults.slots is not None:
        slots, slots_line = defaults.slots, defaults.slots_line
    elif "devices" in item:
        slots, slots_line = len(_expect(item["devices"], list, f"{what}.devices", where)), item["devices"].line
    else:
        raise InventoryError(f"{what} ({name}) has no 'slots:'", path=where, line=line)
    if slots < 1:
        raise InventoryError(f"{what}.slots must be a positive integer, got {slots}", path=where, line=slots_line)
    if slots > MAX_SLOTS:
        raise InventoryError(f"{what}.slots must be in 1..{MAX_SLOTS}, got {show(slots)}", path=where, line=slots_line)
    return slots


def _host_max_slots(item: Dict[str, Node], what: str, slots: int, where: str) -> Optional[int]:
    """A host's ``max_slots:`` (OpenMPI's), at least its slots, or None."""
    if "max_slots" not in item:
        return None
    max_slots = _expect(item["max_slots"], int, f"{what}.max_slots", where)
    if max_slots > MAX_SLOTS:
        raise InventoryError(f"{what}.max_slots must be in 1..{MAX_SLOTS}, got {show(max_slots)}", path=where, line=item["max_slots"].line)
    if max_slots < slots:
        raise InventoryError(f"{what}.max_slots is below slots", path=where, line=item["max_slots"].line)
    return max_slots


def _host_devices(item: Dict[str, Node], what: str, slots: int, where: str) -> Optional[Tuple[int, ...]]:
    """A host's ``devices:``: distinct ids in ``0..MAX_DEVICE_ID``, one per slot; None when absent."""
    if "devices" not in item:
        return None
    devs = []
    for dn in _expect(item["devices"], list, f"{what}.devices", where):
        d = _expect(dn, int, f"{what}.devices entry", where)
        if d < 0:
            raise InventoryError(f"{what}.devices: device id must be >= 0, got {d}", path=where, line=dn.line)
        if d > MAX_DEVICE_ID:
            raise InventoryError(f"{what}.devices: device id must be in 0..{MAX_DEVICE_ID}, got {show(d)}", path=where, line=dn.line)
        devs.append(d)
    if len(set(devs)) != len(devs):
        raise InventoryError(f"{what}.devices has duplicates", path=where, line=item["devices"].line)
    if len(devs) != slots:
        raise InventoryError(
            f"{what}.devices lists {len(devs)} devices but slots is {slots}; make them agree",
            path=where, line=item["devices"].line,
        )
    return tuple(devs)


def _id_map(item: Dict[str, Node], key: str, what: str, where: str) -> Optional[Tuple[Tuple[int, str], ...]]:
    """``device_ips:`` / ``super_device_ids:``: device id -> text, sorted by device id; None when absent."""
    if key not in item:
        return None
    mapping = _expect(item[key], dict, f"{what}.{key}", where)
    out = []
    for k, v in mapping.items():
        out.append((_int_key(k, f"{what}.{key}", where, v.line), _scalar_str(v, f"{what}.{key}.{k}", where)))
    return tuple(sorted(out))
