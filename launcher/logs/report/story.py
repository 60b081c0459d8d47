"""A job's timeline in words (pure): one sentence per event of ``events.jsonl`` (what happened, to
which rank and host, why), and from ``metrics.jsonl`` where each attempt's steps began and ended
(where a restart resumed, which steps it trained again).  The report lists them in time order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from launcher.planning.job.kinds import EventKind, describe_returncode, signal_name

__all__ = ["Line", "story"]

#: How many processes a sentence about an attempt's start names before it counts the rest.
_NAMED = 6


@dataclass(frozen=True)
class Line:
    """One sentence of the timeline at ``time`` (epoch seconds); ``kind`` is the event's kind, or ``steps``."""

    time: float
    kind: str
    text: str


def _s(value: Any, default: str = "?") -> str:
    return default if value is None else str(value)


def _cause(cause: Any) -> str:
    """`` after rank 1 on h1: killed by SIGKILL (cause: killed)`` from a restart's ``cause``, or ``""``."""
    if not isinstance(cause, Mapping):
        return ""
    text = f" after {_s(cause.get('name'))} on {_s(cause.get('host'))} failed: {_s(cause.get('reason'))}"
    judged = cause.get("cause")
    if isinstance(judged, Mapping) and judged.get("kind"):
        text += f" (cause: {judged.get('kind')}: {_s(judged.get('evidence'), '')[:160]})"
    return text


def _started(group: List[Mapping[str, Any]]) -> str:
    k = group[0].get("attempt", 0)
    named = [f"{_s(e.get('name'))} on {_s(e.get('host'))}" for e in group[:_NAMED]]
    if len(group) > _NAMED:
        named.append(f"{len(group) - _NAMED} more")
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"Attempt {k} started {listed}."


def _sentence(e: Mapping[str, Any], attempt: int) -> Optional[str]:
    """The sentence of one event (None for events the timeline leaves out)."""
    kind = e.get("kind")
    if kind == EventKind.PREFLIGHT:
        out = [f"{x.get('host')} ({x.get('reason')})" for x in e.get("excluded") or [] if isinstance(x, Mapping)]
        left = f"; it left out {', '.join(out)}" if out else "; every host passed"
        secs = e.get("seconds")
        took = f" took {secs:.1f} s" if isinstance(secs, (int, float)) else " ran"
        return f"The pre-flight check ({_s(e.get('mode'))}){took}{left}."
    if kind == EventKind.JOB_START:
        return f"The job {e['job_id']} started." if e.get("job_id") else "The job started."
    if kind == EventKind.EXITED:
        rc = e.get("returncode")
        what = describe_returncode(rc) if isinstance(rc, int) else "an unknown status"
        return f"{_s(e.get('name'))} on {_s(e.get('host'))} ended: {what}."
    if kind == EventKind.FAILURE:
        rc = e.get("returncode")
        what = describe_returncode(rc) if isinstance(rc, int) else "an unknown status"
        return (
            f"mslaunch saw {_s(e.get('name'))} on {_s(e.get('host'))} fail ({what}): "
            f"attempt {attempt} stops at once (fail fast)."
        )
    if kind == EventKind.TEARDOWN:
        names = [str(n) for n in e.get("names") or []]
        shown = ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")
        return f"mslaunch tore down {shown or 'the processes left'} (SIGTERM, then SIGKILL after the grace)."
    if kind == EventKind.HUNG:
        return f"Attempt {attempt} hung: {_s(e.get('message'))[:300]}."
    if kind == EventKind.RESTART:
        return f"mslaunch restarted the job as attempt {_s(e.get('attempt'))}{_cause(e.get('cause'))}."
    if kind == EventKind.HOST_EXCLUDED:
        moves = f"; {e['moves']}" if e.get("moves") else ""
        return (
            f"mslaunch left out {_s(e.get('host'))} from attempt {_s(e.get('attempt'))}: {_s(e.get('reason'))}{moves}."
        )
    if kind == EventKind.PLANNED_RESTART:
        return f"mslaunch ended attempt {attempt} for a planned restart ({_s(e.get('reason'))})."
    if kind == EventKind.HOST_REJOINED:
        return f"{_s(e.get('host'))} answered again and was given ranks from attempt {_s(e.get('attempt'))} on."
    if kind == EventKind.RESIZED:
        smaller = (
            isinstance(e.get("world_size"), int)
            and isinstance(e.get("previous"), int)
            and (e["world_size"] < e["previous"])
        )
        return (
            f"Attempt {_s(e.get('attempt'))} {'went on with' if smaller else 'grew back to'} "
            f"{_s(e.get('world_size'))} of the {_s(e.get('planned'))} planned ranks on {_s(e.get('hosts'))} "
            f"host{'s' * (e.get('hosts') != 1)} "
            f"({_s(e.get('why'))})."
        )
    if kind == EventKind.STOP_RESTARTS:
        return f"Restarts stopped: {_s(e.get('message'))}."
    if kind == EventKind.TIMEOUT:
        limit = e.get("timeout")
        return f"The job ran past --timeout {limit:g} s." if isinstance(limit, (int, float)) else "The job timed out."
    if kind == EventKind.INTERRUPTED:
        sig = e.get("signal")
        return f"mslaunch received {signal_name(sig) if isinstance(sig, int) else 'a stop signal'}: the job stops."
    if kind == EventKind.CLUSTER_STOP:
        why = f": {e['message']}" if e.get("message") else ""
        return f"The cluster's scheduler ended the job ({_s(e.get('status'))}){why}."
    if kind == EventKind.CKPT_FAILED:
        return f"Rank {_s(e.get('rank'))} could not write a checkpoint ({_s(e.get('why'))}); the job trained on."
    if kind == EventKind.STRAGGLER:
        who = f"rank {_s(e.get('rank'))} on {_s(e.get('host'))}"
        if e.get("cleared"):
            return f"{who} was no longer a straggler: {_s(e.get('evidence'))}."
        return f"mslaunch named {who} a straggler: {_s(e.get('evidence'))}."
    if kind == EventKind.JOB_END:
        return f"The job ended: {_s(e.get('status'))} (exit code {_s(e.get('exit_code'))})."
    return None


def _step_lines(records: Sequence[Mapping[str, Any]]) -> List[Line]:
    """Per attempt: its first step (where it resumed, the steps it trains again) and its last."""
    first: Dict[int, Mapping[str, Any]] = {}
    last: Dict[int, Mapping[str, Any]] = {}
    for r in records:
        k, g, t = r.get("attempt", 0), r.get("global_step"), r.get("time")
        if r.get("kind") != "step" or not isinstance(g, int) or not isinstance(t, (int, float)):
            continue
        k = k if isinstance(k, int) else 0
        if k not in first or (g, t) < (first[k]["global_step"], first[k]["time"]):
            first[k] = r
        if k not in last or (g, t) > (last[k]["global_step"], last[k]["time"]):
            last[k] = r
    out: List[Line] = []
    best: Optional[int] = None
    for k in sorted(first):
        g = int(first[k]["global_step"])
        text = f"Attempt {k} logged its first step, step {g}"
        if best is not None:
            text += f": it resumed after step {g - 1}" if g > 1 else ": it started from scratch"
            if best >= g:
                text += f", so steps {g} to {best} are trained again" if best > g else f", so step {g} is trained again"
        out.append(Line(float(first[k]["time"]), "steps", text + f" (rank {first[k].get('rank')})."))
        top = int(last[k]["global_step"])
        out.append(Line(float(last[k]["time"]), "steps", f"Attempt {k} logged its last step, step {top}."))
        best = top if best is None else max(best, top)
    return out


def story(events: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]) -> List[Line]:
    """The job's timeline in words, in time order (see the module doc)."""
    out: List[Line] = []
    attempt, torn = 0, False
    group: List[Mapping[str, Any]] = []
    timed = sorted((e for e in events if isinstance(e.get("time"), (int, float))), key=lambda e: float(e["time"]))
    for e in timed:
        kind = e.get("kind")
        if kind == EventKind.STARTED:
            if group and group[0].get("attempt") != e.get("attempt"):
                out.append(Line(float(group[0]["time"]), str(EventKind.STARTED), _started(group)))
                group = []
            group.append(e)
            attempt, torn = int(e.get("attempt") or 0), False
            continue
        if group:
            out.append(Line(float(group[0]["time"]), str(EventKind.STARTED), _started(group)))
            group = []
        if kind == EventKind.TEARDOWN:
            torn = True
        if kind == EventKind.EXITED and (torn or e.get("returncode") == 0):
            continue  # ended by the teardown, or finished: the job's end says it
        text = _sentence(e, attempt)
        if text is not None:
            out.append(Line(float(e["time"]), str(kind), text))
    if group:
        out.append(Line(float(group[0]["time"]), str(EventKind.STARTED), _started(group)))
    out += _step_lines(records)
    return sorted(out, key=lambda line: (line.time, line.kind != "steps"))  # a step read with the end: before it
