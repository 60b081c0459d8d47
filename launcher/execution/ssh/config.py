"""Where to connect and as whom, as OpenSSH decides it.

The ssh config is ``--ssh-config``, else ``$MSLAUNCH_SSH_CONFIG``, else ``~/.ssh/config``; it is
read with ``Include`` lines expanded (``Host`` patterns, ``HostName``, ``User``, ``Port``,
``IdentityFile``, ``IdentitiesOnly``, ``IdentityAgent none``, ``UserKnownHostsFile``,
``GlobalKnownHostsFile``, ``StrictHostKeyChecking``), then the YAML inventory's per-host
``ssh: {user, port, key}`` goes on top.  ``~`` is ``$HOME``.  No key material is ever read here.
"""

from __future__ import annotations

import getpass
import glob
import os
import shlex
from dataclasses import dataclass, replace
from typing import List, Mapping, Optional, Tuple

import paramiko

from launcher.errors import LaunchError
from launcher.planning.inventory.model import Host, Inventory


def config_path(explicit: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The ssh config to read: ``explicit``, else ``$MSLAUNCH_SSH_CONFIG``, else ``~/.ssh/config``
    if it exists, else None."""
    env = os.environ if environ is None else environ
    if explicit:
        return os.path.expanduser(explicit)
    if env.get("MSLAUNCH_SSH_CONFIG"):
        return os.path.expanduser(env["MSLAUNCH_SSH_CONFIG"])
    default = os.path.expanduser("~/.ssh/config")
    return default if os.path.isfile(default) else None


def _config_text(path: str, depth: int = 0) -> str:
    """The text of an ssh config with ``Include`` lines replaced by the files they name."""
    if depth > 16:
        raise LaunchError("ssh config Include nesting is deeper than 16; is there a loop?", path=path)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        raise LaunchError("no such ssh config file; pass an existing --ssh-config", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LaunchError(f"cannot read ssh config: {exc}", path=path) from None
    out: List[str] = []
    for line in lines:
        words = line.strip().split(None, 1)
        if words and words[0].lower() == "include" and len(words) == 2:
            for pattern in shlex.split(words[1]):
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):  # OpenSSH: relative to ~/.ssh for user configs
                    pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
                for inc in sorted(glob.glob(pattern)):
                    out.append(_config_text(inc, depth + 1))
            continue
        out.append(line)
    return "\n".join(out)


def read_ssh_config(path: Optional[str]) -> paramiko.SSHConfig:
    """Parse the ssh config at ``path`` (None: an empty config).

    Raises:
        LaunchError: the file is missing, unreadable or malformed.
    """
    if path is None:
        return paramiko.SSHConfig()
    text = _config_text(path)
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as exc:  # paramiko raises ConfigParseError / ValueError
        raise LaunchError(f"cannot parse ssh config: {exc}", path=path) from None


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect to one inventory host (the resolved config; no key material).

    Attributes:
        name: the host as the inventory names it.
        hostname: the address to connect to (``HostName``).
        port: TCP port.
        user: login user.
        key_files: private key paths to offer (``IdentityFile`` / inventory ``ssh.key``).
        known_hosts: user known_hosts files; new keys are recorded in the first.
        global_known_hosts: read-only known_hosts files.
        accept_new: the config allows trust on first use (``StrictHostKeyChecking accept-new|no``).
        allow_agent: use ssh-agent (not with ``IdentitiesOnly yes`` / ``IdentityAgent none``).
        look_for_keys: try ``~/.ssh/id_*`` when no key file is given.
    """

    name: str
    hostname: str
    port: int
    user: str
    key_files: Tuple[str, ...]
    known_hosts: Tuple[str, ...]
    global_known_hosts: Tuple[str, ...] = ()
    accept_new: bool = False
    allow_agent: bool = True
    look_for_keys: bool = True

    @property
    def label(self) -> str:
        """``name`` plus where it points if that differs (``h1 (10.0.0.1:22)``)."""
        where = f"{self.hostname}:{self.port}"
        return self.name if where in (self.name, f"{self.name}:22") else f"{self.name} ({where})"


def resolve_target(host: Host, config: paramiko.SSHConfig, known_hosts: Optional[str] = None) -> SshTarget:
    """Combine the ssh config entry for ``host.name`` with the inventory's ``ssh:`` overrides."""
    conf = config.lookup(host.name)
    hostname = conf.get("hostname", host.name)
    port = host.ssh.port if host.ssh.port is not None else int(conf.get("port", 22))
    user = host.ssh.user or conf.get("user") or os.environ.get("USER") or getpass.getuser()
    if host.ssh.key is not None:
        keys: Tuple[str, ...] = (os.path.expanduser(host.ssh.key),)
    else:
        keys = tuple(os.path.expanduser(k) for k in conf.get("identityfile", []))
    if known_hosts is not None:
        user_kh: Tuple[str, ...] = (os.path.expanduser(known_hosts),)
    else:
        user_kh = tuple(
            os.path.expanduser(p)
            for p in shlex.split(conf.get("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"))
        )
    global_kh = tuple(
        os.path.expanduser(p)
        for p in shlex.split(conf.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"))
    )
    strict = conf.get("stricthostkeychecking", "ask").lower()
    only = conf.get("identitiesonly", "no").lower() == "yes"
    agent = conf.get("identityagent", "").lower() != "none" and not only
    return SshTarget(
        name=host.name,
        hostname=hostname,
        port=port,
        user=user,
        key_files=keys,
        known_hosts=user_kh,
        global_known_hosts=global_kh,
        accept_new=strict in ("accept-new", "no", "off"),
        allow_agent=agent,
        look_for_keys=not keys and not only,
    )


def resolve_addrs(inventory: Inventory, ssh_config: Optional[str]) -> Inventory:
    """Give every remote host without ``addr:`` the ``HostName`` its ssh config names.

    That is the address other hosts reach it at (``MS_SCHED_HOST``) when the inventory uses ssh
    aliases such as ``h1``.

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    config = read_ssh_config(config_path(ssh_config))
    hosts = []
    for h in inventory.hosts:
        if h.addr is None and not h.is_local:
            name = config.lookup(h.name).get("hostname", h.name)
            if name != h.name:
                h = replace(h, addr=name)
        hosts.append(h)
    return Inventory(tuple(hosts), source=inventory.source)
