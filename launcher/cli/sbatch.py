"""``mslaunch sbatch [OPTIONS] SCRIPT [ARGS]``: submit a job to Slurm.

Writes a batch script into the job dir (``sbatch.sh``; ``--dry-run`` prints it and submits
nothing) that runs ``mslaunch run --launcher slurm`` inside the allocation, submits it with
``sbatch --parsable``, prints the Slurm job id and the mslaunch job id, and registers the job so
``mslaunch ps / status / logs tail / stop`` work for it (``stop`` = ``scancel``).

Before SCRIPT, sbatch's options and ``mslaunch run``'s come in any order
(:mod:`launcher.cli.sbatch_args`).  The allocation is sized from ``--np``/``--per-host`` where
``-N``/``--ntasks``/``--ntasks-per-node`` are not given (:mod:`launcher.planning.backends.sbatch`).
Before anything is written, the script's ``mslaunch run`` is checked as it will run in the
allocation, against a stand-in of it (:mod:`launcher.cli.submit_check`): a job that would fail
there on its options or a missing program is refused now, one line, exit 2.

Preemption: ``--signal USR1@<s>`` makes Slurm send SIGUSR1
to mslaunch ``<s>`` seconds before the end (``B:`` is added: the batch script's mslaunch gets it,
not the ranks); mslaunch then stops the ranks gracefully (SIGTERM, ``--grace``) and writes the
summary as ``preempted``, as it does when Slurm preempts the job (see
:meth:`~launcher.execution.backend.Backend.outside_stop`); with ``--requeue`` the script then
requeues the job unless Slurm does (:mod:`launcher.execution.slurm.requeue`) and the next run
continues in ``<job dir>/attempt_<k>/`` (``k`` = ``SLURM_RESTART_COUNT``); a job requeued by
Slurm itself does the same.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import replace
from typing import Any, List, Optional, Sequence, Tuple

import typer
from typer.core import TyperCommand

from launcher.cli.sbatch_args import SplitArgs, option_names, split_args
from launcher.cli.spec import new_job_id
from launcher.errors import PlanError
from launcher.planning.backends.sbatch import (
    Shape,
    check_directive_text,
    derive_shape,
    directive,
    quote_directive_value,
)
from launcher.planning.job import layout

_SIGNAL_RE = re.compile(r"^(?:[RB]{1,2}:)?(?:SIG)?([A-Z0-9]+)(?:@(\d+))?$")
#: where :class:`SbatchCommand` leaves the split arguments for :func:`sbatch_cmd`.
_SPLIT = "mslaunch.sbatch.split"
_HELP = ("-h", "--help")
#: sbatch options that size the job: mslaunch sbatch's own, never through --sbatch-arg.
_SHAPE_OPTS = ("-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node")


class SbatchCommand(TyperCommand):
    """``sbatch``'s arguments are split (:func:`~launcher.cli.sbatch_args.split_args`) before
    its own options are parsed: the run options and the program wait in ``ctx.meta``."""

    def parse_args(self, ctx: Any, args: List[str]) -> List[str]:
        root = ctx.find_root()
        run = root.command.get_command(root, "run")
        try:
            split = split_args(list(args), option_names(self, _HELP), option_names(run, _HELP))
        except PlanError:
            if any(a in _HELP for a in args):  # 'mslaunch sbatch --help' needs no SCRIPT
                return super().parse_args(ctx, ["--help"])
            raise
        ctx.meta[_SPLIT] = split
        super().parse_args(ctx, split.sbatch)
        return []


def register(app: typer.Typer) -> None:
    app.command(
        "sbatch",
        cls=SbatchCommand,
        options_metavar="[OPTIONS] SCRIPT [ARGS]...",
        context_settings={"help_option_names": list(_HELP)},
    )(sbatch_cmd)


def _signal_directive(text: str) -> str:
    """``--signal`` for the batch script: ``USR1@60`` -> ``B:USR1@60`` (to the batch shell's mslaunch)."""
    m = _SIGNAL_RE.match(text.strip().upper())
    if not m:
        raise PlanError(f"--signal {text!r}: expected SIG[@SECONDS], e.g. USR1@60", field="--signal")
    sig, secs = m.group(1), m.group(2)
    if sig not in ("USR1", "10"):
        raise PlanError(f"--signal {text!r}: mslaunch stops gracefully on USR1; use USR1@SECONDS", field="--signal")
    return f"B:USR1@{secs}" if secs else "B:USR1"


def render_script(
    *,
    job_id: str,
    job_dir: str,
    cwd: str,
    python: str,
    directives: List[str],
    run_args: List[str],
    requeue: bool,
    environ_conf: Optional[str] = None,
    secrets_file: Optional[str] = None,
    env_assignments: Sequence[str] = (),
) -> str:
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
        secrets_file: the job's ``secrets.json`` (``run_args`` name it): removed when the run ends
            unless the job may be requeued (a requeued run reads it again).
        env_assignments: the ``--env NAME=VALUE`` of ``run_args``: the run's command line shows
            ``NAME=<hidden>`` and the values travel in its environment (:mod:`launcher.cli.hiddenenv`),
            so no value is on the command line of the process the script starts, not even at its start.
    """
    q = shlex.quote
    lines = (
        ["#!/bin/bash"]
        + [f"#SBATCH {d}" for d in directives]
        + [
            "# Written by 'mslaunch sbatch': runs the job inside the allocation with --launcher slurm.",
            "set -u",
        ]
    )
    if environ_conf:
        lines.append(f"export SLURM_CONF={q(environ_conf)}")
    from launcher.cli.hiddenenv import HIDDEN_ENV_VAR, hide_env_values

    head = ["run", "--launcher", "slurm", "--job-id", job_id, "--log-dir", "$LOG_DIR", "--tee", "none"]
    shown, hidden = hide_env_values(head + list(run_args), env_assignments)
    hidden_env = f"{HIDDEN_ENV_VAR}={q(json.dumps(hidden))} " if hidden else ""
    run = [python, "-m", "launcher", *head[:6]]
    lines += [
        f"cd {q(cwd)}",
        "K=${SLURM_RESTART_COUNT:-0}",
        f'if [ "$K" -gt 0 ]; then LOG_DIR={q(job_dir)}/attempt_$K; else LOG_DIR={q(job_dir)}; fi',
        hidden_env + " ".join(q(a) for a in run) + ' "$LOG_DIR" --tee none ' + " ".join(q(a) for a in shown[9:]) + " &",
        "pid=$!",
        "trap 'kill -USR1 $pid 2>/dev/null' USR1",
        "trap 'kill -TERM $pid 2>/dev/null' TERM INT",
        "while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done",
    ]
    if requeue:  # a preempted run requeues its job, unless Slurm does it already
        lines.append(f'{q(python)} -m launcher.execution.slurm.requeue "$LOG_DIR/summary.json"')
    elif secrets_file:
        lines.append(f"rm -f {q(secrets_file)}")
    lines.append("exit $rc")
    return "\n".join(lines) + "\n"


def sbatch_cmd(
    ctx: typer.Context,
    nodes: Optional[str] = typer.Option(
        None,
        "--nodes",
        "-N",
        metavar="N|MIN-MAX",
        help="sbatch --nodes (default: derived from --np and --per-host).",
        rich_help_panel="sbatch",
    ),
    ntasks: Optional[int] = typer.Option(
        None, "--ntasks", help="sbatch --ntasks (-n is mslaunch run's --np).", rich_help_panel="sbatch"
    ),
    ntasks_per_node: Optional[int] = typer.Option(
        None,
        "--ntasks-per-node",
        help=("sbatch --ntasks-per-node (default: --per-host, else derived from --np)."),
        rich_help_panel="sbatch",
    ),
    partition: Optional[str] = typer.Option(
        None, "--partition", "-p", help="sbatch --partition.", rich_help_panel="sbatch"
    ),
    time_limit: Optional[str] = typer.Option(None, "--time", "-t", help="sbatch --time.", rich_help_panel="sbatch"),
    job_name: Optional[str] = typer.Option(
        None,
        "--job-name",
        "-J",
        help=(
            "sbatch --job-name: Slurm's name of the job (default: mslaunch-<job id>; the mslaunch job id is --job-id)."
        ),
        rich_help_panel="sbatch",
    ),
    account: Optional[str] = typer.Option(None, "--account", "-A", help="sbatch --account.", rich_help_panel="sbatch"),
    gres: Optional[str] = typer.Option(None, "--gres", help="sbatch --gres (e.g. gpu:8).", rich_help_panel="sbatch"),
    exclusive: bool = typer.Option(False, "--exclusive", help="sbatch --exclusive.", rich_help_panel="sbatch"),
    signal_opt: Optional[str] = typer.Option(
        None,
        "--signal",
        help=("Preemption warning: USR1@SECONDS (mslaunch stops the ranks gracefully; summary 'preempted')."),
        rich_help_panel="sbatch",
    ),
    requeue: bool = typer.Option(
        False,
        "--requeue",
        help=(
            "Let Slurm requeue the job; after a --signal warning mslaunch requeues it; runs continue in attempt_<k>/."
        ),
        rich_help_panel="sbatch",
    ),
    sbatch_arg: List[str] = typer.Option(
        [],
        "--sbatch-arg",
        help="Any other sbatch option, e.g. --sbatch-arg=--qos=high (repeatable).",
        rich_help_panel="sbatch",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help=(
            "Check the job and print the batch script; write and submit nothing (anywhere before SCRIPT: never passed "
            "to "
            "run)."
        ),
        rich_help_panel="sbatch",
    ),
) -> None:
    """Submit a job to Slurm: a batch script running 'mslaunch run --launcher slurm' in the allocation.

    Before SCRIPT, the sbatch options below and mslaunch run's options (mslaunch run --help) come in any order.
    -h/--help and --dry-run are sbatch's;
    --job-id and --log-dir name the mslaunch job and its directory; -n is run's --np (Slurm's is --ntasks). See
    docs/slurm.md.

    Without -N/--ntasks/--ntasks-per-node the allocation is sized from --np and --per-host (--np 16 --per-host 8: 2
    nodes x 8 tasks).

    The job is checked as it will run in the allocation before anything is written: bad run options, a job too big for
    the allocation asked for or a
    missing SCRIPT are refused (exit 2).

    Prints the Slurm job id, then the mslaunch job id; 'mslaunch ps/status/logs tail/stop' work on it.
    """
    from launcher.cli.submit_check import check_run, parse_run, submit_environ
    from launcher.jobs.jobfile import validate_job_id
    from launcher.planning.backends.sbatch import stand_in_environ

    split: SplitArgs = ctx.meta.pop(_SPLIT)
    job_id = validate_job_id(split.job_id) if split.job_id is not None else new_job_id()
    if split.log_dir is not None and not split.log_dir.strip():
        raise PlanError("--log-dir must not be empty", field="--log-dir")
    job_dir = (
        os.path.abspath(split.log_dir) if split.log_dir else os.path.abspath(os.path.join("mslaunch_logs", job_id))
    )
    extras = _extra_directives(sbatch_arg)
    # the batch script's run, parsed by run's own parser (its usage errors now)
    run_ctx = parse_run(
        ctx, ["--launcher", "slurm", "--job-id", job_id, "--log-dir", job_dir, "--tee", "none"] + split.run_argv()
    )
    shape = derive_shape(nodes, ntasks, ntasks_per_node, run_ctx.params.get("np"), run_ctx.params.get("per_host"))
    # every value is checked (no newline, CR or NUL) and quoted for sbatch's #SBATCH parser
    directives = [
        directive("--job-name", job_name or "mslaunch-" + job_id),
        directive("--output", os.path.join(job_dir, layout.SBATCH_OUTPUT), field="--log-dir"),
        "--open-mode=append",
    ] + shape.directives()
    for flag, value in (("--partition", partition), ("--time", time_limit), ("--account", account), ("--gres", gres)):
        if value is not None:
            directives.append(directive(flag, value))
    if exclusive:
        directives.append("--exclusive")
    if signal_opt:
        directives.append(f"--signal={_signal_directive(signal_opt)}")
    directives.append("--requeue" if requeue else "--no-requeue")
    directives += extras
    check_run(run_ctx, submit_environ(stand_in_environ(shape), os.environ))  # against a stand-in of the allocation
    run_args, secret_pairs = _secrets_out_of_the_script(run_ctx.params, split, job_dir)
    kept = [a for a in run_ctx.params.get("env") or () if any(x == a or x.endswith(a) for x in run_args)]
    script = render_script(
        job_id=job_id,
        job_dir=job_dir,
        cwd=os.getcwd(),
        python=sys.executable,
        directives=directives,
        run_args=run_args,
        requeue=requeue,
        environ_conf=os.environ.get("SLURM_CONF"),
        secrets_file=os.path.join(job_dir, layout.SBATCH_SECRETS) if secret_pairs else None,
        env_assignments=kept,
    )
    _note_derived(shape)
    if dry_run:
        sys.stdout.write(script)
        return
    slurm_id = _write_and_submit(job_dir, script, secret_pairs)
    from launcher.cli.hiddenenv import without_secrets
    from launcher.jobs.jobdir import register_submitted

    shown = without_secrets(
        ["mslaunch", "sbatch"] + sys.argv[2:], [f"{k}={v}" for k, v in secret_pairs], {k for k, _ in secret_pairs}
    )
    register_submitted(job_id, job_dir, slurm_id, shown)
    sys.stdout.write(f"{slurm_id}\n{job_id}\n")
    sys.stderr.write(
        f"mslaunch: submitted Slurm job {slurm_id} as mslaunch job {job_id}; logs: {job_dir}\n"
        f"  follow: mslaunch logs tail {job_id} -f    stop: mslaunch stop {job_id}\n"
    )


def _secrets_out_of_the_script(params: Any, split: SplitArgs, job_dir: str) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The script's run arguments without the secrets' values, and those values: the ``--env``
    assignments of secret variables and the ``--secret-env`` values of this environment go into
    ``<job dir>/secrets.json`` (0600), which the run reads as a ``--secret-env-file``."""
    from launcher.cli.secretflags import take_secret_env_args
    from launcher.planning.job.secrets import DEFAULT_PATTERNS

    patterns = (() if params.get("no_secret_patterns") else DEFAULT_PATTERNS) + tuple(
        params.get("secret_pattern") or ()
    )
    names = list(params.get("secret_env") or ())
    run, pairs = take_secret_env_args(split.run, names, patterns)
    given = {k for k, _ in pairs}
    pairs += [(n, os.environ[n]) for n in dict.fromkeys(names) if n not in given and n in os.environ]
    if not pairs:
        return split.run_argv(), []
    run += ["--secret-env-file", os.path.join(job_dir, layout.SBATCH_SECRETS)]
    return replace(split, run=run).run_argv(), pairs


def _extra_directives(sbatch_arg: List[str]) -> List[str]:
    """``--sbatch-arg`` values: one sbatch option each, none that sizes the job.

    The value of a ``--name=value`` is quoted for sbatch (read whole, blanks and ``#`` included);
    other forms (``-q high``) go on the line as given.

    Raises:
        PlanError: not an option, a newline, CR or NUL, or ``-N``/``--nodes``/``-n``/``--ntasks``/``--ntasks-per-node``.
    """
    out = []
    for extra in sbatch_arg:
        check_directive_text(extra, "--sbatch-arg")
        if not extra.startswith("-"):
            raise PlanError(
                f"--sbatch-arg {extra!r}: give one sbatch option, e.g. --sbatch-arg=--qos=high", field="--sbatch-arg"
            )
        name = extra.partition("=")[0] if extra.startswith("--") else extra[:2]
        if name in _SHAPE_OPTS:
            raise PlanError(
                f"--sbatch-arg {extra!r}: give -N/--ntasks/--ntasks-per-node as mslaunch sbatch options "
                "(they size the job and are checked against --np)",
                field="--sbatch-arg",
            )
        if extra.startswith("--") and "=" in extra:
            name, _, value = extra.partition("=")
            extra = f"{name}={quote_directive_value(value)}"
        out.append(extra)
    return out


def _note_derived(shape: Shape) -> None:
    if shape.derived:
        shown = " ".join(d for d in shape.directives() if d.partition("=")[0] in shape.derived)
        sys.stderr.write(f"mslaunch: allocation {shown} (derived from --np/--per-host)\n")


def _write_and_submit(job_dir: str, script: str, secret_pairs: Sequence[Tuple[str, str]] = ()) -> str:
    """Write ``sbatch.sh`` (and ``secrets.json`` when the job has ``secret_pairs``) into a new (or
    empty) job dir and submit it; the Slurm job id.

    If sbatch refuses the job, the files and the directories this call created are removed.

    Raises:
        LaunchError: sbatch refused the job (its message) or is missing.
    """
    from launcher.execution.slurm.submit import submit
    from launcher.jobs.files import write_atomic
    from launcher.jobs.joblock import prepare_job_dir

    parent = os.path.dirname(job_dir)
    parent_existed = os.path.isdir(parent)
    created = prepare_job_dir(job_dir)
    path = os.path.join(job_dir, layout.SBATCH_SCRIPT)
    write_atomic(path, script)  # 0600: it holds the --env values (sbatch reads it; nothing runs it)
    secrets_path = os.path.join(job_dir, layout.SBATCH_SECRETS)
    if secret_pairs:  # 0600; read by the run at run time, never part of the script
        write_atomic(secrets_path, json.dumps(dict(secret_pairs)))
    try:
        return submit(path, os.getcwd())
    except BaseException:
        os.unlink(path)
        if secret_pairs:
            os.unlink(secrets_path)
        for made, folder in ((created, job_dir), (not parent_existed, parent)):
            if made:
                try:
                    os.rmdir(folder)
                except OSError:
                    break
        raise
