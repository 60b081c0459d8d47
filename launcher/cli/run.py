"""``mslaunch run``: plan, start, supervise, report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple

import typer

from launcher.cli.ci_outputs import check_ci_outputs, write_ci_outputs
from launcher.cli.console import Console
from launcher.cli.docs import epilog
from launcher.cli.elastic_flags import with_elastic_settings
from launcher.cli.metrics_flags import with_metrics_settings
from launcher.cli.msrun_flags import parse_msrun_bool, tail_ranks
from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, with_job_options
from launcher.cli.preflight_flags import PreflightSettings, with_preflight_settings
from launcher.cli.program_check import check_program
from launcher.cli.spec import build_spec
from launcher.cli.ssh_flags import with_ssh_settings
from launcher.cli.submit_check import stand_in, stand_in_options
from launcher.errors import MsLaunchError, PlanError
from launcher.execution.settings import ElasticSettings, SuperviseOptions
from launcher.execution.ssh.settings import SSHSettings
from launcher.logs.promsettings import MetricsSettings
from launcher.planning.build import build_plan
from launcher.planning.job import layout
from launcher.planning.job.events import Preflight
from launcher.planning.job.spec import JobSpec, Plan
from launcher.planning.text.private import open_private

if TYPE_CHECKING:
    from launcher.cli.startmode import StartMode

TEE_MODES = ("none", "rank0", "all", "errors")


def register(app: typer.Typer) -> None:
    app.command("run", context_settings=PROGRAM_CONTEXT, epilog=epilog("running"))(run_cmd)


@with_job_options
@with_ssh_settings("accept_new", "connect_timeout", "start_timeout")
@with_metrics_settings
@with_elastic_settings
@with_preflight_settings
def run_cmd(
    ctx: typer.Context,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print the plan and start nothing (the options and the program are checked first).",
        rich_help_panel="Run",
    ),
    as_json: bool = typer.Option(False, "--json", help="With --dry-run: the plan as JSON.", rich_help_panel="Run"),
    grace: float = typer.Option(
        SuperviseOptions.grace,
        "--grace",
        help="Seconds between SIGTERM and SIGKILL at teardown (time for a checkpoint on SIGTERM; docs/long-jobs.md).",
        rich_help_panel="Run",
    ),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", help="Bound on the whole job, s (exit 124).", rich_help_panel="Run"
    ),
    start_timeout: float = typer.Option(
        SuperviseOptions.start_timeout,
        "--start-timeout",
        help="Seconds for the scheduler's port to accept.",
        rich_help_panel="Run",
    ),
    max_restarts: int = typer.Option(
        SuperviseOptions.max_restarts,
        "--max-restarts",
        help=("Restart the whole job this many times after a failure or a hang."),
        rich_help_panel="Run",
    ),
    hang_timeout: str = typer.Option(
        "auto",
        "--hang-timeout",
        help=(
            "auto | SECONDS | off: end the attempt as hung (exit 125, stacks dumped) when no rank makes progress this "
            "long;"
            " auto = max(60 s, 5 x the longest step interval), armed once a rank logs a step (auto:FLOOR sets the 60 "
            "s). See docs/long-jobs.md."
        ),
        rich_help_panel="Long jobs",
    ),
    first_step_timeout: Optional[str] = typer.Option(
        None,
        "--first-step-timeout",
        help=("SECONDS | off: hung when no rank logged a step this long after the start (default off)."),
        rich_help_panel="Long jobs",
    ),
    stopped_timeout: Optional[str] = typer.Option(
        None,
        "--stopped-timeout",
        help=(
            "SECONDS | off: hung when a rank's process has been stopped by a signal (SIGSTOP, ^Z) this long "
            "(default 5; local and ssh ranks)."
        ),
        rich_help_panel="Long jobs",
    ),
    restart_delay: float = typer.Option(
        SuperviseOptions.restart_delay,
        "--restart-delay",
        help=(
            "Seconds to wait before a restart, after every process of the previous attempt is gone (Ascend: ~10 s to "
            "release devices)."
        ),
        rich_help_panel="Long jobs",
    ),
    host_failures: int = typer.Option(
        SuperviseOptions.host_failures,
        "--host-failures",
        help=(
            "After N failures in a row blamed on one host (a rank killed by a signal, a hang's culprit; new steps "
            "trained on it clear them), restarts leave it out "
            "and "
            "move its ranks to spare hosts (hosts given no rank); a lost host is left out at once; 0: never for "
            "failures. "
            "See docs/spare-hosts.md."
        ),
        rich_help_panel="Long jobs",
    ),
    straggler: str = typer.Option(
        "warn",
        "--straggler",
        help=(
            "off | warn[:WINDOW] | replace[:WINDOW]: name a rank whose process waits for a CPU far more than the "
            "others' over the last WINDOW s (default 30), or keeps its TCP send queues full; replace: then restart "
            "at once without its host when a spare is left or --min-hosts allows (the ranks save first). "
            "See docs/long-jobs.md."
        ),
        rich_help_panel="Long jobs",
    ),
    tee: Optional[str] = typer.Option(
        None,
        "--tee",
        help=(
            "Console: none | rank0 | all | errors (rank 0 plus every rank's error lines). Default: on a terminal the "
            "live "
            "per-rank view (as mslaunch top) plus every rank's error lines; else errors."
        ),
        rich_help_panel="Run",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No rank output, only the final summary line.", rich_help_panel="Run"
    ),
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Start in the background; print the job id and return.", rich_help_panel="Run"
    ),
    summary_json: Optional[str] = typer.Option(
        None, "--summary-json", help="Also write summary.json here.", rich_help_panel="CI"
    ),
    junit: Optional[str] = typer.Option(
        None, "--junit", help="Write a JUnit XML report here (one testcase per rank).", rich_help_panel="CI"
    ),
    sched_wait: bool = typer.Option(
        True,
        "--sched-wait/--no-sched-wait",
        help=(
            "Start workers once the scheduler's port accepts (default), or right away (faster start; workers retry "
            "registering)."
        ),
        rich_help_panel="Run",
    ),
    zygote: Optional[bool] = typer.Option(
        None,
        "--zygote/--no-zygote",
        help=(
            "Import MindSpore once and fork each local Python rank from it (faster start). Default: on for MindSpore "
            "CPU "
            "jobs of the local launcher, with a fallback to plain processes when the import is not fork-safe; "
            "--no-zygote: "
            "plain processes."
        ),
        rich_help_panel="Run",
    ),
    minimal_scheduler: Optional[bool] = typer.Option(
        None,
        "--minimal-scheduler/--script-scheduler",
        help=(
            "With the zygote (MindSpore CPU dynamic jobs): the scheduler is forked too and runs MindSpore's init() "
            "alone "
            "(default), or runs your script as msrun does (--script-scheduler)."
        ),
        rich_help_panel="Run",
    ),
    *,
    opts: JobOptions,
    ssh: SSHSettings,
    metrics: MetricsSettings,
    elastic: ElasticSettings,
    preflight: PreflightSettings,
) -> None:
    """Run a job: one process per rank (plus the scheduler), supervised, with per-rank logs.

    Exit code: 0 on success; the failing rank's exit code (128+N for signal N); 124 after
    --timeout; 125 when hung (--hang-timeout, or a collective timed out); 130/143/129 when stopped by
    SIGINT/SIGTERM/SIGHUP; 1 when the job could not start;
    2 for bad input.
    """
    tee, live = _console_mode(opts, tee, quiet, detach)
    from launcher.logs.hang import HangPolicy
    from launcher.planning.health.stragglers import StragglerPolicy

    options = SuperviseOptions(
        grace=grace,
        timeout=timeout,
        start_timeout=start_timeout,
        max_restarts=max_restarts,
        scheduler_first=sched_wait,
        hang=HangPolicy.parse(hang_timeout, first_step_timeout, stopped_timeout),
        restart_delay=restart_delay,
        host_failures=host_failures,
        straggler=StragglerPolicy.parse(straggler),
        elastic=elastic,
    )
    stand_in_env = stand_in(ctx)  # set when 'mslaunch sbatch' checks its batch script's run at submit time
    opts = _run_options(opts, stand_in_env, dry_run, start_timeout)
    spec = build_spec(opts, allocation=stand_in_env)
    plan = build_plan(spec)
    check_program(spec, os.environ if stand_in_env is None else stand_in_env)
    if opts.join is not None and not parse_msrun_bool(opts.join, "--join"):
        detach = True  # msrun --join=False: start the job and return
    if stand_in_env is not None:  # checked up to where the run would start anything
        if detach:
            raise PlanError("--join False would end the batch job at once (the run returns); drop it", field="--join")
        check_ci_outputs(summary_json, junit)
        return
    if dry_run:
        _print_plan(plan, as_json)
        return
    check_ci_outputs(summary_json, junit)
    if detach:
        _detach(plan, opts.env, metrics)
        return
    from launcher.cli.hiddenenv import hide_own_title

    hide_own_title(opts.env)  # the job's life: no --env value in this process's title
    plan, pre_event = _preflight(preflight, spec, plan, ssh, elastic.min_hosts)
    from launcher.cli.startmode import choose, mindspore_cpu_job

    start = replace(
        choose(plan, mindspore_cpu_job(spec, plan), zygote, minimal_scheduler), keep_zygote=not opts.cold_restarts
    )
    console = Console(
        plan,
        "none" if quiet else tee,
        tail_ranks(opts.tail_worker_log) if opts.tail_worker_log is not None else None,
        tail_all=opts.tail_worker_log is not None,
        live=live,
        start_note=start.note,
    )
    result = _supervise(spec, plan, options, ssh, start, console, pre_event, metrics)
    problems = write_ci_outputs(result, summary_json, junit)  # one that cannot be written never hides the result
    from launcher.cli.render import print_result

    print_result(result, quiet=quiet)
    for line in problems:
        sys.stderr.write(line + "\n")
    raise typer.Exit(result.exit_code)


def _console_mode(opts: JobOptions, tee: Optional[str], quiet: bool, detach: bool) -> Tuple[str, bool]:
    """The console's ``--tee`` mode and whether it shows the live per-rank view.

    In a Kubernetes pod, per-node mode prints every rank's lines on stdout; the live view
    replaces the prefixed lines only on a terminal when nothing asked for lines (``--tee``,
    msrun's ``--tail_worker_log``) or for silence (``--quiet``, ``--detach``).

    Raises:
        PlanError: an unknown ``--tee`` mode.
    """
    from launcher.cli.pod import console_default

    tee = console_default(opts, tee, os.environ)
    live = tee is None and opts.tail_worker_log is None and not quiet and not detach and sys.stdout.isatty()
    tee = tee or "errors"
    if tee not in TEE_MODES:
        raise PlanError(f"unknown --tee mode {tee!r}; use one of {', '.join(TEE_MODES)}", field="--tee")
    return tee, live


def _run_options(
    opts: JobOptions, stand_in_env: Optional[Mapping[str, str]], dry_run: bool, start_timeout: float
) -> JobOptions:
    """The options as this run plans with them: checked against ``mslaunch sbatch``'s stand-in
    allocation (``stand_in_env``), or, for a real start in per-node mode, with the scheduler's
    name resolved to its address (a pod's DNS name: waited for within ``start_timeout``).

    Raises:
        MsLaunchError: a ``--hccn`` pair the stand-in cannot use; the name did not resolve.
    """
    if stand_in_env is not None:
        return stand_in_options(opts)
    if dry_run:
        return opts
    from launcher.cli.pod import resolve_master

    return resolve_master(opts, start_timeout, os.environ)


def _print_plan(plan: Plan, as_json: bool) -> None:
    """``--dry-run``: the plan as ``mslaunch plan`` prints it (``--json``: as JSON)."""
    if as_json:
        from launcher.execution.backend import plan_json
        from launcher.planning.text.jsontext import dumps_indented

        sys.stdout.write(dumps_indented(plan_json(plan)) + "\n")
        return
    from launcher.cli.render import print_plan

    print_plan(plan)


def _preflight(
    settings: PreflightSettings,
    spec: JobSpec,
    plan: Plan,
    ssh: SSHSettings,
    min_hosts: Optional[int] = None,
) -> Tuple[Plan, Optional[Preflight]]:
    """``--preflight MODE``: the health check of every host, and the plan to run (``exclude``:
    planned around slow or faulty hosts); with the check's event for the job's metrics (None
    without ``--preflight``)."""
    if settings.mode is None:
        return plan, None
    from launcher.cli.health import preflight as run_preflight

    return run_preflight(settings.mode, spec, plan, ssh, settings.device_checks, min_hosts, settings.threshold)


def _supervise(
    spec: JobSpec,
    plan: Plan,
    options: SuperviseOptions,
    ssh: SSHSettings,
    start: "StartMode",
    console: Console,
    pre_event: Optional[Preflight],
    metrics: MetricsSettings,
) -> Any:
    """Start the job and supervise it to its end, its ranks' output on ``console``; the result
    (a :class:`~launcher.execution.results.JobResult`).  Restarts leave out bad hosts when the
    inventory has more than one (:func:`launcher.planning.spares.replan`)."""
    from launcher.cli.hiddenenv import without_secrets
    from launcher.cli.metrics_flags import start_exporter
    from launcher.cli.startmode import ssh_settings
    from launcher.execution.hostthreads import NoteSettings
    from launcher.execution.local.backend import LocalSettings
    from launcher.execution.runner import run_plan
    from launcher.execution.ssh.reach import answers_probe
    from launcher.logs.metricsfile import append_event
    from launcher.planning.spares import replan

    exporter = start_exporter(metrics, spec, plan)  # bound before the job starts: a port in use starts nothing

    def started() -> None:
        if pre_event is not None:
            append_event(plan.job_dir, pre_event)
        exporter.announce()
        console.start()

    try:
        return run_plan(
            plan,
            options,
            without_secrets(sys.argv, [f"{k}={v}" for k, v in spec.env], plan.secrets),
            on_event=console.event,
            on_started=started,
            replan=(lambda exclusions: replan(spec, exclusions, plan.planned_size, options.elastic.min_hosts))
            if len(spec.inventory.hosts) > 1
            else None,
            reachable=answers_probe(spec.inventory.hosts, spec.ssh_config)
            if plan.launcher in ("ssh", "mpirun")
            else None,
            backend_settings={
                "ssh": ssh_settings(ssh, spec, plan, start, console.note, options.straggler.every),
                "mpirun": NoteSettings(console.note),
                "slurm": NoteSettings(console.note),
                "local": LocalSettings(
                    zygote=start.zygote,
                    on_note=console.note,
                    fork_scheduler=start.fork_scheduler,
                    keep_zygote=start.keep_zygote,
                ),
            },
            job_extra=exporter.job_extra(),
            on_ended=exporter.close,  # the textfile's last write, before the job is seen ended
        )
    finally:
        console.stop()
        exporter.close()  # (again: the server, and when the job could not start)


def _detach(plan: Plan, env_assignments: Sequence[str] = (), metrics: Optional[MetricsSettings] = None) -> None:
    """Re-run this command in the background as its own session; print the job id.

    Its command line shows each ``--env NAME=VALUE`` as ``NAME=<hidden>`` (every user of the host
    can read a process's command line); the values reach it in its environment
    (:mod:`launcher.cli.hiddenenv`)."""
    from launcher.cli.hiddenenv import HIDDEN_ENV_VAR, hide_env_values
    from launcher.cli.metrics_flags import check_bindable
    from launcher.execution.runner import preflight

    preflight(plan)
    check_bindable(metrics or MetricsSettings())  # the port and textfile folder: errors here, not in the background
    from launcher.jobs.joblock import prepare_job_dir

    prepare_job_dir(plan.job_dir)  # created 0700 (or an empty one of the user's made 0700); the child locks it
    argv = _without_detach(list(sys.argv[1:]))
    idx = argv.index("run")
    child = (
        [sys.executable, "-m", "launcher"]
        + argv[: idx + 1]
        + ["--job-id", plan.job_id, "--log-dir", plan.job_dir, "--tee", "none"]
        + argv[idx + 1 :]
    )
    shown, hidden = hide_env_values(child[3:], env_assignments)
    env = dict(os.environ)
    env.pop(HIDDEN_ENV_VAR, None)
    if hidden:
        env[HIDDEN_ENV_VAR] = json.dumps(hidden)
    with os.fdopen(open_private(os.path.join(plan.job_dir, layout.DETACH_LOG)), "ab") as out:
        proc = subprocess.Popen(
            child[:3] + shown,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 30
    job_file = os.path.join(plan.job_dir, layout.JOB_FILE)
    while not os.path.exists(job_file):
        if proc.poll() is not None:
            tail = (
                open(os.path.join(plan.job_dir, layout.DETACH_LOG), encoding="utf-8", errors="replace")
                .read()
                .strip()
                .splitlines()[-1:]
            )
            raise MsLaunchError(f"the detached job exited at once: {tail[0] if tail else proc.returncode}", exit_code=1)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    sys.stdout.write(plan.job_id + "\n")
    sys.stderr.write(
        f"mslaunch: job {plan.job_id} running in the background (pid {proc.pid}); logs: {plan.job_dir}\n"
        f"  follow: mslaunch logs tail {plan.job_id} -f    stop: mslaunch stop {plan.job_id}\n"
    )


def _without_detach(argv: List[str]) -> List[str]:
    """``argv`` without ``--detach``/``-d`` and msrun's ``--join False`` (before the script)."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--detach", "-d") or arg.startswith("--join="):
            i += 1
            continue
        if arg == "--join" and i + 1 < len(argv):
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
