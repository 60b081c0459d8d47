"""``mslaunch top``: a live per-rank view of a job; ``mslaunch report``: an HTML report.

``top`` reads the job dir only: ``plan.json`` once, then at each refresh the new lines of
``metrics.jsonl`` (written by the supervising mslaunch, see :mod:`launcher.logs.metricsfile`),
a stat of each rank's log (its last output), and ``summary.json`` once the job ended.  So it
works for every launcher, attached or detached, from any shell on the launching machine.  Jobs
without ``metrics.jsonl`` (ended before it existed) are read from their logs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import typer

from launcher.cli.docs import epilog
from launcher.errors import JobError, MsLaunchError
from launcher.logs.progress import SILENT_AFTER, STRAGGLER_RATIO, Progress, Snapshot, snapshot
from launcher.planning.job.kinds import JobStatus

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def register(app: typer.Typer) -> None:
    app.command("top", epilog=epilog("watching"))(top_cmd)
    app.command("report", epilog=epilog("watching"))(report_cmd)


def _resolve(job: Optional[str], log_dir: Optional[str]) -> str:
    from launcher.jobs.jobdir import find_job

    if log_dir:
        if not os.path.isdir(log_dir):
            raise JobError("no such job directory", path=log_dir)
        return os.path.abspath(log_dir)
    return find_job(job).job_dir


class JobWatch:
    """Incremental view of a job dir: new metric records, log mtimes, state.

    Args:
        job_dir: the job directory.
        straggler_ratio, silent_after: see :func:`launcher.logs.progress.snapshot`.
        clock: the wall clock.
    """

    def __init__(
        self,
        job_dir: str,
        straggler_ratio: float = STRAGGLER_RATIO,
        silent_after: float = SILENT_AFTER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from launcher.jobs import jobdir
        from launcher.logs.metricsfile import METRICS_FILE, JsonlTail, LogMetrics

        self.job_dir = job_dir
        self.straggler_ratio = straggler_ratio
        self.silent_after = silent_after
        self.clock = clock
        self.progress = Progress()
        info = jobdir.job_info(job_dir)
        self.job_id = info.job_id
        self.pid = info.pid
        plan = info.plan or {}
        self.world_size = int(plan.get("world_size") or 0)
        self.hosts: Dict[int, str] = {
            int(r["rank"]): str(r.get("host", "?")) for r in plan.get("ranks", []) if isinstance(r.get("rank"), int)
        }
        metrics_path = os.path.join(job_dir, METRICS_FILE)
        self.summary: Optional[Dict[str, Any]] = info.summary
        if os.path.exists(metrics_path) or info.state == JobStatus.RUNNING:
            tail = JsonlTail(metrics_path)
            self._read: Callable[[], List[Dict[str, Any]]] = tail.read
        else:
            source = LogMetrics(job_dir)
            self._read = lambda: source.poll(final=True)

    def state(self) -> str:
        from launcher.jobs import jobdir

        if self.summary is None:
            try:
                self.summary = jobdir.read_job_file(
                    os.path.join(self.job_dir, jobdir.SUMMARY_FILE), jobdir.SUMMARY_FILE
                )
            except jobdir.CorruptJobFile:
                return JobStatus.CORRUPT
        if self.summary is not None:
            return str(self.summary.get("status", "unknown"))
        return JobStatus.RUNNING if jobdir.pid_alive(self.pid) else JobStatus.LOST

    def notes(self) -> List[str]:
        """The hang, the stragglers and the attempts of an ended job (``summary.json``), as lines;
        while it runs, the ranks named stragglers now (``events.jsonl``)."""
        from launcher.logs.longjob import running_stragglers, straggler_lines, summary_notes
        from launcher.logs.metricsfile import read_events

        if self.summary is None:
            return straggler_lines(running_stragglers(read_events(self.job_dir)))
        return summary_notes(self.summary)

    def poll(self) -> Snapshot:
        """Read what is new; the snapshot of now."""
        from launcher.logs.metricsfile import log_mtimes

        state = self.state()
        self.progress.extend(self._read())
        exits: Dict[int, Dict[str, Any]] = {}
        if self.summary is not None:
            for p in self.summary.get("processes", []):
                if isinstance(p.get("rank"), int):
                    exits[p["rank"]] = p
        world = self.world_size or (max(self.progress.ranks) + 1 if self.progress.ranks else 0)
        return snapshot(
            self.job_id,
            state,
            self.clock(),
            world,
            self.hosts,
            self.progress,
            log_mtimes(self.job_dir),
            exits,
            straggler_ratio=self.straggler_ratio,
            silent_after=self.silent_after,
        )


def _fmt_age(secs: Optional[float]) -> str:
    if secs is None:
        return "-"
    if secs < 60:
        return f"{secs:.0f}s"
    if secs < 3600:
        return f"{secs // 60:.0f}m{secs % 60:02.0f}s"
    return f"{secs // 3600:.0f}h{(secs % 3600) // 60:02.0f}m"


def _fmt_num(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(snap: Snapshot, width: int = 120, notes: Sequence[str] = ()) -> Any:
    """The rich renderable of a snapshot: the per-rank table and totals.

    Per-rank progress bars need ``width`` >= 100 columns; narrower terminals get one bar for
    the whole job (the slowest rank's progress) under the table.
    """
    from rich import box
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    bars = width >= 100
    table = Table(
        title=f"job {snap.job_id}: {snap.state}",
        title_justify="left",
        expand=False,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    cols: List[Tuple[str, "JustifyMethod"]] = [
        ("rank", "right"),
        ("host", "left"),
        ("state", "left"),
        ("step", "right"),
    ]
    cols += [("progress", "left")] if bars else []
    cols += [("loss", "right"), ("ms/step", "right"), ("samples/s", "right"), ("last out", "right")]
    for col, just in cols:
        table.add_column(
            col, justify=just, no_wrap=True, min_width=9 if col in ("host", "state") else len(col), overflow="ellipsis"
        )
    for r in snap.rows:
        style = ""
        state = r.state
        if r.silent:
            style = "bold red"
        elif r.state == "failed" or r.nonfinite_loss:
            style = "bold red"
        elif r.straggler:
            style = "bold yellow"
            state = "straggler" if r.state == "running" else f"{r.state} (slow)"
        step = "-" if r.step is None else (f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step))
        cells: List[Any] = [str(r.rank), r.host, Text(state, style=style), step]
        if bars:
            cells.append(
                ProgressBar(total=r.total_steps, completed=min(r.step, r.total_steps), width=12)
                if r.total_steps and r.step is not None
                else ""
            )
        cells.append(Text("NaN/Inf", style="bold red") if r.nonfinite_loss else _fmt_num(r.loss, 4))
        cells += [_fmt_num(r.step_time_ms, 0), _fmt_num(r.samples_per_s, 1), _fmt_age(r.last_output_age)]
        table.add_row(*cells, style=style or None)
    parts = [f"total {_fmt_num(snap.samples_per_s, 1)} samples/s"]
    times = {r.rank: r.step_time_ms for r in snap.rows if r.step_time_ms}
    if snap.slowest_rank is not None:
        parts.append(f"slowest rank {snap.slowest_rank} ({times.get(snap.slowest_rank, 0):.0f} ms/step)")
    if snap.fastest_rank is not None:
        parts.append(f"fastest rank {snap.fastest_rank} ({times.get(snap.fastest_rank, 0):.0f} ms/step)")
    if snap.eta_s is not None:
        parts.append(f"ETA {_fmt_age(snap.eta_s)}")
    lines: List[Any] = [Text(" · ".join(parts))]
    known = [r for r in snap.rows if r.total_steps and r.step is not None]
    if not bars and known:
        low = min(known, key=lambda r: r.step / r.total_steps)  # type: ignore[operator]  # known: rows with both step and total_steps
        low_step, low_total = int(low.step or 0), int(low.total_steps or 0)  # both set: low is in known
        grid = Table.grid(padding=(0, 1))
        grid.add_row(
            Text(f"progress (rank {low.rank}) {low_step}/{low_total}"),
            ProgressBar(total=low_total, completed=min(low_step, low_total), width=30),
        )
        lines.append(grid)
    if snap.stragglers:
        lines.append(
            Text(
                f"stragglers (step time far above the median): rank {', '.join(map(str, snap.stragglers))}",
                style="yellow",
            )
        )
    if snap.silent:
        lines.append(Text(f"silent (no output for a while): rank {', '.join(map(str, snap.silent))}", style="red"))
    lines += [
        Text(
            note,
            style="red" if note.startswith(("hung", "likely")) else "yellow" if note.startswith("straggler") else "",
        )
        for note in notes
    ]  # hang, attempts (after the end)
    return Group(table, *lines)


def _width(console: Any) -> int:
    return int(getattr(console, "width", 120) or 120)


def live_loop(
    watch: JobWatch, stop: threading.Event, interval: float, console: Any = None, until_end: bool = True
) -> Snapshot:
    """Refresh the view every ``interval`` s until ``stop`` is set (or the job ended); returns the last snapshot.

    Drawn with rich ``Live`` (no auto refresh: one redraw per interval, only the lines that
    changed are rewritten by the terminal), so it neither flickers nor keeps a core busy.
    """
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    snap = watch.poll()
    with Live(
        render(snap, _width(console), watch.notes()),
        console=console,
        auto_refresh=False,
        transient=False,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as live:
        while True:
            if until_end and snap.state != JobStatus.RUNNING:
                break
            if stop.wait(interval):
                snap = watch.poll()
                live.update(render(snap, _width(console), watch.notes()), refresh=True)
                break
            snap = watch.poll()
            live.update(render(snap, _width(console), watch.notes()), refresh=True)
    return snap


def top_cmd(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
    as_json: bool = typer.Option(False, "--json", help="Print one snapshot as JSON and exit."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between refreshes."),
    silent_after: float = typer.Option(
        SILENT_AFTER, "--silent-after", help="A rank with no output for this many seconds is flagged silent."
    ),
    straggler_ratio: float = typer.Option(
        STRAGGLER_RATIO, "--straggler-ratio", help="Step time above this × the median flags a straggler."
    ),
) -> None:
    """Live per-rank view of a job: step, loss, ms/step, samples/s, last output; stragglers and silent ranks flagged.

    Runs until the job ends (or Ctrl-C). Works for local, ssh and mpirun jobs, attached or detached.
    """
    if interval <= 0:
        raise MsLaunchError("--interval must be > 0", field="--interval")
    watch = JobWatch(_resolve(job, log_dir), straggler_ratio=straggler_ratio, silent_after=silent_after)
    if as_json:
        sys.stdout.write(json.dumps(watch.poll().to_json(), indent=2) + "\n")
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a pipe or a file: one table, no redraws
        console.print(render(watch.poll(), console.width, watch.notes()))
        return
    try:
        live_loop(watch, threading.Event(), interval, console=console)
    except KeyboardInterrupt:
        return


def report_cmd(
    job: Optional[str] = typer.Argument(None, help="Job id (or prefix, or job dir); default: the newest job."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", help="The job directory."),
    output: Optional[str] = typer.Option(
        None, "-o", "--output", help="Folder for report.html and the PNGs (default: <job dir>/report)."
    ),
) -> None:
    """Write a self-contained HTML report (plus PNGs): loss, step time and throughput over every attempt,
    goodput, timeline, root cause."""
    from launcher.jobs import jobdir
    from launcher.logs.report.page import outside_files, write_report

    folder = _resolve(job, log_dir)
    skipped = outside_files(folder)
    if skipped:
        shown = ", ".join(skipped[:4]) + (f" and {len(skipped) - 4} more" if len(skipped) > 4 else "")
        sys.stderr.write(
            f"mslaunch: skipped {shown}: outside the job directory {folder} (symlinks resolved); not read\n"
        )
    out = output or os.path.join(folder, "report")
    plan = jobdir.read_job_file(os.path.join(folder, jobdir.PLAN_FILE), jobdir.PLAN_FILE)
    summary = jobdir.read_job_file(os.path.join(folder, jobdir.SUMMARY_FILE), jobdir.SUMMARY_FILE)
    path = write_report(folder, out, plan, summary)
    sys.stdout.write(path + "\n")
