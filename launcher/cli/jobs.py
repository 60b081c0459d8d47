"""``mslaunch logs``, ``ps``, ``status``, ``stop``."""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from typing import List, Optional

import typer

from launcher.errors import JobError, MsLaunchError

logs_app = typer.Typer(help="Per-rank logs of a job.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(logs_app, name="logs")
    app.command("ps")(ps_cmd)
    app.command("status")(status_cmd)
    app.command("stop")(stop_cmd)


def _job_dir(job: Optional[str], log_dir: Optional[str]) -> str:
    from launcher.jobs.jobdir import find_job

    if log_dir:
        if not os.path.isdir(log_dir):
            raise JobError("no such job directory", path=log_dir)
        return os.path.abspath(log_dir)
    return find_job(job).job_dir


def _parse_ranks(text: Optional[str]) -> Optional[List[int]]:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MsLaunchError(f"--rank takes rank numbers like 0,3, got {text!r}", field="--rank") from None


@logs_app.command("tail")
def logs_tail(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
    rank: Optional[str] = typer.Option(None, "--rank", "-r", help="Only these ranks, e.g. 0,3."),
    lines: int = typer.Option(10, "-n", "--lines", help="Lines of each log to show first."),
    follow: bool = typer.Option(False, "-f", "--follow", help="Follow new lines and new logs while the job runs."),
    grep: Optional[str] = typer.Option(None, "--grep", help="Only lines matching this regular expression."),
) -> None:
    """Show the last lines of every rank's log, prefixed `[rank N]`; with -f, follow them."""
    from launcher.jobs.jobdir import SUMMARY_FILE, latest_attempt_dir
    from launcher.logs.follow import Follower, job_log_sources, last_lines, prefix

    folder = _job_dir(job, log_dir)
    ranks = _parse_ranks(rank)
    try:
        pattern = re.compile(grep) if grep else None
    except re.error as exc:
        raise MsLaunchError(f"bad regular expression: {exc}", field="--grep") from None
    colour = sys.stdout.isatty()
    attempt = latest_attempt_dir(folder)

    def emit(src, line: str) -> None:  # type: ignore[no-untyped-def]
        if pattern is None or pattern.search(line):
            sys.stdout.write(prefix(src, colour) + line + "\n")

    offsets = {}
    for src in job_log_sources(attempt, ranks):
        text, end = last_lines(src.path, lines)
        for line in text:
            emit(src, line)
        offsets[src.path] = end
    sys.stdout.flush()
    if not follow:
        return
    follower = Follower(lambda: job_log_sources(latest_attempt_dir(folder), ranks), lambda s, l: (emit(s, l), sys.stdout.flush()), from_start=True)
    follower.seek(offsets)  # continue after what was shown
    try:
        while True:
            follower.poll()
            if os.path.exists(os.path.join(folder, SUMMARY_FILE)):
                follower.flush()
                return
            time.sleep(0.2)
    except KeyboardInterrupt:
        return


@logs_app.command("ls")
def logs_ls(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
) -> None:
    """List a job's log files with their sizes."""
    from launcher.jobs.jobdir import latest_attempt_dir
    from launcher.logs.follow import job_log_sources

    folder = _job_dir(job, log_dir)
    for src in job_log_sources(latest_attempt_dir(folder)):
        try:
            size = os.path.getsize(src.path)
        except OSError:
            size = 0
        sys.stdout.write(f"{src.label:<12} {size:>10}  {src.path}\n")


def _age(started: Optional[float]) -> str:
    if not started:
        return "-"
    secs = int(time.time() - started)
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def ps_cmd(all_jobs: bool = typer.Option(False, "--all", "-a", help="Also finished jobs (default: running ones and the last 10).")) -> None:
    """List jobs: id, state, ranks, age, log dir."""
    from rich.console import Console
    from rich.table import Table

    from launcher.jobs.jobdir import list_jobs

    jobs = list_jobs()
    if not all_jobs:
        running = [j for j in jobs if j.state == "running"]
        rest = [j for j in jobs if j.state != "running"][:10]
        jobs = running + rest
    table = Table()
    for col in ("job", "state", "ranks", "age", "log dir"):
        table.add_column(col, overflow="fold")
    for j in jobs:
        table.add_row(j.job_id, j.state, "-" if j.ranks is None else str(j.ranks), _age(j.started), j.job_dir)
    Console().print(table)


def status_cmd(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json (or the live state) as JSON."),
) -> None:
    """Show a job's state; exit 0 if it succeeded or is running, 1 otherwise."""
    from launcher.jobs.jobdir import find_job

    from launcher.logs.metricsfile import load_progress

    info = find_job(job)
    progress = load_progress(info.job_dir)
    if as_json:
        data = info.summary if info.summary is not None else {"job_id": info.job_id, "job_dir": info.job_dir, "status": info.state, "pid": info.pid}
        data = dict(data, progress=[{"rank": r, "step": st.global_step if st.global_step is not None else st.step,
                                     "loss": None if st.loss is None or st.loss != st.loss else st.loss, "epoch": st.epoch}
                                    for r, st in sorted(progress.ranks.items())])
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(f"job {info.job_id}: {info.state}\n  log dir: {info.job_dir}\n")
        if info.ranks is not None:
            sys.stdout.write(f"  ranks: {info.ranks}\n")
        for r, st in sorted(progress.ranks.items()):
            step = st.global_step if st.global_step is not None else st.step
            loss = "-" if st.loss is None else ("NaN/Inf" if st.loss != st.loss else f"{st.loss:.6g}")
            sys.stdout.write(f"  rank {r}: step {'-' if step is None else step}, loss {loss}\n")
        if info.summary:
            sys.stdout.write(f"  exit code: {info.summary.get('exit_code')}\n")
            cause = info.summary.get("root_cause")
            if cause:
                sys.stdout.write(f"  root cause: {cause['name']} on {cause['host']}: {cause['reason']} (log {cause['log']})\n")
    raise typer.Exit(0 if info.state in ("running", "succeeded") else 1)


def stop_cmd(
    job: str = typer.Argument(..., help="Job id (or prefix, or job dir)."),
    wait: float = typer.Option(30.0, "--wait", help="Seconds to wait for the job to end."),
) -> None:
    """Stop a running job: its supervisor tears it down as after a failure (SIGTERM, grace, SIGKILL)."""
    from launcher.jobs.jobdir import pid_alive, find_job

    info = find_job(job)
    if info.state != "running" or not info.pid:
        raise JobError(f"job {info.job_id} is not running (state: {info.state})", exit_code=1)
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while pid_alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(info.pid):
        raise JobError(f"job {info.job_id} (pid {info.pid}) did not stop within {wait:g} s", exit_code=1)
    sys.stdout.write(f"stopped job {info.job_id}\n")
