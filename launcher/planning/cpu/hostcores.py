"""A host's usable cores and the threads of its ranks (pure).

What a host lets a process use is learned on that host (:mod:`launcher.execution.probes.host_cores`:
the cpuset and the cgroup CPU quota) and passed in as a :class:`HostCores`. Threads per rank
follow torchrun's and DeepSpeed's rule, as for local ranks (:mod:`launcher.planning.cpu.tuning`): k
ranks on N usable cores get ``N // k`` threads each, the first ``N % k`` one more, at least 1; a
variable the user set wins.

Usable cores: the cpuset's size, capped by the quota rounded down (at least 1): a quota of 1.5
cores lets 1 thread run all the time, a second would be throttled half of every period.

Ranks whose host is not reached before the plan (remote hosts) get a :class:`HostThreads` in the
plan instead of numbers, and what reaches the host at start applies the same rule there: the ssh
agent (:func:`host_thread_env` on this machine, from the cores the agent read), the Slurm task
shim on each node (:func:`host_thread_env` on the node, ``SLURM_CPUS_PER_TASK`` capping a rank's
share), the mpirun rank wrapper ``templates/mslaunch-rank.sh`` (the same arithmetic in sh:
:func:`thread_shares` and :attr:`HostCores.usable`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import MsLaunchError

THREAD_VARS = ("OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS")


class HostCoresError(MsLaunchError):
    """A host's cores report that cannot be read."""


def format_cpus(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out: List[str] = []
    s = sorted(set(cpus))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class HostCores:
    """The cores one host lets its ranks use.

    Attributes:
        host: the host's name.
        cpus: the cpuset (the process's CPU affinity there).
        quota: the cgroup CPU quota in cores (None: none).
        quota_source: which file set it (e.g. ``cgroup v1 cpu.cfs_quota_us /job``).
        learned: where it was read (``this machine``, ``the ssh agent on h2``, ...).
    """

    host: str
    cpus: Tuple[int, ...]
    quota: Optional[float] = None
    quota_source: Optional[str] = None
    learned: str = "this machine"
    #: thread variables already set in the environment ranks start from there (they win)
    preset: Mapping[str, str] = field(default_factory=dict)

    @property
    def usable(self) -> int:
        n = len(self.cpus)
        if self.quota is not None:
            n = min(n, max(1, int(self.quota + 1e-9)))
        return max(n, 1)

    def describe(self) -> str:
        """``2 usable core(s) (cpuset 0-1, cgroup v1 cpu.cfs_quota_us /job: 0.5 core; read by ...)``."""
        parts = [f"cpuset {format_cpus(self.cpus)}"]
        if self.quota is not None:
            parts.append(f"{self.quota_source or 'cgroup quota'}: {self.quota:g} core(s)")
        else:
            parts.append("no cgroup CPU quota")
        return f"{self.usable} usable core(s) ({', '.join(parts)}; read by {self.learned})"

    def to_json(self) -> Dict[str, Any]:
        return {
            "host": self.host,
            "cpus": format_cpus(self.cpus),
            "quota": self.quota,
            "quota_source": self.quota_source,
            "usable": self.usable,
            "learned": self.learned,
        }


def parse_host_cores(data: Any, host: str, learned: str) -> HostCores:
    """``read_host_cores()``'s object from ``host``.

    Raises:
        HostCoresError: not that shape (the field named).
    """
    if not isinstance(data, Mapping):
        raise HostCoresError("the cores report is not an object", path=host)
    cpus = data.get("cpus")
    if (
        not isinstance(cpus, list)
        or not cpus
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus)
    ):
        raise HostCoresError(f"must be a non-empty list of CPU numbers, got {cpus!r}", path=host, field="cpus")
    quota = data.get("quota")
    if quota is not None and (isinstance(quota, bool) or not isinstance(quota, (int, float)) or quota <= 0):
        raise HostCoresError(f"must be a number > 0 or null, got {quota!r}", path=host, field="quota")
    source = data.get("quota_source")
    raw_set = data.get("set")
    preset = raw_set if isinstance(raw_set, Mapping) else {}
    return HostCores(
        host,
        tuple(sorted(set(cpus))),
        float(quota) if quota is not None else None,
        str(source) if source else None,
        learned,
        {str(k): str(v) for k, v in preset.items() if k in THREAD_VARS},
    )


def thread_shares(usable: int, ranks: int) -> Tuple[int, ...]:
    """Threads per rank for ``ranks`` ranks on ``usable`` cores: ``N // k``, the first ``N % k``
    one more; 1 each when the ranks outnumber the cores."""
    if ranks <= 0:
        return ()
    if usable <= ranks:
        return (1,) * ranks
    base, extra = divmod(usable, ranks)
    return tuple(base + (1 if i < extra else 0) for i in range(ranks))


@dataclass(frozen=True)
class HostThreads:
    """Threads for the ranks of a host whose cores are learned at start.

    Attributes:
        host: the host.
        ranks: the global ranks on it, in local-rank order.
        set_vars: the thread variables to set (those the user did not set).
        user_omp: the user's ``OMP_NUM_THREADS`` for that host (for the oversubscription warning).
    """

    host: str
    ranks: Tuple[int, ...]
    set_vars: Tuple[str, ...] = THREAD_VARS
    user_omp: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return {"host": self.host, "ranks": list(self.ranks), "set": list(self.set_vars), "at": "start"}


@dataclass(frozen=True)
class HostThreadPlan:
    """What :func:`host_thread_env` decided for one host: env per global rank, notes, warnings."""

    env: Mapping[int, Mapping[str, str]]
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]


def host_thread_env(
    threads: HostThreads, cores: HostCores, per_rank: Optional[int] = None, per_rank_source: str = ""
) -> HostThreadPlan:
    """The thread variables of ``threads.ranks`` on a host with ``cores``, and one note saying
    where the numbers came from (plus a warning when the ranks outnumber the usable cores).

    ``per_rank``: CPUs the scheduler gave each rank (Slurm's ``SLURM_CPUS_PER_TASK``, named in
    ``per_rank_source``): the host's usable cores are then capped at ``per_rank`` x ranks, so a
    rank gets ``per_rank`` threads when the host has them, fewer when its cpuset or quota is tighter."""
    k = len(threads.ranks)
    usable = cores.usable if per_rank is None or per_rank < 1 else min(cores.usable, per_rank * k)
    shares = thread_shares(usable, k)
    names = tuple(v for v in threads.set_vars if v not in cores.preset)
    env = {rank: {var: str(n) for var in names} for rank, n in zip(threads.ranks, shares)}
    sizes = "/".join(sorted({str(n) for n in shares}))
    what = ", ".join(names) if names else "yours: nothing set"
    cap = (
        f"; at most {per_rank} per rank ({per_rank_source or 'CPUs per task'})"
        if per_rank is not None and per_rank >= 1
        else ""
    )
    notes: List[str] = [f"{cores.host}: threads per rank {sizes} ({what}): {k} rank(s) on {cores.describe()}{cap}"]
    warnings: List[str] = []
    if k > cores.usable:
        warnings.append(
            f"{cores.host}: {k} ranks on {cores.usable} usable core(s): several ranks share each core "
            "(oversubscribed; expect each rank to run slower)"
        )
    omp = threads.user_omp if threads.user_omp is not None else cores.preset.get("OMP_NUM_THREADS")
    if omp is not None and omp.isdigit() and k * int(omp) > cores.usable:
        warnings.append(
            f"{cores.host}: {k} ranks x OMP_NUM_THREADS={omp} (yours) exceed its {cores.usable} usable core(s) "
            "(oversubscribed)"
        )
    return HostThreadPlan(env, tuple(notes), tuple(warnings))


def deferred_note(threads: HostThreads, launcher: str) -> str:
    """The plan's line for a host whose cores are learned only at start."""
    by = {
        "ssh": "the ssh agent",
        "slurm": "the Slurm task shim on each node",
        "mpirun": "the rank wrapper (mslaunch-rank.sh) on each host",
    }.get(launcher, f"the {launcher} launcher")
    return (
        f"{threads.host}: threads per rank set at start by {by} from the host's usable cores (cpuset, cgroup CPU "
        f"quota) / {len(threads.ranks)} rank(s) (not reached before this plan)"
    )
