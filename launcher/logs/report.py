"""``mslaunch report``: a self-contained HTML page (plus PNGs) about one job.

Output folder (``-o DIR``, default ``<job dir>/report/``)::

    report.html      the page; the plots are embedded as data: URIs, so the file alone is enough
    loss.png         loss vs global step, one line per rank
    step_time.png    step time vs global step per rank (the straggler view), with the median
    throughput.png   samples/s over time: each rank and the job's total
    timeline.png     each process from start to end (ok / failed / stopped; earlier attempts too),
                     job start and end, the failure, the teardown and restarts (from events.jsonl)

The folder is created 0700 and every file in it 0600, whatever the umask (the page shows the job's
plan and log lines, which may hold values of the environment).

Plots are drawn with matplotlib (the ``report`` extra) on its non-interactive Agg backend.
Reads ``plan.json``, ``summary.json``, ``events.jsonl`` and ``metrics.jsonl`` (or the logs when it is missing).
"""

from __future__ import annotations

import base64
import html
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import MsLaunchError
from launcher.logs.causes import Cause
from launcher.logs.joblogs import JobLog, inside, job_logs
from launcher.logs.metricsfile import EVENTS_FILE, METRICS_FILE, LogMetrics, read_events, read_records
from launcher.logs.progress import Progress
from launcher.planning.job import layout
from launcher.planning.job.kinds import EventKind
from launcher.planning.text.private import makedirs_private, open_private

#: The events the report's timeline lists (``started`` events are drawn as bars instead).
_TIMELINE_KINDS = (
    EventKind.PREFLIGHT,
    EventKind.JOB_START,
    EventKind.FAILURE,
    EventKind.TEARDOWN,
    EventKind.RESTART,
    EventKind.TIMEOUT,
    EventKind.INTERRUPTED,
    EventKind.CLUSTER_STOP,
    EventKind.HOST_EXCLUDED,
    EventKind.STRAGGLER,
    EventKind.JOB_END,
)

__all__ = ["write_report", "PLOTS"]

PLOTS = ("loss", "step_time", "throughput", "timeline")


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


def _series(records: List[Dict[str, Any]], key: str) -> Dict[int, Tuple[List[float], List[float]]]:
    """rank -> (global steps, values) of step records of the newest attempt that carry ``key``."""
    newest: Dict[int, int] = {}
    for r in records:
        if isinstance(r.get("rank"), int):
            newest[r["rank"]] = max(newest.get(r["rank"], 0), int(r.get("attempt", 0) or 0))
    out: Dict[int, Tuple[List[float], List[float]]] = {}
    for r in records:
        rank = r.get("rank")
        if not isinstance(rank, int) or r.get("kind") != "step" or int(r.get("attempt", 0) or 0) != newest.get(rank):
            continue
        if isinstance(r.get("global_step"), int) and isinstance(r.get(key), (int, float)):
            xs, ys = out.setdefault(rank, ([], []))
            xs.append(r["global_step"])
            ys.append(float(r[key]))
    return dict(sorted(out.items()))


def _plot_loss(plt: Any, records: List[Dict[str, Any]], path: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    for rank, (xs, ys) in _series(records, "loss").items():
        ax.plot(xs, ys, marker=".", linewidth=1.2, label=f"rank {rank}")
    for r in records:
        if r.get("event") == "nonfinite_loss" and isinstance(r.get("global_step"), int):
            ax.axvline(r["global_step"], color="red", linestyle=":", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("loss per rank")
    _finish(ax, fig, path)


def _plot_step_time(plt: Any, records: List[Dict[str, Any]], path: str) -> None:
    import statistics

    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    last: List[float] = []
    for rank, (xs, ys) in _series(records, "step_time_ms").items():
        ax.plot(xs, ys, marker=".", linewidth=1.2, label=f"rank {rank}")
        last.append(ys[-1])
    if last:
        ax.axhline(statistics.median(last), color="grey", linestyle="--", linewidth=1, label="median (last)")
    ax.set_xlabel("step")
    ax.set_ylabel("ms / step")
    ax.set_title("step time per rank (stragglers stand out)")
    _finish(ax, fig, path)


def _plot_throughput(plt: Any, records: List[Dict[str, Any]], t0: float, path: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    per_rank: Dict[int, Tuple[List[float], List[float]]] = {}
    latest: Dict[int, float] = {}
    total_x: List[float] = []
    total_y: List[float] = []
    for r in sorted((r for r in records if isinstance(r.get("time"), (int, float))), key=lambda r: r["time"]):
        rank = r.get("rank")
        if not isinstance(rank, int) or not isinstance(r.get("samples_per_s"), (int, float)):
            continue
        t = float(r["time"]) - t0
        xs, ys = per_rank.setdefault(rank, ([], []))
        xs.append(t)
        ys.append(float(r["samples_per_s"]))
        latest[rank] = float(r["samples_per_s"])
        total_x.append(t)
        total_y.append(sum(latest.values()))
    for rank, (xs, ys) in sorted(per_rank.items()):
        ax.plot(xs, ys, linewidth=1.2, label=f"rank {rank}")
    if total_x:
        ax.plot(total_x, total_y, color="black", linewidth=2, label="total")
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("samples / s")
    ax.set_title("throughput")
    _finish(ax, fig, path)


def _plot_timeline(
    plt: Any, summary: Optional[Dict[str, Any]], events: List[Dict[str, Any]], t0: float, path: str
) -> None:
    procs = (summary or {}).get("processes", [])
    end = float((summary or {}).get("ended") or time.time())
    restarts = sorted(
        float(e["time"])
        for e in events
        if e.get("kind") == EventKind.RESTART and isinstance(e.get("time"), (int, float))
    )
    rows: Dict[str, int] = {}
    for p in procs:
        rows.setdefault(str(p.get("name")), len(rows))
    # Processes of earlier attempts: from their "started" events to the restart that ended them.
    earlier: List[Tuple[str, float, float]] = []
    for e in events:
        if e.get("kind") != EventKind.STARTED or not isinstance(e.get("time"), (int, float)):
            continue
        later = [t for t in restarts if t >= float(e["time"])]
        if later:
            earlier.append((str(e.get("name")), float(e["time"]), later[0]))
            rows.setdefault(str(e.get("name")), len(rows))
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.4 * max(2, len(rows))), dpi=100)
    for name, start, stop in earlier:
        ax.barh(rows[name], max(stop - start, 0.01), left=start - t0, color="#e8a0a0", height=0.6)
    for p in procs:
        start = float(p.get("started") or t0) - t0
        stop = float(p.get("ended") or end) - t0
        if p.get("exit_code") == 0 and not p.get("signal"):
            colour = "tab:green"
        elif p.get("torn_down"):
            colour = "tab:grey"
        else:
            colour = "tab:red"
        ax.barh(rows[str(p.get("name"))], max(stop - start, 0.01), left=start, color=colour, height=0.6)
    names = sorted(rows, key=lambda n: rows[n])
    ax.set_yticks(range(len(names)))
    hosts = {str(p.get("name")): p.get("host") for p in procs}
    ax.set_yticklabels([f"{n} @ {hosts.get(n, '?')}" for n in names])
    ax.axvline(0, color="black", linewidth=1)
    ax.axvline(end - t0, color="black", linewidth=1)
    styles = {
        "failure": ("red", "--"),
        "teardown": ("grey", ":"),
        "restart": ("tab:orange", "-."),
        "timeout": ("tab:purple", "--"),
        "interrupted": ("tab:purple", ":"),
        "cluster_stop": ("tab:purple", ":"),
    }
    attempt = 1
    for e in events:
        kind = e.get("kind")
        if kind not in styles or not isinstance(e.get("time"), (int, float)):
            continue
        colour, style = styles[kind]
        label = {"failure": f"failure: {e.get('name')}", "restart": f"restart (attempt {attempt + 1})"}.get(
            str(kind), str(kind)
        )
        attempt += kind == EventKind.RESTART
        ax.axvline(float(e["time"]) - t0, color=colour, linestyle=style, linewidth=1.5, label=label)
    if not events:  # a job from before events.jsonl: the summary's root cause
        cause = (summary or {}).get("root_cause")
        if cause and cause.get("time"):
            ax.axvline(
                float(cause["time"]) - t0,
                color="red",
                linestyle="--",
                linewidth=1.5,
                label=f"failure: {cause.get('name')}",
            )
    ax.set_xlabel("seconds since the job started")
    ax.set_title("timeline (green ok, red failed, grey stopped by mslaunch, pink earlier attempts)", fontsize="medium")
    _finish(ax, fig, path)


def _finish(ax: Any, fig: Any, path: str, legend: bool = True) -> None:
    ax.grid(True, alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    with os.fdopen(open_private(path, append=False), "wb") as fh:  # 0600 as every file of the job dir
        fig.savefig(fh, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)


def _cause(summary: Optional[Dict[str, Any]]) -> Optional[Cause]:
    """The cause inside a summary's ``root_cause``, or None."""
    cause = (summary or {}).get("root_cause")
    return Cause.from_json(cause.get("cause")) if isinstance(cause, dict) else None


def _summary_rows(plan: Dict[str, Any], summary: Optional[Dict[str, Any]], job_dir: str) -> List[Tuple[str, str]]:
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
    plt = _pyplot()
    if plan is None:
        raise MsLaunchError("not a job directory (no plan.json)", path=job_dir)
    records = _records(job_dir)
    events = read_events(job_dir) if inside(os.path.join(job_dir, EVENTS_FILE), job_dir) else []
    try:
        makedirs_private(out_dir)
    except OSError as exc:
        raise MsLaunchError(f"cannot create the report folder: {exc.strerror}", path=out_dir) from None
    times = [float(r["time"]) for r in records if isinstance(r.get("time"), (int, float))]
    t0 = float((summary or {}).get("started") or (min(times) if times else time.time()))
    paths = {name: os.path.join(out_dir, f"{name}.png") for name in PLOTS}
    try:
        _plot_loss(plt, records, paths["loss"])
        _plot_step_time(plt, records, paths["step_time"])
        _plot_throughput(plt, records, t0, paths["throughput"])
        _plot_timeline(plt, summary, events, t0, paths["timeline"])
    except OSError as exc:
        raise MsLaunchError(f"cannot write the plots: {exc.strerror}", path=out_dir) from None

    parts = _html_summary(job_dir, plan, summary)
    parts += _html_events(records, events, t0)
    parts += _html_ranks(plan, records)
    parts += _html_figures(paths)
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


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed).

    Raises:
        MsLaunchError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MsLaunchError(
            "mslaunch report needs matplotlib: pip install 'mslaunch[report]' (or pip install matplotlib)"
        ) from None
    return plt


def _html_summary(job_dir: str, plan: Dict[str, Any], summary: Optional[Dict[str, Any]]) -> List[str]:
    """The page's head, title, summary table and (for a failed job) its root cause."""
    esc = html.escape
    title = f"mslaunch report: job {esc(str(plan.get('job_id', '')))}"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta '
        f'charset="utf-8"><title>{title}</title>\n<style>{_CSS}</style></head><body>',
        f"<h1>{title}</h1>",
        '<h2>Summary</h2><table class="kv" id="summary">',
    ]
    for k, v in _summary_rows(plan, summary, job_dir):
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
    """The timeline of the job's events (times relative to ``t0``) and the non-finite losses."""
    esc = html.escape
    parts: List[str] = []
    nonfinite = [r for r in records if r.get("event")]
    timeline = [e for e in events if e.get("kind") in _TIMELINE_KINDS]
    if timeline:
        parts.append('<h2>Timeline</h2><ul id="timeline">')
        for e in timeline:
            at = max(0.0, float(e.get("time", t0)) - t0)
            detail = {k: v for k, v in e.items() if k not in ("time", "kind", "cause")}
            parts.append(f"<li>+{at:.2f} s: <b>{esc(str(e.get('kind')))}</b> {esc(json.dumps(detail))}</li>")
        parts.append("</ul>")
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


def _html_figures(paths: Dict[str, str]) -> List[str]:
    """The plots embedded as base64 PNGs, each linking to its file."""
    esc = html.escape
    captions = {
        "loss": "Loss vs step",
        "step_time": "Step time per rank",
        "throughput": "Throughput over time",
        "timeline": "Timeline",
    }
    parts: List[str] = []
    for name in PLOTS:
        with open(paths[name], "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        parts.append(
            f'<figure><img id="plot-{name}" class="plot" alt="{esc(captions[name])}" '
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
"""
