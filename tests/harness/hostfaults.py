"""Real performance faults on namespace-cluster hosts: a CPU quota and a shaped link.

* :func:`throttle_cpu` puts the host's sshd in a cgroup v1 ``cpu`` group with a CFS quota
  (``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``); everything started over ssh on that host
  inherits it.  :func:`unthrottle` moves the processes back and removes the group.
  :func:`throttle_slurmd` / :func:`unthrottle_slurmd` do the same for a Slurm node's slurmd
  (the job steps started there), and :func:`stop_slurmd` stops it.  :func:`throttle_pids` moves
  processes already running (a rank) into a group with a quota; :func:`unthrottle_group` undoes it.
  :func:`favor_cpu` puts the host's sshd in that group with a high ``cpu.shares`` instead: the
  host's processes get the CPU they ask for before the rest of this machine's work, as a real
  host's own cores would give them (a quota set later on the same host caps it still;
  :func:`lift_quota` takes the quota off and keeps the weight).  :func:`favored_slurmds` does
  that for Slurm nodes, :func:`favored_children` for processes a test starts itself: the
  suite's longest end-to-end jobs take it so that they run near their time alone beside the
  suite's other work (the total CPU is the same; the longest tests end sooner).
* :func:`shape_link` adds a ``tbf`` qdisc on the root-namespace end of the host's veth (the
  traffic *to* the host) and on the host's own ``eth0`` (the traffic *from* it);
  :func:`unshape_link` removes both.

Use them in a ``try``/``finally`` (or :func:`host_faults`, which undoes everything it did).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tests.harness.netns_cluster import HostRef, NamespaceCluster

CPU_ROOT = "/sys/fs/cgroup/cpu"


def cgroup_v1_cpu() -> bool:
    """This machine has the cgroup v1 cpu controller with CFS quotas."""
    return os.path.exists(os.path.join(CPU_ROOT, "cpu.cfs_quota_us"))


def _can_group() -> bool:
    """Groups can be made here: the controller, and the right to (root)."""
    return cgroup_v1_cpu() and os.access(CPU_ROOT, os.W_OK)


def _group(cluster: NamespaceCluster, host: HostRef) -> str:
    return os.path.join(CPU_ROOT, f"{cluster.prefix}{cluster.host(host).name}")


def throttle_cpu(cluster: NamespaceCluster, host: HostRef, quota_us: int = 5000, period_us: int = 100000) -> str:
    """Put ``host``'s sshd (so every later ssh session there) under ``quota_us`` per ``period_us``."""
    pid = cluster.sshd_pid(host)
    if pid is None:
        raise RuntimeError(f"{cluster.host(host).name}: sshd is not running")
    return _throttle(_group(cluster, host), pid, quota_us, period_us)


#: ``cpu.shares`` of a favored host's group: 8 times a process's default weight (1024).
FAVORED_SHARES = 8192


def favor_cpu(cluster: NamespaceCluster, host: HostRef, shares: int = FAVORED_SHARES) -> str:
    """Put ``host``'s sshd (so every later ssh session there) in a group of weight ``shares``,
    no quota.  The namespace hosts share this machine's cores with the rest of the suite: a
    measurement that compares hosts (the health check's compute) needs each host's processes
    served as on a host of its own, not as one more process among the suite's."""
    pid = cluster.sshd_pid(host)
    if pid is None:
        raise RuntimeError(f"{cluster.host(host).name}: sshd is not running")
    return _into_group(_group(cluster, host), pid, {"cpu.shares": shares})


def lift_quota(cluster: NamespaceCluster, host: HostRef) -> None:
    """Take :func:`throttle_cpu`'s quota off ``host``'s group, keeping the group (and a weight
    :func:`favor_cpu` gave it); :func:`unthrottle` removes the group."""
    with open(os.path.join(_group(cluster, host), "cpu.cfs_quota_us"), "w") as fh:
        fh.write("-1")


def unthrottle(cluster: NamespaceCluster, host: HostRef) -> None:
    """Move ``host``'s throttled processes back to the root group and remove the group."""
    _unthrottle(_group(cluster, host))


def throttle_pids(name: str, pids: List[int], quota_us: int = 3000, period_us: int = 100000) -> str:
    """Move running processes ``pids`` (every thread of each) into a new cgroup v1 ``cpu`` group
    ``name`` under ``quota_us`` per ``period_us``; :func:`unthrottle_group` undoes it."""
    path = os.path.join(CPU_ROOT, name)
    for pid in pids:
        _throttle(path, pid, quota_us, period_us)
    return path


def unthrottle_group(name: str) -> None:
    """Move what is left in cgroup ``name`` back to the root group and remove the group."""
    _unthrottle(os.path.join(CPU_ROOT, name))


def throttle_slurmd(slurm, node: str, quota_us: int = 5000, period_us: int = 100000) -> str:  # type: ignore[no-untyped-def]
    """Put ``node``'s slurmd (a :class:`tests.harness.slurm_cluster.SlurmCluster` node) under a CPU
    quota: every job step started there later (its slurmstepd and tasks) inherits it."""
    return _throttle(_slurmd_group(slurm, node), slurm.daemon_pids()[node], quota_us, period_us)


def unthrottle_slurmd(slurm, node: str) -> None:  # type: ignore[no-untyped-def]
    """Undo :func:`throttle_slurmd` (what still runs in the group moves back to the root group)."""
    _unthrottle(_slurmd_group(slurm, node))


@contextlib.contextmanager
def favored_slurmds(slurm, nodes: Optional[Sequence[str]] = None) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """:func:`favor_cpu` for Slurm nodes (None: all of them): each node's slurmd (so every job step
    started there later) in a group of weight :data:`FAVORED_SHARES`; undone on the way out.
    Nothing where no group can be made (:func:`favored_children`)."""
    done: List[str] = []
    try:
        for node in (slurm.nodes if nodes is None else nodes) if _can_group() else ():
            _into_group(_slurmd_group(slurm, node), slurm.daemon_pids()[node], {"cpu.shares": FAVORED_SHARES})
            done.append(node)
        yield
    finally:
        for node in reversed(done):
            unthrottle_slurmd(slurm, node)


@contextlib.contextmanager
def favored_children(this_thread: bool = False) -> Iterator[Callable[[], None]]:
    """A group of weight :data:`FAVORED_SHARES` for processes the test starts: yields a
    ``preexec_fn`` that moves the child in before it runs (so all it starts is in the group too);
    on the way out what is left there moves back to the root group and the group is removed.
    With ``this_thread`` the calling thread is in the group too, until the way out (a test that
    must act on its job within a step or two: beside favored ranks it would wait its turn).
    Without the cgroup v1 cpu controller (or the right to make a group there: not root) the
    ``preexec_fn`` does nothing."""
    if not _can_group():
        yield lambda: None
        return
    path = _make_group(os.path.join(CPU_ROOT, f"mslaunch-tests-favored-{os.getpid()}"), {"cpu.shares": FAVORED_SHARES})
    procs = os.path.join(path, "cgroup.procs")

    def enter() -> None:  # in the child, between fork and exec
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))

    home = _thread_group() if this_thread else None
    try:
        if home is not None:
            _move_thread(path)
        yield enter
    finally:
        if home is not None:
            _move_thread(home)
        _unthrottle(path)


def _thread_group() -> str:
    """The cpu group the calling thread is in (``/proc/thread-self/cgroup``)."""
    with open("/proc/thread-self/cgroup") as fh:
        for line in fh:
            _, controllers, where = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                return os.path.join(CPU_ROOT, where.lstrip("/"))
    return CPU_ROOT


def _move_thread(path: str) -> None:
    with open(os.path.join(path, "tasks"), "w") as fh:
        fh.write(str(threading.get_native_id()))


def _slurmd_group(slurm, node: str) -> str:  # type: ignore[no-untyped-def]
    return os.path.join(CPU_ROOT, f"{slurm.net.prefix}{node}")


def _throttle(path: str, pid: int, quota_us: int, period_us: int) -> str:
    return _into_group(path, pid, {"cpu.cfs_period_us": period_us, "cpu.cfs_quota_us": quota_us})


def _into_group(path: str, pid: int, settings: Dict[str, int]) -> str:
    """:func:`_make_group`, then move ``pid`` in."""
    with open(os.path.join(_make_group(path, settings), "cgroup.procs"), "w") as fh:
        fh.write(str(pid))
    return path


def _make_group(path: str, settings: Dict[str, int]) -> str:
    """Make cgroup ``path`` (if new) and write ``settings`` (file -> value) there."""
    os.makedirs(path, exist_ok=True)
    for name, value in settings.items():
        with open(os.path.join(path, name), "w") as fh:
            fh.write(str(value))
    return path


def _unthrottle(path: str) -> None:
    if not os.path.isdir(path):
        return
    with open(os.path.join(path, "cgroup.procs")) as fh:
        pids = [line.strip() for line in fh if line.strip()]
    for pid in pids:
        try:
            with open(os.path.join(CPU_ROOT, "cgroup.procs"), "w") as fh:
                fh.write(pid)
        except OSError:
            pass  # gone meanwhile
    os.rmdir(path)


def _tc(argv: List[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=10)


def shape_link(cluster: NamespaceCluster, host: HostRef, rate: str = "8mbit") -> None:
    """Limit ``host``'s link to ``rate`` both ways (``tc qdisc ... tbf``)."""
    h = cluster.host(host)
    tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"]
    _tc(["tc", "qdisc", "replace", "dev", h.veth, *tbf])
    _tc(["ip", "netns", "exec", h.netns, "tc", "qdisc", "replace", "dev", "eth0", *tbf])


def unshape_link(cluster: NamespaceCluster, host: HostRef) -> None:
    """Remove :func:`shape_link`'s qdiscs (no error when there are none)."""
    h = cluster.host(host)
    subprocess.run(["tc", "qdisc", "del", "dev", h.veth, "root"], capture_output=True, timeout=10)
    subprocess.run(
        ["ip", "netns", "exec", h.netns, "tc", "qdisc", "del", "dev", "eth0", "root"], capture_output=True, timeout=10
    )


@contextlib.contextmanager
def host_faults(
    cluster: NamespaceCluster,
    *,
    favored: Tuple[HostRef, ...] = (),
    throttled: Tuple[HostRef, ...] = (),
    shaped: Tuple[HostRef, ...] = (),
    stopped: Tuple[HostRef, ...] = (),
) -> Iterator[NamespaceCluster]:
    """Favor (:func:`favor_cpu`), throttle, shape and stop sshd on the given hosts; undo all of it
    on the way out."""
    done: List[Tuple[str, HostRef]] = []
    try:
        for h in favored:
            favor_cpu(cluster, h)
            done.append(("cpu", h))
        for h in throttled:
            throttle_cpu(cluster, h)
            done.append(("cpu", h))
        for h in shaped:
            shape_link(cluster, h)
            done.append(("tc", h))
        for h in stopped:
            cluster.stop_sshd(h)
            done.append(("sshd", h))
        yield cluster
    finally:
        for kind, h in reversed(done):
            if kind == "cpu":
                unthrottle(cluster, h)
            elif kind == "tc":
                unshape_link(cluster, h)
            else:
                cluster.start_sshd(h)


def stop_slurmd(cluster, node: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Stop ``node``'s slurmd (a :class:`tests.harness.slurm_cluster.SlurmCluster` node) by its pid."""
    import signal
    import time

    pid = cluster.daemon_pids()[node]
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # not our child (a cluster attached from its state): gone when kill(0) fails
            try:
                os.kill(pid, 0)
                done = 0
            except ProcessLookupError:
                pass
        if done == pid:
            return
        time.sleep(0.05)
    os.killpg(pid, signal.SIGKILL)
