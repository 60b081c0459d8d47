"""A throwaway multi-host cluster on one machine: network namespaces, a bridge, one sshd per host.

Each "host" is a Linux network namespace with its own address on a private /24, joined to the
others by a bridge in the root namespace.  The root namespace (the test process, i.e. the
"launching machine") also has an address on the bridge, so it reaches every host, and every host
reaches every other.  Each host runs its own ``sshd`` (key authentication only) listening on
``<ip>:22``.  All hosts share the machine's filesystem, so ``/work/main/.venv/bin/python`` works on
every one of them.  Nothing is routed beyond the bridge: the namespaces have no default route.

Needs root, iproute2 (``ip netns``), OpenSSH's ``sshd``, ``ssh`` and ``ssh-keygen``.

Use from Python::

    with NamespaceCluster(3) as cluster:
        cluster.ssh("h1", "hostname -I").stdout        # OpenSSH client, ssh -F <ssh_config> h1
        cluster.hosts[1].ip                            # h2's address
        cluster.cut_link("h2"); cluster.restore_link("h2")

or by hand::

    python -m tests.harness.netns_cluster up --hosts 3 --dir /tmp/mslcluster
    ssh -F /tmp/mslcluster/ssh_config h1
    python -m tests.harness.netns_cluster down --dir /tmp/mslcluster

Hosts are named ``h1`` .. ``hK``.  Every method taking a ``host`` accepts either an ``int`` (a
0-based index into :attr:`NamespaceCluster.hosts`, so ``0`` is ``h1``) or a ``str`` (the host's
name ``h1``, its IP or its namespace name).

Names (all derived from one per-run prefix, default ``msl<pid><letter>``; interface names are
limited to 15 characters)::

    <prefix>br      the bridge in the root namespace, address <subnet>.254
    <prefix>h<i>    host i's network namespace (its interface inside is ``eth0``, <subnet>.<i>)
    <prefix>v<i>    the root-namespace end of host i's veth pair, a port of the bridge

The subnet is the first /24 of ``10.213.0.0/16`` that overlaps no address or route on this
machine, chosen under a lock file so that concurrent runs do not pick the same one.

On-disk layout of the work directory::

    state.json                 everything ``down`` / :meth:`NamespaceCluster.from_state` needs
    id_ed25519, id_ed25519.pub the user key pair (client side)
    authorized_keys            the user public key, read by every sshd
    known_hosts                ``h1,10.213.N.1 ssh-ed25519 AAAA...`` per host
    ssh_config                 ``Host h1 10.213.N.1`` blocks: HostName, User root, Port 22,
                               IdentityFile, UserKnownHostsFile, StrictHostKeyChecking yes, BatchMode yes
    hostfile                   ``10.213.N.1 slots=2`` per host (OpenMPI format)
    cluster.yaml               the same hosts as a mslaunch YAML inventory with ssh {user, port, key}
    hosts/h<i>/sshd_config     that host's sshd configuration
    hosts/h<i>/ssh_host_ed25519_key[.pub], sshd.pid, sshd.log
    hosts/h<i>/tmp             that host's OpenMPI session dirs (OMPI_MCA_orte_tmpdir_base in its sessions)
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import ipaddress
import itertools
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Union

SSHD = "/usr/sbin/sshd"
#: Where free /24s are looked for.
DEFAULT_POOL = "10.213.0.0/16"
#: Last octet of the root namespace's address on the bridge.
ROOT_OCTET = 254
#: With ``cgroups=True``: the cgroup v1 ``cpu`` and ``cpuset`` hierarchies under ``/sys/fs/cgroup``
#: inside each host's mount namespace, where a host's processes read their CPU limits.
CGROUP_MOUNTS = (
    "mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup && mkdir /sys/fs/cgroup/cpu /sys/fs/cgroup/cpuset"
    " && mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu && mount -t cgroup -o cpuset cgroup /sys/fs/cgroup/cpuset"
)

#: sshd's privilege separation directory (normally created by the service unit).
PRIVSEP_DIR = "/run/sshd"
#: Runs serialise subnet choice with flock on this directory (no lock file is left behind).
LOCK_DIR = tempfile.gettempdir()
STATE_FILE = "state.json"
STATE_VERSION = 1
IFNAMSIZ = 15

HostRef = Union[int, str]

_counter = itertools.count()


class NamespaceClusterError(RuntimeError):
    """Setting up, driving or tearing down a namespace cluster failed; the message says what."""


@dataclass(frozen=True)
class NetnsHost:
    """One host of a :class:`NamespaceCluster`.

    Attributes:
        name: ``h1`` .. ``hK``; also a ``Host`` alias in the ssh config.
        index: 0-based position in :attr:`NamespaceCluster.hosts`.
        netns: network namespace name (``ip netns exec <netns> ...``).
        ip: the host's IPv4 address (on ``eth0`` inside the namespace).
        veth: the root-namespace end of its veth pair (brought down by ``cut_link``).
    """

    name: str
    index: int
    netns: str
    ip: str
    veth: str


# --------------------------------------------------------------------------------------------
# small helpers


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run ``argv`` with captured text output; raise :class:`NamespaceClusterError` if it fails and ``check``."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise NamespaceClusterError(f"{shlex.join(argv)} did not finish within {timeout:g}s") from exc
    if check and proc.returncode != 0:
        raise NamespaceClusterError(f"{shlex.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _letters(n: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba', ... (a short per-process cluster counter)."""
    out = ""
    while True:
        out = chr(ord("a") + n % 26) + out
        n //= 26
        if n == 0:
            return out


def _default_prefix() -> str:
    return f"msl{os.getpid()}{_letters(next(_counter))}"


def _proc_state(pid: int) -> Optional[str]:
    """The one-letter state of ``pid`` (``R``, ``S``, ``Z``, ...), or ``None`` if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return data.rsplit(")", 1)[-1].split()[0]


_PF_EXITING = 0x4  # linux/sched.h: the task is in do_exit()


def _alive(pid: int) -> bool:
    """True if ``pid`` exists, is not a zombie and is not already exiting.

    A process between ``exit_mm()`` and becoming a zombie still shows its namespaces in /proc but no
    longer its executable, and its state letter is not yet ``Z``; the kernel's ``PF_EXITING`` flag
    (field 9 of /proc/<pid>/stat) marks it.  It is gone in all but bookkeeping.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().decode("ascii", "replace").rsplit(")", 1)[-1].split()
    except OSError:
        return False
    try:
        flags = int(fields[6])
    except (IndexError, ValueError):
        flags = 0
    return fields[:1] not in (["Z"], ["X"], []) and not flags & _PF_EXITING


def _cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _exe(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _not_sshd_and_alive(pid: int) -> bool:
    exe = _exe(pid)
    if exe == SSHD:
        return False
    return exe is not None or _alive(pid)


def _netns_inode(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _pids_in_netns(inode: int) -> List[int]:
    """Pids of live (non-zombie) processes whose network namespace has inode ``inode``."""
    me = os.getpid()
    pids: List[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or _netns_inode(f"/proc/{pid}/ns/net") != inode:
            continue
        if _alive(pid):
            pids.append(pid)
    return sorted(pids)


def _ppid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _wait_reaped(pids: Sequence[int], timeout: float) -> None:
    """Wait until each of ``pids`` is gone from /proc, or a zombie that only init can reap."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _proc_state(p) is not None and not (_proc_state(p) == "Z" and _ppid(p) == 1)]
        if left:
            time.sleep(0.01)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_gone(pids: Sequence[int], timeout: float) -> List[int]:
    """Wait until none of ``pids`` is alive (zombies count as gone); return those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]
    return left


@contextlib.contextmanager
def _subnet_lock(timeout: float = 30.0) -> Iterator[None]:
    """Serialise subnet choice + bridge address assignment between concurrent runs.

    Raises:
        NamespaceClusterError: the lock is not free within ``timeout`` seconds.
    """
    fd = os.open(LOCK_DIR, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NamespaceClusterError(
                        f"flock on {LOCK_DIR} held by another process for {timeout:g}s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _used_networks() -> List[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address in or a route to (default route excluded)."""
    nets: List[ipaddress.IPv4Network] = []
    for entry in json.loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for info in entry.get("addr_info", []):
            if "local" in info:
                nets.append(ipaddress.ip_interface(f"{info['local']}/{info.get('prefixlen', 32)}").network)
    for route in json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = route.get("dst")
        if not dst or dst == "default":
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(dst, strict=False))
    return nets


def free_subnet(pool: str = DEFAULT_POOL) -> ipaddress.IPv4Network:
    """The first /24 of ``pool`` that overlaps no address or route of this machine.

    Call it under :func:`_subnet_lock` and claim the result (give the bridge an address in it)
    before releasing the lock.

    Raises:
        NamespaceClusterError: every /24 of ``pool`` is taken.
    """
    used = _used_networks()
    for candidate in ipaddress.ip_network(pool).subnets(new_prefix=24):
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise NamespaceClusterError(f"no free /24 left in {pool}; remove stale bridges or pass subnet=")


# --------------------------------------------------------------------------------------------
# the cluster


class NamespaceCluster:
    """``n_hosts`` network namespaces, a bridge, and one sshd per namespace (see the module doc).

    Args:
        n_hosts: number of hosts (1..253).
        workdir: folder for keys, configs, logs and ``state.json``; created if missing (and then
            removed by :meth:`close`), or an existing *empty* folder (then only emptied).
            ``None``: a fresh temp dir.
        prefix: per-run name prefix (lowercase letters and digits, starting with a letter);
            ``None``: ``msl<pid><letter>``.
        slots: slots per host written to the hostfile and the YAML inventory.
        subnet: a /24 to use (e.g. ``"10.213.7.0/24"``); ``None``: the first free /24 of
            :data:`DEFAULT_POOL`.
        start_timeout: seconds to wait for every sshd to accept connections.
        source_bashrc: let bash source ``~/.bashrc`` in ssh sessions, as it does by default for
            commands run over ssh.  ``False`` (default): every sshd sets ``SHLVL=1`` in its
            sessions, which makes bash skip it.  Root's bashrc may do slow or global things
            (``pyenv init`` runs ``pyenv rehash``, which takes a lock in ``~/.pyenv/shims`` that
            is left stale, stalling every later shell for 60 s, if the session is killed mid-way).
        extra_ssh_port: a second port every sshd listens on (besides 22), for inventories that
            give hosts their own SSH port; ``None``: port 22 only.
        cgroups: mount the cgroup v1 ``cpu`` and ``cpuset`` hierarchies in each host (``ip netns
            exec`` gives it a /sys without them), so a host's processes see the CPU limits
            :mod:`tests.harness.cgroups` puts on its sshd.

    Raises:
        NamespaceClusterError: a prerequisite is missing, a name or the subnet is taken, or a
            step failed.  Everything created so far is removed before it is raised.
    """

    def __init__(
        self,
        n_hosts: int,
        workdir: Optional[str] = None,
        prefix: Optional[str] = None,
        *,
        slots: int = 2,
        subnet: Optional[str] = None,
        start_timeout: float = 15.0,
        source_bashrc: bool = False,
        cgroups: bool = False,
        extra_ssh_port: Optional[int] = None,
    ) -> None:
        if not 1 <= n_hosts <= 253:
            raise NamespaceClusterError(f"n_hosts must be 1..253, got {n_hosts}")
        self.prefix = prefix if prefix is not None else _default_prefix()
        if not (
            self.prefix[:1].isalpha() and self.prefix.isalnum() and self.prefix.isascii() and self.prefix.islower()
        ):
            raise NamespaceClusterError(
                f"prefix {self.prefix!r} must be lowercase letters/digits starting with a letter"
            )
        longest = max(len(f"{self.prefix}br"), len(f"{self.prefix}v{n_hosts}"))
        if longest > IFNAMSIZ:
            raise NamespaceClusterError(
                f"prefix {self.prefix!r} is too long: interface names must be <= {IFNAMSIZ} chars"
            )
        self.slots = slots
        self.source_bashrc = source_bashrc
        self.cgroups = cgroups
        self.extra_ssh_port = extra_ssh_port
        self.bridge = f"{self.prefix}br"
        self.subnet: Optional[ipaddress.IPv4Network] = None
        self.bridge_ip: Optional[str] = None
        self.hosts: List[NetnsHost] = []
        self._created_netns: List[str] = []
        self._created_links: List[str] = []
        self._sshd_procs: Dict[str, subprocess.Popen] = {}
        self._sshd_pids: Dict[str, int] = {}
        self._ns_inodes: Dict[str, int] = {}
        self._closed = False
        self._own_workdir = workdir is None or not os.path.exists(workdir)
        self._workdir_created = False
        self._setup_workdir(workdir)
        atexit.register(self._atexit_close)
        try:
            self._check_prerequisites()
            self._create_network(n_hosts, subnet)
            self._write_client_files()
            self._start_all_sshd(start_timeout)
            self._write_state()
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    # ---------------------------------------------------------------- public properties

    @property
    def workdir(self) -> str:
        """The work directory (see the module doc for its layout)."""
        return self._workdir

    @property
    def ssh_config(self) -> str:
        """Path of the OpenSSH client config (``ssh -F <ssh_config> h1``)."""
        return os.path.join(self._workdir, "ssh_config")

    @property
    def key_path(self) -> str:
        """Path of the user's private key (ed25519, no passphrase)."""
        return os.path.join(self._workdir, "id_ed25519")

    @property
    def known_hosts(self) -> str:
        """Path of the known_hosts file holding every host's key under its name and IP."""
        return os.path.join(self._workdir, "known_hosts")

    @property
    def hostfile(self) -> str:
        """Path of the OpenMPI-style hostfile (``<ip> slots=N`` per host)."""
        return os.path.join(self._workdir, "hostfile")

    @property
    def inventory_yaml(self) -> str:
        """Path of the mslaunch YAML inventory (hosts by IP, with ssh user/port/key)."""
        return os.path.join(self._workdir, "cluster.yaml")

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "NamespaceCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.ip}" for h in self.hosts)
        return f"NamespaceCluster(prefix={self.prefix!r}, subnet={self.subnet}, hosts=[{hosts}], closed={self._closed})"

    # ---------------------------------------------------------------- driving hosts

    def host(self, ref: HostRef) -> NetnsHost:
        """The host ``ref`` names: a 0-based index, or a name (``h1``), IP or namespace name.

        Raises:
            NamespaceClusterError: no such host.
        """
        if isinstance(ref, int) and not isinstance(ref, bool):
            if 0 <= ref < len(self.hosts):
                return self.hosts[ref]
            raise NamespaceClusterError(
                f"host index {ref} out of range 0..{len(self.hosts) - 1} (indexes are 0-based: 0 is h1)"
            )
        for h in self.hosts:
            if ref in (h.name, h.ip, h.netns):
                return h
        raise NamespaceClusterError(f"no host {ref!r}; hosts are {[h.name for h in self.hosts]}")

    def ssh_argv(
        self, host: HostRef, cmd: Union[str, Sequence[str]], *, connect_timeout: Optional[float] = None
    ) -> List[str]:
        """The OpenSSH client argv :meth:`ssh` runs (``ssh -F <ssh_config> [-o ConnectTimeout=N] h1 <cmd>``).

        ``cmd`` as a string is given to the remote shell as is; as a list it is ``shlex``-quoted.
        """
        h = self.host(host)
        argv = ["ssh", "-F", self.ssh_config]
        if connect_timeout is not None:
            argv += ["-o", f"ConnectTimeout={max(1, int(round(connect_timeout)))}"]
        remote = cmd if isinstance(cmd, str) else shlex.join(cmd)
        return argv + [h.name, remote]

    def ssh(
        self,
        host: HostRef,
        cmd: Union[str, Sequence[str]],
        *,
        timeout: float = 60.0,
        connect_timeout: Optional[float] = None,
        check: bool = False,
        input: Optional[str] = None,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` on ``host`` with the OpenSSH client and the generated config.

        Args:
            host: index or name (see :meth:`host`).
            cmd: a remote shell command string, or an argv list (quoted for the remote shell).
            timeout: seconds before the local ``ssh`` is killed (``subprocess.TimeoutExpired``).
            connect_timeout: overrides the config's ``ConnectTimeout`` (5 s).
            check: raise ``subprocess.CalledProcessError`` on a non-zero exit.
            input: text fed to the remote command's stdin (default: none, stdin is /dev/null).

        Returns:
            the finished process, text ``stdout``/``stderr``; exit code 255 means ssh itself failed.
        """
        argv = self.ssh_argv(host, cmd, connect_timeout=connect_timeout)
        return subprocess.run(
            argv,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def exec_in(
        self, host: HostRef, argv: Sequence[str], *, timeout: float = 60.0, check: bool = False
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` directly inside ``host``'s namespace (``ip netns exec``), no ssh involved.

        Returns:
            the finished process with text ``stdout``/``stderr``.
        """
        h = self.host(host)
        return subprocess.run(
            ["ip", "netns", "exec", h.netns, *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def pids_in(self, host: HostRef, *, include_sshd: bool = False) -> List[int]:
        """Pids of live processes in ``host``'s network namespace, sorted.

        Processes of the sshd binary (the listener and its per-connection processes) are left out
        unless ``include_sshd``; so after every session has ended this is ``[]`` unless something
        was left running there.  Zombies are not listed.
        """
        h = self.host(host)
        inode = self._ns_inodes.get(h.netns)
        if inode is None:
            return []
        pids = _pids_in_netns(inode)
        if include_sshd:
            return pids
        # a process that exits between the liveness check and the readlink has no executable any
        # more (an sshd connection child closing, say): ask again whether it is alive
        return [p for p in pids if _not_sshd_and_alive(p)]

    def all_pids(self, *, include_sshd: bool = False) -> Dict[str, List[int]]:
        """:meth:`pids_in` for every host, by host name (only hosts with processes are listed)."""
        out = {h.name: self.pids_in(h.index, include_sshd=include_sshd) for h in self.hosts}
        return {k: v for k, v in out.items() if v}

    def sshd_pid(self, host: HostRef) -> Optional[int]:
        """The pid of ``host``'s listening sshd, or ``None`` if it is not running."""
        pid = self._sshd_pids.get(self.host(host).name)
        return pid if pid is not None and _alive(pid) else None

    def cut_link(self, host: HostRef) -> None:
        """Bring ``host``'s veth (root end) down: it can no longer reach or be reached by anyone.

        Existing TCP connections are not reset; they stall, as on a dropped link.
        """
        _run(["ip", "link", "set", "dev", self.host(host).veth, "down"])

    def restore_link(self, host: HostRef, *, wait: bool = True, timeout: float = 10.0) -> None:
        """Bring ``host``'s veth back up; with ``wait``, until its sshd answers again (if running).

        Raises:
            NamespaceClusterError: it does not answer within ``timeout`` seconds.
        """
        h = self.host(host)
        _run(["ip", "link", "set", "dev", h.veth, "up"])
        if wait and self.sshd_pid(h.index) is not None:
            self.wait_ssh(h.index, timeout=timeout)

    def stop_sshd(self, host: HostRef, *, timeout: float = 5.0) -> None:
        """Stop ``host``'s listening sshd (SIGTERM, then SIGKILL).  Open sessions keep running."""
        h = self.host(host)
        proc = self._sshd_procs.pop(h.name, None)
        pid = self._sshd_pids.pop(h.name, None)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout)
        elif pid is not None and self._is_our_sshd(pid, h):
            _signal(pid, signal.SIGTERM)
            if wait_gone([pid], timeout):
                _signal(pid, signal.SIGKILL)
                wait_gone([pid], timeout)
        self._write_state()

    def start_sshd(self, host: HostRef, *, timeout: float = 15.0) -> None:
        """(Re)start ``host``'s sshd and wait until it accepts connections; no-op if it runs."""
        h = self.host(host)
        if self.sshd_pid(h.index) is not None:
            return
        self._spawn_sshd(h)
        self.wait_ssh(h.index, timeout=timeout)
        self._write_state()

    def wait_ssh(self, host: HostRef, *, timeout: float = 15.0) -> None:
        """Wait until ``host:22`` sends an SSH banner.

        Raises:
            NamespaceClusterError: its sshd exited, or no banner within ``timeout`` seconds.
        """
        h = self.host(host)
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            proc = self._sshd_procs.get(h.name)
            if proc is not None and proc.poll() is not None:
                raise NamespaceClusterError(
                    f"sshd of {h.name} exited with {proc.returncode}; log:\n{self._log_tail(h)}"
                )
            try:
                with socket.create_connection((h.ip, 22), timeout=0.5) as sock:
                    sock.settimeout(max(0.2, min(2.0, deadline - time.monotonic())))
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise NamespaceClusterError(
                    f"{h.name} ({h.ip}:22) did not answer within {timeout:g}s ({last}); log:\n{self._log_tail(h)}"
                )
            time.sleep(0.02)

    def reset(self) -> Dict[str, List[int]]:
        """Bring the cluster back to its fresh state between tests.

        Restores every link, starts every stopped sshd, and SIGKILLs whatever else runs in the
        namespaces.

        Returns:
            the pids killed, by host name (empty if nothing was left behind).
        """
        for h in self.hosts:
            _run(["ip", "link", "set", "dev", h.veth, "up"])
        killed = self._kill_strays(include_sshd=False)
        for h in self.hosts:
            self.start_sshd(h.index)
        return killed

    # ---------------------------------------------------------------- teardown

    def close(self) -> None:
        """Remove everything: processes in the namespaces, sshds, namespaces, veths, bridge, files.

        Only what this cluster created is removed.  Idempotent; safe after a failed setup.

        Raises:
            NamespaceClusterError: something could not be removed (every step is still tried;
                calling close again retries what is left).
        """
        if self._closed:
            return
        errors: List[str] = []

        def step(what: str, fn, *args) -> None:  # type: ignore[no-untyped-def]
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - collect, keep tearing down
                errors.append(f"{what}: {exc}")

        step("kill leftovers", self._kill_strays, True)
        for h in list(self.hosts):
            step(f"stop sshd of {h.name}", self.stop_sshd, h.index)
        step("kill remaining sessions", self._kill_strays, True)
        for link in list(reversed(self._created_links)):
            step(f"delete link {link}", self._delete_link, link)
        for ns in list(reversed(self._created_netns)):
            step(f"delete netns {ns}", self._delete_netns, ns)
        step("remove work dir", self._remove_workdir)
        if errors:
            with contextlib.suppress(Exception):
                self._write_state()
            raise NamespaceClusterError("cleanup incomplete: " + "; ".join(errors))
        self._closed = True
        atexit.unregister(self._atexit_close)

    def detach(self) -> None:
        """Keep the cluster running after this process exits (no atexit cleanup); for ``up``."""
        atexit.unregister(self._atexit_close)

    @classmethod
    def from_state(cls, workdir: str) -> "NamespaceCluster":
        """Re-attach to a cluster from its ``state.json`` (e.g. one started by ``up``).

        The object drives and closes it like the original; it does not own the sshd ``Popen``
        handles, so sshds are stopped by pid after checking that the pid still runs sshd with
        this cluster's config.

        Raises:
            NamespaceClusterError: no or unreadable ``state.json``.
        """
        path = os.path.join(workdir, STATE_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                state = json.load(fh)
        except (OSError, ValueError) as exc:
            raise NamespaceClusterError(f"{path}: cannot read cluster state ({exc})") from exc
        if state.get("version") != STATE_VERSION:
            raise NamespaceClusterError(f"{path}: state version {state.get('version')!r}, expected {STATE_VERSION}")
        self = cls.__new__(cls)
        self._workdir = os.path.abspath(workdir)
        self.prefix = state["prefix"]
        self.slots = state["slots"]
        self.source_bashrc = bool(state.get("source_bashrc", False))
        self.cgroups = bool(state.get("cgroups", False))
        self.bridge = state["bridge"]
        self.subnet = ipaddress.ip_network(state["subnet"]) if state.get("subnet") else None
        self.bridge_ip = state.get("bridge_ip")
        self.hosts = [NetnsHost(**h) for h in state["hosts"]]
        self._created_netns = list(state["created_netns"])
        self._created_links = list(state["created_links"])
        self._sshd_procs = {}
        self._sshd_pids = {k: int(v) for k, v in state["sshd_pids"].items()}
        self._ns_inodes = {}
        for ns in self._created_netns:
            inode = _netns_inode(f"/run/netns/{ns}")
            if inode is not None:
                self._ns_inodes[ns] = inode
        self._own_workdir = bool(state["own_workdir"])
        self._workdir_created = True
        self._closed = False
        return self

    # ---------------------------------------------------------------- internals: setup

    def _setup_workdir(self, workdir: Optional[str]) -> None:
        if workdir is None:
            self._workdir = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        else:
            workdir = os.path.abspath(workdir)
            if os.path.exists(workdir):
                if not os.path.isdir(workdir):
                    raise NamespaceClusterError(f"{workdir} exists and is not a directory")
                if os.listdir(workdir):
                    hint = (
                        " (a cluster is up there: run 'down' first)"
                        if os.path.exists(os.path.join(workdir, STATE_FILE))
                        else ""
                    )
                    raise NamespaceClusterError(f"{workdir} is not empty{hint}")
            else:
                os.makedirs(workdir, mode=0o700)
            self._workdir = workdir
        self._workdir_created = True
        if any(c.isspace() or c in "\"'#" for c in self._workdir):
            self._remove_workdir()
            raise NamespaceClusterError(f"work dir {self._workdir!r} must not contain spaces, quotes or '#'")
        os.makedirs(os.path.join(self._workdir, "hosts"), exist_ok=True)

    def _check_prerequisites(self) -> None:
        missing = []
        if os.geteuid() != 0:
            missing.append("root (network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN)")
        for tool in ("ip", "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                missing.append(f"'{tool}' on PATH")
        if not os.access(SSHD, os.X_OK):
            missing.append(SSHD)
        if missing:
            raise NamespaceClusterError(
                "missing: " + ", ".join(missing) + " (apt-get install iproute2 openssh-server openssh-client)"
            )
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)

    def _create_network(self, n_hosts: int, subnet: Optional[str]) -> None:
        with _subnet_lock():
            if subnet is None:
                net = free_subnet()
            else:
                net = ipaddress.ip_network(subnet)
                if net.prefixlen != 24:
                    raise NamespaceClusterError(f"subnet must be a /24, got {net}")
                clash = [str(u) for u in _used_networks() if net.overlaps(u)]
                if clash:
                    raise NamespaceClusterError(f"subnet {net} overlaps {', '.join(clash)} on this machine")
            self.subnet = net
            self.bridge_ip = str(net.network_address + ROOT_OCTET)
            _run(["ip", "link", "add", "name", self.bridge, "type", "bridge"])
            self._created_links.append(self.bridge)
            _run(["ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge])
        _run(["ip", "link", "set", "dev", self.bridge, "up"])
        for i in range(1, n_hosts + 1):
            host = NetnsHost(
                name=f"h{i}",
                index=i - 1,
                netns=f"{self.prefix}h{i}",
                ip=str(net.network_address + i),
                veth=f"{self.prefix}v{i}",
            )
            _run(["ip", "netns", "add", host.netns])
            self._created_netns.append(host.netns)
            inode = _netns_inode(f"/run/netns/{host.netns}")
            if inode is None:
                raise NamespaceClusterError(f"/run/netns/{host.netns} missing right after 'ip netns add'")
            self._ns_inodes[host.netns] = inode
            self.hosts.append(host)
            _run(["ip", "link", "add", "name", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
            self._created_links.append(host.veth)
            _run(["ip", "link", "set", "dev", host.veth, "master", self.bridge, "up"])
            _run(["ip", "-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", "eth0"])
            _run(["ip", "-n", host.netns, "link", "set", "dev", "lo", "up"])
            _run(["ip", "-n", host.netns, "link", "set", "dev", "eth0", "up"])

    def _host_dir(self, h: NetnsHost) -> str:
        return os.path.join(self._workdir, "hosts", h.name)

    def _write(self, name: str, text: str, mode: int = 0o644) -> str:
        path = os.path.join(self._workdir, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, mode)
        return path

    def _write_client_files(self) -> None:
        # Key generation: the user key and every host key, in parallel.
        jobs = [(self.key_path, "mslaunch-netns-user")]
        for h in self.hosts:
            os.makedirs(self._host_dir(h), mode=0o700, exist_ok=True)
            jobs.append((os.path.join(self._host_dir(h), "ssh_host_ed25519_key"), f"{h.name}-hostkey"))
        procs = [
            (
                path,
                subprocess.Popen(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
            )
            for path, comment in jobs
        ]
        for path, proc in procs:
            _, err = proc.communicate(timeout=30)
            if proc.returncode != 0:
                raise NamespaceClusterError(f"ssh-keygen -f {path} failed: {err.decode(errors='replace').strip()}")

        with open(self.key_path + ".pub", encoding="utf-8") as fh:
            user_pub = fh.read().strip()
        self._write("authorized_keys", user_pub + "\n", 0o600)

        known, config, hostfile = [], [f"# generated by tests/netns_cluster.py; use: ssh -F {self.ssh_config} h1\n"], []
        yaml = ["# generated by tests/netns_cluster.py: a mslaunch YAML inventory of the namespace cluster", "hosts:"]
        for h in self.hosts:
            with open(os.path.join(self._host_dir(h), "ssh_host_ed25519_key.pub"), encoding="utf-8") as fh:
                keytype, blob = fh.read().split()[:2]
            extra = (
                f",[{h.name}]:{self.extra_ssh_port},[{h.ip}]:{self.extra_ssh_port}"
                if self.extra_ssh_port is not None
                else ""
            )
            known.append(f"{h.name},{h.ip}{extra} {keytype} {blob}\n")
            config.append(
                f"Host {h.name} {h.ip}\n"
                f"    HostName {h.ip}\n"
                f"    User root\n"
                f"    Port 22\n"
                f"    IdentityFile {self.key_path}\n"
                f"    IdentitiesOnly yes\n"
                f"    IdentityAgent none\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
                f"    GlobalKnownHostsFile /dev/null\n"
                f"    StrictHostKeyChecking yes\n"
                f"    CheckHostIP no\n"
                f"    UpdateHostKeys no\n"
                f"    BatchMode yes\n"
                f"    ConnectTimeout 5\n"
                f"    ServerAliveInterval 5\n"
                f"    ServerAliveCountMax 3\n"
                f"    LogLevel ERROR\n\n"
            )
            hostfile.append(f"{h.ip} slots={self.slots}\n")
            yaml += [
                f"  - host: {h.ip}",
                f"    slots: {self.slots}",
                f"    ssh: {{user: root, port: 22, key: {json.dumps(self.key_path)}}}",
            ]
        self._write("known_hosts", "".join(known))
        self._write("ssh_config", "".join(config))
        self._write("hostfile", f"# namespace cluster {self.prefix} ({self.subnet})\n" + "".join(hostfile))
        self._write("cluster.yaml", "\n".join(yaml) + "\n")

        for h in self.hosts:
            hd = self._host_dir(h)
            with open(os.path.join(hd, "sshd_config"), "w", encoding="utf-8") as fh:
                fh.write(
                    f"# sshd of namespace {h.netns}; generated by tests/netns_cluster.py\n"
                    f"ListenAddress {h.ip}:22\n"
                    + (f"ListenAddress {h.ip}:{self.extra_ssh_port}\n" if self.extra_ssh_port is not None else "")
                    + f"HostKey {hd}/ssh_host_ed25519_key\n"
                    f"PidFile {hd}/sshd.pid\n"
                    f"AuthorizedKeysFile {self._workdir}/authorized_keys\n"
                    "PubkeyAuthentication yes\n"
                    "PasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\n"
                    "PermitRootLogin prohibit-password\n"
                    "UsePAM no\n"
                    "StrictModes no\n"
                    "PermitUserEnvironment no\n"
                    "UseDNS no\n"
                    "PrintMotd no\n"
                    "PrintLastLog no\n"
                    "X11Forwarding no\n"
                    "AllowAgentForwarding no\n"
                    "MaxStartups 100:30:200\n"
                    "MaxSessions 64\n"
                    "LoginGraceTime 30\n"
                    "LogLevel VERBOSE\n"
                    "Subsystem sftp internal-sftp\n"
                    # the hosts share this machine's /tmp: each host's OpenMPI daemons keep their
                    # session dirs in their own folder, as on separate machines (two daemons of one
                    # job creating /tmp/ompi.<node>.<uid>/jf.<job> at once can fail with EEXIST)
                     + f"SetEnv OMPI_MCA_orte_tmpdir_base={hd}/tmp" + ("" if self.source_bashrc else " SHLVL=1") + "\n"
                )
            os.makedirs(os.path.join(hd, "tmp"), mode=0o1777, exist_ok=True)

    def _spawn_sshd(self, h: NetnsHost) -> None:
        hd = self._host_dir(h)
        log = os.path.join(hd, "sshd.log")
        sshd = [SSHD, "-D", "-f", os.path.join(hd, "sshd_config"), "-E", log]
        if self.cgroups:  # 'ip netns exec' mounts a fresh /sys without /sys/fs/cgroup: mount what a host has
            sshd = ["sh", "-c", CGROUP_MOUNTS + ' && exec "$@"', "sshd", *sshd]
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", h.netns, *sshd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # no terminal SIGINT/SIGHUP (SIGHUP would make sshd re-exec)
            )
        # 'ip netns exec' (and the cgroups' sh) exec sshd in place, so proc.pid is sshd's pid.
        self._sshd_procs[h.name] = proc
        self._sshd_pids[h.name] = proc.pid

    def _start_all_sshd(self, timeout: float) -> None:
        for h in self.hosts:
            self._spawn_sshd(h)
        deadline = time.monotonic() + timeout
        for h in self.hosts:
            self.wait_ssh(h.index, timeout=max(0.5, deadline - time.monotonic()))

    def _log_tail(self, h: NetnsHost, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            with open(os.path.join(self._host_dir(h), "sshd.log"), encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        return "(no log)"

    def _write_state(self) -> None:
        if not getattr(self, "_workdir_created", False) or not os.path.isdir(self._workdir):
            return
        state = {
            "version": STATE_VERSION,
            "prefix": self.prefix,
            "slots": self.slots,
            "source_bashrc": self.source_bashrc,
            "cgroups": self.cgroups,
            "bridge": self.bridge,
            "subnet": str(self.subnet) if self.subnet else None,
            "bridge_ip": self.bridge_ip,
            "hosts": [asdict(h) for h in self.hosts],
            "created_netns": self._created_netns,
            "created_links": self._created_links,
            "sshd_pids": self._sshd_pids,
            "own_workdir": self._own_workdir,
            "ssh_config": self.ssh_config,
            "hostfile": self.hostfile,
            "inventory_yaml": self.inventory_yaml,
        }
        tmp = os.path.join(self._workdir, STATE_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh, indent=2)
        os.replace(tmp, os.path.join(self._workdir, STATE_FILE))

    # ---------------------------------------------------------------- internals: teardown

    def _is_our_sshd(self, pid: int, h: NetnsHost) -> bool:
        """``pid`` is alive and is the sshd started with ``h``'s config (guards against pid reuse)."""
        return _alive(pid) and os.path.join(self._host_dir(h), "sshd_config") in _cmdline(pid)

    def _kill_strays(self, include_sshd: bool) -> Dict[str, List[int]]:
        """SIGKILL the processes in our namespaces, children before parents.

        The listening sshds are never touched here (:meth:`stop_sshd` stops them); sshd session
        processes only if ``include_sshd``.  Killing leaves first lets every parent reap its
        child, so no zombies are orphaned to an init that may not reap them.

        Returns:
            the pids killed, by host name.

        Raises:
            NamespaceClusterError: processes survive SIGKILL or keep appearing for 15 s.
        """
        killed: Dict[str, List[int]] = {}
        deadline = time.monotonic() + 15.0
        for h in self.hosts:
            if h.netns not in self._ns_inodes:
                continue
            listener = self._sshd_pids.get(h.name)
            while True:
                pids = [p for p in self.pids_in(h.index, include_sshd=include_sshd) if p != listener]
                if not pids:
                    break
                if time.monotonic() > deadline:
                    raise NamespaceClusterError(f"processes {pids} in {h.netns} survive SIGKILL")
                parents = {_ppid(p) for p in pids}
                leaves = [p for p in pids if p not in parents] or pids
                for pid in leaves:
                    _signal(pid, signal.SIGKILL)
                killed.setdefault(h.name, []).extend(leaves)
                _wait_reaped(leaves, 2.0)
        return killed

    def _delete_link(self, link: str) -> None:
        if _run(["ip", "link", "show", "dev", link], check=False).returncode == 0:
            _run(["ip", "link", "delete", "dev", link])
        self._created_links.remove(link)

    def _delete_netns(self, ns: str) -> None:
        if os.path.exists(f"/run/netns/{ns}"):
            _run(["ip", "netns", "delete", ns])
        self._created_netns.remove(ns)
        self._ns_inodes.pop(ns, None)

    def _remove_workdir(self) -> None:
        if not getattr(self, "_workdir_created", False) or not os.path.isdir(self._workdir):
            return
        if self._own_workdir:
            shutil.rmtree(self._workdir)
        else:  # a folder the caller gave us empty: empty it again
            for name in os.listdir(self._workdir):
                path = os.path.join(self._workdir, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)

    def _atexit_close(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# --------------------------------------------------------------------------------------------
# manual use: python -m tests.harness.netns_cluster up|down


def _describe(cluster: NamespaceCluster) -> str:
    out = [
        f"namespace cluster up: {len(cluster.hosts)} hosts on {cluster.subnet} "
        f"(bridge {cluster.bridge}, this machine is {cluster.bridge_ip})",
    ]
    for h in cluster.hosts:
        out.append(f"  {h.name}  {h.ip:<15}  netns {h.netns}  sshd pid {cluster.sshd_pid(h.index)}")
    out += [
        f"files in {cluster.workdir}:",
        f"  ssh config     {cluster.ssh_config}",
        f"  private key    {cluster.key_path}",
        f"  known_hosts    {cluster.known_hosts}",
        f"  hostfile       {cluster.hostfile}",
        f"  inventory      {cluster.inventory_yaml}",
        "use it:",
        f"  ssh -F {cluster.ssh_config} h1 hostname -I",
        f"  ip netns exec {cluster.hosts[0].netns} bash          # a shell 'on' h1 without ssh",
        f"  mslaunch ... --hostfile {cluster.hostfile}   (or the YAML inventory)",
        f"  mpirun --allow-run-as-root --hostfile {cluster.hostfile} --mca plm_rsh_args '-F {cluster.ssh_config}' \\",
        f"         --mca oob_tcp_if_include {cluster.subnet} --mca btl_tcp_if_include {cluster.subnet} hostname -I",
        "tear down:",
        f"  python -m tests.harness.netns_cluster down --dir {cluster.workdir}",
    ]
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``up`` / ``down`` / ``status`` / ``subnet`` for a namespace cluster kept in ``--dir``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.harness.netns_cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create the cluster and leave it running")
    up.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    up.add_argument("--dir", required=True, help="work dir (missing or empty); keeps state.json for 'down'")
    up.add_argument("--slots", type=int, default=2, help="slots per host in hostfile/inventory (default 2)")
    up.add_argument("--subnet", default=None, help=f"a /24 to use (default: first free one in {DEFAULT_POOL})")
    up.add_argument("--prefix", default=None, help="name prefix for namespaces and links (default msl<pid><letter>)")
    down = sub.add_parser("down", help="remove everything 'up' created (idempotent)")
    down.add_argument("--dir", required=True)
    status = sub.add_parser("status", help="print the hosts of a running cluster")
    status.add_argument("--dir", required=True)
    subnet = sub.add_parser("subnet", help="print the cluster's subnet (for --nic)")
    subnet.add_argument("--dir", required=True)
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            cluster = NamespaceCluster(
                args.hosts, workdir=args.dir, prefix=args.prefix, slots=args.slots, subnet=args.subnet
            )
            cluster.detach()
            print(_describe(cluster))
            return 0
        if not os.path.exists(os.path.join(args.dir, STATE_FILE)):
            print(f"no cluster state in {args.dir}; nothing to do")
            return 0 if args.command == "down" else 1
        cluster = NamespaceCluster.from_state(args.dir)
        if args.command == "status":
            print(_describe(cluster))
            return 0
        if args.command == "subnet":
            print(cluster.subnet)
            return 0
        cluster.close()
        print(f"namespace cluster {cluster.prefix} removed")
        return 0
    except NamespaceClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
