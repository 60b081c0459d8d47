"""Causes judged elsewhere, before any log is read: the host was lost (the supervisor), the attempt
hung or a collective timed out (the hang watch's report, summary.json's ``hang``).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from launcher.logs.causerules import Facts, Found, cut


def match_lost_host(facts: Facts) -> Optional[Found]:
    """The supervisor lost the host (its connection, agent or node went away)."""
    lost = facts.failure.lost
    if not lost:
        return None
    return Found(cut(f"{facts.failure.name} on {facts.host}: {lost}"), {"how": lost})


def _report_fields(hang: Mapping[str, Any], facts: Facts) -> Dict[str, str]:
    culprit = hang.get("culprit") or {}
    rank = culprit.get("rank")
    hosts = {r.get("rank"): r.get("host") for r in hang.get("ranks") or [] if isinstance(r, Mapping)}
    return {
        "rank": "" if rank is None else str(rank),
        "culprit_host": str(hosts.get(rank) or facts.host),
        "why": str(culprit.get("evidence") or ""),
        "stacks": str(hang.get("stacks_dir") or "the attempt's stacks/ folder"),
    }


def _culprit_text(fields: Mapping[str, str]) -> str:
    if not fields["rank"]:
        return "no rank stands out"
    return f"likely culprit rank {fields['rank']} on {fields['culprit_host']}: {fields['why']}"


def match_collective_timeout_report(facts: Facts) -> Optional[Found]:
    """The hang watch judged a rank's collective timeout (summary ``hang.kind`` ``collective_timeout``)."""
    hang = facts.failure.hang
    if not hang or hang.get("kind") != "collective_timeout":
        return None
    fields = _report_fields(hang, facts)
    t = hang.get("timed_out") or {}
    head = f"rank {t.get('rank')}'s collective timed out waiting for the others ({cut(str(t.get('line') or ''), 120)})"
    hint = (
        None
        if fields["rank"]
        else (
            "no rank stands out: compare the ranks' stacks in {stacks}; a slow host or a broken "
            "link between hosts holds a collective (mslaunch doctor --health)"
        )
    )
    return Found(cut(f"{head}; {_culprit_text(fields)}"), fields, hint=hint)


def match_hang_report(facts: Facts) -> Optional[Found]:
    """The hang watch judged the attempt hung (no progress for the limit, or a rank stopped by a signal)."""
    hang = facts.failure.hang
    if not hang or hang.get("kind") == "collective_timeout":
        return None
    fields = _report_fields(hang, facts)
    if hang.get("kind") == "stopped":
        head = f"a rank's process was stopped by a signal for {hang.get('idle_s')} s ({hang.get('derived')})"
        why = "something sent it SIGSTOP (or ^Z): find what, or give --stopped-timeout off to stop ranks on purpose"
        return Found(cut(f"{head}; {_culprit_text(fields)}"), fields, hint=why)
    head = f"no rank made progress for {hang.get('idle_s')} s (limit {hang.get('limit_s')} s, {hang.get('derived')})"
    hint = (
        None
        if fields["rank"]
        else (
            "no rank stands out: compare the ranks' stacks in {stacks}; if a step can take "
            "this long, raise --hang-timeout"
        )
    )
    return Found(cut(f"{head}; {_culprit_text(fields)}"), fields, hint=hint)
