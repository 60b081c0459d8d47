"""From :class:`~launcher.cli.options.JobOptions` to a planning
:class:`~launcher.planning.job.spec.JobSpec` and a plan: reading the files the options name,
resolving ``auto`` ports, per-node mode and the launching environment (the impure edge of
planning lives here).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from launcher.cli.cpuspec import cpu_spec
from launcher.cli.msrun_flags import node_rank_from_env, parse_bind_numa, parse_msrun_bool, tail_ranks
from launcher.cli.options import JobOptions
from launcher.cli.secretflags import read_secret_file, secret_inputs
from launcher.cli.ssh_flags import job_ssh_config
from launcher.errors import MsLaunchError, PlanError
from launcher.execution.backend import backend_names
from launcher.planning.backends.sbatch import stand_in_inventory
from launcher.planning.build import build_plan
from launcher.planning.inventory.filters import apply_filters
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.model import Inventory
from launcher.planning.inventory.sources import local_inventory, read_hosts_arg
from launcher.planning.job import envs
from launcher.planning.job.kinds import Method
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.spec import DEFAULT_MASTER_PORT, JobSpec, NodeSpec, Plan, worker_log_name


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


def slurm_inventory(
    opts: JobOptions, per_host: Optional[int], environ: Mapping[str, str], stand_in: bool = False
) -> Inventory:
    """``--launcher slurm``: the allocation's nodes (narrowed by ``-H``), each with its NodeAddr
    (``stand_in``: ``mslaunch sbatch``'s stand-in, see :func:`~launcher.planning.backends.sbatch.stand_in_inventory`).

    Args:
        opts: the job options (``-H``, ``--include``/``--exclude``).
        per_host: ranks per node (:attr:`JobShape.per_host`), or None: the allocation's tasks per node.
        environ: the allocation's ``SLURM_*`` variables.
        stand_in: ``environ`` is a stand-in allocation (no node is asked for its address).

    Raises:
        PlanError: not inside an allocation, or ``--hosts`` given (the allocation is the inventory).
        InventoryError: a malformed SLURM_* variable or a -H node outside the allocation.
    """
    from launcher.planning.backends.slurm import allocation_inventory, parse_allocation, parse_narrow

    if opts.hosts:
        raise PlanError(
            "--launcher slurm takes its hosts from the allocation; drop --hosts (narrow with -H)", field="--hosts"
        )
    alloc = parse_allocation(environ, per_host)
    if stand_in:
        return stand_in_inventory(alloc, opts.host_list, opts.include, opts.exclude)
    from launcher.execution.slurm.nodes import node_addrs

    inv = allocation_inventory(alloc, node_addrs(alloc.nodes), parse_narrow(opts.host_list) if opts.host_list else None)
    return apply_filters(inv, opts.include, opts.exclude)


def _read_env_file(path: str) -> Tuple[Tuple[str, str], ...]:
    """``--env-file PATH``'s pairs, in order.

    Raises:
        MsLaunchError: the file is missing or a line is not ``K=V`` (naming path:line).
    """
    from launcher.planning.text.textfile import read_text

    return envs.parse_env_file(read_text(path, MsLaunchError, "no such env file", "an env file"), path)


def new_job_id() -> str:
    import time

    # os.urandom is what secrets.token_hex reads; importing secrets loads OpenSSL's hashes (~25 ms)
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()


def master_port(text: str) -> int:
    """``--master-port`` (:attr:`JobShape.master_port`): an int, or ``auto`` for a free local port.

    Raises:
        PlanError: neither.
    """
    if text == "auto":
        from launcher.execution.ports import free_port

        return free_port()
    try:
        return int(text)
    except ValueError:
        raise PlanError(f"--master-port must be a port number or 'auto', got {text!r}", field="--master-port") from None


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
    from launcher.planning.text.textfile import read_text

    text = read_text(path, RankTableError, "no such rank table", "a rank table")
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RankTableError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
    problems = validate_rank_table(table)
    if problems:
        first = problems[0]
        raise RankTableError(
            f"{first.message} (and {len(problems) - 1} more)" if len(problems) > 1 else first.message,
            path=path,
            field=first.json_path,
        )
    return os.path.abspath(path)


@dataclass(frozen=True)
class JobShape:
    """How many ranks the job has and where its scheduler listens: the flags as given, or in
    per-node mode with what the cluster manager's environment and msrun's defaults fill in
    (see :func:`job_shape`).

    Attributes:
        np: the job's total ranks (``--np``; per-node mode: ``MS_WORKER_NUM``, else 8).
        per_host: ranks per host (``--per-host``; per-node mode: this node's workers,
            ``MS_LOCAL_WORKER``, else 8 capped at ``np``).
        master_addr: the scheduler's address, or None (the first host).
        master_port: ``--master-port`` as given (a number or ``auto``), or ``MS_SCHED_PORT``.
        node: per-node mode, or None (mslaunch plans every host's ranks).
    """

    np: Optional[int]
    per_host: Optional[int]
    master_addr: Optional[str]
    master_port: str
    node: Optional[NodeSpec] = None


def job_shape(opts: JobOptions, environ: Mapping[str, str]) -> JobShape:
    """The job's shape from the flags, and per-node mode from the msrun flags (and, for
    ``--node_rank auto``, the cluster manager's ``MS_WORKER_NUM``/``MS_LOCAL_WORKER``/
    ``MS_SCHED_HOST``/``MS_SCHED_PORT`` where a flag is unset).

    Per-node mode is on when ``--node_rank`` is given, or when no inventory is given and
    ``--local_worker_num`` is below ``--worker_num`` (msrun's multi-node command line); then
    ``MS_NODE_RANK`` gives the node rank if set.

    Raises:
        PlanError: a bad ``--node_rank`` or cluster manager variable, or per-node mode with
            ``--hosts``/``-H``.
    """
    np, per_host, addr, port = opts.np, opts.per_host, opts.master_addr, opts.master_port
    node_rank: Optional[int] = None
    if opts.node_rank is not None and opts.node_rank.strip().lower() == "auto":
        node_rank, _ = node_rank_from_env(environ)
        np = np if np is not None else _env_int(environ, "MS_WORKER_NUM")
        per_host = per_host if per_host is not None else _env_int(environ, "MS_LOCAL_WORKER")
        addr = addr if addr is not None else (environ.get("MS_SCHED_HOST") or None)
        if port == str(DEFAULT_MASTER_PORT) and environ.get("MS_SCHED_PORT"):
            port = environ["MS_SCHED_PORT"]
    elif opts.node_rank is not None:
        node_rank = _given_node_rank(opts.node_rank)
    elif (
        opts.launcher != "slurm"
        and opts.hosts is None
        and opts.host_list is None
        and np is not None
        and per_host is not None
        and per_host < np
    ):
        if environ.get("MS_NODE_RANK"):
            node_rank, _ = node_rank_from_env({"MS_NODE_RANK": environ["MS_NODE_RANK"]})
    else:
        return JobShape(np=np, per_host=per_host, master_addr=addr, master_port=port)
    if opts.hosts is not None or opts.host_list is not None:
        raise PlanError(
            "per-node mode (--node_rank) runs this node's workers only; drop --hosts/-H", field="--node_rank"
        )
    if np is None:
        np = 8  # msrun's default --worker_num
    if per_host is None:
        per_host = 8 if np >= 8 else np  # msrun's default --local_worker_num (8), capped for small jobs
    node = NodeSpec(node_rank=node_rank, local_worker_num=per_host, owns_master=_owns_master(addr))
    return JobShape(np=np, per_host=per_host, master_addr=addr, master_port=port, node=node)


def _env_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    """A cluster manager's integer variable (``--node_rank auto``), None when unset or empty."""
    text = environ.get(name)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise PlanError(f"{name}={text!r} is not an integer", field="--node_rank") from None


def _given_node_rank(text: str) -> Optional[int]:
    """``--node_rank N``: N, or None for msrun's default -1 (MindSpore assigns the ranks)."""
    try:
        node_rank = int(text)
    except ValueError:
        raise PlanError(f"--node_rank must be an integer or 'auto', got {text!r}", field="--node_rank") from None
    return None if node_rank == -1 else node_rank


def _owns_master(addr: Optional[str]) -> Optional[bool]:
    """Whether the scheduler's address is one of this machine's (None: no address given)."""
    if addr is None:
        return None
    from launcher.execution.ports import is_local_addr

    return is_local_addr(addr)


def build_spec(
    opts: JobOptions, job_id: Optional[str] = None, allocation: Optional[Mapping[str, str]] = None
) -> JobSpec:
    """Read every input the options name and build the job spec, in one pass.

    Each step reads or checks one group of options; a step's error comes before the next
    step's (the order users see when several options are wrong).

    Args:
        opts: the command's job options.
        job_id: the job's id (default ``--job-id``, else a new one).
        allocation: the environ of a stand-in Slurm allocation (``mslaunch sbatch``'s check),
            or None: this process's environment.

    Raises:
        MsLaunchError: any input the options name is missing or malformed (the subclass and
            its field say which).
    """
    environ = os.environ if allocation is None else allocation
    shape = job_shape(opts, environ)
    _check_msrun_flags(opts)
    bind_numa = parse_bind_numa(opts.bind_numa)
    rank_table_file = _read_given_rank_table(opts.rank_table_file) if opts.rank_table_file else None
    log_name = _worker_log_name(opts.worker_log_name, shape.master_addr)
    if opts.launcher == "slurm":
        inventory = slurm_inventory(opts, shape.per_host, environ, stand_in=allocation is not None)
    else:
        local_slots = (shape.per_host if shape.node else shape.np) or shape.per_host or shape.np or 1
        inventory = load_inventory(opts.hosts, opts.host_list, opts.include, opts.exclude, local_slots)
    program = _program(opts)
    job_id, job_dir = _job_id_and_dir(opts, job_id)
    env_pairs = tuple(envs.parse_env_assignment(e) for e in opts.env)
    env_files = tuple((path, _read_env_file(path)) for path in opts.env_file)
    given = (
        [k for k, _ in env_pairs]
        + [k for _, p in env_files for k, _ in p]
        + [k for h in inventory.hosts for k, _ in h.env]
    )
    secret = secret_inputs(
        opts.secret_env,
        opts.secret_env_file,
        opts.secret_pattern,
        opts.no_secret_patterns,
        given,
        environ,
        read_secret_file,
    )
    device_ips = _device_ips(opts, inventory)
    wrapper = template_path("mslaunch-rank.sh") if opts.launcher == "mpirun" or opts.method == Method.MPI else None
    port = master_port(shape.master_port) if opts.method == Method.DYNAMIC else DEFAULT_MASTER_PORT
    ssh_config = job_ssh_config(opts.ssh_config, inventory.all_local)
    inventory = _scheduler_reachable(opts, shape.master_addr, inventory, ssh_config)
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
        np=shape.np,
        per_host=None if shape.node is not None else shape.per_host,
        master_addr=shape.master_addr,
        master_port=port,
        cluster_time_out=opts.cluster_time_out,
        env_files=env_files + secret.env_files,
        env=env_pairs,
        secret_named=secret.named,
        secret_patterns=secret.patterns,
        user_env_keys=frozenset(os.environ),
        compile_cache=opts.compile_cache,
        device_ips=device_ips,
        mpi=_mpi_options(opts, job_dir),
        wrapper=wrapper,
        ssh_config=ssh_config,
        cpu=cpu_spec(opts, inventory, program, env_pairs),
        node=shape.node,
        worker_log_name=log_name,
        rank_table_file=rank_table_file,
        sim_level=opts.sim_level,
        sim_rank_id=opts.sim_rank_id if opts.sim_rank_id not in (None, -1) else None,
        bind_numa=bind_numa,
    )


def _check_msrun_flags(opts: JobOptions) -> None:
    """msrun's ``--sim_level``/``--sim_rank_id``, ``--join`` and ``--tail_worker_log``, checked
    before anything is read (their values are used later, by the plan and by ``run``).

    Raises:
        PlanError: a value msrun would refuse, naming its flag.
    """
    if opts.sim_level is not None and opts.sim_level not in (0, 1, 2, 3):
        raise PlanError(f"--sim_level must be 0, 1, 2 or 3, got {opts.sim_level}", field="--sim_level")
    if opts.sim_rank_id is not None and opts.sim_rank_id != -1 and opts.sim_level is None:
        raise PlanError("--sim_rank_id needs --sim_level", field="--sim_rank_id")
    if opts.join is not None:
        parse_msrun_bool(opts.join, "--join")
    if opts.tail_worker_log is not None:
        tail_ranks(opts.tail_worker_log)


def _worker_log_name(template: Optional[str], master_addr: Optional[str]) -> Optional[str]:
    """``--worker_log_name`` with ``{ip}`` (this machine's address towards the scheduler) and
    ``{hostname}`` filled in, or None when not given.

    Raises:
        PlanError: the name is not a file name prefix.
    """
    if not template:
        return None
    import socket

    from launcher.execution.ports import local_ip_towards

    return worker_log_name(template, local_ip_towards(master_addr or "127.0.0.1"), socket.gethostname())


def _program(opts: JobOptions) -> Tuple[str, ...]:
    """The program and its arguments (``-m``: the module first).

    Raises:
        PlanError: an option after the script's place (a mistyped mslaunch option), or ``-m``
            with ``--no-python``.
    """
    program: Tuple[str, ...] = ((opts.module,) if opts.module else ()) + opts.program
    if not opts.module and opts.program and opts.program[0].startswith("-"):
        raise PlanError(
            f"no such option {opts.program[0]!r} (options go before the script; see --help)", field="SCRIPT"
        )
    if opts.module and opts.no_python:
        raise PlanError("-m and --no-python exclude each other", field="-m")
    return program


def _device_ips(opts: JobOptions, inventory: Inventory) -> Optional[Mapping[str, Any]]:
    """Each host's device IPs for a generated rank table (``--method ranktable`` without
    ``--rank_table_file``), else None.

    Raises:
        PlanError / RankTableError: a malformed ``--hccn`` pair or hccn.conf, or a host without device IPs.
    """
    if opts.method != Method.RANKTABLE or opts.rank_table_file:
        return None
    from launcher.planning.ranktable import resolve_device_ips

    hccn_files = dict(hccn_pair(h) for h in opts.hccn)
    return resolve_device_ips(inventory, hccn_dir=opts.hccn_dir, hccn_files=hccn_files)


def _scheduler_reachable(
    opts: JobOptions, master_addr: Optional[str], inventory: Inventory, ssh_config: Optional[str]
) -> Inventory:
    """``inventory`` with its first host's address resolved through the ssh config, when a
    dynamic job with remote hosts puts its scheduler there (``MS_SCHED_HOST`` must be an
    address every host reaches: an ssh alias's HostName); else ``inventory`` itself."""
    if opts.method != Method.DYNAMIC or inventory.all_local or master_addr is not None or opts.launcher == "slurm":
        return inventory
    from launcher.execution.ssh.config import resolve_addrs

    # only the scheduler's host, the first, is dialled by address: one lookup, not one per host
    first = resolve_addrs(Inventory(inventory.hosts[:1]), ssh_config).hosts[0]
    return Inventory((first,) + inventory.hosts[1:], source=inventory.source)


def _mpi_options(opts: JobOptions, job_dir: str) -> MpiOptions:
    """mpirun's options (read by the mpirun launcher only)."""
    return MpiOptions(
        allow_run_as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        oversubscribe=opts.oversubscribe,
        nic=opts.nic,
        hostfile=os.path.join(job_dir, "hostfile") if opts.mpi_hostfile else None,
        extra=opts.mpi_arg,
    )


def _job_id_and_dir(opts: JobOptions, job_id: Optional[str]) -> Tuple[str, str]:
    """The job's id (``job_id``, ``--job-id`` or a new one; validated) and its directory.

    Raises:
        JobError / PlanError: a bad ``--job-id`` (an empty one too: a mistake, not "pick one"),
            an empty ``--log-dir``.
    """
    from launcher.jobs.jobfile import validate_job_id

    if opts.job_id is not None:
        validate_job_id(opts.job_id)
    job_id = validate_job_id(job_id or opts.job_id or new_job_id())
    if opts.log_dir is not None and not opts.log_dir.strip():
        raise PlanError("--log-dir must not be empty", field="--log-dir")
    job_dir = os.path.abspath(opts.log_dir) if opts.log_dir else os.path.abspath(os.path.join("mslaunch_logs", job_id))
    return job_id, job_dir


def hccn_pair(text: str) -> Tuple[str, str]:
    """``--hccn HOST=PATH`` as ``(host, path)``.

    Raises:
        PlanError: not of that form.
    """
    host, sep, path = text.partition("=")
    if not sep or not host or not path:
        raise PlanError(f"expected HOST=PATH, got {text!r}", field="--hccn")
    return host, path


def plan_from(opts: JobOptions, job_id: Optional[str] = None) -> Plan:
    """The plan of ``opts`` (:func:`build_spec`, then :func:`~launcher.planning.build.build_plan`)."""
    return build_plan(build_spec(opts, job_id))
