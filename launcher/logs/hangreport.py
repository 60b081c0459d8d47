"""A hung attempt's report (pure): what the hang watch found, typed, and its wordings.

Made by :class:`launcher.execution.supervision.hangwatch.HangWatch` before the teardown, kept in
the attempt's result, written to ``summary.json`` as ``hang`` (and in each ``attempt_results``
entry)::

    {"kind": "no_progress" | "collective_timeout" | "stopped", "limit_s": 10.0, "derived": "--hang-timeout 10 s",
     "idle_s": 10.4, "stacks_dir": ".../stacks", "culprit": {"rank": 1, "evidence": "..."} | null,
     "timed_out": {"rank": 0, "line": "..."} (collective_timeout only),
     "ranks": [{"rank", "host", "last_step", "silent_s", "frame", "in_collective", "alive",
                "timed_out", "stack_files", "stopped_s" (a stopped rank only)}, ...]}

Read back with :meth:`HangReport.from_json` (``status``, ``top`` and ``report`` read summaries);
what the console, the summary and the restart rules say of a hang comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from launcher.logs.stacks import Culprit
from launcher.planning.job.kinds import StrEnum

__all__ = ["Culprit", "HangKind", "HangRank", "HangReport", "TimedOut"]


class HangKind(StrEnum):
    """Why an attempt was judged hung."""

    NO_PROGRESS = "no_progress"  # no rank made progress for the limit
    COLLECTIVE_TIMEOUT = "collective_timeout"  # a rank's collective timed out waiting for the others
    STOPPED = "stopped"  # a rank's process was stopped by a signal for --stopped-timeout


@dataclass(frozen=True)
class TimedOut:
    """The rank whose collective timed out, and its log line that says so."""

    rank: Optional[int]
    line: str

    def to_json(self) -> Dict[str, Any]:
        return {"rank": self.rank, "line": self.line}


@dataclass(frozen=True)
class HangRank:
    """One rank at the moment of the hang: its last step, silence and innermost main-thread frame."""

    rank: int
    host: str
    last_step: Optional[str] = None
    silent_s: Optional[float] = None
    frame: Optional[str] = None
    in_collective: Optional[bool] = None
    alive: bool = True
    timed_out: bool = False
    stack_files: Tuple[str, ...] = ()
    stopped_s: Optional[float] = None  # seconds its process had been stopped by a signal

    @property
    def where(self) -> str:
        """Its main thread's frame, or why there is none."""
        if self.stopped_s is not None and not self.frame:
            return "a stopped process"
        return self.frame or ("exited" if not self.alive else "no stack")

    def to_json(self) -> Dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "last_step": self.last_step,
            "silent_s": self.silent_s,
            "frame": self.frame,
            "in_collective": self.in_collective,
            "alive": self.alive,
            "timed_out": self.timed_out,
            "stack_files": list(self.stack_files),
            **({"stopped_s": self.stopped_s} if self.stopped_s is not None else {}),
        }


@dataclass(frozen=True)
class HangReport:
    """What the hang watch found (see the module doc for its JSON)."""

    kind: HangKind
    limit_s: Optional[float] = None
    derived: Optional[str] = None
    idle_s: Optional[float] = None
    stacks_dir: Optional[str] = None
    culprit: Optional[Culprit] = None
    timed_out: Optional[TimedOut] = None
    ranks: Tuple[HangRank, ...] = field(default_factory=tuple)

    @property
    def collective(self) -> bool:
        return self.kind == HangKind.COLLECTIVE_TIMEOUT

    def message(self) -> str:
        """The summary's one line for the hung attempt."""
        if self.collective:
            t = self.timed_out or TimedOut(None, "")
            head = f"rank {t.rank}'s collective timed out waiting for the others ({t.line[:160]})"
        elif self.kind == HangKind.STOPPED:
            head = f"hung: a rank's process was stopped by a signal for {self.idle_s} s (limit {self.limit_s} s)"
        else:
            head = f"hung: no rank made progress for {self.idle_s} s (limit {self.limit_s} s, {self.derived})"
        if self.culprit is not None:
            head += f"; likely culprit: rank {self.culprit.rank}: {self.culprit.evidence}"
        else:
            head += "; no rank stands out (see the stacks)"
        return head + f"; stacks in {self.stacks_dir}"

    def title(self) -> str:
        """The first line of :meth:`lines` (the console's table title)."""
        if self.collective:
            return f"hung: rank {self.timed_out.rank if self.timed_out else None}'s collective timed out"
        if self.kind == HangKind.STOPPED:
            return f"hung: a rank's process stopped for {self.idle_s} s; limit {self.limit_s} s ({self.derived})"
        return f"hung: no progress for {self.idle_s} s; limit {self.limit_s} s ({self.derived})"

    def lines(self) -> List[str]:
        """The hang in a few lines: the limit, the culprit, each rank's last step and frame."""
        out = [self.title() + (" waiting for the others" if self.collective else "")]
        out.append(
            f"likely culprit: rank {self.culprit.rank}: {self.culprit.evidence}"
            if self.culprit
            else "likely culprit: none stands out"
        )
        for r in self.ranks:
            out.append(f"  rank {r.rank}: last {r.last_step or 'step -'}, main thread in {r.where}")
        out.append(f"stacks: {self.stacks_dir}")
        return out

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": str(self.kind), "limit_s": self.limit_s, "derived": self.derived}
        if self.idle_s is not None:
            out["idle_s"] = self.idle_s
        if self.timed_out is not None:
            out["timed_out"] = self.timed_out.to_json()
        out.update(
            stacks_dir=self.stacks_dir,
            culprit=self.culprit.to_json() if self.culprit else None,
            ranks=[r.to_json() for r in self.ranks],
        )
        return out

    @classmethod
    def from_json(cls, data: Optional[Mapping[str, Any]]) -> Optional["HangReport"]:
        """The report of a summary's ``hang`` object (None for none); missing fields stay unset."""
        if not isinstance(data, Mapping) or not data:
            return None
        try:
            kind = HangKind(data.get("kind", HangKind.NO_PROGRESS))
        except ValueError:
            kind = HangKind.NO_PROGRESS
        culprit = data.get("culprit")
        timed = data.get("timed_out")
        ranks = []
        for r in data.get("ranks") or ():
            if isinstance(r, Mapping):
                ranks.append(
                    HangRank(
                        rank=r.get("rank"),  # type: ignore[arg-type]  # hang.json is mslaunch's own: each entry has its rank
                        host=str(r.get("host")),
                        last_step=r.get("last_step"),
                        silent_s=r.get("silent_s"),
                        frame=r.get("frame"),
                        in_collective=r.get("in_collective"),
                        alive=r.get("alive", True) is not False,
                        timed_out=bool(r.get("timed_out")),
                        stack_files=tuple(r.get("stack_files") or ()),
                        stopped_s=r.get("stopped_s"),
                    )
                )
        return cls(
            kind=kind,
            limit_s=data.get("limit_s"),
            derived=data.get("derived"),
            idle_s=data.get("idle_s"),
            stacks_dir=data.get("stacks_dir"),
            culprit=Culprit(culprit["rank"], str(culprit.get("evidence", "")))
            if isinstance(culprit, Mapping) and "rank" in culprit
            else None,
            timed_out=TimedOut(timed.get("rank"), str(timed.get("line", ""))) if isinstance(timed, Mapping) else None,
            ranks=tuple(ranks),
        )
