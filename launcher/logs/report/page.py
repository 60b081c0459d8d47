"""``mslaunch report``: a self-contained HTML page (plus PNGs) about one job, every attempt included.

Output folder (``-o DIR``, default ``<job dir>/report/``)::

    report.html      the page; the plots are embedded as data: URIs, so the file alone is enough
    loss.png         loss vs global step per rank, every attempt (charts.py: restarts marked,
                     steps trained again dashed)
    step_time.png    step time vs global step per rank (the straggler view), with the median
    throughput.png   samples/s over time: each rank and the job's total, a line per attempt
    goodput.png      where the time went: productive and each kind of badput (launcher.logs.goodput)
    timeline.png     each process from start to end (ok / failed / stopped; earlier attempts too),
                     job start and end, the failure, the teardown and restarts (from events.jsonl)

The page: the summary (with the goodput line), the root cause, the timeline in words
(story.py: one sentence per event), the per-rank table and the plots.

The folder is created 0700 and every file in it 0600, whatever the umask (the page shows the job's
plan and log lines, which may hold values of the environment).

Reads ``plan.json``, ``summary.json``, ``events.jsonl`` and ``metrics.jsonl`` (or the logs when it is missing).
"""

from __future__ import annotations

import base64
import html
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import MsLaunchError
from launcher.logs.causes import Cause
from launcher.logs.goodput import Goodput, account, goodput_line
from launcher.logs.joblogs import JobLog, inside, job_logs
from launcher.logs.metricsfile import EVENTS_FILE, METRICS_FILE, LogMetrics, read_events, read_records
from launcher.logs.progress import Progress
from launcher.logs.report import charts
from launcher.logs.report.story import story
from launcher.planning.job import layout
from launcher.planning.text.private import makedirs_private, open_private

__all__ = ["PLOTS", "outside_files", "write_report"]

PLOTS = ("loss", "step_time", "throughput", "goodput", "timeline")


def _records(job_dir: str) -> List[Dict[str, Any]]:
    path = os.path.join(job_dir, METRICS_FILE)
    if os.path.exists(path) and inside(path, job_dir):  # never a symlink out of the job dir
        return read_records(path)
    return LogMetrics(job_dir).poll(final=True)  # the rank logs inside the job dir (joblogs.job_logs)


def outside_files(job_dir: str) -> List[str]:
    """The files a report of ``job_dir`` leaves out for lying outside it (symlinks resolved): the
    metrics and events files, and logs ``plan.json`` names (every attempt), as ``label (path)``."""
    out = [
        name
        for name in (METRICS_FILE, EVENTS_FILE)
        if os.path.lexists(os.path.join(job_dir, name)) and not inside(os.path.join(job_dir, name), job_dir)
    ]
    k = 0
    folder = job_dir
    while k == 0 or os.path.isdir(folder):
        skipped: List[JobLog] = []
        job_logs(folder, scheduler=False, outside=skipped)
        out += [f"{log.label} ({log.path})" for log in skipped]
        k += 1
        folder = layout.attempt_dir(job_dir, k)
    return out


def _cause(summary: Optional[Dict[str, Any]]) -> Optional[Cause]:
    """The cause inside a summary's ``root_cause``, or None."""
    cause = (summary or {}).get("root_cause")
    return Cause.from_json(cause.get("cause")) if isinstance(cause, dict) else None


def _summary_rows(
    plan: Dict[str, Any], summary: Optional[Dict[str, Any]], job_dir: str, goodput: Optional[Goodput] = None
) -> List[Tuple[str, str]]:
    rows = [("job", str((summary or plan).get("job_id") or os.path.basename(job_dir))), ("job dir", job_dir)]
    if summary:
        rows += [
            ("status", str(summary.get("status"))),
            ("exit code", str(summary.get("exit_code"))),
            ("duration", f"{summary.get('duration', 0):.1f} s"),
            ("attempts", str(summary.get("attempts"))),
        ]
        if summary.get("started"):
            rows.append(("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(summary["started"])))))
    else:
        rows.append(("status", "running (no summary.json yet)"))
    rows += [
        ("ranks", str(plan.get("world_size", "?"))),
        ("launcher", str(plan.get("launcher", "?"))),
        ("method", str(plan.get("method", "?"))),
        ("hosts", ", ".join(plan.get("hosts", []))),
    ]
    if goodput is not None:
        rows.append(("goodput", goodput_line(goodput)))
    if summary and summary.get("message"):
        rows.append(("message", str(summary["message"])))
    judged = _cause(summary)
    if judged is not None:
        rows += [("cause", f"{judged.kind}: {judged.evidence}"), ("hint", judged.hint)]
    from launcher.logs.longjob import attempt_lines, excluded_lines, hang_lines

    rows += [("excluded hosts" if i == 0 else "", line) for i, line in enumerate(excluded_lines(summary or plan))]
    if summary:
        rows += [("hang" if i == 0 else "", line) for i, line in enumerate(hang_lines(summary.get("hang")))]
        rows += [("attempts" if i == 0 else "", line) for i, line in enumerate(attempt_lines(summary))]
    return rows


def write_report(job_dir: str, out_dir: str, plan: Optional[Dict[str, Any]], summary: Optional[Dict[str, Any]]) -> str:
    """Write ``report.html`` and the PNGs (each 0600) into ``out_dir`` (created 0700); returns the HTML's path.

    ``plan`` and ``summary`` are the job's validated ``plan.json`` / ``summary.json`` (the caller
    reads them with the job-file reader); ``summary`` is None while the job runs.

    Raises:
        MsLaunchError: matplotlib is missing, the job dir has no ``plan.json``, or ``out_dir``
            cannot be written.
    """
    plt = charts.pyplot()
    if plan is None:
        raise MsLaunchError("not a job directory (no plan.json)", path=job_dir)
    records = _records(job_dir)
    events = read_events(job_dir) if inside(os.path.join(job_dir, EVENTS_FILE), job_dir) else []
    # The same accounting as summary.json's (its job_end is the summary's end): they agree.
    ended = (summary or {}).get("ended")  # a job from before job_end events ended then
    goodput = account(events, records, now=float(ended) if isinstance(ended, (int, float)) else None)
    try:
        makedirs_private(out_dir)
    except OSError as exc:
        raise MsLaunchError(f"cannot create the report folder: {exc.strerror}", path=out_dir) from None
    times = [float(r["time"]) for r in records if isinstance(r.get("time"), (int, float))]
    t0 = float((summary or {}).get("started") or (min(times) if times else time.time()))
    if events:  # the job's start as its events say (the pre-flight check, job_start): as the goodput counts
        t0 = min(t0, goodput.started)
    paths = {name: os.path.join(out_dir, f"{name}.png") for name in PLOTS}
    try:
        facts = {
            "loss": charts.plot_loss(plt, records, paths["loss"]),
            "step_time": charts.plot_step_time(plt, records, paths["step_time"]),
            "throughput": charts.plot_throughput(plt, records, events, t0, goodput, paths["throughput"]),
            "goodput": charts.plot_goodput(plt, goodput, paths["goodput"]),
            "timeline": charts.plot_timeline(plt, summary, events, t0, paths["timeline"]),
        }
    except OSError as exc:
        raise MsLaunchError(f"cannot write the plots: {exc.strerror}", path=out_dir) from None

    parts = _html_summary(job_dir, plan, summary, goodput)
    parts += _html_events(records, events, t0)
    parts += _html_ranks(plan, records)
    parts += _html_figures(paths, facts)
    parts.append(
        f'<p class="foot">metrics: {len(records)} records from '
        f"{html.escape(os.path.join(job_dir, METRICS_FILE))}</p></body></html>\n"
    )
    html_path = os.path.join(out_dir, "report.html")
    try:
        with os.fdopen(open_private(html_path, append=False), "w", encoding="utf-8") as fh:
            fh.write("\n".join(parts))
    except OSError as exc:
        raise MsLaunchError(f"cannot write: {exc.strerror}", path=html_path) from None
    return html_path


def _html_summary(
    job_dir: str, plan: Dict[str, Any], summary: Optional[Dict[str, Any]], goodput: Optional[Goodput] = None
) -> List[str]:
    """The page's head, title, summary table and (for a failed job) its root cause."""
    esc = html.escape
    title = f"mslaunch report: job {esc(str(plan.get('job_id', '')))}"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta '
        f'charset="utf-8"><title>{title}</title>\n<style>{_CSS}</style></head><body>',
        f"<h1>{title}</h1>",
        '<h2>Summary</h2><table class="kv" id="summary">',
    ]
    for k, v in _summary_rows(plan, summary, job_dir, goodput):
        parts.append(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>")
    parts.append("</table>")
    cause = (summary or {}).get("root_cause")
    if cause:
        parts.append(
            f'<h2>Root cause</h2><p id="root-cause"><b>{esc(str(cause.get("name")))}</b> on '
            f"{esc(str(cause.get('host')))}: "
            f"{esc(str(cause.get('reason')))} (log <code>{esc(str(cause.get('log')))}</code>)</p>"
        )
        judged = _cause(summary)
        if judged is not None:
            parts.append(
                f'<p id="cause">cause: <b>{esc(judged.kind)}</b>: {esc(judged.evidence)}<br>hint: '
                f"{esc(judged.hint)}</p>"
            )
        parts.append("<pre>" + esc("\n".join(cause.get("tail") or [])) + "</pre>")
    return parts


def _html_events(records: List[Dict[str, Any]], events: List[Dict[str, Any]], t0: float) -> List[str]:
    """The job's timeline in words (story.py; times relative to ``t0``) and the non-finite losses."""
    esc = html.escape
    parts: List[str] = []
    nonfinite = [r for r in records if r.get("event")]
    timeline = story(events, records)
    if timeline:
        parts.append('<h2>Timeline</h2><ol id="timeline">')
        for line in timeline:
            at = line.time - t0
            parts.append(
                f'<li class="ev-{esc(line.kind)}"><span class="at">{"+" if at >= 0 else "-"}{abs(at):.2f} s</span> '
                f"{esc(line.text)}</li>"
            )
        parts.append("</ol>")
    if nonfinite:
        parts.append('<h2>Events</h2><ul id="events">')
        for r in nonfinite:
            parts.append(
                f"<li>rank {r.get('rank')}: loss became {esc(str(r.get('loss_text')))} at epoch {r.get('epoch')} step "
                f"{r.get('step')}</li>"
            )
        parts.append("</ul>")
    return parts


def _html_ranks(plan: Dict[str, Any], records: List[Dict[str, Any]]) -> List[str]:
    """The per-rank table: host, steps, last loss, step time, throughput, eval metrics."""
    prog = Progress()
    prog.extend(records)
    parts = [
        '<h2>Ranks</h2><table id="ranks"><tr><th>rank</th><th>host</th><th>steps</th><th>last '
        "loss</th><th>ms/step</th><th>samples/s</th><th>eval</th></tr>"
    ]
    hosts = {r.get("rank"): r.get("host") for r in plan.get("ranks", [])}
    for rank in range(int(plan.get("world_size") or 0)):
        st = prog.ranks.get(rank)
        cells = [str(rank), str(hosts.get(rank, "?"))]
        if st is None:
            cells += ["-"] * 5
        else:
            ev = ", ".join(f"{k} {v:.4g}" for k, v in st.eval.items()) or "-"
            cells += [
                str(st.global_step if st.global_step is not None else "-"),
                _num(st.loss, 4),
                _num(st.step_time_ms, 0),
                _num(st.samples_per_s, 1),
                ev,
            ]
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    return parts


def _html_figures(paths: Dict[str, str], facts: Dict[str, Dict[str, int]]) -> List[str]:
    """The plots embedded as base64 PNGs, each linking to its file, with what each drew
    (``data-lines``: lines or bars, ``data-restarts``: restart markers)."""
    esc = html.escape
    captions = {
        "loss": "Loss vs step",
        "step_time": "Step time per rank",
        "throughput": "Throughput over time",
        "goodput": "Where the time went",
        "timeline": "Timeline",
    }
    parts: List[str] = []
    for name in PLOTS:
        with open(paths[name], "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        parts.append(
            f'<figure><img id="plot-{name}" class="plot" alt="{esc(captions[name])}" '
            f'data-lines="{facts[name]["lines"]}" data-restarts="{facts[name]["restarts"]}" '
            f'src="data:image/png;base64,{data}">'
            f'<figcaption>{esc(captions[name])} (<a href="{name}.png">{name}.png</a>)</figcaption></figure>'
        )
    return parts


def _num(value: Optional[float], digits: int) -> str:
    if value is None:
        return "-"
    if value != value:
        return "NaN"
    return f"{value:.{digits}f}"


_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 60em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
table.kv th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 85%; }
figure { margin: 1em 0; } img.plot { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 90%; color: #555; } .foot { color: #777; font-size: 85%; }
ol#timeline { list-style: none; padding-left: 0; } ol#timeline li { margin: 0.15em 0; }
ol#timeline .at { display: inline-block; min-width: 6em; color: #555; font-variant-numeric: tabular-nums; }
ol#timeline li.ev-failure, ol#timeline li.ev-hung { color: #b00; }
"""
