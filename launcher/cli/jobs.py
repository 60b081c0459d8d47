"""``mslaunch logs``, ``ps``, ``status``, ``stop``."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, Callable, List, Optional

import typer

from launcher.cli.docs import epilog
from launcher.errors import JobError, MsLaunchError
from launcher.planning.job.kinds import JobStatus

if TYPE_CHECKING:
    from launcher.jobs.jobdir import JobInfo

logs_app = typer.Typer(help="Per-rank logs of a job.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(logs_app, name="logs")
    app.command("ps", epilog=epilog("running"))(ps_cmd)
    app.command("status", epilog=epilog("running"))(status_cmd)
    app.command("stop", epilog=epilog("running"))(stop_cmd)


def _job(job: Optional[str], log_dir: Optional[str]) -> "JobInfo":
    """The job named by JOB or --log-dir (not both); a corrupt one is announced on stderr.

    Raises:
        JobError: both given, an empty value, no such job, or a directory that holds no job.
    """
    from launcher.jobs.jobdir import find_job

    if log_dir is not None:
        if job is not None:
            raise JobError("give a job id or --log-dir, not both", field="--log-dir")
        if not log_dir.strip():
            raise JobError("--log-dir must not be empty", field="--log-dir")
        if not os.path.isdir(log_dir):
            raise JobError("is not a directory" if os.path.lexists(log_dir) else "no such job directory", path=log_dir)
        job = log_dir if os.sep in log_dir else os.path.join(".", log_dir)
    info = find_job(job)
    if info.state == JobStatus.CORRUPT:
        if not os.path.isdir(info.job_dir):
            raise JobError(f"job {info.job_id} is corrupt: {info.problem}", exit_code=1)
        sys.stderr.write(f"mslaunch: warning: job {info.job_id} is corrupt: {info.problem}\n")
    return info


def _parse_ranks(text: Optional[str], world_size: Optional[int] = None) -> Optional[List[int]]:
    """``--rank 0,3`` as a list; every rank must be >= 0 (and < the job's world size when known).

    Raises:
        MsLaunchError: not a comma-separated list of ranks, or a rank the job does not have.
    """
    if text is None:
        return None
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MsLaunchError(f"--rank takes rank numbers like 0,3, got {text!r}", field="--rank") from None
    if not ranks:
        raise MsLaunchError(f"--rank takes rank numbers like 0,3, got {text!r}", field="--rank")
    for r in ranks:
        if r < 0 or (world_size is not None and r >= world_size):
            have = f"; the job has ranks 0..{world_size - 1}" if world_size else ""
            raise MsLaunchError(f"no rank {r}{have}", field="--rank")
    return ranks


@logs_app.command("tail", epilog=epilog("watching"))
def logs_tail(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
    rank: Optional[str] = typer.Option(None, "--rank", "-r", help="Only these ranks, e.g. 0,3."),
    lines: int = typer.Option(10, "-n", "--lines", help="Lines of each log to show first."),
    follow: bool = typer.Option(False, "-f", "--follow", help="Follow new lines and new logs while the job runs."),
    grep: Optional[str] = typer.Option(None, "--grep", help="Only lines matching this regular expression."),
) -> None:
    """Show the last lines of every rank's log, prefixed `[rank N]`; with -f, follow them."""
    from launcher.jobs.jobdir import latest_attempt_dir
    from launcher.jobs.joblock import lock_holder
    from launcher.logs.follow import Follower, LogSource, job_log_sources, last_lines, prefix
    from launcher.logs.joblogs import JobLog, job_logs, missing_note, outside_note
    from launcher.planning.job.layout import SUMMARY_FILE

    if lines < 0:
        raise MsLaunchError(f"-n takes a number of lines >= 0, got {lines}", field="--lines")
    info = _job(job, log_dir)
    folder = info.job_dir
    ranks = _parse_ranks(rank, info.ranks)
    try:
        pattern = re.compile(grep) if grep else None
    except re.error as exc:
        raise MsLaunchError(f"bad regular expression: {exc}", field="--grep") from None
    colour = sys.stdout.isatty()
    attempt = latest_attempt_dir(folder)

    def emit(src, line: str) -> None:
        if pattern is None or pattern.search(line):
            sys.stdout.write(prefix(src, colour) + line + "\n")

    offsets = {}
    outside: List[JobLog] = []
    present, missing = job_logs(attempt, ranks, outside=outside)
    skipped = outside_note(outside, folder)
    if skipped is not None:
        sys.stderr.write(f"mslaunch: {skipped}\n")
    for log in present:
        src = LogSource(log.label, log.path, log.rank)
        text, end = last_lines(src.path, lines)
        for line in text:
            emit(src, line)
        offsets[src.path] = end
    sys.stdout.flush()
    note = missing_note(missing)
    if note is not None:
        sys.stderr.write(f"mslaunch: {note}\n")
    if not follow:
        return
    follower = Follower(lambda: job_log_sources(latest_attempt_dir(folder), ranks), emit, from_start=True)
    follower.seek(offsets)  # continue after what was shown
    queued = _slurm_queued(info.slurm_job_id)
    checked = 0.0
    try:
        while True:
            emitted = follower.poll()
            sys.stdout.flush()  # once per sweep, not per line (1,000 ranks' lines)
            if time.monotonic() - checked >= 1.0 or not emitted:
                checked = time.monotonic()
                if queued is not None:  # a Slurm job (mslaunch sbatch): until it left the queue (requeues included)
                    ended = not queued() and lock_holder(folder) is None
                else:  # the job ended (summary written) or nobody runs it any more (lost, corrupt, finished)
                    ended = os.path.lexists(os.path.join(folder, SUMMARY_FILE)) or lock_holder(folder) is None
                if ended:
                    follower.poll()
                    follower.flush()
                    sys.stdout.flush()
                    return
            time.sleep(follower.next_wait(emitted))
    except KeyboardInterrupt:
        return


@logs_app.command("ls")
def logs_ls(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
) -> None:
    """List a job's log files with their sizes."""
    from launcher.jobs.jobdir import latest_attempt_dir
    from launcher.logs.joblogs import JobLog, job_logs, outside_note

    folder = _job(job, log_dir).job_dir
    outside: List[JobLog] = []
    present, missing = job_logs(latest_attempt_dir(folder), outside=outside)
    skipped = outside_note(outside, folder)
    if skipped is not None:
        sys.stderr.write(f"mslaunch: {skipped}\n")
    gone = {log.path for log in missing}
    for log in sorted(present + missing, key=lambda log: (log.rank is None, log.rank or 0)):
        try:
            size = str(os.path.getsize(log.path))
        except OSError:
            size = "-"
        note = "  (no log yet)" if log.path in gone else ""
        sys.stdout.write(f"{log.label:<12} {size:>10}  {log.path}{note}\n")


def _age(started: Optional[float]) -> str:
    if not started:
        return "-"
    secs = max(0, int(time.time() - started))
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def ps_cmd(
    all_jobs: bool = typer.Option(
        False, "--all", "-a", help="Also finished jobs (default: running ones and the last 10)."
    ),
) -> None:
    """List jobs: id, state, ranks, age, log dir."""
    from rich.markup import escape
    from rich.table import Table

    from launcher.cli.render import make_console
    from launcher.jobs.jobdir import list_jobs

    jobs = list_jobs()
    if not all_jobs:
        running = [j for j in jobs if j.state == JobStatus.RUNNING]
        rest = [j for j in jobs if j.state != JobStatus.RUNNING][:10]
        jobs = running + rest
    table = Table()
    for col in ("job", "state", "ranks", "age", "log dir"):
        table.add_column(col, overflow="fold")
    for j in jobs:
        state = j.state if j.problem is None else f"{j.state}: {j.problem}"
        table.add_row(
            escape(j.job_id),
            escape(state),
            "-" if j.ranks is None else str(j.ranks),
            _age(j.started),
            escape(j.job_dir),
        )
    make_console().print(table)


def status_cmd(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json (or the live state) as JSON."),
) -> None:
    """Show a job's state; exit 0 if it succeeded or is running, 1 otherwise."""
    from launcher.jobs.jobdir import find_job
    from launcher.logs.goodput import goodput_line
    from launcher.logs.longjob import process_lines, process_table, running_stragglers, straggler_lines
    from launcher.logs.metricsfile import load_goodput, load_progress, read_events

    info = find_job(job)
    progress = load_progress(info.job_dir)
    goodput = load_goodput(info.job_dir, info.summary if info.problem is None else None)
    if as_json:
        if info.summary is not None and info.problem is None:
            data = info.summary
        else:
            data = {"job_id": info.job_id, "job_dir": info.job_dir, "status": info.state, "pid": info.pid}
            if info.problem is not None:
                data["problem"] = info.problem
        if info.summary is None:  # running (or ended without a summary): its processes from events.jsonl
            now = read_events(info.job_dir)
            data = dict(data, processes=process_table(now), stragglers=running_stragglers(now))
        data = dict(
            data,
            progress=[
                {
                    "rank": r,
                    "step": st.global_step if st.global_step is not None else st.step,
                    "loss": None if st.loss is None or st.loss != st.loss else st.loss,
                    "epoch": st.epoch,
                }
                for r, st in sorted(progress.ranks.items())
            ],
            goodput=goodput.to_json(),
        )
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(f"job {info.job_id}: {info.state}\n  log dir: {info.job_dir}\n")
        if info.problem is not None:
            sys.stdout.write(f"  problem: {info.problem}\n")
        if info.ranks is not None:
            sys.stdout.write(f"  ranks: {info.ranks}\n")
        if info.summary is None:
            now = read_events(info.job_dir)
            for line in process_lines(process_table(now)) + straggler_lines(running_stragglers(now)):
                sys.stdout.write(f"  {line}\n")
        if info.slurm_job_id is not None:
            from launcher.execution.slurm.submit import job_state

            sys.stdout.write(
                f"  slurm job: {info.slurm_job_id} ({job_state(info.slurm_job_id) or 'not in the queue'})\n"
            )
        for r, st in sorted(progress.ranks.items()):
            step = st.global_step if st.global_step is not None else st.step
            loss = "-" if st.loss is None else ("NaN/Inf" if st.loss != st.loss else f"{st.loss:.6g}")
            sys.stdout.write(f"  rank {r}: step {'-' if step is None else step}, loss {loss}\n")
        sys.stdout.write(f"  {goodput_line(goodput)}\n")
        if info.summary:
            sys.stdout.write(f"  exit code: {info.summary.get('exit_code')}\n")
            cause = info.summary.get("root_cause")
            if isinstance(cause, dict) and cause:
                from launcher.logs.causes import Cause, console_lines

                sys.stdout.write(
                    f"  root cause: {cause.get('name', '?')} on {cause.get('host', '?')}: {cause.get('reason', '?')} "
                    f"(log {cause.get('log', '?')})\n"
                )
                judged = Cause.from_json(cause.get("cause"))
                if judged is not None:
                    for line in console_lines(judged):
                        sys.stdout.write(f"  {line}\n")
            from launcher.logs.longjob import summary_notes

            for line in summary_notes(info.summary):
                sys.stdout.write(f"  {line}\n")
        elif info.plan:  # still running: the hosts left out so far (plan.json of the current attempt)
            from launcher.logs.longjob import excluded_lines

            for line in excluded_lines(info.plan):
                sys.stdout.write(f"  {line}\n")
    raise typer.Exit(0 if info.state in (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.SUBMITTED) else 1)


def stop_cmd(
    job: str = typer.Argument(..., help="Job id (or prefix, or job dir)."),
    wait: float = typer.Option(30.0, "--wait", help="Seconds to wait for the job to end."),
) -> None:
    """Stop a running job: its supervisor tears it down as after a failure (SIGTERM, grace, SIGKILL)."""
    from launcher.jobs.jobdir import find_job
    from launcher.jobs.joblock import holder_is_the_job, lock_holder

    if wait < 0:
        raise MsLaunchError(f"--wait must be >= 0, got {wait:g}", field="--wait")
    info = find_job(job)
    if info.slurm_job_id is not None and _stop_slurm_job(info, wait):
        return
    pid = info.running_pid  # the holder of the job dir's lock: the supervisor, never a reused pid
    if pid is None:
        why = f"{info.state}: {info.problem}" if info.problem else info.state
        raise JobError(f"job {info.job_id} is not running (state: {why})", exit_code=1)
    # only the job's own mslaunch is signalled, never whatever else holds the lock (holder_is_the_job)
    deadline = time.monotonic() + wait
    while True:
        ours, why = holder_is_the_job(info.job_dir, pid)
        if ours or lock_holder(info.job_dir) != pid:
            break
        if ours is False or time.monotonic() >= deadline:
            raise JobError(f"job {info.job_id}: {why}; not signalled", exit_code=1)
        time.sleep(0.05)  # starting: job.json follows the lock at once
    if ours:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    while lock_holder(info.job_dir) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if lock_holder(info.job_dir) == pid:
        raise JobError(f"job {info.job_id} (pid {pid}) did not stop within {wait:g} s", exit_code=1)
    sys.stdout.write(f"stopped job {info.job_id}\n")


def _stop_slurm_job(info: "JobInfo", wait: float) -> bool:
    """``stop`` of a job that runs in a Slurm allocation: ``scancel`` its Slurm job (its mslaunch
    gets SIGTERM and tears the ranks down), then wait until it left the queue.  False when the
    Slurm job is no longer queued (then the job is stopped like any other)."""
    from launcher.execution.slurm.submit import cancel, job_state

    sid = info.slurm_job_id
    if sid is None or job_state(sid) is None:
        return False
    cancel(sid)
    deadline = time.monotonic() + wait
    while job_state(sid) is not None:
        if time.monotonic() >= deadline:
            raise JobError(
                f"job {info.job_id} (Slurm job {sid}) did not leave the queue within {wait:g} s", exit_code=1
            )
        time.sleep(0.2)
    sys.stdout.write(f"stopped job {info.job_id} (scancel {info.slurm_job_id})\n")
    return True


def _slurm_queued(slurm_job_id: Optional[str]) -> "Optional[Callable[[], bool]]":
    """For a Slurm job: a check "still in Slurm's queue" asking squeue at most every 2 s; else None."""
    if slurm_job_id is None:
        return None
    from launcher.execution.slurm.submit import job_state

    last = [0.0, True]

    def queued() -> bool:
        if time.monotonic() - float(last[0]) >= 2.0:
            last[0], last[1] = time.monotonic(), job_state(slurm_job_id) is not None
        return bool(last[1])

    return queued
