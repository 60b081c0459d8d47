"""Goodput accounting of one job (pure): where its wall time went, across attempts.

:func:`account` reads the job's events (``events.jsonl``) and metric records (``metrics.jsonl``)
and splits the job's elapsed time into *productive* time and *badput* by kind (:data:`KINDS`).
Every instant of the job belongs to exactly one of them, so ``productive_s + sum(badput_s) ==
elapsed_s``.  ``summary.json`` (``goodput``), ``mslaunch status`` (text and ``--json``), the report
and the Prometheus export all call it, so they agree.

How each span is found (times are those the launcher recorded; see docs/watching.md):

* the job runs from ``job_start`` (or the start of the pre-flight check before it) to ``job_end``,
  or to ``now`` while it runs;
* attempt 0 starts with the job; attempt *k* >= 1 with its ``restart`` event;
* ``startup``: the job's start to attempt 0's first step record (a step line as mslaunch read it);
* ``restart``: a ``restart`` event to that attempt's first step record (the restart delay, the
  processes' start, loading the checkpoint, the first step);
* ``retrain``: from an attempt's first step to its first step beyond the best step any earlier
  attempt reached (steps trained again since the checkpoint it resumed from);
* ``detect``: the fault to the moment mslaunch noticed it (its ``failure`` or ``hung`` event).  A
  process that exits is at fault from its ``exited`` event; a hung attempt from its last step
  record (no step: its silence before the hang was judged, ``idle_s``).  mslaunch cannot see a
  fault it does not hear of: a host cut off is noticed when its connection is judged lost, and
  counts from then;
* ``teardown``: noticed to the next ``restart`` event (SIGTERM, the grace, SIGKILL, the crash-loop
  and spare-host decisions), or to the job's end;
* ``planned``: a stop the job did not fail by (``interrupted``: a stop signal or a preemption
  warning; ``cluster_stop``: the cluster's scheduler; ``timeout``: ``--timeout``) to the next
  attempt's first step or the job's end;
* ``finish``: after the last step of a job that ended by itself (final checkpoint, evaluation,
  exit, the scheduler's end);
* productive: the rest: steps trained for the first time (and, while a job runs, the step in
  progress).

A job that logged no step has no productive time (``has_steps`` False).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from launcher.planning.job.kinds import EventKind

__all__ = ["KINDS", "LABELS", "PRODUCTIVE", "Goodput", "Span", "account", "goodput_line"]

#: The kinds of badput, in the order of a restart's story.
KINDS: Tuple[str, ...] = ("startup", "detect", "teardown", "restart", "retrain", "planned", "finish")
#: The name of the productive spans (:attr:`Span.kind`).
PRODUCTIVE = "productive"
#: What each kind is, in words (status, the report's legend).
LABELS: Mapping[str, str] = {
    PRODUCTIVE: "productive (new steps)",
    "startup": "start-up to the first step",
    "detect": "waiting to notice a fault",
    "teardown": "teardown",
    "restart": "restart to the first step",
    "retrain": "steps trained again",
    "planned": "planned stops and restarts",
    "finish": "after the last step",
}

_FAULTS = (EventKind.FAILURE, EventKind.HUNG)
#: Stops that are not faults: a stop signal, the cluster's own stop or time limit, and mslaunch's
#: planned restart (``--straggler replace``, ``--grow-at-checkpoint``).
_PLANNED = (EventKind.INTERRUPTED, EventKind.CLUSTER_STOP, EventKind.TIMEOUT, EventKind.PLANNED_RESTART)


@dataclass(frozen=True)
class Span:
    """A stretch of the job's time of one kind (:data:`KINDS` or :data:`PRODUCTIVE`), epoch seconds."""

    kind: str
    start: float
    end: float
    attempt: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Goodput:
    """Where a job's time went (see the module doc).

    Attributes:
        elapsed_s: the job's wall time so far (to ``job_end``, or ``now``).
        productive_s: time spent training new steps.
        badput_s: every kind of :data:`KINDS` -> seconds (0.0 where none).
        ratio: ``productive_s / elapsed_s`` (0.0 for a job of no time).
        started, ended: the epoch seconds the accounting spans.
        running: no ``job_end`` yet: ``ended`` is ``now`` and the last span may still change kind.
        has_steps: some step was logged (else nothing can be productive).
        spans: the time line, in order, covering ``started`` to ``ended`` (not in JSON).
    """

    elapsed_s: float
    productive_s: float
    badput_s: Dict[str, float]
    ratio: float
    started: float = 0.0
    ended: float = 0.0
    running: bool = False
    has_steps: bool = False
    spans: Tuple[Span, ...] = field(default=(), compare=False)

    def to_json(self) -> Dict[str, Any]:
        """``summary.json``'s ``goodput`` (seconds rounded to the millisecond)."""
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "productive_s": round(self.productive_s, 3),
            "badput_s": {k: round(self.badput_s.get(k, 0.0), 3) for k in KINDS},
            "ratio": round(self.ratio, 4),
            "started": round(self.started, 3),
            "ended": round(self.ended, 3),
            "running": self.running,
            "has_steps": self.has_steps,
        }

    @classmethod
    def from_json(cls, data: Any) -> Optional["Goodput"]:
        """A ``goodput`` object read back (None when it is not one)."""
        if not isinstance(data, Mapping):
            return None
        try:
            bad = data.get("badput_s") or {}
            return cls(
                elapsed_s=float(data["elapsed_s"]),
                productive_s=float(data["productive_s"]),
                badput_s={k: float(bad.get(k, 0.0)) for k in KINDS},
                ratio=float(data["ratio"]),
                started=float(data.get("started") or 0.0),
                ended=float(data.get("ended") or 0.0),
                running=bool(data.get("running", False)),
                has_steps=bool(data.get("has_steps", True)),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _num(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any, default: Optional[int] = None) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass
class _Steps:
    """One attempt's step records: first and last time, best step, when each step was first logged."""

    first: float = float("inf")
    last: float = float("-inf")
    best: int = -(1 << 62)
    seen: Dict[int, float] = field(default_factory=dict)  # step -> when a rank first logged it

    def add(self, t: float, step: int) -> None:
        self.first, self.last, self.best = min(self.first, t), max(self.last, t), max(self.best, step)
        self.seen[step] = min(t, self.seen.get(step, t))

    def first_beyond(self, step: Optional[int]) -> Optional[float]:
        """When the attempt first logged a step above ``step`` (None: never)."""
        times = [t for s, t in self.seen.items() if step is None or s > step]
        return min(times) if times else None


def _step_records(records: Iterable[Mapping[str, Any]]) -> Dict[int, _Steps]:
    out: Dict[int, _Steps] = {}
    for r in records:
        t, g = _num(r.get("time")), _int(r.get("global_step"))
        if r.get("kind") != "step" or t is None or g is None:
            continue
        out.setdefault(_int(r.get("attempt"), 0) or 0, _Steps()).add(t, g)
    return out


def _bounds(
    events: List[Mapping[str, Any]], steps: Dict[int, _Steps], now: Optional[float]
) -> Tuple[float, float, bool]:
    """(start, end, running) of the accounting."""
    starts = [float(e["time"]) for e in events if e.get("kind") == EventKind.JOB_START]
    for e in events:
        if e.get("kind") == EventKind.PREFLIGHT:
            starts.append(float(e["time"]) - max(0.0, _num(e.get("seconds")) or 0.0))
    if not starts:  # no events: the first thing the job left
        starts = [float(e["time"]) for e in events[:1]] + [s.first for s in steps.values()]
    ends = [float(e["time"]) for e in events if e.get("kind") == EventKind.JOB_END]
    running = not ends
    end = ends[0] if ends else (now if now is not None else _time.time())
    begin = min(starts) if starts else end
    return begin, max(begin, end), running


def account(
    events: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]], now: Optional[float] = None
) -> Goodput:
    """The goodput of a job from its events and metric records (see the module doc).

    Args:
        events: ``events.jsonl``'s records (``{"time", "kind", ...}``), in any order.
        records: ``metrics.jsonl``'s records; only ``kind: step`` ones with ``time``,
            ``global_step`` and ``attempt`` are read.
        now: the end of a job that has no ``job_end`` event yet (default: the clock).

    Returns:
        The :class:`Goodput`; its parts add up to ``elapsed_s``.
    """
    evs = sorted((e for e in events if _num(e.get("time")) is not None), key=lambda e: float(e["time"]))
    steps = _step_records(records)
    begin, end, running = _bounds(evs, steps, now)
    starts = _attempt_starts(evs, steps, begin, end)
    spans: List[Span] = []
    best_before: Optional[int] = None
    lead = "startup"
    for i, (k, start) in enumerate(starts):
        stop_end = starts[i + 1][1] if i + 1 < len(starts) else end
        window = [e for e in evs if start <= float(e["time"]) <= stop_end]
        if i + 1 < len(starts):  # events at the very start of the next attempt are its own
            window = [e for e in window if float(e["time"]) < stop_end or e.get("kind") != EventKind.RESTART]
        mine = steps.get(k)
        cuts, stop_kind = _attempt_cuts(
            k, start, stop_end, window, mine, best_before, lead, last=i + 1 == len(starts), ended=not running
        )
        spans += _spans(cuts, stop_end, k)
        if mine is not None:
            best_before = mine.best if best_before is None else max(best_before, mine.best)
        lead = "planned" if stop_kind == "planned" else "restart"
    return _total(spans, begin, end, running, bool(steps))


def _attempt_starts(
    evs: List[Mapping[str, Any]], steps: Dict[int, _Steps], begin: float, end: float
) -> List[Tuple[int, float]]:
    """``(attempt, start)`` of each attempt the job's files name: attempt 0 at the job's start,
    then each at its ``restart`` event (or its first ``started`` event or step record when the
    events lack it), in order of attempt, the times clamped into that order."""
    known: Dict[int, float] = {0: begin}
    for e in evs:
        k = _int(e.get("attempt"))
        if k is None or k < 1:
            continue
        if e.get("kind") == EventKind.RESTART:
            known[k] = min(known.get(k, float("inf")), float(e["time"]))
    for e in evs:
        k = _int(e.get("attempt"))
        if k is not None and k >= 1 and e.get("kind") == EventKind.STARTED and k not in known:
            known[k] = float(e["time"])
    for k, s in steps.items():
        known.setdefault(k, s.first)
    out: List[Tuple[int, float]] = []
    for k in sorted(known):
        out.append((k, min(end, max(known[k], out[-1][1] if out else begin))))
    return out


def _attempt_cuts(
    k: int,
    start: float,
    stop_end: float,
    window: List[Mapping[str, Any]],
    mine: Optional[_Steps],
    best_before: Optional[int],
    lead: str,
    last: bool,
    ended: bool,
) -> Tuple[List[Tuple[float, str]], Optional[str]]:
    """The attempt's time line as ``(from, kind)`` points, and how it stopped (``fault``,
    ``planned`` or None)."""
    stop = next((e for e in window if e.get("kind") in _FAULTS + _PLANNED), None)
    noticed: Optional[float] = float(stop["time"]) if stop is not None else None
    stop_kind: Optional[str] = None
    if stop is not None:
        stop_kind = "planned" if stop.get("kind") in _PLANNED else "fault"
    elif not last:  # it could not start (no event says why): torn down from its teardown, or its end
        tear = next((e for e in window if e.get("kind") == EventKind.TEARDOWN), None)
        noticed, stop_kind = (float(tear["time"]) if tear is not None else stop_end), "fault"
    fault = noticed
    at = float(stop["time"]) if stop is not None else stop_end
    if stop is not None and stop.get("kind") == EventKind.FAILURE:  # from the first exit that failed
        exits = [
            float(e["time"])
            for e in window
            if e.get("kind") == EventKind.EXITED and _int(e.get("returncode"), 0) != 0 and float(e["time"]) <= at
        ]
        fault = min(exits) if exits else at
    elif stop is not None and stop.get("kind") == EventKind.HUNG:  # from the last step, or its silence
        if mine is not None and mine.first <= at:
            fault = min(mine.last, at)
        else:
            hang = stop.get("hang")
            idle = _num(hang.get("idle_s")) if isinstance(hang, Mapping) else None
            fault = at - idle if idle is not None else start
    train_end = fault if fault is not None else stop_end
    cuts: List[Tuple[float, str]] = [(start, lead)]
    if mine is not None and mine.first <= train_end:  # steps read after the fault count up to it
        cuts.append((mine.first, "retrain"))
        new = mine.first_beyond(best_before)
        if new is not None:
            cuts.append((min(new, train_end), PRODUCTIVE))
        if stop is None and last and ended:
            cuts.append((min(mine.last, train_end), "finish"))
    if fault is not None and noticed is not None:
        cuts.append((fault, "detect" if stop_kind == "fault" else "planned"))
        cuts.append((noticed, "teardown" if stop_kind == "fault" else "planned"))
    return cuts, stop_kind


def _spans(cuts: List[Tuple[float, str]], end: float, attempt: int) -> List[Span]:
    """The spans of ``cuts`` (each from its point to the next one's), in order: a point before the
    one ahead of it is moved up to it, so the spans never overlap and cover ``cuts[0]`` to ``end``."""
    out: List[Span] = []
    at = cuts[0][0]
    points = []
    for t, kind in cuts:
        at = min(end, max(at, t))
        points.append((at, kind))
    for i, (t, kind) in enumerate(points):
        nxt = points[i + 1][0] if i + 1 < len(points) else end
        if nxt > t:
            out.append(Span(kind, t, nxt, attempt))
    return out


def _total(spans: List[Span], begin: float, end: float, running: bool, has_steps: bool) -> Goodput:
    merged: List[Span] = []
    for s in spans:
        if merged and merged[-1].kind == s.kind and merged[-1].attempt == s.attempt and merged[-1].end == s.start:
            merged[-1] = Span(s.kind, merged[-1].start, s.end, s.attempt)
        else:
            merged.append(s)
    bad = {k: 0.0 for k in KINDS}
    productive = 0.0
    for s in merged:
        if s.kind == PRODUCTIVE:
            productive += s.seconds
        else:
            bad[s.kind] += s.seconds
    elapsed = end - begin
    ratio = productive / elapsed if elapsed > 0 else 0.0
    return Goodput(elapsed, productive, bad, ratio, begin, end, running, has_steps, tuple(merged))


def goodput_line(g: Goodput) -> str:
    """``status``'s and the report's one line: ``goodput 62.1 % of 30.2 s (18.8 s productive);
    badput: start-up to the first step 3.1 s, ...`` (kinds of no time left out)."""
    # From the figures as summary.json keeps them (:meth:`Goodput.to_json` rounds them), so that a
    # line made from a fresh count (the report) and one read back from summary.json (status) agree.
    g = Goodput.from_json(g.to_json()) or g
    head = "goodput so far" if g.running else "goodput"
    if not g.has_steps:
        text = f"{head}: no step logged in {g.elapsed_s:.1f} s"
    else:
        text = f"{head} {100 * g.ratio:.1f} % of {g.elapsed_s:.1f} s ({g.productive_s:.1f} s productive)"
    parts = [f"{LABELS[k]} {g.badput_s[k]:.1f} s" for k in KINDS if round(g.badput_s.get(k, 0.0), 1) > 0]
    return text + ("; badput: " + ", ".join(parts) if parts else "")
