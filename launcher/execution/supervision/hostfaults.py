"""Failures attributed to hosts, and the hosts a restart leaves out (no I/O).

Spare hosts on restart (``mslaunch run --host-failures N``, docs/spare-hosts.md): after a failed or
hung attempt, :func:`attributed` names the hosts the attempt's failure is blamed on:

* the attempt's earliest failure (its root cause), when it is a rank killed by a signal that
  mslaunch did not send (``rank 2 killed by SIGKILL``).  What died after it is most likely a
  consequence (a peer's collective broke), so it is not counted;
* a hung attempt's likely culprit (the hang detector names a rank): its host (``rank 1 hang
  culprit``);
* a *lost* host (its ssh session or agent gone, mpirun's daemon on it gone, its Slurm node down
  or not responding: a rank its backend ended with ``host_lost``, not by mslaunch's teardown):
  excluded at once, whatever ``N`` is;
* a host whose ranks mslaunch was tearing down when its backend found it lost too (two hosts
  behind one failed switch: the first one lost starts the teardown, the second is found lost
  during it): lost when it does not answer at the restart (``reachable``), since a teardown can
  end a backend's link to a host that is fine (mpirun's daemons go with mpirun).

At most one failure per host and attempt is counted.  :class:`HostFaults` keeps the counts of the
job; a host with ``N`` failures in a row (or lost once) is due to be left out of the next attempt.
*In a row*: an attempt that trained new steps (its best step past every earlier attempt's) with a
rank on a host clears that host's earlier failures: on a long job faults come now and then to any
host, and a host the job trained on since its last failure is not the one that keeps the job from
progressing (a bad host fails every attempt before the job gets further: a crash loop); and
:class:`Spares` asks for that attempt's plan (``replan``, given by the caller that holds the job's
spec: :func:`launcher.planning.spares.replan`).

A host left out is tried again (``--rejoin-after SECONDS``): at a restart at least that long after
it was left out, when it answers again (``reachable``: its ssh port accepts), it is given ranks
again (the event ``host_rejoined``) and its failures are forgotten; each time the same host is
left out again its cooldown doubles (Horovod's blacklist cooldown, for the same reason: a host
that keeps failing costs a restart each time it is tried).  With ``--min-hosts`` this is how a job
that went on with fewer hosts grows back to its planned size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from launcher.errors import MsLaunchError
from launcher.execution.results import FAILED, HUNG, AttemptResult, earliest_failure
from launcher.planning.job.spec import Exclusion, Plan

__all__ = ["Fault", "HostFaults", "Reachable", "Replan", "Replanned", "Spares", "attributed", "moves_text"]


@dataclass(frozen=True)
class Fault:
    """One failure blamed on a host: ``what`` (``rank 2 killed by SIGKILL``), ``lost``: the host is gone."""

    host: str
    what: str
    lost: bool = False


def attributed(result: AttemptResult) -> List[Fault]:
    """The faults of one attempt, at most one per host (see the module doc)."""
    if result.status not in (FAILED, HUNG):
        return []
    out: Dict[str, Fault] = {}
    for p in result.processes:
        if p.lost is not None and p.host not in out:
            out[p.host] = Fault(p.host, f"{p.name}: {p.reason}", lost=True)
    if result.status == HUNG:
        rank = result.hang.culprit.rank if result.hang is not None and result.hang.culprit is not None else None
        host = next((p.host for p in result.processes if p.rank == rank and p.rank is not None), None)
        if host is not None and host not in out:
            out[host] = Fault(host, f"rank {rank} hang culprit")
        return list(out.values())
    first = earliest_failure(list(result.processes))
    if first is not None and first.rank is not None and first.signal is not None and first.host not in out:
        out[first.host] = Fault(first.host, f"rank {first.rank} killed by {first.signal}")
    return list(out.values())


class HostFaults:
    """The faults per host of one job, and the hosts due to be left out.

    Args:
        limit: ``--host-failures``: failures of one host in a row (see the module doc) that leave
            it out; 0: never leave a host out for failures (a lost host is still left out).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.faults: Dict[str, List[Fault]] = {}
        self.cleared: Dict[str, int] = {}  # host -> failures cleared by the job's progress on it
        self.best: Optional[int] = None  # the furthest step of the attempts counted so far

    def add(self, result: AttemptResult) -> List[Fault]:
        """Count ``result``'s faults (after clearing the earlier ones of the hosts it trained new
        steps on); the new ones."""
        best = result.best_step
        if isinstance(best, int) and (self.best is None or best > self.best):
            self.best = best
            for host in {p.host for p in result.processes if p.rank is not None}:
                gone = self.faults.pop(host, [])
                if gone and not any(f.lost for f in gone):
                    self.cleared[host] = self.cleared.get(host, 0) + len(gone)
                elif gone:
                    self.faults[host] = gone
        new = attributed(result)
        for f in new:
            self.faults.setdefault(f.host, []).append(f)
        return new

    def forget(self, host: str) -> None:
        """``host`` starts with no failures (it is tried again after its cooldown)."""
        self.faults.pop(host, None)

    def due(self, already: Sequence[str], attempt: int) -> List[Exclusion]:
        """Hosts to leave out from ``attempt`` on (not in ``already``), in the order first faulted,
        with their reasons."""
        out: List[Exclusion] = []
        for host, faults in self.faults.items():
            if host in already:
                continue
            lost = next((f for f in faults if f.lost), None)
            if lost is not None:
                out.append(Exclusion(host, f"host lost ({lost.what})", "restart", attempt))
            elif self.limit > 0 and len(faults) >= self.limit:
                n = len(faults)
                out.append(
                    Exclusion(
                        host, f"{n} failure{'s' * (n != 1)} ({', '.join(f.what for f in faults)})", "restart", attempt
                    )
                )
        return out


def moves_text(
    old: Sequence[Tuple[int, str]], new: Sequence[Tuple[int, str]], old_sched: Optional[str], new_sched: Optional[str]
) -> str:
    """``ranks 2-3 move to h4`` (ranks whose host changed, grouped by their new host; ``rank 5 to h3``
    for one), then ``the scheduler moves to h1`` when it did; empty when nothing moved."""
    before = dict(old)
    moved: Dict[str, List[int]] = {}
    for rank, host in sorted(new):
        if before.get(rank) != host:
            moved.setdefault(host, []).append(rank)
    parts = []
    for i, (host, rs) in enumerate(moved.items()):
        verb = (" move to " if len(rs) > 1 else " moves to ") if i == 0 else " to "
        parts.append(_ranks_text(rs) + verb + host)
    text = ", ".join(parts)
    if new_sched is not None and new_sched != old_sched:
        text = f"{text}; the scheduler moves to {new_sched}" if text else f"the scheduler moves to {new_sched}"
    return text


def _ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 2-3``, ``ranks 0-1,4``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: List[str] = []
    start = prev = ranks[0]
    for r in list(ranks[1:]) + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return "ranks " + ",".join(runs)


#: Re-plans the job without the given hosts (every exclusion so far), the planned world size (fewer
#: ranks with ``--min-hosts``); raises :class:`launcher.errors.PlanError` (one line) when the rest
#: has too few slots (or hosts).
Replan = Callable[[Sequence[Exclusion]], Plan]

#: Whether a host left out answers again (the caller's probe: its ssh port accepts a connection).
Reachable = Callable[[str], bool]


@dataclass(frozen=True)
class Replanned:
    """The plan of the next attempt, the hosts it newly leaves out, those it takes back, and which
    ranks moved where (``ranks 2-3 move to h4``, see :func:`moves_text`)."""

    plan: Plan
    excluded: Tuple[Exclusion, ...]
    moves: str
    rejoined: Tuple[Exclusion, ...] = ()


class Spares:
    """The supervisor's restart path to spare hosts: count each attempt's faults; when a host is
    due (see :class:`HostFaults`), the next attempt's plan without it.

    Args:
        replan: see :data:`Replan`.
        limit: ``--host-failures``.
        rejoin_after: ``--rejoin-after``: seconds before a host left out is tried again (doubled
            each time it is left out again); None: never.
        reachable: see :data:`Reachable` (asked only of hosts whose cooldown is over).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        replan: Replan,
        limit: int,
        rejoin_after: Optional[float] = None,
        reachable: Optional[Reachable] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replan = replan
        self.faults = HostFaults(limit)
        self.rejoin_after = rejoin_after
        self.probes = reachable is not None
        self.reachable: Reachable = reachable or (lambda host: True)
        self.clock = clock
        self.left_at: Dict[str, float] = {}  # host -> when it was last left out
        self.times_left: Dict[str, int] = {}  # host -> how often it was left out
        self.never_back: Set[str] = set()  # hosts left out as stragglers: not taken back in this job
        self.check: Optional[Replan] = None  # the re-plan without writing anything (can_leave_out)

    def after(self, result: AttemptResult, plan: Plan, next_attempt: int) -> Optional[Replanned]:
        """Count ``result``; the re-planned next attempt, or None when no host is due to be left
        out or taken back.

        Raises:
            PlanError: not enough spare hosts (one line naming the hosts and their failures).
        """
        self.faults.add(result)
        self._silent_during_teardown(result)
        new = self.faults.due([e.host for e in plan.excluded], next_attempt)
        for host, why in result.leave_out:  # a planned restart's (--straggler replace): for good
            if host not in {e.host for e in plan.excluded} | {e.host for e in new}:
                new.append(Exclusion(host, why, "restart", next_attempt))
            self.never_back.add(host)
        back = self._back(plan.excluded, {e.host for e in new})
        if not new and not back:
            return None
        now = self.clock()
        for e in new:
            self.left_at[e.host] = now
            self.times_left[e.host] = self.times_left.get(e.host, 0) + 1
        for e in back:
            self.faults.forget(e.host)
        fresh = self.replan(tuple(e for e in plan.excluded if e not in back) + tuple(new))
        rank_hosts = lambda p: [(r.rank, r.host) for r in p.ranks if r.rank is not None]  # noqa: E731  (a one-line local helper)
        sched = lambda p: p.scheduler.host if p.scheduler is not None else None  # noqa: E731  (a one-line local helper)
        moves = moves_text(rank_hosts(plan), rank_hosts(fresh), sched(plan), sched(fresh))
        return Replanned(fresh, tuple(new), moves, tuple(back))

    def _silent_during_teardown(self, result: AttemptResult) -> None:
        """Count as lost a host found lost while its ranks were torn down, if it does not answer now."""
        if not self.probes:
            return
        seen = set()
        for p in result.processes:
            if p.host_lost is None or p.lost is not None or p.host in seen:
                continue
            seen.add(p.host)
            if not any(f.lost for f in self.faults.faults.get(p.host, [])) and not self.reachable(p.host):
                self.faults.faults.setdefault(p.host, []).append(
                    Fault(p.host, f"{p.name}: {p.host_lost}; no answer at the restart", lost=True)
                )

    def _back(self, excluded: Sequence[Exclusion], leaving: "set[str]") -> List[Exclusion]:
        """The hosts left out whose cooldown is over and that answer again."""
        due = set(self.cooldown_over(excluded)) - leaving
        return [e for e in excluded if e.host in due and self.reachable(e.host)]

    def cooldown_over(self, excluded: Sequence[Exclusion]) -> List[str]:
        """Hosts of ``excluded`` that may be tried again now (``--rejoin-after``): left out by this
        job's restarts (not before the start: ``--preflight``), not as stragglers, cooldown over."""
        if self.rejoin_after is None:
            return []
        now = self.clock()
        out = []
        for e in excluded:
            if e.host not in self.left_at or e.host in self.never_back:
                continue
            cooldown = self.rejoin_after * 2 ** (self.times_left.get(e.host, 1) - 1)
            if now - self.left_at[e.host] >= cooldown:
                out.append(e.host)
        return out

    def can_leave_out(self, plan: Plan, host: str) -> bool:
        """Whether the job could go on without ``host`` (a spare is left, or ``--min-hosts`` allows
        a smaller job): asked before a planned restart leaves a straggler's host out."""
        if self.check is None:
            return False
        try:
            self.check(tuple(plan.excluded) + (Exclusion(host, "straggler", "restart", 0),))
        except MsLaunchError:
            return False
        return True
