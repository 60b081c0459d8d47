"""From :class:`~launcher.cli.options.JobOptions` to a planning
:class:`~launcher.planning.jobspec.JobSpec` and a plan: reading the files the options name,
resolving ``auto`` ports, per-node mode and the launching environment (the impure edge of
planning lives here).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace as _replace
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Tuple


from launcher.cli.msrun_flags import NODE_RANK_VARS, node_rank_from_env, parse_bind_numa, parse_msrun_bool, tail_ranks  # noqa: F401 (re-exported)
from launcher.cli.options import JobOptions
from launcher.cli.ssh_flags import job_ssh_config
from launcher.errors import MsLaunchError, PlanError
from launcher.execution.backend import backend_names
from launcher.planning import envs
from launcher.planning.inventory import Inventory, apply_filters, local_inventory, parse_host_list, read_hosts_arg, read_inventory  # noqa: F401
from launcher.planning.mpi import MpiOptions
from launcher.planning.plan import DEFAULT_MASTER_PORT, JobSpec, NodeSpec, Plan, build_plan, worker_log_name
from launcher.planning.sbatchshape import stand_in_inventory

if TYPE_CHECKING:
    from launcher.planning.cpu import CpuSpec

def check_launcher(name: Optional[str]) -> None:
    """``--launcher`` must name a registered backend (see :mod:`launcher.execution.backend`).

    Raises:
        PlanError: no backend has that name.
    """
    if name is not None and name not in backend_names():
        raise PlanError(f"unknown launcher {name!r}; use one of {', '.join(backend_names())}", field="--launcher")


def load_inventory(
    hosts: Optional[str],
    host_list: Optional[str],
    include: Optional[str] = None,
    exclude: Optional[str] = None,
    local_slots: int = 1,
) -> Inventory:
    """The inventory from --hosts / -H (default: this machine with ``local_slots``), filtered."""
    if hosts and host_list:
        raise PlanError("give either --hosts FILE or -H LIST, not both", field="--hosts")
    if hosts:
        inv = read_hosts_arg(hosts)  # a file, or a (Slurm) host list such as node[01-04]
    elif host_list:
        inv = parse_host_list(host_list)
    else:
        inv = local_inventory(local_slots)
    return apply_filters(inv, include, exclude)


def slurm_inventory(opts: JobOptions, environ: Mapping[str, str], stand_in: bool = False) -> Inventory:
    """``--launcher slurm``: the allocation's nodes (narrowed by ``-H``), each with its NodeAddr
    (``stand_in``: ``mslaunch sbatch``'s stand-in, see :func:`~launcher.planning.sbatchshape.stand_in_inventory`).

    Raises:
        PlanError: not inside an allocation, or ``--hosts`` given (the allocation is the inventory).
        InventoryError: a malformed SLURM_* variable or a -H node outside the allocation.
    """
    from launcher.planning.slurmalloc import allocation_inventory, parse_allocation, parse_narrow

    if opts.hosts:
        raise PlanError("--launcher slurm takes its hosts from the allocation; drop --hosts (narrow with -H)", field="--hosts")
    alloc = parse_allocation(environ, opts.per_host)
    if stand_in:
        return stand_in_inventory(alloc, opts.host_list, opts.include, opts.exclude)
    from launcher.execution.slurm.nodes import node_addrs

    inv = allocation_inventory(alloc, node_addrs(alloc.nodes), parse_narrow(opts.host_list) if opts.host_list else None)
    return apply_filters(inv, opts.include, opts.exclude)


def _read_env_file(path: str) -> Tuple[Tuple[str, str], ...]:
    from launcher.planning.textfile import read_text

    return envs.parse_env_file(read_text(path, MsLaunchError, "no such env file", "an env file"), path)


def new_job_id() -> str:
    import secrets
    import time

    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def master_port(opts: JobOptions) -> int:
    """``--master-port``: an int, or ``auto`` for a free local port."""
    if opts.master_port == "auto":
        from launcher.execution.ports import free_port

        return free_port()
    try:
        return int(opts.master_port)
    except ValueError:
        raise PlanError(f"--master-port must be a port number or 'auto', got {opts.master_port!r}", field="--master-port") from None


def template_path(name: str) -> str:
    """Path of a file in the project's ``templates/`` folder."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.normpath(os.path.join(here, "..", "..", "templates", name))
    if not os.path.exists(path):
        raise MsLaunchError(f"template {name} not found at {path}; reinstall mslaunch from its source tree")
    return path


def _read_given_rank_table(path: str) -> str:
    """``--rank_table_file``: the absolute path of a rank table that exists and validates."""
    import json

    from launcher.errors import RankTableError
    from launcher.planning.ranktable import validate_rank_table
    from launcher.planning.textfile import read_text

    text = read_text(path, RankTableError, "no such rank table", "a rank table")
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RankTableError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
    problems = validate_rank_table(table)
    if problems:
        first = problems[0]
        raise RankTableError(f"{first.message} (and {len(problems) - 1} more)" if len(problems) > 1 else first.message, path=path, field=first.json_path)
    return os.path.abspath(path)


def _node_mode(opts: JobOptions, environ: Mapping[str, str]) -> Tuple[Optional[NodeSpec], Optional[int], Optional[int], Optional[str], str]:
    """Per-node mode from the msrun flags (and, for ``--node_rank auto``, the cluster manager's
    ``MS_WORKER_NUM``/``MS_LOCAL_WORKER``/``MS_SCHED_HOST``/``MS_SCHED_PORT`` where a flag is unset).

    Per-node mode is on when ``--node_rank`` is given, or when no inventory is given and
    ``--local_worker_num`` is below ``--worker_num`` (msrun's multi-node command line); then
    ``MS_NODE_RANK`` gives the node rank if set.

    Returns:
        ``(node, np, per_host, master_addr, master_port text)``.
    """
    np, per_host, addr, port = opts.np, opts.per_host, opts.master_addr, opts.master_port
    node_rank: Optional[int] = None
    if opts.node_rank is not None and opts.node_rank.strip().lower() == "auto":
        node_rank, _ = node_rank_from_env(environ)

        def env_int(name: str) -> Optional[int]:
            text = environ.get(name)
            if not text:
                return None
            try:
                return int(text)
            except ValueError:
                raise PlanError(f"{name}={text!r} is not an integer", field="--node_rank") from None

        np = np if np is not None else env_int("MS_WORKER_NUM")
        per_host = per_host if per_host is not None else env_int("MS_LOCAL_WORKER")
        addr = addr if addr is not None else (environ.get("MS_SCHED_HOST") or None)
        if port == str(DEFAULT_MASTER_PORT) and environ.get("MS_SCHED_PORT"):
            port = environ["MS_SCHED_PORT"]
    elif opts.node_rank is not None:
        try:
            node_rank = int(opts.node_rank)
        except ValueError:
            raise PlanError(f"--node_rank must be an integer or 'auto', got {opts.node_rank!r}", field="--node_rank") from None
        if node_rank == -1:
            node_rank = None  # msrun's default: MindSpore assigns the ranks
    elif opts.launcher != "slurm" and opts.hosts is None and opts.host_list is None and np is not None and per_host is not None and per_host < np:
        if environ.get("MS_NODE_RANK"):
            node_rank, _ = node_rank_from_env({"MS_NODE_RANK": environ["MS_NODE_RANK"]})
    else:
        return None, np, per_host, addr, port
    if opts.hosts is not None or opts.host_list is not None:
        raise PlanError("per-node mode (--node_rank) runs this node's workers only; drop --hosts/-H", field="--node_rank")
    if np is None:
        np = 8  # msrun's default --worker_num
    if per_host is None:
        per_host = 8 if np >= 8 else np  # msrun's default --local_worker_num (8), capped for small jobs
    owns: Optional[bool] = None
    if addr is not None:
        from launcher.execution.ports import is_local_addr

        owns = is_local_addr(addr)
    return NodeSpec(node_rank=node_rank, local_worker_num=per_host, owns_master=owns), np, per_host, addr, port


def build_spec(opts: JobOptions, job_id: Optional[str] = None, allocation: Optional[Mapping[str, str]] = None) -> JobSpec:
    """Read every input the options name and build the job spec (``allocation``: the environ of a stand-in Slurm allocation)."""
    node, np, per_host, master_addr, port_text = _node_mode(opts, os.environ if allocation is None else allocation)
    if node is not None:
        opts = _replace(opts, np=np, per_host=per_host, master_addr=master_addr, master_port=port_text)
    if opts.sim_level is not None and opts.sim_level not in (0, 1, 2, 3):
        raise PlanError(f"--sim_level must be 0, 1, 2 or 3, got {opts.sim_level}", field="--sim_level")
    if opts.sim_rank_id is not None and opts.sim_rank_id != -1 and opts.sim_level is None:
        raise PlanError("--sim_rank_id needs --sim_level", field="--sim_rank_id")
    if opts.join is not None:
        parse_msrun_bool(opts.join, "--join")
    if opts.tail_worker_log is not None:
        tail_ranks(opts.tail_worker_log)
    bind_numa = parse_bind_numa(opts.bind_numa)
    rank_table_file = _read_given_rank_table(opts.rank_table_file) if opts.rank_table_file else None
    log_name = None
    if opts.worker_log_name:
        import socket

        from launcher.execution.ports import local_ip_towards

        log_name = worker_log_name(opts.worker_log_name, local_ip_towards(opts.master_addr or "127.0.0.1"), socket.gethostname())
    spec = _build_spec(opts, job_id, node, allocation)
    return _replace(
        spec,
        node=node,
        worker_log_name=log_name,
        rank_table_file=rank_table_file,
        sim_level=opts.sim_level,
        sim_rank_id=opts.sim_rank_id if opts.sim_rank_id not in (None, -1) else None,
        bind_numa=bind_numa,
    )


def _build_spec(opts: JobOptions, job_id: Optional[str], node: Optional[NodeSpec], allocation: Optional[Mapping[str, str]] = None) -> JobSpec:
    if opts.launcher == "slurm":
        inventory = slurm_inventory(opts, os.environ if allocation is None else allocation, stand_in=allocation is not None)
    else:
        inventory = load_inventory(opts.hosts, opts.host_list, opts.include, opts.exclude, (opts.per_host if node else opts.np) or opts.per_host or opts.np or 1)
    program: Tuple[str, ...] = ((opts.module,) if opts.module else ()) + opts.program
    if not opts.module and opts.program and opts.program[0].startswith("-"):
        raise PlanError(f"no such option {opts.program[0]!r} (options go before the script; see --help)", field="SCRIPT")
    if opts.module and opts.no_python:
        raise PlanError("-m and --no-python exclude each other", field="-m")
    job_id, job_dir = _job_id_and_dir(opts, job_id)
    env_pairs = tuple(envs.parse_env_assignment(e) for e in opts.env)
    env_files = tuple((path, _read_env_file(path)) for path in opts.env_file)
    device_ips = None
    if opts.method == "ranktable" and not opts.rank_table_file:
        from launcher.planning.ranktable import resolve_device_ips

        hccn_files = dict(_hccn_pair(h) for h in opts.hccn)
        device_ips = resolve_device_ips(inventory, hccn_dir=opts.hccn_dir, hccn_files=hccn_files)
    wrapper = None
    if opts.launcher == "mpirun" or opts.method == "mpi":
        wrapper = template_path("mslaunch-rank.sh")
    port = master_port(opts) if opts.method == "dynamic" else DEFAULT_MASTER_PORT
    ssh_config = job_ssh_config(opts.ssh_config, inventory.all_local)
    if opts.method == "dynamic" and not inventory.all_local and opts.master_addr is None and opts.launcher != "slurm":
        # MS_SCHED_HOST must be an address every host reaches: an ssh alias's HostName.
        from launcher.execution.ssh import resolve_addrs

        # only the scheduler's host, the first, is dialled by address: one lookup, not one per host
        first = resolve_addrs(Inventory(inventory.hosts[:1]), ssh_config).hosts[0]
        inventory = Inventory((first,) + inventory.hosts[1:], source=inventory.source)
    mpi_opts = MpiOptions(
        allow_run_as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        oversubscribe=opts.oversubscribe,
        nic=opts.nic,
        hostfile=os.path.join(job_dir, "hostfile") if opts.mpi_hostfile else None,
        extra=opts.mpi_arg,
    )
    check_launcher(opts.launcher)
    return JobSpec(
        inventory=inventory,
        program=program,
        python=opts.python or sys.executable,
        cwd=os.getcwd(),
        job_dir=job_dir,
        job_id=job_id,
        module=opts.module is not None,
        no_python=opts.no_python,
        method=opts.method,
        launcher=opts.launcher,
        np=opts.np,
        per_host=None if node is not None else opts.per_host,
        master_addr=opts.master_addr,
        master_port=port,
        cluster_time_out=opts.cluster_time_out,
        env_files=env_files,
        env=env_pairs,
        user_env_keys=frozenset(os.environ),
        device_ips=device_ips,
        mpi=mpi_opts,
        wrapper=wrapper,
        ssh_config=ssh_config,
        cpu=cpu_spec(opts, inventory, program, env_pairs),
    )


def _job_id_and_dir(opts: JobOptions, job_id: Optional[str]) -> Tuple[str, str]:
    """The job's id (``job_id``, ``--job-id`` or a new one; validated) and its directory.

    Raises:
        JobError / PlanError: a bad ``--job-id`` (an empty one too: a mistake, not "pick one"),
            an empty ``--log-dir``.
    """
    from launcher.jobs.jobdir import validate_job_id

    if opts.job_id is not None:
        validate_job_id(opts.job_id)
    job_id = validate_job_id(job_id or opts.job_id or new_job_id())
    if opts.log_dir is not None and not opts.log_dir.strip():
        raise PlanError("--log-dir must not be empty", field="--log-dir")
    job_dir = os.path.abspath(opts.log_dir) if opts.log_dir else os.path.abspath(os.path.join("mslaunch_logs", job_id))
    return job_id, job_dir


def _hccn_pair(text: str) -> Tuple[str, str]:
    host, sep, path = text.partition("=")
    if not sep or not host or not path:
        raise PlanError(f"expected HOST=PATH, got {text!r}", field="--hccn")
    return host, path


def plan_from(opts: JobOptions, job_id: Optional[str] = None) -> Plan:
    return build_plan(build_spec(opts, job_id))


def _device_target(program: Tuple[str, ...], env: Dict[str, str]) -> Optional[str]:
    """The device the program is told to use (``--device-target X`` / ``--device_target=X``,
    else ``DEVICE_TARGET``), or None."""
    for i, arg in enumerate(program):
        for flag in ("--device-target", "--device_target"):
            if arg == flag and i + 1 < len(program):
                return program[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return env.get("DEVICE_TARGET") or None


def cpu_spec(opts: JobOptions, inventory: Inventory, program: Tuple[str, ...], env_pairs: Tuple[Tuple[str, str], ...]) -> "CpuSpec":
    """CPU-tuning inputs: ``--cpu-tune``, ``--bind-core``, this machine's cores and, when the
    job is a MindSpore CPU job with ranks here, this machine's (cached) CPU probe.

    A job counts as a MindSpore CPU job when it is a Python program (not ``--no-python``), its
    rendezvous is ``dynamic`` (MindSpore's CPU collectives), nothing names another device
    (``--device-target``/``DEVICE_TARGET``), and the ranks' interpreter has MindSpore (the probe's
    ``--facts`` step says). ``--cpu-tune on`` skips the guess (for wrappers that run MindSpore).
    """
    from launcher.planning.cpu import CPU_TUNE_MODES, CpuSpec, parse_bind_core

    mode = opts.cpu_tune.strip().lower()
    if mode not in CPU_TUNE_MODES:
        raise PlanError(f"unknown --cpu-tune {opts.cpu_tune!r}; use one of {', '.join(CPU_TUNE_MODES)}", field="--cpu-tune")
    bind = parse_bind_core(opts.bind_core)
    try:
        local_cpus = tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:
        local_cpus = tuple(range(os.cpu_count() or 1))
    if mode == "off" or not any(h.is_local for h in inventory.hosts):
        return CpuSpec(mode=mode, bind_core=bind, local_cpus=local_cpus)
    env = dict(os.environ)
    env.update(env_pairs)
    target = _device_target(program, env)
    candidate = mode == "on" or (not opts.no_python and opts.method == "dynamic" and (target is None or target.upper() == "CPU"))
    if not candidate:
        return CpuSpec(mode=mode, bind_core=bind, local_cpus=local_cpus)
    local = next(h for h in inventory.hosts if h.is_local)
    python = local.python or opts.python or sys.executable
    from launcher.execution.checks.cpu import cached_probe, local_runner, program_facts, script_imports_mindspore
    from launcher.jobs.jobdir import mslaunch_home

    if program and mode == "auto" and not opts.module and script_imports_mindspore(program[0]) is not True:
        # the facts step would say the same of this script (it reads the file from the same
        # folder): not a MindSpore job, and no interpreter started to find that out
        return CpuSpec(mode=mode, bind_core=bind, local_cpus=local_cpus)

    import socket

    def announce(msg: str) -> None:
        sys.stderr.write(f"mslaunch: {msg}\n")
        sys.stderr.flush()

    runner = local_runner(python)
    tail: Tuple[str, ...] = ()
    if program and mode == "auto":
        tail = ("--module", program[0]) if opts.module else ("--script", program[0])
    try:
        facts = program_facts(runner, tail)
    except MsLaunchError as exc:
        return CpuSpec(mode=mode, bind_core=bind, local_cpus=local_cpus, probe_note=str(exc))
    is_ms = mode == "on" or (bool(facts.get("mindspore")) and facts.get("imports_mindspore") is True)
    if not is_ms:
        return CpuSpec(mode=mode, bind_core=bind, local_cpus=local_cpus)
    outcome = cached_probe(runner, mslaunch_home(), socket.gethostname(), on_probe=announce, facts=facts)
    return CpuSpec(
        mode=mode,
        mindspore_cpu=True,
        bind_core=bind,
        local_cpus=local_cpus,
        probe=outcome.probe,
        probe_note=outcome.note,
    )
