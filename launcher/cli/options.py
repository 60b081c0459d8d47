"""Run options shared by ``run``, ``plan``, ``env show``, ``check`` and ``doctor``.

:func:`with_job_options` adds the options to a typer command's signature and hands the
command one :class:`JobOptions` value; :func:`build_spec` turns it into a planning
:class:`~launcher.planning.plan.JobSpec` (reading files, resolving ``auto`` ports and
reading the launching environment: the impure edge of planning lives here).
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import typer

from launcher.errors import MsLaunchError, PlanError
from launcher.planning import envs
from launcher.planning.inventory import Inventory, apply_filters, local_inventory, parse_host_list, read_inventory
from launcher.planning.mpi import MpiOptions
from launcher.planning.plan import DEFAULT_MASTER_PORT, JobSpec, Plan, build_plan

#: typer context settings for commands that take ``SCRIPT [ARGS...]``: everything after the
#: script belongs to it, including options.
PROGRAM_CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}


@dataclass(frozen=True)
class JobOptions:
    hosts: Optional[str]
    host_list: Optional[str]
    np: Optional[int]
    per_host: Optional[int]
    include: Optional[str]
    exclude: Optional[str]
    method: str
    launcher: Optional[str]
    master_addr: Optional[str]
    master_port: str
    cluster_time_out: Optional[int]
    env: Tuple[str, ...]
    env_file: Tuple[str, ...]
    module: Optional[str]
    no_python: bool
    python: Optional[str]
    hccn_dir: Optional[str]
    hccn: Tuple[str, ...]
    log_dir: Optional[str]
    job_id: Optional[str]
    mpi_arg: Tuple[str, ...]
    mpi_hostfile: bool
    oversubscribe: bool
    nic: Optional[str]
    ssh_config: Optional[str]
    program: Tuple[str, ...]


_OPTIONS: List[inspect.Parameter] = []


def _opt(name: str, annotation: Any, default: Any) -> None:
    _OPTIONS.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))


_opt("hosts", Optional[str], typer.Option(None, "--hosts", "--hostfile", "-f", help="Hostfile (host slots=N) or YAML cluster file.", rich_help_panel="Inventory"))
_opt("host_list", Optional[str], typer.Option(None, "-H", "--host", help="Hosts as h1:8,h2:8 (mpirun's -H).", rich_help_panel="Inventory"))
_opt("np", Optional[int], typer.Option(None, "--np", "-n", "--worker-num", "--worker_num", help="Total ranks (default: every slot).", rich_help_panel="Inventory"))
_opt("per_host", Optional[int], typer.Option(None, "--per-host", "--local-worker-num", "--local_worker_num", help="At most this many ranks per host.", rich_help_panel="Inventory"))
_opt("include", Optional[str], typer.Option(None, "--include", help="Only these hosts/devices: host1:0,1@host2.", rich_help_panel="Inventory"))
_opt("exclude", Optional[str], typer.Option(None, "--exclude", help="Not these hosts/devices: host1:0,1@host2.", rich_help_panel="Inventory"))
_opt("method", str, typer.Option("dynamic", "--method", help="Rendezvous: dynamic | ranktable | mpi.", rich_help_panel="Job"))
_opt("launcher", Optional[str], typer.Option(None, "--launcher", help="local | ssh | mpirun (default: local if every host is this machine, else ssh).", rich_help_panel="Job"))
_opt("master_addr", Optional[str], typer.Option(None, "--master-addr", "--master_addr", help="Scheduler address (default: the first host).", rich_help_panel="Job"))
_opt("master_port", str, typer.Option(str(DEFAULT_MASTER_PORT), "--master-port", "--master_port", help="Scheduler port, or 'auto' for a free one.", rich_help_panel="Job"))
_opt("cluster_time_out", Optional[int], typer.Option(None, "--cluster-time-out", "--cluster_time_out", help="Cluster build timeout, s (MS_TOPO_TIMEOUT).", rich_help_panel="Job"))
_opt("env", List[str], typer.Option([], "--env", "-e", help="K=V for every rank (repeatable; wins over --env-file).", rich_help_panel="Job"))
_opt("env_file", List[str], typer.Option([], "--env-file", help="File of K=V lines for every rank (repeatable).", rich_help_panel="Job"))
_opt("module", Optional[str], typer.Option(None, "-m", "--module", help="Run a Python module (python -m).", rich_help_panel="Job"))
_opt("no_python", bool, typer.Option(False, "--no-python", help="Run the program as an executable, not under Python.", rich_help_panel="Job"))
_opt("python", Optional[str], typer.Option(None, "--python", help="Interpreter for Python programs (default: the one mslaunch runs under).", rich_help_panel="Job"))
_opt("hccn_dir", Optional[str], typer.Option(None, "--hccn-dir", help="Folder of per-host hccn.conf copies (ranktable method).", rich_help_panel="Rank table"))
_opt("hccn", List[str], typer.Option([], "--hccn", help="HOST=PATH of a host's hccn.conf (repeatable).", rich_help_panel="Rank table"))
_opt("log_dir", Optional[str], typer.Option(None, "--log-dir", "--log_dir", help="Job directory (default ./mslaunch_logs/<job-id>).", rich_help_panel="Job"))
_opt("job_id", Optional[str], typer.Option(None, "--job-id", help="Job id (default: time-based).", rich_help_panel="Job"))
_opt("mpi_arg", List[str], typer.Option([], "--mpi-arg", help="Extra mpirun argument (repeatable).", rich_help_panel="mpirun"))
_opt("mpi_hostfile", bool, typer.Option(False, "--mpi-hostfile", help="Give mpirun a generated --hostfile instead of -H.", rich_help_panel="mpirun"))
_opt("oversubscribe", bool, typer.Option(False, "--oversubscribe", help="Allow more processes than slots (mpirun).", rich_help_panel="mpirun"))
_opt("nic", Optional[str], typer.Option(None, "--nic", help="Network interface for MPI traffic.", rich_help_panel="mpirun"))
_opt("ssh_config", Optional[str], typer.Option(None, "--ssh-config", help="ssh config for remote hosts (default $MSLAUNCH_SSH_CONFIG, else ~/.ssh/config).", rich_help_panel="SSH"))
_opt("program", Optional[List[str]], typer.Argument(None, metavar="SCRIPT [ARGS]...", help="Script (or module args with -m, or executable with --no-python) and its arguments."))

_FIELDS = [p.name for p in _OPTIONS]


def with_job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the job options to ``func``'s signature; ``func`` receives ``opts: JobOptions``."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != "opts"]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _FIELDS}
        for name in ("env", "env_file", "hccn", "mpi_arg", "program"):
            values[name] = tuple(values[name] or ())
        return func(*args, opts=JobOptions(**values), **kwargs)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD else p for p in own]
    arguments = [p for p in params if isinstance(p.default, typer.models.ArgumentInfo)]
    others = [p for p in params if p not in arguments]
    wrapper.__signature__ = sig.replace(parameters=others + _OPTIONS[:-1] + arguments + _OPTIONS[-1:])  # type: ignore[attr-defined]
    return wrapper


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
        inv = read_inventory(hosts)
    elif host_list:
        inv = parse_host_list(host_list)
    else:
        inv = local_inventory(local_slots)
    return apply_filters(inv, include, exclude)


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


def build_spec(opts: JobOptions, job_id: Optional[str] = None) -> JobSpec:
    """Read every input the options name and build the job spec."""
    inventory = load_inventory(opts.hosts, opts.host_list, opts.include, opts.exclude, opts.np or opts.per_host or 1)
    program: Tuple[str, ...] = ((opts.module,) if opts.module else ()) + opts.program
    if not opts.module and opts.program and opts.program[0].startswith("-"):
        raise PlanError(f"no such option {opts.program[0]!r} (options go before the script; see --help)", field="SCRIPT")
    if opts.module and opts.no_python:
        raise PlanError("-m and --no-python exclude each other", field="-m")
    job_id = job_id or opts.job_id or new_job_id()
    job_dir = os.path.abspath(opts.log_dir) if opts.log_dir else os.path.abspath(os.path.join("mslaunch_logs", job_id))
    env_pairs = tuple(envs.parse_env_assignment(e) for e in opts.env)
    env_files = tuple((path, _read_env_file(path)) for path in opts.env_file)
    device_ips = None
    if opts.method == "ranktable":
        from launcher.planning.ranktable import resolve_device_ips

        hccn_files = dict(_hccn_pair(h) for h in opts.hccn)
        device_ips = resolve_device_ips(inventory, hccn_dir=opts.hccn_dir, hccn_files=hccn_files)
    wrapper = None
    if opts.launcher == "mpirun" or opts.method == "mpi":
        wrapper = template_path("mslaunch-rank.sh")
    port = master_port(opts) if opts.method == "dynamic" else DEFAULT_MASTER_PORT
    ssh_config = opts.ssh_config or (os.environ.get("MSLAUNCH_SSH_CONFIG") if not inventory.all_local else None) or None
    if ssh_config is None and not inventory.all_local:
        # The file mslaunch's own SSH reads ($HOME/.ssh/config): OpenSSH (mpirun's agent) gets
        # it with -F too, since it would read the passwd home's instead (HOME differs in CI).
        from launcher.execution.ssh import config_path

        ssh_config = config_path()
    if ssh_config is not None:
        ssh_config = os.path.abspath(os.path.expanduser(ssh_config))
        if not os.path.isfile(ssh_config):
            raise PlanError(f"no such ssh config file {ssh_config}", field="--ssh-config")
    if opts.method == "dynamic" and not inventory.all_local and opts.master_addr is None:
        # MS_SCHED_HOST must be an address every host reaches: an ssh alias's HostName.
        from launcher.execution.ssh import resolve_addrs

        inventory = resolve_addrs(inventory, ssh_config)
    mpi_opts = MpiOptions(
        allow_run_as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        oversubscribe=opts.oversubscribe,
        nic=opts.nic,
        hostfile=os.path.join(job_dir, "hostfile") if opts.mpi_hostfile else None,
        extra=opts.mpi_arg,
    )
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
        per_host=opts.per_host,
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
    )


def _hccn_pair(text: str) -> Tuple[str, str]:
    host, sep, path = text.partition("=")
    if not sep or not host or not path:
        raise PlanError(f"expected HOST=PATH, got {text!r}", field="--hccn")
    return host, path


def plan_from(opts: JobOptions, job_id: Optional[str] = None) -> Plan:
    return build_plan(build_spec(opts, job_id))
