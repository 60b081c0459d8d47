"""The supervisor's hang watch: progress from the metric follower, the verdict, stack dumps and the
culprit (see :mod:`launcher.logs.hang` and :mod:`launcher.logs.stacks` for the rules).

Wiring: :func:`launcher.execution.runner.run_plan` makes one :class:`HangWatch` per job, gives
:meth:`HangWatch.on_line` to the metrics writer (every rank line it reads) and the watch to the
supervisor, which calls :meth:`begin` at each attempt, :meth:`due` while it waits, and
:meth:`investigate` before teardown when the attempt is hung or a rank's collective timed out.

What a hung attempt leaves: ``<attempt dir>/stacks/`` with one file per process (see
:mod:`launcher.execution.process.stackdump`; remote backends dump on the rank's host through
:meth:`ProcessHandle.dump_stacks <launcher.execution.backend.ProcessHandle.dump_stacks>`), and
the report of :mod:`launcher.logs.hangreport` (``summary.json``'s ``hang`` object).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from launcher.execution.process.handle import ProcessHandle
from launcher.execution.results import ProcResult, RootCause
from launcher.execution.supervision.diagnose import RootTail, judge_cause
from launcher.logs.hang import HangPolicy, HangTracker, HangVerdict, step_text
from launcher.logs.hangreport import HangKind, HangRank, HangReport, TimedOut
from launcher.logs.metrics import Metric
from launcher.logs.stacks import (
    RankEvidence,
    collective_timeout,
    in_collective,
    innermost_python,
    judge_culprit,
    main_thread,
    parse_pyspy,
)
from launcher.planning.job.kinds import Role

if TYPE_CHECKING:
    from launcher.execution.supervision.planned import PlannedRestarts
    from launcher.execution.supervision.stragglerwatch import StragglerWatch

__all__ = ["HangWatch", "STACKS_DIR", "culprit_cause"]

#: The attempt's folder of stack dumps.
STACKS_DIR = "stacks"


class HangWatch:
    """One job's hang watch (thread-safe: lines come from the follower's thread).

    Args:
        policy: ``--hang-timeout`` / ``--first-step-timeout``.
        clock: the monotonic clock.
    """

    def __init__(self, policy: HangPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.tracker = HangTracker(policy)
        self._clock = clock
        self.plan_ranks: List[Tuple[int, str]] = []
        self.stopped_for: Dict[int, float] = {}  # rank -> seconds stopped, as last looked at
        self.stragglers: Optional["StragglerWatch"] = None  # --straggler, asked along (see stopped())
        self.planned: Optional["PlannedRestarts"] = None  # a planned restart asked for (planned.py)

    def on_line(self, attempt: int, rank: int, metric: Optional[Metric]) -> None:
        """A rank's line arrived (called by the metrics writer for every line)."""
        self.tracker.feed(attempt, rank, metric.progress if metric is not None else None, self._clock())

    def begin(self, attempt: int, ranks: Sequence[Tuple[int, str]]) -> None:
        """Attempt ``attempt`` starts with these ``(rank, host)``."""
        self.plan_ranks = list(ranks)
        self.stopped_for = {}
        self.tracker.begin(attempt, [r for r, _ in ranks], self._clock())
        if self.stragglers is not None:
            self.stragglers.begin(attempt)
        if self.planned is not None:
            self.planned.begin(attempt)

    def due(self) -> Optional[HangVerdict]:
        """The verdict when the current attempt is hung now (never when the policy is off)."""
        if not self.policy.watching:
            return None
        return self.tracker.due(self._clock())

    def stopped(self, handles: Sequence[ProcessHandle], exits: Dict[int, Any]) -> Optional[HangVerdict]:
        """The verdict when a running rank's process has been stopped by a signal for
        ``--stopped-timeout`` (looked at on every call: the supervisor calls it about once a
        second); None otherwise, or when that watch is off.  The straggler watch looks along."""
        if self.stragglers is not None:
            self.stragglers.look(handles, exits)
        limit = self.policy.stopped
        if limit is None:
            return None
        now = self._clock()
        self.stopped_for = {}
        for idx, h in enumerate(handles):
            if idx in exits or h.plan.rank is None or h.plan.role != Role.WORKER:
                continue
            try:
                seconds = h.stopped_for(now)
            except Exception:  # looking must never end a job
                seconds = None
            if seconds is not None:
                self.stopped_for[h.plan.rank] = seconds
        if not self.stopped_for:
            return None
        rank, seconds = max(self.stopped_for.items(), key=lambda kv: (kv[1], -kv[0]))
        if seconds < limit:
            return None
        return HangVerdict(limit, f"--stopped-timeout {limit:g} s", seconds, stopped_rank=rank)

    def timed_out(self, handle: ProcessHandle, tail: Sequence[str]) -> Optional[str]:
        """The collective-timeout line of a failed worker's log tail, or None."""
        if handle.plan.role != Role.WORKER:
            return None
        return collective_timeout(tail)

    def investigate(
        self,
        handles: Sequence[ProcessHandle],
        exits: Dict[int, Any],
        adir: str,
        verdict: Optional[HangVerdict],
        timed_out: Optional[Tuple[int, str]] = None,
    ) -> Tuple[HangReport, str]:
        """Dump the stacks of the running ranks, judge the culprit; the ``hang`` object of the summary
        and its one-line message.

        Args:
            handles: the attempt's handles.
            exits: index -> exit of the handles that exited (not dumped).
            adir: the attempt's folder (``stacks/`` goes there).
            verdict: the no-progress verdict, or None for a collective timeout.
            timed_out: ``(rank, line)`` of the rank whose collective timed out.
        """
        folder = os.path.join(adir, STACKS_DIR)
        now = self._clock()
        files = _dump(handles, exits, folder)
        watches = {w.rank: w for w in self.tracker.ranks()}
        alive: Dict[int, bool] = {}
        hosts: Dict[int, str] = {}
        for idx, h in enumerate(handles):
            if h.plan.rank is not None and h.plan.role == Role.WORKER:
                alive[h.plan.rank] = idx not in exits and not h.has_exited()
                hosts[h.plan.rank] = h.host
        for p in self.plan_ranks:  # ranks a handle stands for together (mpirun, a Slurm step)
            hosts.setdefault(p[0], p[1])
            if p[0] not in alive:
                alive[p[0]] = any(
                    idx not in exits and not h.has_exited()
                    for idx, h in enumerate(handles)
                    if h.plan.role != Role.SCHEDULER
                )
        ranks: List[RankEvidence] = []
        rows: List[HangRank] = []
        for rank in sorted(hosts):
            w = watches.get(rank)
            ev = RankEvidence(
                rank,
                last_step=w.last_step if w else None,
                silent_for=None if w is None or w.last_output_at is None else now - w.last_output_at,
                timed_out=timed_out is not None and timed_out[0] == rank,
                alive=alive.get(rank, False),
                stack_files=files.get(rank, []),
                stopped_for=self.stopped_for.get(rank),
            )
            if ev.stack_files:
                _read_frame(ev.stack_files[0], ev)
            ranks.append(ev)
            rows.append(
                HangRank(
                    rank=rank,
                    host=hosts[rank],
                    last_step=step_text(ev.last_step),
                    silent_s=None if ev.silent_for is None else round(ev.silent_for, 1),
                    frame=ev.frame,
                    in_collective=ev.in_collective,
                    alive=ev.alive,
                    timed_out=ev.timed_out,
                    stack_files=tuple(os.path.basename(f) for f in ev.stack_files),
                    stopped_s=None if ev.stopped_for is None else round(ev.stopped_for, 1),
                )
            )
        culprit = judge_culprit(ranks)
        limit_s: Optional[float]
        idle_s: Optional[float]
        if verdict is not None:
            limit_s, derived, idle_s = round(verdict.limit, 1), verdict.derived, round(verdict.idle, 1)
        else:
            limit, derived = self.tracker.limit()
            limit_s, idle_s = None if limit is None else round(limit, 1), None
        if verdict is None:
            kind = HangKind.COLLECTIVE_TIMEOUT
        else:
            kind = HangKind.STOPPED if verdict.stopped_rank is not None else HangKind.NO_PROGRESS
        report = HangReport(
            kind=kind,
            limit_s=limit_s,
            derived=derived,
            idle_s=idle_s,
            stacks_dir=folder,
            culprit=culprit,
            timed_out=TimedOut(timed_out[0], timed_out[1]) if timed_out is not None else None,
            ranks=tuple(rows),
        )
        return report, report.message()


def _dump(handles: Sequence[ProcessHandle], exits: Dict[int, Any], folder: str) -> Dict[Optional[int], List[str]]:
    """Dump every running rank's stacks at once, each the way its backend reaches it
    (:meth:`ProcessHandle.dump_stacks <launcher.execution.backend.ProcessHandle.dump_stacks>`).
    Returns rank -> files, the rank's own process first."""
    import threading

    out: Dict[Optional[int], List[str]] = {}
    lock = threading.Lock()

    def one(h: ProcessHandle) -> None:
        try:
            got = h.dump_stacks(folder) or {}
        except Exception:  # a dump must never stop the teardown
            got = {}
        with lock:
            for rank, files in got.items():
                out.setdefault(rank, []).extend(files)

    threads = [
        threading.Thread(target=one, args=(h,), daemon=True)
        for idx, h in enumerate(handles)
        if idx not in exits and not h.has_exited() and h.plan.role != Role.SCHEDULER
    ]  # ranks only: the scheduler waits by design
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _read_frame(path: str, ev: RankEvidence) -> None:
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return
    thread = main_thread(parse_pyspy(text))
    if thread is None or not thread.frames:
        return
    frame = innermost_python(thread)
    ev.frame = str(frame) if frame is not None else str(thread.frames[0])
    ev.in_collective = in_collective(thread)


def culprit_cause(hang: Optional[HangReport], results: List[ProcResult]) -> Optional[RootCause]:
    """A hung attempt's root cause: the likely culprit's process (not the rank that timed out), with
    the cause judged from the hang report; without a culprit, the rank whose collective timed out
    (its cause says no rank stands out); None when neither is known (a hang where no rank stands
    out: the report and the message tell it)."""
    if hang is None:
        return None
    culprit = hang.culprit
    rank = culprit.rank if culprit is not None else (hang.timed_out.rank if hang.timed_out is not None else None)
    if rank is None:
        return None
    for r in results:
        if r.rank == rank and r.name.startswith("rank"):
            why = (
                f"likely culprit of the hang: {culprit.evidence}"
                if culprit is not None
                else "its collective timed out; no rank stands out"
            )
            proc = replace(r, reason=why)
            tail = RootTail.read(r.log)
            return RootCause(proc, tail.shown(), judge_cause(proc, tail.lines, hang=hang))
    return None
