"""The values of planning: what the user asked for (:class:`JobSpec`) and what execution consumes
(:class:`Plan`, one :class:`ProcPlan` per process, the :class:`Artefact` files) (pure).

:func:`launcher.planning.build.build_plan` turns the one into the other; the modules that build a
part of a plan (:mod:`~launcher.planning.job.procenv`, :mod:`~launcher.planning.backends.mpirun`) read these types
from here, so none of them imports the builder.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Mapping, Optional, Tuple

from launcher.errors import PlanError
from launcher.planning.cpu import tuning as cpu
from launcher.planning.cpu.hostcores import HostThreads
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.job import layout
from launcher.planning.job.kinds import ArtefactKind, Method, Role
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.secrets import DEFAULT_PATTERNS, redact_pairs

LAUNCHERS = ("local", "ssh", "mpirun")
DEFAULT_MASTER_PORT = 8118
RANK_TABLE_NAME = layout.RANK_TABLE_FILE
HOSTFILE_NAME = layout.HOSTFILE_FILE


@dataclass(frozen=True)
class Exclusion:
    """A host the plan leaves out, and why (``plan.json``'s ``excluded_hosts``).

    Attributes:
        host: the host's name as in the inventory.
        reason: one line, e.g. ``slow: compute 1.1 GFLOPS, median 9.8`` or ``2 failures: rank 3 killed by SIGKILL``.
        by: ``preflight`` (the health check before the start) or ``restart`` (failures in this job).
        attempt: the first attempt planned without the host (0 for ``preflight``).
    """

    host: str
    reason: str
    by: str
    attempt: int = 0

    def to_json(self) -> Dict[str, Any]:
        return {"host": self.host, "reason": self.reason, "by": self.by, "attempt": self.attempt}


@dataclass(frozen=True)
class NodeSpec:
    """Per-node mode (msrun's model): this mslaunch runs one node's share of a multi-node job.

    A cluster manager (Kubernetes operator, Slurm, a person) starts one mslaunch on every node;
    each plans only its own workers, and the node that owns the master address also runs the
    scheduler.  The job's total worker count is :attr:`JobSpec.np`.

    Attributes:
        node_rank: this node's index (ranks ``node_rank*local_worker_num + i``), or None: one
            node only (``local_worker_num == np``), or ranks left to MindSpore (msrun without
            ``--node_rank``: no ``MS_NODE_ID``/``RANK_ID``, logs named by local index).
        local_worker_num: workers on this node.
        owns_master: whether the master address is one of this machine's addresses (the
            scheduler runs here), or None when unknown (then node 0 runs it).
    """

    node_rank: Optional[int]
    local_worker_num: int
    owns_master: Optional[bool] = None

    @property
    def runs_scheduler(self) -> bool:
        if self.owns_master is not None:
            return self.owns_master
        return self.node_rank in (None, 0)


def worker_log_name(template: str, ip: str, hostname: str) -> str:
    """msrun's ``--worker_log_name``: ``{ip}`` and ``{hostname}`` replaced; the rank suffix
    (``_<rank>.log``) is added per worker.

    Raises:
        PlanError: an empty name or one with a path separator.
    """
    name = template.replace("{ip}", ip).replace("{hostname}", hostname)
    if not name or "/" in name or name in (".", ".."):
        raise PlanError(f"--worker_log_name must be a file name prefix, got {template!r}", field="--worker_log_name")
    return name


@dataclass(frozen=True)
class JobSpec:
    """What to run and where.

    Attributes:
        inventory: hosts after include/exclude filters.
        program: script path and its args; a module and its args when ``module``; an
            executable and its args when ``no_python``.
        python: interpreter for Python programs on this machine (``sys.executable``).
        cwd: the launching directory; relative script paths resolve against it and ranks run
            in it (except ranktable ranks, which run in their ``device<rank>/`` dir).
        job_dir: absolute job directory.
        job_id: the job's id.
        method: ``dynamic`` | ``ranktable`` | ``mpi``: as the user gave it (a :class:`Method` or its
            string); :func:`~launcher.planning.build.build_plan` refuses another value, and its
            :class:`Plan` holds the :class:`Method`.
        launcher: ``local`` | ``ssh`` | ``mpirun`` | None (auto: local when every host is this
            machine, else ssh; mpirun for the mpi method).
        np, per_host: see :func:`launcher.planning.job.ranks.assign_ranks`.
        master_addr, master_port: scheduler address/port (dynamic method).
        cluster_time_out: ``MS_TOPO_TIMEOUT`` seconds, or None.
        env_files: ``(path, pairs)`` per ``--env-file``, in order.
        env: ``--env`` pairs, in order.
        user_env_keys: names set in the launching environment (tuning defaults skip them).
        device_ips: host name -> device IPs (ranktable method; see
            :func:`launcher.planning.ranktable.resolve_device_ips`).
        rank_table_version: ``1.0`` or ``1.2``.
        mpi: mpirun options (the mpirun launcher).
        wrapper: path of ``templates/mslaunch-rank.sh`` (the mpirun launcher).
        ssh_config: the ssh config remote hosts are reached through (``--ssh-config`` /
            ``$MSLAUNCH_SSH_CONFIG``), or None (``~/.ssh/config``).
        cpu: CPU-tuning inputs (see :mod:`launcher.planning.cpu.tuning`); the default tunes nothing.
        node: per-node mode (``--node_rank``), or None (mslaunch plans every host's ranks).
        worker_log_name: prefix of worker log names (``<prefix>_<rank>.log``), already
            formatted (see :func:`worker_log_name`); None: ``worker``.
        rank_table_file: a rank table the user gives (``--rank_table_file``): the ranktable
            method uses it instead of generating one; the dynamic method exports it as
            ``RANK_TABLE_FILE`` to every process, as msrun does.
        sim_level: msrun's ``--sim_level`` (MindSpore's dry run, ``MS_SIMULATION_LEVEL``):
            workers only, no scheduler and no cluster variables.
        sim_rank_id: with ``sim_level``: run one worker that simulates this rank.
        bind_numa: msrun's ``--bind_numa`` dict as ``(key, NUMA nodes)`` pairs, keys
            ``device<local index>`` or ``scheduler``: those processes start under
            ``numactl --membind N --cpunodebind N``.
        compile_cache: give every process MindSpore's compile cache in the job dir
            (:func:`launcher.planning.job.envs.compile_cache_env`) unless the user sets its
            variables (``--compile-cache``).
        secret_named: names the user marked secret (``--secret-env``, ``--secret-env-file``).
        secret_patterns: the user's variables whose names match one of these are secret too
            (:mod:`launcher.planning.job.secrets`).
        planned_np: the job's world size as first planned, when this spec is a restart's on fewer
            hosts (``--min-hosts``, :func:`launcher.planning.spares.without_hosts`); None: ``np``
            is the planned size.
    """

    inventory: Inventory
    program: Tuple[str, ...]
    python: str
    cwd: str
    job_dir: str
    job_id: str
    module: bool = False
    no_python: bool = False
    method: str = Method.DYNAMIC
    launcher: Optional[str] = None
    np: Optional[int] = None
    per_host: Optional[int] = None
    master_addr: Optional[str] = None
    master_port: int = DEFAULT_MASTER_PORT
    cluster_time_out: Optional[int] = None
    env_files: Tuple[Tuple[str, Tuple[Tuple[str, str], ...]], ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    user_env_keys: FrozenSet[str] = frozenset()
    device_ips: Optional[Mapping[str, Any]] = None
    rank_table_version: str = "1.0"
    mpi: MpiOptions = field(default_factory=MpiOptions)
    wrapper: Optional[str] = None
    ssh_config: Optional[str] = None
    cpu: cpu.CpuSpec = field(default_factory=cpu.CpuSpec)
    node: Optional[NodeSpec] = None
    worker_log_name: Optional[str] = None
    rank_table_file: Optional[str] = None
    sim_level: Optional[int] = None
    sim_rank_id: Optional[int] = None
    bind_numa: Tuple[Tuple[str, str], ...] = ()
    compile_cache: bool = False
    secret_named: FrozenSet[str] = frozenset()
    secret_patterns: Tuple[str, ...] = DEFAULT_PATTERNS
    planned_np: Optional[int] = None


def numa_prefix(bind_numa: Tuple[Tuple[str, str], ...], key: str) -> Tuple[str, ...]:
    """The ``numactl`` prefix msrun puts before a process bound by ``--bind_numa`` (or ``()``)."""
    nodes = dict(bind_numa).get(key)
    if nodes is None:
        return ()
    return ("numactl", "--membind", nodes, "--cpunodebind", nodes)


@dataclass(frozen=True)
class ProcPlan:
    """One process to start: a rank, or the dynamic-cluster scheduler (``rank`` None)."""

    name: str
    role: Role  #: a plain string is turned into its :class:`Role` (``"worker"`` -> ``Role.WORKER``)
    host: str
    rank: Optional[int]
    local_rank: Optional[int]
    node_rank: Optional[int]
    device_id: Optional[int]
    argv: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    cwd: str
    log: str
    env_dump: Optional[str] = None
    cpus: Optional[Tuple[int, ...]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.role, Role):
            object.__setattr__(self, "role", Role(self.role))

    def env_dict(self) -> Dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class Artefact:
    """A file written into the job dir before start (``name`` is relative to it)."""

    name: str
    kind: ArtefactKind  #: a plain string is turned into its :class:`ArtefactKind`
    content: str

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ArtefactKind):
            object.__setattr__(self, "kind", ArtefactKind(self.kind))


@dataclass(frozen=True)
class Plan:
    """Everything execution needs; a value (``to_json`` gives the ``plan --json`` shape).

    ``backend_settings`` is the chosen backend's own planned settings, read only by that
    backend's pure argv builder (mpirun: :class:`launcher.planning.backends.mpirun.MpirunPlan`, built by
    :func:`launcher.planning.backends.mpirun.mpirun_command`); ``plan.json`` shows what the backend's
    ``describe`` adds (``to_json(backend=...)``).
    """

    job_id: str
    job_dir: str
    method: Method  #: a plain string is turned into its :class:`Method`
    #: the backend's name: a plain string, not an enum, because backends are an open set (plug-ins
    #: register theirs: :mod:`launcher.execution.backend`)
    launcher: str
    world_size: int
    hosts: Tuple[Host, ...]
    ranks: Tuple[ProcPlan, ...]
    scheduler: Optional[ProcPlan]
    artefacts: Tuple[Artefact, ...]
    master_addr: Optional[str]
    master_port: Optional[int]
    backend_settings: Any = None
    ssh_config: Optional[str] = None
    cpu_notes: Tuple[str, ...] = ()
    cpu_warnings: Tuple[str, ...] = ()
    excluded: Tuple[Exclusion, ...] = ()
    #: remote hosts whose ranks' thread variables the backend sets at start (see
    #: :mod:`launcher.planning.cpu.hostcores`): their cores are learned there
    host_threads: Tuple[HostThreads, ...] = ()
    #: names of the secret variables: their values reach the ranks but are shown as ``<secret>``
    #: in ``to_json`` (``plan.json``, ``plan``) and everything else mslaunch writes or prints
    secrets: FrozenSet[str] = frozenset()
    #: the job's world size as first planned; larger than ``world_size`` when a restart runs on
    #: fewer hosts (``--min-hosts``); 0: the same as ``world_size``
    planned_world_size: int = 0

    @property
    def planned_size(self) -> int:
        """The job's planned world size (``MSLAUNCH_PLANNED_WORLD_SIZE``)."""
        return self.planned_world_size or self.world_size

    def shown_env(self, proc: ProcPlan) -> Tuple[Tuple[str, str], ...]:
        """``proc``'s env as it may be written or printed: each secret's value shown as ``<secret>``."""
        return redact_pairs(proc.env, self.secrets)

    def __post_init__(self) -> None:
        if not isinstance(self.method, Method):
            object.__setattr__(self, "method", Method(self.method))

    def thread_source(self, proc: ProcPlan) -> Optional[str]:
        """Where ``proc``'s thread count comes from (one line), or None when mslaunch sets none."""
        from launcher.planning.cpu.hostcores import deferred_note

        for t in self.host_threads:
            if proc.rank in t.ranks and proc.host == t.host:
                return deferred_note(t, self.launcher)
        if proc.rank is not None and "MSLAUNCH_CPU_THREADS" in proc.env_dict():
            return next((n for n in self.cpu_notes if n.startswith("threads per rank")), None)
        return None

    @property
    def processes(self) -> Tuple[ProcPlan, ...]:
        """Scheduler first (it must be up before the workers), then ranks."""
        return ((self.scheduler,) if self.scheduler is not None else ()) + self.ranks

    def to_json(self, backend: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """The ``plan --json`` shape; ``backend``: entries the backend adds (its argv)."""

        def proc(p: ProcPlan) -> Dict[str, Any]:
            d = {
                "rank": p.rank,
                "local_rank": p.local_rank,
                "node_rank": p.node_rank,
                "host": p.host,
                "device_id": p.device_id,
                "cwd": p.cwd,
                "argv": list(p.argv),
                "env": dict(self.shown_env(p)),
                "log": p.log,
            }
            if p.env_dump is not None:
                d["env_dump"] = p.env_dump
            if p.cpus is not None:
                d["cpus"] = cpu.format_cpus(p.cpus)
            return d

        out: Dict[str, Any] = {
            "job_id": self.job_id,
            "job_dir": self.job_dir,
            "method": self.method,
            "launcher": self.launcher,
            "world_size": self.world_size,
            **({"planned_world_size": self.planned_size} if self.planned_size != self.world_size else {}),
            "hosts": [h.name for h in self.hosts],
            "ranks": [proc(p) for p in self.ranks],
            "artefacts": [
                {"name": a.name, "kind": a.kind, "path": posixpath.join(self.job_dir, a.name)} for a in self.artefacts
            ],
        }
        if self.scheduler is not None:
            sched = proc(self.scheduler)
            for key in ("rank", "local_rank", "node_rank", "device_id"):
                sched.pop(key)
            out["scheduler"] = sched
            out["master_addr"] = self.master_addr
            out["master_port"] = self.master_port
        out.update(backend or {})
        ssh = {
            h.name: {k: v for k, v in (("user", h.ssh.user), ("port", h.ssh.port)) if v is not None} for h in self.hosts
        }
        if any(ssh.values()):  # the hosts' own SSH user/port (hostfile username=/port=, YAML ssh:)
            out["host_ssh"] = {name: value for name, value in ssh.items() if value}
        if self.ssh_config is not None:
            out["ssh_config"] = self.ssh_config
        if self.cpu_notes:
            out["cpu"] = {"notes": list(self.cpu_notes), "warnings": list(self.cpu_warnings)}
            if self.host_threads:
                out["cpu"]["threads_at_start"] = [t.to_json() for t in self.host_threads]
        if self.excluded:
            out["excluded_hosts"] = [e.to_json() for e in self.excluded]
        if self.secrets:
            out["secrets"] = sorted(self.secrets)
        return out
