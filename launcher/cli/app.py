"""The ``mslaunch`` command: typer apps, error mapping and exit codes.

Exit codes: 0 success; 1 a job or check failed (or validation found problems); 2 bad input
(hostfile, YAML, rank table, flags); for ``run``, the root-cause rank's exit code (128+N for
signal N).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import typer

from launcher.cli.docs import epilog
from launcher.cli.gcpause import no_gc
from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, with_job_options
from launcher.cli.spec import load_inventory, plan_from
from launcher.cli.version import version_line
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


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(version_line() + "\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print mslaunch's version and exit."
    ),
) -> None:
    """The options of ``mslaunch`` itself (before the command)."""


@app.command("plan", context_settings=PROGRAM_CONTEXT, epilog=epilog("running"))
@with_job_options
def plan_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    show_all: bool = typer.Option(
        False, "--all", help="Print every process of a big plan (else the first and last ones)."
    ),
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
            from launcher.planning.text.jsontext import dumps_indented

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
    for key, value in plan.shown_env(proc):  # a secret's value: <secret>
        sys.stdout.write(f"export {key}={shlex.quote(value)}\n")
    source = plan.thread_source(proc)
    if source is not None:
        sys.stdout.write(f"# {source}\n")


@hostfile_app.command("gen", epilog=epilog("inventories"))
def hostfile_gen(
    hosts: Optional[str] = typer.Option(
        None, "--hosts", "--hostfile", "-f", help="Hostfile, YAML cluster file or Slurm hostlist."
    ),
    host_list: Optional[str] = typer.Option(None, "-H", "--host", help="Hosts as h1:8,h2:8 or node[1-4]:8."),
    include: Optional[str] = typer.Option(None, "--include", help="Only these hosts/devices: host1:0,1@host2."),
    exclude: Optional[str] = typer.Option(None, "--exclude", help="Not these hosts/devices."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write here (atomically) instead of stdout."),
) -> None:
    """Write an OpenMPI hostfile (`host slots=N` lines) from an inventory, after filters."""
    from launcher.planning.backends.mpirun import render_hostfile

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


#: The modules that register the other commands, in the order of ``mslaunch --help``, with the
#: commands each adds and the modules those commands need besides (``k8s gen`` and ``sbatch``
#: check their run options against ``run``'s).  A command's module is imported when it runs, or
#: every module for the full list: importing them all costs each command a tenth of a second.
_MODULES = (
    ("run", ("run",), ()),
    ("jobs", ("ps", "status", "stop", "logs"), ()),
    ("check", ("check",), ()),
    ("doctor", ("doctor",), ()),
    ("top", ("top", "report"), ()),
    ("sbatch", ("sbatch",), ("run",)),
    ("k8s", ("k8s",), ("run",)),
    ("ranktable", ("ranktable",), ()),
    ("data", ("data",), ()),
)
_OWN = ("plan", "env", "hostfile")  # this module's commands
_ORDER = {name: i for i, name in enumerate(list(_OWN) + [c for _, cmds, _ in _MODULES for c in cmds])}
_registered: List[str] = []


def _register_module(module: str) -> None:
    from importlib import import_module

    mod = import_module(f"launcher.cli.{module}")
    if module in ("ranktable", "data"):
        app.add_typer(mod.app, name=module)
    else:
        mod.register(app)
    _registered.append(module)


def _register(command: Optional[str] = None) -> None:
    """Add ``command``'s module (and the ones it needs) to ``app``, or every module
    (``command`` None or not one of them); each module once (``main`` may run many times in one
    process).  The commands keep the order of :data:`_MODULES` whatever the order of calls."""
    wanted = [] if command in _OWN else [m for m, _, _ in _MODULES]
    for module, cmds, needs in _MODULES:
        if command in cmds:
            wanted = [m for m, _, _ in _MODULES if m == module or m in needs]
    for module in wanted:
        if module not in _registered:
            _register_module(module)
    app.registered_commands.sort(key=lambda c: _ORDER.get(c.name or "", len(_ORDER)))
    app.registered_groups.sort(key=lambda g: _ORDER.get(g.name or "", len(_ORDER)))


_commands: Dict[Tuple[str, ...], Any] = {}


def _command(args: Sequence[str] = ()) -> Any:
    """The click command of ``app`` with what the command in ``args`` needs registered (every
    command when it names none); built once per set of commands (building reads each
    command's signature)."""
    _register(next((a for a in args if not a.startswith("-")), None))
    key = tuple(_registered)
    if key not in _commands:
        _commands[key] = typer.main.get_command(app)
    return _commands[key]


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: run the CLI; an MsLaunchError becomes one line on stderr and its exit code.

    Usage errors (unknown flags, missing arguments) are reported by typer itself (exit 2).
    """
    args = sys.argv[1:] if argv is None else argv
    if list(args[:1]) == ["--version"]:  # before any command's module is imported
        sys.stdout.write(version_line() + "\n")
        return
    if [a for a in args if not a.startswith("-")][:1] == ["run"] and argv is None:
        from launcher.execution import stopsignals

        if not stopsignals.installed():
            stopsignals.install()  # a stop signal during start-up becomes a "stopped" job
    try:
        _command(args)(args=argv, prog_name="mslaunch")
    except MsLaunchError as exc:
        sys.stderr.write(f"mslaunch: error: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
