"""``mslaunch sbatch [sbatch options] [run options] SCRIPT [ARGS]``: submit a job to Slurm.

Writes a batch script into the job dir (``sbatch.sh``; ``--dry-run`` prints it and submits
nothing) that runs ``mslaunch run --launcher slurm`` inside the allocation, submits it with
``sbatch --parsable``, prints the Slurm job id and the mslaunch job id, and registers the job so
``mslaunch ps / status / logs tail / stop`` work for it (``stop`` = ``scancel``).

The sbatch options come first; everything from the first other option (or the script) on is
given to ``mslaunch run`` unchanged.  Preemption: ``--signal USR1@<s>`` makes Slurm send SIGUSR1
to mslaunch ``<s>`` seconds before the end (``B:`` is added: the batch script's mslaunch gets it,
not the ranks); mslaunch then stops the ranks gracefully (SIGTERM, ``--grace``) and writes the
summary as ``preempted``, as it does when Slurm preempts the job (see
:meth:`~launcher.execution.backend.Backend.outside_stop`); with ``--requeue`` the script then
requeues the job unless Slurm does (:mod:`launcher.execution.slurm.requeue`) and the next run
continues in ``<job dir>/attempt_<k>/`` (``k`` = ``SLURM_RESTART_COUNT``); a job requeued by
Slurm itself does the same.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from typing import FrozenSet, List, Optional, Set, Tuple

import typer

from launcher.cli.options import PROGRAM_CONTEXT, new_job_id
from launcher.errors import PlanError
from launcher.planning import layout

_SIGNAL_RE = re.compile(r"^(?:[RB]{1,2}:)?(?:SIG)?([A-Z0-9]+)(?:@(\d+))?$")
#: run options sbatch sets itself.
_OWN = ("--launcher", "--log-dir", "--log_dir", "--job-id", "--detach", "-d")


CONTEXT = dict(PROGRAM_CONTEXT, allow_extra_args=True)


def register(app: typer.Typer) -> None:
    app.command("sbatch", context_settings=CONTEXT)(sbatch_cmd)


def _signal_directive(text: str) -> str:
    """``--signal`` for the batch script: ``USR1@60`` -> ``B:USR1@60`` (to the batch shell's mslaunch)."""
    m = _SIGNAL_RE.match(text.strip().upper())
    if not m:
        raise PlanError(f"--signal {text!r}: expected SIG[@SECONDS], e.g. USR1@60", field="--signal")
    sig, secs = m.group(1), m.group(2)
    if sig not in ("USR1", "10"):
        raise PlanError(f"--signal {text!r}: mslaunch stops gracefully on USR1; use USR1@SECONDS", field="--signal")
    return f"B:USR1@{secs}" if secs else "B:USR1"


def render_script(*, job_id: str, job_dir: str, cwd: str, python: str, directives: List[str], run_args: List[str],
                  requeue: bool, environ_conf: Optional[str] = None) -> str:
    """The batch script (pure).

    Args:
        job_id: the mslaunch job id (``--job-id`` of every run).
        job_dir: the job dir; a requeued run k uses ``<job_dir>/attempt_<k>``.
        cwd: where the runs start (the submitting shell's directory).
        python: the interpreter that runs mslaunch on the first node.
        directives: ``#SBATCH`` option texts (without ``#SBATCH``).
        run_args: ``mslaunch run`` options, SCRIPT and ARGS.
        requeue: requeue the job after a preemption warning (``--requeue``).
        environ_conf: ``SLURM_CONF`` to export, if set when submitting.
    """
    q = shlex.quote
    lines = ["#!/bin/bash"] + [f"#SBATCH {d}" for d in directives] + [
        "# Written by 'mslaunch sbatch': runs the job inside the allocation with --launcher slurm.",
        "set -u",
    ]
    if environ_conf:
        lines.append(f"export SLURM_CONF={q(environ_conf)}")
    run = [python, "-m", "launcher", "run", "--launcher", "slurm", "--job-id", job_id, "--log-dir"]
    lines += [
        f"cd {q(cwd)}",
        "K=${SLURM_RESTART_COUNT:-0}",
        f"if [ \"$K\" -gt 0 ]; then LOG_DIR={q(job_dir)}/attempt_$K; else LOG_DIR={q(job_dir)}; fi",
        " ".join(q(a) for a in run) + " \"$LOG_DIR\" --tee none " + " ".join(q(a) for a in run_args) + " &",
        "pid=$!",
        "trap 'kill -USR1 $pid 2>/dev/null' USR1",
        "trap 'kill -TERM $pid 2>/dev/null' TERM INT",
        "while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done",
    ]
    if requeue:  # a preempted run requeues its job, unless Slurm does it already
        lines.append(f"{q(python)} -m launcher.execution.slurm.requeue \"$LOG_DIR/summary.json\"")
    lines.append("exit $rc")
    return "\n".join(lines) + "\n"


def run_flag_names(ctx: typer.Context) -> FrozenSet[str]:
    """The ``run`` options that take no value (flags, ``--x/--no-x`` pairs), read from the ``run``
    command itself, so a new flag of ``run`` is known here without a list to keep in step."""
    root = ctx.find_root()
    group = root.command
    run = group.get_command(root, "run") if hasattr(group, "get_command") else None
    names: Set[str] = set()
    for param in getattr(run, "params", ()):  # typer's own click objects: read by their attributes
        if param.param_type_name == "option" and (getattr(param, "is_flag", False) or getattr(param, "count", False)):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return frozenset(names)


def _split_run_args(args: List[str], flags: FrozenSet[str]) -> Tuple[List[str], Optional[str], Optional[str]]:
    """``run`` options and program as given, minus ``--log-dir`` / ``--job-id`` (returned).

    ``flags`` are the run options that take no value (:func:`run_flag_names`); every other
    option takes the next argument unless written ``--opt=value``.

    Raises:
        PlanError: ``--launcher`` / ``--detach`` (sbatch sets them), no SCRIPT.
    """
    out: List[str] = []
    log_dir = job_id = None
    i = 0
    seen_program = False
    while i < len(args):
        a = args[i]
        if not seen_program and a.startswith("-"):
            name, eq, value = a.partition("=")
            if name in ("--log-dir", "--log_dir", "--job-id"):
                if not eq:
                    if i + 1 >= len(args):
                        raise PlanError(f"{name} needs a value", field=name)
                    value = args[i + 1]
                    i += 1
                if name == "--job-id":
                    job_id = value
                else:
                    log_dir = value
                i += 1
                continue
            if name in _OWN:
                raise PlanError(f"{name} is set by mslaunch sbatch (the job runs with --launcher slurm in the allocation); drop it",
                                field=name)
            out.append(a)
            i += 1
            if not eq and name not in flags and i < len(args):  # its value
                out.append(args[i])
                i += 1
            if name in ("-m", "--module"):  # the module's own arguments follow
                seen_program = True
            continue
        seen_program = True
        out.append(a)
        i += 1
    if not seen_program:
        raise PlanError("missing SCRIPT: mslaunch sbatch [sbatch options] [run options] SCRIPT [ARGS]", field="SCRIPT")
    return out, log_dir, job_id


def sbatch_cmd(
    ctx: typer.Context,
    nodes: Optional[str] = typer.Option(None, "--nodes", "-N", help="sbatch --nodes.", rich_help_panel="sbatch"),
    ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", help="sbatch --ntasks-per-node (ranks per node by default).", rich_help_panel="sbatch"),
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="sbatch --partition.", rich_help_panel="sbatch"),
    time_limit: Optional[str] = typer.Option(None, "--time", "-t", help="sbatch --time.", rich_help_panel="sbatch"),
    job_name: Optional[str] = typer.Option(None, "--job-name", "-J", help="sbatch --job-name (default: mslaunch-<job id>).", rich_help_panel="sbatch"),
    account: Optional[str] = typer.Option(None, "--account", "-A", help="sbatch --account.", rich_help_panel="sbatch"),
    gres: Optional[str] = typer.Option(None, "--gres", help="sbatch --gres (e.g. gpu:8).", rich_help_panel="sbatch"),
    exclusive: bool = typer.Option(False, "--exclusive", help="sbatch --exclusive.", rich_help_panel="sbatch"),
    signal_opt: Optional[str] = typer.Option(None, "--signal", help="Preemption warning: USR1@SECONDS (mslaunch stops the ranks gracefully; summary 'preempted').", rich_help_panel="sbatch"),
    requeue: bool = typer.Option(False, "--requeue", help="Let Slurm requeue the job; after a --signal warning mslaunch requeues it; runs continue in attempt_<k>/.", rich_help_panel="sbatch"),
    sbatch_arg: List[str] = typer.Option([], "--sbatch-arg", help="Any other sbatch option, e.g. --sbatch-arg=--qos=high (repeatable).", rich_help_panel="sbatch"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the batch script; submit nothing.", rich_help_panel="sbatch"),
) -> None:
    """Submit a job to Slurm: a batch script running 'mslaunch run --launcher slurm' in the allocation.

    Prints the Slurm job id, then the mslaunch job id; 'mslaunch ps/status/logs tail/stop' work on it.
    """
    run_args, log_dir, job_id = _split_run_args(list(ctx.args), run_flag_names(ctx))
    from launcher.jobs.jobdir import validate_job_id

    job_id = validate_job_id(job_id) if job_id is not None else new_job_id()
    if log_dir is not None and not log_dir.strip():
        raise PlanError("--log-dir must not be empty", field="--log-dir")
    job_dir = os.path.abspath(log_dir) if log_dir else os.path.abspath(os.path.join("mslaunch_logs", job_id))
    directives = [f"--job-name={job_name or 'mslaunch-' + job_id}", f"--output={os.path.join(job_dir, layout.SBATCH_OUTPUT)}",
                  "--open-mode=append"]
    for flag, value in (("--nodes", nodes), ("--ntasks-per-node", ntasks_per_node), ("--partition", partition),
                        ("--time", time_limit), ("--account", account), ("--gres", gres)):
        if value is not None:
            directives.append(f"{flag}={value}")
    if exclusive:
        directives.append("--exclusive")
    if signal_opt:
        directives.append(f"--signal={_signal_directive(signal_opt)}")
    directives.append("--requeue" if requeue else "--no-requeue")
    for extra in sbatch_arg:
        if not extra.startswith("-") or "\n" in extra:
            raise PlanError(f"--sbatch-arg {extra!r}: give one sbatch option, e.g. --sbatch-arg=--qos=high", field="--sbatch-arg")
        directives.append(extra)
    script = render_script(job_id=job_id, job_dir=job_dir, cwd=os.getcwd(), python=sys.executable, directives=directives,
                           run_args=run_args, requeue=requeue, environ_conf=os.environ.get("SLURM_CONF"))
    if dry_run:
        sys.stdout.write(script)
        return
    from launcher.execution.slurm.submit import submit
    from launcher.jobs.files import write_atomic
    from launcher.jobs.jobdir import prepare_job_dir, register_submitted

    prepare_job_dir(job_dir)
    path = os.path.join(job_dir, layout.SBATCH_SCRIPT)
    write_atomic(path, script, mode=0o700)
    slurm_id = submit(path, os.getcwd())
    register_submitted(job_id, job_dir, slurm_id, ["mslaunch", "sbatch"] + [a for a in sys.argv[2:]])
    sys.stdout.write(f"{slurm_id}\n{job_id}\n")
    sys.stderr.write(f"mslaunch: submitted Slurm job {slurm_id} as mslaunch job {job_id}; logs: {job_dir}\n"
                     f"  follow: mslaunch logs tail {job_id} -f    stop: mslaunch stop {job_id}\n")
