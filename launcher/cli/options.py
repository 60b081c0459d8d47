"""Run options shared by ``run``, ``plan``, ``env show``, ``check`` and ``doctor``.

:func:`with_job_options` adds the options to a typer command's signature and hands the
command one :class:`JobOptions` value; :func:`launcher.cli.spec.build_spec` turns it into a
planning :class:`~launcher.planning.job.spec.JobSpec`.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple

import typer

from launcher.cli.ssh_flags import ssh_parameter
from launcher.execution.backend import backend_names
from launcher.planning.job.spec import DEFAULT_MASTER_PORT

if TYPE_CHECKING:
    pass

#: typer context settings for commands that take ``SCRIPT [ARGS...]``: everything after the
#: script belongs to it, including options.
PROGRAM_CONTEXT = {
    "allow_interspersed_args": False,
    "ignore_unknown_options": True,
    "help_option_names": ["-h", "--help"],
}


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
    secret_env: Tuple[str, ...]
    secret_env_file: Tuple[str, ...]
    secret_pattern: Tuple[str, ...]
    no_secret_patterns: bool
    module: Optional[str]
    no_python: bool
    cold_restarts: bool
    compile_cache: bool
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
    cpu_tune: str
    bind_core: Optional[str]
    node_rank: Optional[str]
    join: Optional[str]
    bind_numa: Optional[str]
    sim_level: Optional[int]
    sim_rank_id: Optional[int]
    rank_table_file: Optional[str]
    worker_log_name: Optional[str]
    tail_worker_log: Optional[str]
    program: Tuple[str, ...]


_OPTIONS: List[inspect.Parameter] = []


def _opt(name: str, annotation: Any, default: Any) -> None:
    _OPTIONS.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))


_opt(
    "hosts",
    Optional[str],
    typer.Option(
        None,
        "--hosts",
        "--hostfile",
        "-f",
        help=("Hostfile (host slots=N), YAML cluster file, or a Slurm hostlist (node[01-04])."),
        rich_help_panel="Inventory",
    ),
)
_opt(
    "host_list",
    Optional[str],
    typer.Option(
        None,
        "-H",
        "--host",
        help="Hosts as h1:8,h2:8 (mpirun's -H) or Slurm hostlists: node[1-4]:8.",
        rich_help_panel="Inventory",
    ),
)
_opt(
    "np",
    Optional[int],
    typer.Option(
        None,
        "--np",
        "-n",
        "--worker-num",
        "--worker_num",
        help="Total ranks (default: every slot).",
        rich_help_panel="Inventory",
    ),
)
_opt(
    "per_host",
    Optional[int],
    typer.Option(
        None,
        "--per-host",
        "--local-worker-num",
        "--local_worker_num",
        help="At most this many ranks per host.",
        rich_help_panel="Inventory",
    ),
)
_opt(
    "include",
    Optional[str],
    typer.Option(None, "--include", help="Only these hosts/devices: host1:0,1@host2.", rich_help_panel="Inventory"),
)
_opt(
    "exclude",
    Optional[str],
    typer.Option(None, "--exclude", help="Not these hosts/devices: host1:0,1@host2.", rich_help_panel="Inventory"),
)
_opt(
    "method",
    str,
    typer.Option("dynamic", "--method", help="Rendezvous: dynamic | ranktable | mpi.", rich_help_panel="Job"),
)
_opt(
    "launcher",
    Optional[str],
    typer.Option(
        None,
        "--launcher",
        help=(f"{' | '.join(backend_names())} (default: local if every host is this machine, else ssh)."),
        rich_help_panel="Job",
    ),
)
_opt(
    "master_addr",
    Optional[str],
    typer.Option(
        None,
        "--master-addr",
        "--master_addr",
        help="Scheduler address (default: the first host).",
        rich_help_panel="Job",
    ),
)
_opt(
    "master_port",
    str,
    typer.Option(
        str(DEFAULT_MASTER_PORT),
        "--master-port",
        "--master_port",
        help="Scheduler port, or 'auto' for a free one.",
        rich_help_panel="Job",
    ),
)
_opt(
    "cluster_time_out",
    Optional[int],
    typer.Option(
        None,
        "--cluster-time-out",
        "--cluster_time_out",
        help="Cluster build timeout, s (MS_TOPO_TIMEOUT).",
        rich_help_panel="Job",
    ),
)
_opt(
    "env",
    List[str],
    typer.Option(
        [], "--env", "-e", help="K=V for every rank (repeatable; wins over --env-file).", rich_help_panel="Job"
    ),
)
_opt(
    "env_file",
    List[str],
    typer.Option([], "--env-file", help="File of K=V lines for every rank (repeatable).", rich_help_panel="Job"),
)
_opt(
    "secret_env",
    List[str],
    typer.Option(
        [],
        "--secret-env",
        help="NAME: a secret variable (its value from --env/--env-file or this environment; shown as <secret>).",
        rich_help_panel="Job",
    ),
)
_opt(
    "secret_env_file",
    List[str],
    typer.Option(
        [], "--secret-env-file", help="File of K=V lines, every one secret (repeatable).", rich_help_panel="Job"
    ),
)
_opt(
    "secret_pattern",
    List[str],
    typer.Option(
        [],
        "--secret-pattern",
        help="Names matching this glob (any case) are secret (repeatable; besides *TOKEN* *KEY* *SECRET* *PASSWORD*).",
        rich_help_panel="Job",
    ),
)
_opt(
    "no_secret_patterns",
    bool,
    typer.Option(False, "--no-secret-patterns", help="Drop the default secret name patterns.", rich_help_panel="Job"),
)
_opt(
    "module",
    Optional[str],
    typer.Option(None, "-m", "--module", help="Run a Python module (python -m).", rich_help_panel="Job"),
)
_opt(
    "cold_restarts",
    bool,
    typer.Option(
        False,
        "--cold-restarts",
        help=(
            "A restart imports MindSpore in a new zygote instead of forking from the last attempt's (when that one is "
            "healthy). See docs/long-jobs.md."
        ),
        rich_help_panel="Job",
    ),
)
_opt(
    "compile_cache",
    bool,
    typer.Option(
        False,
        "--compile-cache",
        help=(
            "Keep MindSpore's compiled graphs in the job dir for its restarts (MS_COMPILER_CACHE_*) for any program "
            "(the "
            "reference trainer does it by itself). Only for programs that compile the same graphs in the same order in "
            "every attempt: MindSpore 2.10 finds a cached graph by its position. See docs/long-jobs.md."
        ),
        rich_help_panel="Job",
    ),
)
_opt(
    "no_python",
    bool,
    typer.Option(
        False, "--no-python", help="Run the program as an executable, not under Python.", rich_help_panel="Job"
    ),
)
_opt(
    "python",
    Optional[str],
    typer.Option(
        None,
        "--python",
        help="Interpreter for Python programs (default: the one mslaunch runs under).",
        rich_help_panel="Job",
    ),
)
_opt(
    "hccn_dir",
    Optional[str],
    typer.Option(
        None, "--hccn-dir", help="Folder of per-host hccn.conf copies (ranktable method).", rich_help_panel="Rank table"
    ),
)
_opt(
    "hccn",
    List[str],
    typer.Option([], "--hccn", help="HOST=PATH of a host's hccn.conf (repeatable).", rich_help_panel="Rank table"),
)
_opt(
    "log_dir",
    Optional[str],
    typer.Option(
        None, "--log-dir", "--log_dir", help="Job directory (default ./mslaunch_logs/<job-id>).", rich_help_panel="Job"
    ),
)
_opt(
    "job_id", Optional[str], typer.Option(None, "--job-id", help="Job id (default: time-based).", rich_help_panel="Job")
)
_opt(
    "mpi_arg",
    List[str],
    typer.Option([], "--mpi-arg", help="Extra mpirun argument (repeatable).", rich_help_panel="mpirun"),
)
_opt(
    "mpi_hostfile",
    bool,
    typer.Option(
        False, "--mpi-hostfile", help="Give mpirun a generated --hostfile instead of -H.", rich_help_panel="mpirun"
    ),
)
_opt(
    "oversubscribe",
    bool,
    typer.Option(False, "--oversubscribe", help="Allow more processes than slots (mpirun).", rich_help_panel="mpirun"),
)
_opt(
    "nic",
    Optional[str],
    typer.Option(None, "--nic", help="Network interface for MPI traffic.", rich_help_panel="mpirun"),
)
_OPTIONS.append(ssh_parameter("config"))
_opt(
    "cpu_tune",
    str,
    typer.Option(
        "auto",
        "--cpu-tune",
        help=(
            "auto: tune MindSpore CPU ranks (oneDNN ISA from a cached probe, cores and threads per rank) | on: any job "
            "| "
            "off."
        ),
        rich_help_panel="CPU",
    ),
)
_opt(
    "bind_core",
    Optional[str],
    typer.Option(
        None,
        "--bind-core",
        "--bind_core",
        help=('msrun\'s: True | False | JSON {"device0": ["0-3"], ...}: cores per local rank.'),
        rich_help_panel="CPU",
    ),
)
_opt(
    "node_rank",
    Optional[str],
    typer.Option(
        None,
        "--node-rank",
        "--node_rank",
        help=(
            "Per-node mode: this node's index (ranks node_rank*local_worker_num+i), or 'auto' (MS_NODE_RANK, "
            "SLURM_NODEID, "
            "OMPI_COMM_WORLD_RANK, JOB_COMPLETION_INDEX, VC_TASK_INDEX)."
        ),
        rich_help_panel="msrun",
    ),
)
_opt(
    "join",
    Optional[str],
    typer.Option(
        None,
        "--join",
        metavar="BOOL",
        help="msrun's --join: True runs attached (the default), False like --detach.",
        rich_help_panel="msrun",
    ),
)
_opt(
    "bind_numa",
    Optional[str],
    typer.Option(
        None,
        "--bind-numa",
        "--bind_numa",
        metavar="BOOL|JSON",
        help=(
            'msrun\'s --bind_numa: True, a {"deviceN": ["nodes"]} dict or a bind JSON file (numactl --membind per '
            "rank)."
        ),
        rich_help_panel="msrun",
    ),
)
_opt(
    "sim_level",
    Optional[int],
    typer.Option(
        None,
        "--sim-level",
        "--sim_level",
        help=("msrun's --sim_level 0-3: MindSpore dry run (MS_SIMULATION_LEVEL), no scheduler."),
        rich_help_panel="msrun",
    ),
)
_opt(
    "sim_rank_id",
    Optional[int],
    typer.Option(
        None,
        "--sim-rank-id",
        "--sim_rank_id",
        help="With --sim_level: one process simulating this rank.",
        rich_help_panel="msrun",
    ),
)
_opt(
    "rank_table_file",
    Optional[str],
    typer.Option(
        None,
        "--rank-table-file",
        "--rank_table_file",
        help=(
            "An existing rank table: validated, used by --method ranktable, else exported as RANK_TABLE_FILE (msrun)."
        ),
        rich_help_panel="msrun",
    ),
)
_opt(
    "worker_log_name",
    Optional[str],
    typer.Option(
        None,
        "--worker-log-name",
        "--worker_log_name",
        help=("Worker log names NAME_<rank>.log; {ip} and {hostname} are replaced (msrun)."),
        rich_help_panel="msrun",
    ),
)
_opt(
    "tail_worker_log",
    Optional[str],
    typer.Option(
        None,
        "--tail-worker-log",
        "--tail_worker_log",
        help=("Ranks whose output goes to the console: -1 (all) or 0,3 (msrun)."),
        rich_help_panel="msrun",
    ),
)
_opt(
    "program",
    Optional[List[str]],
    typer.Argument(
        None,
        metavar="SCRIPT [ARGS]...",
        help="Script (or module args with -m, or executable with --no-python) and its arguments.",
    ),
)

_FIELDS = [p.name for p in _OPTIONS]


def with_job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the job options to ``func``'s signature; ``func`` receives ``opts: JobOptions``."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != "opts"]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, opts=job_options({name: kwargs.pop(name) for name in _FIELDS}), **kwargs)

    params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD else p
        for p in own
    ]
    arguments = [p for p in params if isinstance(p.default, typer.models.ArgumentInfo)]
    others = [p for p in params if p not in arguments]
    wrapper.__signature__ = sig.replace(parameters=others + _OPTIONS[:-1] + arguments + _OPTIONS[-1:])  # type: ignore[attr-defined]  # inspect.signature (typer) reads it
    return wrapper


def job_options(params: Mapping[str, Any]) -> JobOptions:
    """The :class:`JobOptions` of a command's parsed parameters (e.g. ``run``'s click context)."""
    values = {name: params[name] for name in _FIELDS}
    for name in ("env", "env_file", "secret_env", "secret_env_file", "secret_pattern", "hccn", "mpi_arg", "program"):
        values[name] = tuple(values[name] or ())
    return JobOptions(**values)
