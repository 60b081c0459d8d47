"""Plans: the value that execution consumes (pure).

A :class:`~launcher.planning.job.spec.JobSpec` is everything the user asked for, with every external fact passed in
(interpreter, cwd, job dir, which env names the user already set, whether we run as root).
:func:`build_plan` turns it into a :class:`Plan`: per-process argv, env, cwd and log path, the
artefacts to write into the job dir, and the chosen backend's own settings (mpirun: its argv builder's input).

Every path of the job directory comes from :mod:`launcher.planning.job.layout`, which documents it.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from launcher.errors import PlanError
from launcher.planning.backends import mpirun as mpi
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.job import envs, layout, secrets
from launcher.planning.job.kinds import ArtefactKind, Method, Role
from launcher.planning.job.procenv import ProcEnv
from launcher.planning.job.ranks import RankSlot, assign_ranks, new_frozen, node_slots, used_inventory
from launcher.planning.job.spec import (
    RANK_TABLE_NAME,
    Artefact,
    JobSpec,
    Plan,
    ProcPlan,
    numa_prefix,
)


def _choose_launcher(spec: JobSpec) -> str:
    # Names are checked by the CLI against the backend registry (a backend may be added there).
    if spec.method == Method.MPI:
        if spec.launcher not in (None, "mpirun"):
            raise PlanError("the mpi method needs --launcher mpirun (OpenMPI assigns the ranks)", field="--launcher")
        return "mpirun"
    if spec.launcher is not None:
        if spec.launcher == "local" and not spec.inventory.all_local:
            remote = ", ".join(h.name for h in spec.inventory.hosts if not h.is_local)
            raise PlanError(
                f"--launcher local runs on this machine only, but the inventory has {remote}; use ssh or mpirun",
                field="--launcher",
            )
        return spec.launcher
    return "local" if spec.inventory.all_local else "ssh"


def program_argv(spec: JobSpec, host: Host) -> Tuple[str, ...]:
    """argv for the user's program on ``host`` (torchrun's rules)."""
    if not spec.program:
        raise PlanError("no program given; pass a script, -m MODULE, or --no-python EXECUTABLE", field="SCRIPT")
    if spec.no_python:
        return spec.program
    python = host.python if host.python is not None else spec.python
    if spec.module:
        return (python, "-m") + spec.program
    script = spec.program[0]
    if not posixpath.isabs(script):
        script = posixpath.normpath(posixpath.join(spec.cwd, script))
    return (python, script) + spec.program[1:]


def _master(spec: JobSpec, used: List[Host]) -> Tuple[Host, str]:
    """The scheduler's host and the address every worker dials."""
    if spec.master_addr is not None:
        for h in used:
            if spec.master_addr in (h.name, h.reach_addr):
                return h, spec.master_addr
        return used[0], spec.master_addr
    first = used[0]
    addr = "127.0.0.1" if first.is_local else first.reach_addr
    return first, addr


def build_plan(spec: JobSpec) -> Plan:
    """Turn a :class:`JobSpec` into a :class:`Plan`.

    Steps: check the spec and choose the launcher (:func:`_check_spec`); assign rank slots to
    the hosts, or to this node in per-node mode (:func:`_rank_slots`); gather the env layers and
    the CPU plan (:class:`ProcEnv`); the rank table artefact (:func:`_rank_table`); place the
    scheduler (:func:`_scheduler_place`); one :class:`ProcPlan` per rank (:func:`_rank_proc`)
    and the scheduler's (:func:`_scheduler_proc`); for the mpirun launcher its settings
    (:func:`launcher.planning.backends.mpirun.plan_mpirun`).

    Raises:
        PlanError: unknown method/launcher, more ranks than slots, a reserved variable set by
            the user, no program, no rank table for the ranktable method, or a bad port.
    """
    launcher = _check_spec(spec)
    slots, used_inv = _rank_slots(spec, launcher)
    world = slots[0].world_size if slots else 0
    slots = _simulated_slots(spec, slots, world)
    used = list(used_inv.hosts)
    proc_env = ProcEnv.build(spec, launcher, slots, used)

    artefacts: List[Artefact] = []
    table_path = _rank_table(spec, used_inv, artefacts)
    sched_host, sched_addr = _scheduler_place(spec, used)
    hosts_by_name = {h.name: h for h in used}
    # msrun without --node_rank on a multi-node job: MindSpore assigns the ranks.
    auto_ranks = spec.node is not None and spec.node.node_rank is None and spec.node.local_worker_num < world
    cache = _RankCache(spec, proc_env)
    ranks: List[ProcPlan] = [
        _rank_proc(spec, slot, hosts_by_name[slot.host], proc_env, sched_addr, table_path, auto_ranks, cache)
        for slot in slots
    ]
    scheduler = _scheduler_proc(spec, world, sched_host, sched_addr, proc_env)

    backend_settings = None
    if launcher == "mpirun":
        backend_settings, files = mpi.plan_mpirun(
            spec.mpi,
            spec.wrapper,
            layout.worker_log_template(spec.worker_log_name),
            used_inv,
            spec.ssh_config,
            spec.job_dir,
            spec.python,
        )
        artefacts += [Artefact(name, kind, text) for name, kind, text in files]

    return Plan(
        job_id=spec.job_id,
        job_dir=spec.job_dir,
        method=Method(spec.method),  # _check_spec refused any other value
        launcher=launcher,
        world_size=world,
        hosts=tuple(used),
        ranks=tuple(ranks),
        scheduler=scheduler,
        artefacts=tuple(artefacts),
        master_addr=sched_addr,
        master_port=spec.master_port if spec.method == Method.DYNAMIC else None,
        backend_settings=backend_settings,
        ssh_config=spec.ssh_config,
        cpu_notes=proc_env.cpu_notes,
        cpu_warnings=proc_env.cpu.warnings,
        host_threads=proc_env.host_threads,
        secrets=_secrets(spec, used),
        planned_world_size=spec.planned_np if spec.planned_np is not None and spec.planned_np != world else 0,
    )


def _secrets(spec: JobSpec, used: List[Host]) -> FrozenSet[str]:
    """The job's secret names (:mod:`launcher.planning.job.secrets`): the named ones, and the
    user's variables (inventory ``env``, env files, ``--env``) matching the secret patterns."""
    user = [k for h in used for k, _ in h.env]
    user += [k for _, pairs in spec.env_files for k, _ in pairs] + [k for k, _ in spec.env]
    return secrets.secret_names(spec.secret_named, user, spec.secret_patterns)


def _check_spec(spec: JobSpec) -> str:
    """Refuse what no plan can be built for; returns the launcher to use.

    Raises:
        PlanError: unknown method or launcher, a bad port, no wrapper for mpirun, or
            ``--sim_level`` with another method than dynamic.
    """
    if spec.method not in envs.METHODS:
        raise PlanError(f"unknown method {spec.method!r}; use one of {', '.join(envs.METHODS)}", field="--method")
    launcher = _choose_launcher(spec)
    if not 0 < spec.master_port < 65536:
        raise PlanError(f"--master-port must be 1..65535, got {spec.master_port}", field="--master-port")
    if launcher == "mpirun" and spec.wrapper is None:
        raise PlanError("the mpirun launcher needs the per-rank wrapper template", field="--launcher")
    if spec.sim_level is not None and spec.method != Method.DYNAMIC:
        raise PlanError(
            "--sim_level runs MindSpore's dry run of a dynamic-cluster job; drop --method", field="--sim_level"
        )
    return launcher


def _rank_slots(spec: JobSpec, launcher: str) -> Tuple[Tuple[RankSlot, ...], Inventory]:
    """The rank slots of the job (or of this node in per-node mode) and the inventory they use.

    For a generated rank table, hosts take ranks in the table's server order (server_id;
    SuperPoD first in 1.2), so ``RANK_ID`` matches the table.
    """
    if spec.node is not None:
        return _node_slots(spec, launcher)
    inventory = spec.inventory
    if spec.method == Method.RANKTABLE and spec.rank_table_file is None:
        from launcher.planning.ranktable import rank_table_host_order

        inventory = Inventory(
            tuple(rank_table_host_order(inventory.hosts, spec.rank_table_version)), source=inventory.source
        )
    slots = assign_ranks(inventory, spec.np, spec.per_host)
    return slots, used_inventory(inventory, slots)


def _simulated_slots(spec: JobSpec, slots: Tuple[RankSlot, ...], world: int) -> Tuple[RankSlot, ...]:
    """msrun's ``--sim_rank_id``: one process simulates the given rank (its log keeps the local index 0).

    Raises:
        PlanError: the rank is outside the job.
    """
    if spec.sim_level is None or spec.sim_rank_id is None:
        return slots
    if not 0 <= spec.sim_rank_id < world:
        raise PlanError(f"--sim_rank_id must be in 0..{world - 1}, got {spec.sim_rank_id}", field="--sim_rank_id")
    return (replace(slots[0], rank=spec.sim_rank_id, local_rank=0, local_world_size=1),)


def _rank_table(spec: JobSpec, used_inv: Inventory, artefacts: List[Artefact]) -> str:
    """The rank table path ranks read (ranktable method): the user's file, or a generated
    ``rank_table.json`` appended to ``artefacts``.

    Raises:
        PlanError: the ranktable method without a rank table file and without device IPs.
    """
    if spec.method != Method.RANKTABLE:
        return layout.artefact_path(spec.job_dir, RANK_TABLE_NAME)
    if spec.rank_table_file is not None:
        return spec.rank_table_file
    if spec.device_ips is None:
        raise PlanError(
            "the ranktable method needs device IPs: pass --hccn-dir, --hccn HOST=PATH or a YAML inventory with "
            "device_ips/hccn_conf",
            field="--method",
        )
    from launcher.planning.ranktable import build_rank_table, rank_table_json

    table = build_rank_table(used_inv, spec.device_ips, version=spec.rank_table_version)
    artefacts.append(Artefact(RANK_TABLE_NAME, ArtefactKind.RANK_TABLE, rank_table_json(table)))
    return layout.artefact_path(spec.job_dir, RANK_TABLE_NAME)


def _scheduler_place(spec: JobSpec, used: Sequence[Host]) -> Tuple[Optional[Host], Optional[str]]:
    """Where the dynamic cluster's scheduler runs and the address workers dial: ``(None, addr)``
    on a per-node run whose node does not run it; ``(None, None)`` without a scheduler."""
    if spec.method != Method.DYNAMIC or spec.sim_level is not None:
        return None, None
    if spec.node is not None:
        return (used[0] if spec.node.runs_scheduler else None), spec.master_addr or "127.0.0.1"
    return _master(spec, list(used))


class _RankCache:
    """What every rank of one host (or of one local index) shares, computed once: its argv and
    its user-side env (ranks not bound to cores here), and the ``numactl`` prefix per local
    index.  Keeps :func:`build_plan` linear with a small constant at 100,000 ranks.

    In every map, a key that is absent is the one "not computed yet"; a value, None included,
    is what was computed (:attr:`prefix`: None is "this host shares no prefix").
    """

    def __init__(self, spec: JobSpec, proc_env: ProcEnv) -> None:
        self.spec = spec
        self.proc_env = proc_env
        self.argv: Dict[str, Tuple[str, ...]] = {}
        self.env: Dict[str, Dict[str, str]] = {}
        self.numa: Dict[int, Tuple[str, ...]] = {}
        self.log = layout.worker_log_filler(spec.job_dir, spec.worker_log_name)
        self.dynamic: Optional[Callable[[RankSlot], Dict[str, str]]] = None
        #: host name -> the pairs its unbound dynamic workers start with (:meth:`shared_prefix`),
        #: or None when its user-side env sets one of the layout's keys
        self.prefix: Dict[str, Optional[Tuple[Tuple[str, str], ...]]] = {}
        self.tails: Dict[Tuple[int, int, int, int], Tuple[Tuple[str, str], ...]] = {}

    def dynamic_worker_pairs(self, host: Host, slot: RankSlot, sched_addr: str) -> Tuple[Tuple[str, str], ...]:
        """``envs.layered(proc_env.user_env(host, rank), envs.dynamic_worker_env(slot, ...))``.

        When the host's user-side env sets none of the layout's keys (the usual case) the
        result is that env's pairs, then the layout's shared pairs (one tuple per host), then
        the rank's own six, with the four that repeat across ranks shared (:meth:`tail`)."""
        if slot.rank in self.proc_env.local_index:  # bound to cores here: its own user-side env
            return envs.layered(self.user_env(host, slot.rank), self.dynamic_env(slot, sched_addr))
        if host.name not in self.prefix:
            self.prefix[host.name] = self.shared_prefix(host, slot, sched_addr)
        prefix = self.prefix[host.name]
        if prefix is None:
            return envs.layered(self.user_env(host, slot.rank), self.dynamic_env(slot, sched_addr))
        rank = str(slot.rank)
        return prefix + (("MS_NODE_ID", rank), ("RANK_ID", rank)) + self.tail(slot)

    def shared_prefix(self, host: Host, slot: RankSlot, sched_addr: str) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The pairs every unbound dynamic worker on ``host`` starts with: its user-side env,
        then the layout's values that every worker shares; None when that env sets one of the
        layout's keys (the layout's value must then take the user's place in the order).

        Args:
            host: the host.
            slot: any rank of ``host`` not bound to cores here.
            sched_addr: the scheduler's address.
        """
        user = self.user_env(host, slot.rank)
        shared = envs.dynamic_worker_layout(
            slot.world_size, sched_addr, self.spec.master_port, self.spec.cluster_time_out
        )(slot)
        if set(user) & set(shared):
            return None
        for key in ("MS_NODE_ID", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            del shared[key]
        return tuple(user.items()) + tuple(shared.items())

    def tail(self, slot: RankSlot) -> Tuple[Tuple[str, str], ...]:
        """The rank's last four pairs (RANK_SIZE, DEVICE_ID, LOCAL_RANK, LOCAL_WORLD_SIZE): one
        tuple per distinct combination, shared by the ranks that have it (a few per job)."""
        key = (slot.world_size, slot.device_id, slot.local_rank, slot.local_world_size)
        found = self.tails.get(key)
        if found is None:
            found = self.tails[key] = (
                ("RANK_SIZE", str(slot.world_size)),
                ("DEVICE_ID", str(slot.device_id)),
                ("LOCAL_RANK", str(slot.local_rank)),
                ("LOCAL_WORLD_SIZE", str(slot.local_world_size)),
            )
        return found

    def dynamic_env(self, slot: RankSlot, sched_addr: str) -> Dict[str, str]:
        """``envs.dynamic_worker_env(slot, sched_addr, ...)`` (the shared part built once)."""
        if self.dynamic is None:
            self.dynamic = envs.dynamic_worker_layout(
                slot.world_size, sched_addr, self.spec.master_port, self.spec.cluster_time_out
            )
        return self.dynamic(slot)

    def program(self, host: Host, local_rank: int) -> Tuple[str, ...]:
        """``numa_prefix(...) + program_argv(spec, host)`` for a rank at ``local_rank`` on ``host``."""
        argv = self.argv.get(host.name)
        if argv is None:
            argv = self.argv[host.name] = program_argv(self.spec, host)
        prefix = self.numa.get(local_rank)
        if prefix is None:
            prefix = self.numa[local_rank] = numa_prefix(self.spec.bind_numa, f"device{local_rank}")
        return prefix + argv if prefix else argv

    def user_env(self, host: Host, rank: int) -> Dict[str, str]:
        """``proc_env.user_env(host, rank)``: shared between ranks, so never change it."""
        if rank in self.proc_env.local_index:
            return self.proc_env.user_env(host, rank)
        env = self.env.get(host.name)
        if env is None:
            env = self.env[host.name] = self.proc_env.user_env(host, rank)
        return env


def _rank_proc(
    spec: JobSpec,
    slot: RankSlot,
    host: Host,
    proc_env: ProcEnv,
    sched_addr: Optional[str],
    table_path: str,
    auto_ranks: bool,
    cache: _RankCache,
) -> ProcPlan:
    """The plan of one rank: the method's layout variables over the user's env, its cwd and log."""
    cwd = spec.cwd
    env_dump = None
    env_pairs: Optional[Tuple[Tuple[str, str], ...]] = None
    env_layout: Dict[str, str] = {}
    rank: Optional[int] = slot.rank
    log_index = slot.rank
    if spec.sim_level is not None:
        env_layout = envs.simulation_env(slot, spec.sim_rank_id is not None)
        log_index = slot.local_rank if spec.sim_rank_id is not None else slot.rank
    elif spec.method == Method.DYNAMIC and not auto_ranks:
        assert sched_addr is not None
        env_pairs = cache.dynamic_worker_pairs(host, slot, sched_addr)
    elif spec.method == Method.DYNAMIC:
        assert sched_addr is not None
        env_layout = cache.dynamic_env(slot, sched_addr)
        if auto_ranks:
            for key in ("MS_NODE_ID", "RANK_ID"):
                env_layout.pop(key)
            rank, log_index = None, slot.local_rank
    elif spec.method == Method.RANKTABLE:
        env_layout = envs.ranktable_env(slot, table_path)
        cwd = layout.rank_cwd(spec.job_dir, slot.rank)
        env_dump = layout.env_dump_path(cwd, slot.rank)
    else:
        env_layout = envs.mpi_env(slot)
    return new_frozen(
        ProcPlan,
        name=f"rank {slot.rank}" if rank is not None else f"worker {slot.local_rank}",
        role=Role.WORKER,
        host=slot.host,
        rank=rank,
        local_rank=slot.local_rank,
        node_rank=slot.node_rank,
        device_id=slot.device_id,
        argv=cache.program(host, slot.local_rank),
        env=env_pairs if env_pairs is not None else envs.layered(cache.user_env(host, slot.rank), env_layout),
        cwd=cwd,
        log=cache.log(log_index),
        env_dump=env_dump,
        cpus=proc_env.rank_cpus(slot.rank),
    )


def _scheduler_proc(
    spec: JobSpec, world: int, host: Optional[Host], addr: Optional[str], proc_env: ProcEnv
) -> Optional[ProcPlan]:
    """The dynamic cluster's scheduler process, or None when this plan runs none."""
    if host is None or addr is None:
        return None
    return ProcPlan(
        name="scheduler",
        role=Role.SCHEDULER,
        host=host.name,
        rank=None,
        local_rank=None,
        node_rank=None,
        device_id=None,
        argv=numa_prefix(spec.bind_numa, "scheduler") + program_argv(spec, host),
        env=envs.layered(
            proc_env.user_env(host), envs.dynamic_scheduler_env(world, addr, spec.master_port, spec.cluster_time_out)
        ),
        cwd=spec.cwd,
        log=layout.scheduler_log(spec.job_dir),
        cpus=proc_env.cpu.scheduler_cpus if proc_env.bind_here and host.is_local else None,
    )


def _node_slots(spec: JobSpec, launcher: str) -> Tuple[Tuple[RankSlot, ...], Inventory]:
    """Per-node mode: this node's slots, and the one-host inventory they use."""
    assert spec.node is not None
    hosts = spec.inventory.hosts
    if len(hosts) != 1 or not spec.inventory.all_local or launcher != "local":
        raise PlanError(
            "per-node mode (--node_rank) runs this node's workers only; drop --hosts/-H/--launcher", field="--node_rank"
        )
    if spec.method != Method.DYNAMIC:
        raise PlanError("per-node mode (--node_rank) runs a dynamic cluster; drop --method", field="--node_rank")
    if spec.np is None:
        raise PlanError("per-node mode needs the job's --worker_num", field="--worker_num")
    slots = node_slots(spec.np, spec.node.local_worker_num, spec.node.node_rank, hosts[0].name)
    host = replace(hosts[0], slots=len(slots), devices=tuple(s.device_id for s in slots), max_slots=None)
    return slots, Inventory((host,), source=spec.inventory.source)
