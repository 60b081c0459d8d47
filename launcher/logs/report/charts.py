"""The report's plots, over every attempt of a job (matplotlib on its Agg backend).

* ``loss.png`` and ``step_time.png``: per rank against the global step; each attempt is its own
  line (no line across a restart); steps an attempt trains again (at or below the best step an
  earlier attempt reached) are dashed and faint, over a pink band; each restart is a magenta
  vertical line at the step it resumed after, labelled;
* ``throughput.png``: samples/s over time, each rank and the job's total, a line per attempt; each
  ``restart`` event a magenta vertical line, the time spent training steps again pink;
* ``goodput.png``: the badput as a picture: the job's time as a horizontal bar coloured by kind
  (in time order), and below it the totals stacked (productive first);
* ``timeline.png``: each process from start to end, earlier attempts included.

Each ``plot_*`` returns what it drew (``{"lines": N, "restarts": M}``), which the page puts on the
image (``data-lines``, ``data-restarts``) so a test can check the picture's parts.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import MsLaunchError
from launcher.logs.goodput import KINDS, LABELS, PRODUCTIVE, Goodput
from launcher.planning.job.kinds import EventKind
from launcher.planning.text.private import open_private

__all__ = [
    "COLOURS",
    "RESTART_COLOUR",
    "Piece",
    "pieces",
    "plot_goodput",
    "plot_loss",
    "plot_step_time",
    "plot_throughput",
    "plot_timeline",
    "pyplot",
]

#: The colour of restart markers (nothing else in the charts uses it).
RESTART_COLOUR = "#cc00cc"
#: Each kind of time (goodput.KINDS and productive) -> its colour in every chart.
COLOURS: Dict[str, str] = {
    PRODUCTIVE: "#2ca02c",
    "startup": "#7f7f7f",
    "detect": "#d62728",
    "teardown": "#8c564b",
    "restart": "#ff7f0e",
    "retrain": "#f7b6d2",
    "planned": "#9467bd",
    "finish": "#17becf",
}

Facts = Dict[str, int]


@dataclass(frozen=True)
class Piece:
    """A stretch of one rank's line in one attempt: its steps, values and whether they are trained again."""

    rank: int
    attempt: int
    xs: Tuple[float, ...]
    ys: Tuple[float, ...]
    again: bool


def _attempt(r: Dict[str, Any]) -> int:
    k = r.get("attempt", 0)
    return k if isinstance(k, int) else 0


def best_before(records: List[Dict[str, Any]]) -> Dict[int, int]:
    """attempt -> the best global step of the attempts before it (attempts with an earlier one only)."""
    best: Dict[int, int] = {}
    for r in records:
        if r.get("kind") == "step" and isinstance(r.get("global_step"), int):
            best[_attempt(r)] = max(best.get(_attempt(r), r["global_step"]), r["global_step"])
    out: Dict[int, int] = {}
    top: Optional[int] = None
    for k in sorted(best):
        if top is not None:
            out[k] = top
        top = best[k] if top is None else max(top, best[k])
    return out


def pieces(records: List[Dict[str, Any]], key: str) -> List[Piece]:
    """Every rank's step records that carry ``key``, cut per attempt and where trained-again steps
    end (the new piece starts at the last trained-again point, so the line does not break there)."""
    before = best_before(records)
    rows: Dict[Tuple[int, int], List[Tuple[float, float]]] = {}
    for r in records:
        rank = r.get("rank")
        if not isinstance(rank, int) or r.get("kind") != "step" or not isinstance(r.get("global_step"), int):
            continue
        if isinstance(r.get(key), (int, float)):
            rows.setdefault((rank, _attempt(r)), []).append((float(r["global_step"]), float(r[key])))
    out: List[Piece] = []
    for (rank, k), points in sorted(rows.items()):
        limit = before.get(k)
        again = [p for p in points if limit is not None and p[0] <= limit]
        new = [p for p in points if limit is None or p[0] > limit]
        if again:
            out.append(Piece(rank, k, tuple(x for x, _ in again), tuple(y for _, y in again), True))
        if new:
            lead = again[-1:] if again else []
            out.append(Piece(rank, k, tuple(x for x, _ in lead + new), tuple(y for _, y in lead + new), False))
    return out


def _rank_colour(rank: int) -> str:
    return f"C{rank % 10}"


def _draw_steps(ax: Any, records: List[Dict[str, Any]], key: str) -> Facts:
    """The per-rank lines of ``key`` against the step, trained-again steps dashed, restarts marked."""
    labelled = set()
    drawn = 0
    for p in pieces(records, key):
        label = None if p.again or p.rank in labelled else f"rank {p.rank}"
        if label is not None:
            labelled.add(p.rank)
        style = dict(linestyle="--", alpha=0.45, linewidth=1.0) if p.again else dict(linewidth=1.2)
        ax.plot(p.xs, p.ys, marker=".", color=_rank_colour(p.rank), label=label, **style)
        drawn += 1
    first: Dict[int, int] = {}
    for r in records:
        if r.get("kind") == "step" and isinstance(r.get("global_step"), int):
            first[_attempt(r)] = min(first.get(_attempt(r), r["global_step"]), r["global_step"])
    restarts = 0
    for k, limit in sorted(best_before(records).items()):
        if k not in first:
            continue
        resumed = first[k] - 1
        if limit > resumed:
            ax.axvspan(resumed, limit, color=COLOURS["retrain"], alpha=0.35, linewidth=0)
        ax.axvline(
            resumed, color=RESTART_COLOUR, linewidth=1.8, label=f"restart: attempt {k} resumes after step {resumed}"
        )
        restarts += 1
    return {"lines": drawn, "restarts": restarts}


def plot_loss(plt: Any, records: List[Dict[str, Any]], path: str) -> Facts:
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    facts = _draw_steps(ax, records, "loss")
    for r in records:
        if r.get("event") == "nonfinite_loss" and isinstance(r.get("global_step"), int):
            ax.axvline(r["global_step"], color="red", linestyle=":", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("loss per rank, every attempt (dashed: steps trained again)")
    _finish(ax, fig, path)
    return facts


def plot_step_time(plt: Any, records: List[Dict[str, Any]], path: str) -> Facts:
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    facts = _draw_steps(ax, records, "step_time_ms")
    newest = max((_attempt(r) for r in records), default=0)
    last = [p.ys[-1] for p in pieces(records, "step_time_ms") if p.attempt == newest and not p.again]
    if last:
        ax.axhline(statistics.median(last), color="grey", linestyle="--", linewidth=1, label="median (last)")
    ax.set_xlabel("step")
    ax.set_ylabel("ms / step")
    ax.set_title("step time per rank (stragglers stand out)")
    _finish(ax, fig, path)
    return facts


def plot_throughput(
    plt: Any, records: List[Dict[str, Any]], events: List[Dict[str, Any]], t0: float, goodput: Goodput, path: str
) -> Facts:
    """Samples/s over time: a line per rank and attempt, the total per attempt, restarts marked."""
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    lines: Dict[Tuple[int, int], Tuple[List[float], List[float]]] = {}
    totals: Dict[int, Tuple[List[float], List[float]]] = {}
    latest: Dict[int, Dict[int, float]] = {}
    for r in sorted((r for r in records if isinstance(r.get("time"), (int, float))), key=lambda r: r["time"]):
        rank, value = r.get("rank"), r.get("samples_per_s")
        if not isinstance(rank, int) or not isinstance(value, (int, float)):
            continue
        k, t = _attempt(r), float(r["time"]) - t0
        xs, ys = lines.setdefault((rank, k), ([], []))
        xs.append(t)
        ys.append(float(value))
        now = latest.setdefault(k, {})
        now[rank] = float(value)
        tx, ty = totals.setdefault(k, ([], []))
        tx.append(t)
        ty.append(sum(now.values()))
    labelled = set()
    for (rank, k), (xs, ys) in sorted(lines.items()):
        ax.plot(xs, ys, linewidth=1.2, color=_rank_colour(rank), label=None if rank in labelled else f"rank {rank}")
        labelled.add(rank)
    for k, (xs, ys) in sorted(totals.items()):
        ax.plot(xs, ys, color="black", linewidth=2, label="total" if k == min(totals) else None)
    for s in goodput.spans:
        if s.kind == "retrain":
            ax.axvspan(s.start - t0, s.end - t0, color=COLOURS["retrain"], alpha=0.5, linewidth=0)
    restarts = [e for e in events if e.get("kind") == EventKind.RESTART and isinstance(e.get("time"), (int, float))]
    for e in restarts:
        ax.axvline(
            float(e["time"]) - t0, color=RESTART_COLOUR, linewidth=1.8, label=f"restart: attempt {e.get('attempt')}"
        )
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("samples / s")
    ax.set_title("throughput (pink: steps trained again)")
    _finish(ax, fig, path)
    return {"lines": len(lines) + len(totals), "restarts": len(restarts)}


def plot_goodput(plt: Any, goodput: Goodput, path: str) -> Facts:
    """The job's time as a bar coloured by kind, in time order, and the totals by kind below it."""
    fig, ax = plt.subplots(figsize=(8, 2.6), dpi=100)
    t0 = goodput.started
    for s in goodput.spans:
        ax.barh(1, s.seconds, left=s.start - t0, color=COLOURS[s.kind], height=0.6, linewidth=0)
    left = 0.0
    parts = [(PRODUCTIVE, goodput.productive_s)] + [(k, goodput.badput_s[k]) for k in KINDS]
    drawn = 0
    for kind, secs in parts:
        if secs <= 0:
            continue
        ax.barh(0, secs, left=left, color=COLOURS[kind], height=0.6, linewidth=0, label=f"{LABELS[kind]}: {secs:.1f} s")
        left += secs
        drawn += 1
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["totals", "time line"])
    ax.set_xlim(0, max(goodput.elapsed_s, 1e-3))
    ax.set_xlabel("seconds since the job started")
    ax.set_title(f"where the time went: {100 * goodput.ratio:.1f} % productive of {goodput.elapsed_s:.1f} s")
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    _finish(ax, fig, path, legend=False)
    return {"lines": drawn, "restarts": 0}


def plot_timeline(
    plt: Any, summary: Optional[Dict[str, Any]], events: List[Dict[str, Any]], t0: float, path: str
) -> Facts:
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
        "restart": (RESTART_COLOUR, "-."),
        "timeout": ("tab:purple", "--"),
        "interrupted": ("tab:purple", ":"),
        "cluster_stop": ("tab:purple", ":"),
    }
    for e in events:
        kind = e.get("kind")
        if kind not in styles or not isinstance(e.get("time"), (int, float)):
            continue
        colour, style = styles[kind]
        label = {"failure": f"failure: {e.get('name')}", "restart": f"restart (attempt {e.get('attempt')})"}.get(
            str(kind), str(kind)
        )
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
    return {"lines": len(rows), "restarts": len(restarts)}


def _finish(ax: Any, fig: Any, path: str, legend: bool = True) -> None:
    ax.grid(True, alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    with os.fdopen(open_private(path, append=False), "wb") as fh:  # 0600 as every file of the job dir
        fig.savefig(fh, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)


def pyplot() -> Any:
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
