"""The inventory model: hosts, their slots and what is known of each, and "is this host local" (pure).

Also the checks every inventory source shares (host names, slot counts, unique hosts, env
values) and the bounds they enforce (:data:`MAX_SLOTS`, :data:`MAX_DEVICE_ID`, :data:`MAX_HOSTS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import InventoryError

#: Hostnames mslaunch considers "this machine" (the local launcher is chosen for them).
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


def is_local(name: str) -> bool:
    """Whether host ``name`` (as written in an inventory or a plan) is this machine: the one
    answer every layer uses (:data:`LOCAL_NAMES`)."""
    return name in LOCAL_NAMES


HOST_RE = re.compile(r"^[A-Za-z0-9_.\-:\[\]%]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DIGITS_RE = re.compile(r"[0-9]+\Z")
SURROGATE_RE = re.compile("[\ud800-\udfff]")
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")

#: Most slots (processes) one host may claim: far above any accelerator server, low enough that
#: rank assignment never allocates much.
MAX_SLOTS = 1024
#: Largest device id a host may list.
MAX_DEVICE_ID = 1023
#: Most hosts one inventory may hold.
MAX_HOSTS = 32768
#: Longest ``NAME=VALUE`` string Linux passes to a new process (MAX_ARG_STRLEN, 32 pages).
MAX_ENV_ENTRY_BYTES = 128 * 1024 - 1


def env_problem(key: str, value: str) -> Optional[str]:
    """What makes ``key=value`` unusable as an environment variable of a process, or None.

    A name must be an identifier (``[A-Za-z_][A-Za-z0-9_]*``); a value must be a string without
    NUL characters or lone surrogates (it is passed to the OS as UTF-8), and ``NAME=VALUE``
    must fit in Linux's limit for one string of a new process (:data:`MAX_ENV_ENTRY_BYTES`).
    """
    if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
        return f"invalid variable name {show(key)}; use letters, digits and _ (not starting with a digit)"
    if not isinstance(value, str):
        return f"the value must be a string, got {type(value).__name__}"
    if "\0" in value:
        return "the value contains a NUL character, which no process environment can hold"
    if SURROGATE_RE.search(value):
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


def positive_int(text: str, what: str, path: Optional[str], line: Optional[int], limit: int = MAX_SLOTS) -> int:
    """``text`` as an integer in ``1..limit`` (ASCII digits only: no sign, ``_`` or spaces)."""
    if not DIGITS_RE.match(text):
        raise InventoryError(f"{what} must be a positive integer, got {clip(text)}", path=path, line=line)
    if len(text) <= 9 and int(text) < 1:
        raise InventoryError(f"{what} must be a positive integer, got {clip(text)}", path=path, line=line)
    if len(text) > 9 or int(text) > limit:
        raise InventoryError(f"{what} must be in 1..{limit}, got {clip(text)}", path=path, line=line)
    return int(text)


def check_host_name(name: str, path: Optional[str], line: Optional[int]) -> None:
    if not name or len(name) > 255 or not HOST_RE.fullmatch(name):
        raise InventoryError(f"invalid host name {clip(name)}", path=path, line=line)


def check_unique_hosts(hosts: List[Host], path: Optional[str]) -> None:
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


def clip(text: str, limit: int = 40) -> str:
    """``repr`` of ``text`` shortened for messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def show(value: Any) -> str:
    """A one-line, short ``repr`` of any value for messages."""
    return clip(value) if isinstance(value, str) else clip(repr(value))[1:-1]
