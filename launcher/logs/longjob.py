"""Text lines about a long job's hangs and attempts, from ``summary.json`` (pure): what
``mslaunch status``, ``top`` (after the end) and ``report`` show.

``summary.json``'s ``hang`` object is documented in :mod:`launcher.execution.supervision.hangwatch`; each of
``attempt_results`` may carry ``ended_because``, ``resumed_from_step``, ``best_step`` and
``steps_lost`` (see :mod:`launcher.execution.supervision.restarts`), and ``replanned`` when it was the first
attempt without a host left out; ``excluded_hosts`` lists those hosts (docs/spare-hosts.md);
``stragglers`` the ranks named slow while the job ran (:mod:`launcher.execution.supervision.stragglerwatch`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = [
    "attempt_lines",
    "excluded_lines",
    "hang_lines",
    "process_lines",
    "process_table",
    "running_stragglers",
    "straggler_lines",
    "summary_notes",
]


def hang_lines(hang: Optional[Mapping[str, Any]]) -> List[str]:
    """The hang in a few lines (:meth:`launcher.logs.hangreport.HangReport.lines` of a summary's ``hang``)."""
    from launcher.logs.hangreport import HangReport

    report = HangReport.from_json(hang)
    return report.lines() if report is not None else []


def attempt_lines(summary: Optional[Mapping[str, Any]]) -> List[str]:
    """One line per attempt of a job that ran more than one: why it ended, where it resumed, steps lost."""
    attempts: List[Dict[str, Any]] = list((summary or {}).get("attempt_results") or [])
    if len(attempts) < 2 and not any(a.get("resumed_from_step") for a in attempts):
        return []
    out = []
    sizes = {r.get("attempt"): r for r in (summary or {}).get("resized") or [] if isinstance(r, Mapping)}
    for a in attempts:
        text = f"attempt {a.get('attempt')}: {a.get('status')}"
        why = a.get("ended_because")
        if why:
            text += f" ({why})"
        if a.get("resumed_from_step") is not None:
            text += f"; resumed at step {a['resumed_from_step']}"
        if a.get("best_step") is not None:
            text += f"; reached step {a['best_step']}"
        if a.get("steps_lost"):
            text += f"; {a['steps_lost']} step(s) lost"
        size = sizes.get(a.get("attempt"))
        if size is not None:  # --min-hosts: fewer hosts, or back
            hosts = size.get("hosts")
            text += (
                f"; re-planned: {size.get('world_size')} of {size.get('planned')} ranks on {hosts} "
                f"host{'s' * (hosts != 1)}"
            )
        elif a.get("replanned"):
            text += "; re-planned on spare hosts"
        out.append(text)
    note = (summary or {}).get("restarts_stopped")
    if note:
        out.append(str(note))
    return out


def excluded_lines(record: Optional[Mapping[str, Any]]) -> List[str]:
    """One line per host left out (``excluded_hosts`` of ``summary.json`` or ``plan.json``):
    ``left out h2 from attempt 2 (restart): 2 failures (rank 2 killed by SIGKILL, ...)``."""
    out = []
    for e in (record or {}).get("excluded_hosts") or []:
        if isinstance(e, Mapping):
            out.append(f"left out {e.get('host')} from attempt {e.get('attempt')} ({e.get('by')}): {e.get('reason')}")
    return out


def _clock(epoch: Any) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(epoch)) if isinstance(epoch, (int, float)) else "?"


def straggler_lines(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """One line per rank named a straggler (``summary.json``'s ``stragglers``, or
    :func:`running_stragglers`): ``straggler since 21:37:02 (attempt 0): rank 1 on h2 waited ...``."""
    out = []
    for row in rows:
        if isinstance(row, Mapping):
            when = row.get("cleared")  # epoch seconds in summary.json (an event's flag is a bool)
            cleared = (
                f", cleared {_clock(when)}" if isinstance(when, (int, float)) and not isinstance(when, bool) else ""
            )
            out.append(
                f"straggler since {_clock(row.get('since'))} (attempt {row.get('attempt')}{cleared}): "
                f"{row.get('evidence')}"
            )
    return out


def running_stragglers(events: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The ranks named stragglers now (the last ``straggler`` event of each rank of the current
    attempt, unless it cleared it), from ``events.jsonl``."""
    from launcher.planning.job.kinds import EventKind

    attempt = max((e.get("attempt", 0) for e in events if e.get("kind") == EventKind.STARTED), default=0)
    now: Dict[Any, Dict[str, Any]] = {}
    for e in events:
        if e.get("kind") == EventKind.STRAGGLER and e.get("attempt") == attempt:
            if e.get("cleared"):
                now.pop(e.get("rank"), None)
            else:
                now[e.get("rank")] = dict(e)
    return list(now.values())


def summary_notes(summary: Optional[Mapping[str, Any]]) -> List[str]:
    """Everything above for one job."""
    s = summary or {}
    return hang_lines(s.get("hang")) + straggler_lines(s.get("stragglers") or []) + excluded_lines(s) + attempt_lines(s)


def process_table(events: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The processes of a job's current attempt, from its ``events.jsonl`` (``started`` and
    ``exited`` events, written by the supervisor under every backend): one entry per started
    process, in start order, ``{"name", "rank", "host", "pid", "attempt", "state", "returncode"}``
    with ``state`` ``running`` or the exit's wording (``exit code 0``, ``killed by SIGKILL``).
    ``pid`` is the process's pid on its own host: the ``started`` event's, or the ``pid`` event's
    that followed it (the ssh agent reports a rank's pid after its start; mpirun's ranks, which
    have no ``started`` event of their own, come with theirs); None while nobody knows it."""
    from launcher.planning.job.kinds import EventKind, describe_returncode

    attempt = max(
        (int(e["attempt"]) for e in events if e.get("kind") == EventKind.STARTED and isinstance(e.get("attempt"), int)),
        default=0,
    )
    rows: Dict[str, Dict[str, Any]] = {}
    for e in events:
        if e.get("attempt", 0) != attempt or not isinstance(e.get("name"), str):
            continue
        if e.get("kind") == EventKind.STARTED:
            rows[e["name"]] = {
                "name": e["name"],
                "rank": e.get("rank"),
                "host": e.get("host"),
                "pid": e.get("pid"),
                "attempt": attempt,
                "state": "running",
                "returncode": None,
            }
        elif e.get("kind") == EventKind.PID and isinstance(e.get("pid"), int):
            row = rows.setdefault(  # a rank a stand-in (mpirun) runs has no ``started`` event of its own
                e["name"],
                {
                    "name": e["name"],
                    "rank": e.get("rank"),
                    "host": e.get("host"),
                    "pid": None,
                    "attempt": attempt,
                    "state": "running",
                    "returncode": None,
                },
            )
            row["pid"] = e["pid"]
        elif e.get("kind") == EventKind.EXITED and e["name"] in rows and isinstance(e.get("returncode"), int):
            rows[e["name"]].update(state=describe_returncode(e["returncode"]), returncode=e["returncode"])
    return list(rows.values())


def process_lines(table: Sequence[Mapping[str, Any]]) -> List[str]:
    """``status``'s lines for :func:`process_table`: ``rank 0  localhost  pid 4242  running``."""
    width = max((len(str(r["name"])) for r in table), default=0)
    hwidth = max((len(str(r["host"])) for r in table), default=0)
    return [
        f"{str(r['name']):<{width}}  {str(r['host']):<{hwidth}}  pid {'-' if r['pid'] is None else r['pid']}  "
        f"{r['state']}"
        for r in table
    ]
