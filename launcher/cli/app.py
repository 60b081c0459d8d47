"""The ``mslaunch`` command: typer apps, error mapping and exit codes.

Exit codes: 0 success; 1 a job or check failed (or validation found problems); 2 bad input
(hostfile, YAML, rank table, flags); for ``run``, the root-cause rank's exit code (128+N for
signal N).
"""
from __future__ import annotations

import shlex
import sys
from typing import Any, List, Optional

import typer

from launcher.cli.docs import epilog
from launcher.cli.gcpause import no_gc
from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, with_job_options
from launcher.cli.spec import load_inventory, plan_from
from launcher.errors import MsLaunchError, PlanError

app = typer.Typer(
    name="mslaunch",
    help="Launch and supervise MindSpore distributed training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
env_app = typer.Typer(help="Per-rank environments.", no_args_is_help=True)
hostfile_app = typer.Typer(help="OpenMPI hostfiles.", no_args_is_help=True)
app.add_typer(env_app, name="env")
app.add_typer(hostfile_app, name="hostfile")


@app.command("plan", context_settings=PROGRAM_CONTEXT, epilog=epilog("running"))
@with_job_options
def plan_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    show_all: bool = typer.Option(False, "--all", help="Print every process of a big plan (else the first and last ones)."),
    *,
    opts: JobOptions,
) -> None:
    """Print the plan of a job (per rank: host, rank, device, cwd, argv, env) without starting it.

    Plans of more than 64 processes show the first and last 8 and a count of the others unless
    ``--all`` is given; ``--json`` is always complete."""
    with no_gc():
        plan = plan_from(opts)
        if as_json:
            from launcher.execution.backend import plan_json
            from launcher.planning.jsontext import dumps_indented

            sys.stdout.write(dumps_indented(plan_json(plan)) + "\n")
            return
    from launcher.cli.render import print_plan

    print_plan(plan, everything=show_all)


@env_app.command("show", context_settings=PROGRAM_CONTEXT, epilog=epilog("running"))
@with_job_options
def env_show(
    rank: Optional[int] = typer.Option(None, "--rank", "-r", help="The rank whose env to print."),
    scheduler: bool = typer.Option(False, "--scheduler", help="Print the scheduler's env instead."),
    *,
    opts: JobOptions,
) -> None:
    """Print one rank's environment as `export` lines (what mslaunch sets on top of the inherited env)."""
    plan = plan_from(opts)
    if scheduler:
        if plan.scheduler is None:
            raise PlanError(f"the {plan.method} method has no scheduler", field="--scheduler")
        proc = plan.scheduler
    else:
        if rank is None:
            raise PlanError("pass --rank R (or --scheduler)", field="--rank")
        if not 0 <= rank < plan.world_size:
            raise PlanError(f"rank {rank} is not in 0..{plan.world_size - 1}", field="--rank")
        proc = plan.ranks[rank]
    for key, value in proc.env:
        sys.stdout.write(f"export {key}={shlex.quote(value)}\n")


@hostfile_app.command("gen", epilog=epilog("inventories"))
def hostfile_gen(
    hosts: Optional[str] = typer.Option(None, "--hosts", "--hostfile", "-f", help="Hostfile, YAML cluster file or Slurm hostlist."),
    host_list: Optional[str] = typer.Option(None, "-H", "--host", help="Hosts as h1:8,h2:8 or node[1-4]:8."),
    include: Optional[str] = typer.Option(None, "--include", help="Only these hosts/devices: host1:0,1@host2."),
    exclude: Optional[str] = typer.Option(None, "--exclude", help="Not these hosts/devices."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write here (atomically) instead of stdout."),
) -> None:
    """Write an OpenMPI hostfile (`host slots=N` lines) from an inventory, after filters."""
    from launcher.planning.mpi import render_hostfile

    if not hosts and not host_list:
        raise PlanError("pass --hosts FILE or -H LIST", field="--hosts")
    _emit(render_hostfile(load_inventory(hosts, host_list, include, exclude)), output)


def _emit(text: str, output: Optional[str]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from launcher.jobs.files import write_atomic

    write_atomic(output, text)
    sys.stderr.write(f"wrote {output}\n")


_registered = []


def _register() -> None:
    """Add every command to ``app`` (once: ``main`` may run many times in one process)."""
    if _registered:
        return
    _registered.append(True)
    from launcher.cli import check, jobs, run

    run.register(app)
    jobs.register(app)
    check.register(app)
    from launcher.cli import doctor

    doctor.register(app)
    from launcher.cli import top

    top.register(app)
    from launcher.cli import sbatch

    sbatch.register(app)
    from launcher.cli import k8s

    k8s.register(app)
    from launcher.cli import ranktable

    app.add_typer(ranktable.app, name="ranktable")
    from launcher.cli import data

    app.add_typer(data.app, name="data")


_commands: List[Any] = []


def _command() -> Any:
    """The click command of ``app``, every command registered; built once per process (building
    it reads every command's signature: a quarter of a second)."""
    if not _commands:
        _register()
        _commands.append(typer.main.get_command(app))
    return _commands[0]


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: run the CLI; an MsLaunchError becomes one line on stderr and its exit code.

    Usage errors (unknown flags, missing arguments) are reported by typer itself (exit 2).
    """
    args = sys.argv[1:] if argv is None else argv
    if [a for a in args if not a.startswith("-")][:1] == ["run"] and argv is None:
        from launcher.execution import stopsignals

        if not stopsignals.installed():
            stopsignals.install()  # a stop signal during start-up becomes a "stopped" job
    try:
        _command()(args=argv, prog_name="mslaunch")
    except MsLaunchError as exc:
        sys.stderr.write(f"mslaunch: error: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
