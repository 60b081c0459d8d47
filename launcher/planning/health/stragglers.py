"""Slow ranks found while the job runs (``--straggler``): the policy and the judge (pure: no I/O).

In data-parallel training every rank waits for the slowest at each AllReduce, so step times cannot
tell which rank is slow. The scheduler can: each rank's process tree has cumulative ``cpu`` (seconds
on a CPU) and ``delay`` (seconds runnable but waiting for a CPU, CFS-throttled time included)
figures (``/proc/<pid>/task/<tid>/schedstat``, summed over the tree; see
:class:`launcher.execution.process.proctree.SchedCounter`). Over a window, a rank's **CPU starvation
share** is ``Δdelay / (Δcpu + Δdelay)``: of the time it wanted a CPU, the part it waited. A rank
that waits in a collective is blocked (not runnable) and adds to neither, so the share separates a
CPU-starved rank (a CPU quota, a noisy neighbour on its host) from the ranks that wait for it.

The rule is relative, so a machine-wide load names nobody: a rank is a straggler when, over the last
``window`` seconds, its share is at least ``min_share`` and its odds ``share / (1 - share)`` are at
least ``odds_ratio`` times those of the median of the other ranks, and it was runnable at least
``min_busy`` of the window, at ``confirm`` judgements in a row (one every ``every`` seconds) that
each saw a new sample of the rank (a host that reports less often than the judge looks gives the
same sample again: that is no new evidence, so it neither confirms nor clears). Odds rather than a
difference of shares: under a heavy common load every share nears 1 (measured here: 0.84-0.88 for
healthy ranks at load 9 on 2 cores), where a starved rank's 0.97 is a small difference but a large
ratio of odds (32 against 6). A named rank is cleared after ``confirm`` judgements in a row that do
not name it.

A second rule sees a slow link: each sample also carries the bytes waiting in the rank's TCP send
queues (``tx_queue`` of its sockets); a rank whose median over the window's samples is at least
``min_sendq`` and ``sendq_ratio`` times the other ranks' median (at least ``min_sendq / 16``) is
named too (``kind`` ``link``): the rank behind a shaped or congested link keeps its queues full in
most samples, the others' drain. The median, not the mean: on a busy machine a slow reader leaves
one sender's queue full at one moment or another (measured here: 600-900 KiB in a single sample of a
healthy job beside two MindSpore jobs), which a mean over three samples made a straggler. A receiver
that does not read fills its senders' queues as well (the evidence says so): while a rank is starved
of CPU in a judgement, no rank is named for its link in it (the starved rank is the one its senders
wait for); and it needs three ranks at least: between two, the sender's full queue says as much of
the receiver as of its own link (a healthy 2-rank trainer named its sender here once, at the end of
a job under the test suite's load).

A full queue in most samples is not yet a slow link: a data-parallel rank sends its gradients in a
burst each step, and samples taken every few seconds can meet one rank's bursts every time (a
healthy 3-host trainer over ssh: one rank at a median of 296 KiB, the others at 0, named and its
host replaced). So the rule also needs the rank's busiest TCP connection to have had data in flight
(the kernel's ``tcpi_busy_time``, see :meth:`~launcher.execution.process.proctree.SchedCounter.busiest_link`)
at least ``min_link_busy`` of the window: a link that is the job's bottleneck is never idle, a
bursty sender's drains between steps (measured on the namespace cluster: 35-50 % for every rank of a
healthy trainer). Where the busy times are unknown (``link`` -1: another network namespace, no
sock_diag) the queue rule alone decides.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Deque, Dict, List, Mapping, Optional, Tuple

from launcher.errors import PlanError
from launcher.planning.median import median

__all__ = ["MODES", "Sample", "StragglerJudge", "StragglerPolicy", "StragglerVerdict", "Update"]

#: ``--straggler`` modes: off, warn (events and the console), replace (warn, and a planned restart
#: that leaves the straggler's host out when the job can go on without it:
#: :mod:`launcher.execution.supervision.planned`).
MODES = ("off", "warn", "replace")


@dataclass(frozen=True)
class StragglerPolicy:
    """``--straggler MODE[:WINDOW]`` and the rule's numbers (see the module doc).

    Attributes:
        mode: off | warn | replace.
        window: seconds judged at a time.
        confirm: judgements in a row that name (or clear) a rank.
        min_share: the least share of a straggler.
        odds_ratio: how many times the other ranks' median odds a straggler's must be.
        min_busy: the least part of the window a straggler was runnable.
        min_sendq: the least mean of bytes in a straggler's TCP send queues (the link rule).
        sendq_ratio: how many times the other ranks' median (at least ``min_sendq / 16``) that must be.
        min_link_busy: the least share of the window its busiest TCP connection had data in flight
            (the link rule; where the busy times are known).
    """

    mode: str = "warn"
    window: float = 30.0
    confirm: int = 3
    min_share: float = 0.5
    odds_ratio: float = 4.0
    min_busy: float = 0.1
    min_sendq: float = 65536.0
    sendq_ratio: float = 8.0
    min_link_busy: float = 0.8

    @property
    def watching(self) -> bool:
        return self.mode != "off"

    @property
    def every(self) -> float:
        """Seconds between samples (and judgements): a sixth of the window, 1 to 5 s."""
        return max(1.0, min(5.0, self.window / 6))

    @classmethod
    def parse(cls, text: Optional[str]) -> "StragglerPolicy":
        """From ``--straggler off|warn|replace`` with an optional ``:WINDOW`` in seconds (``warn:10``).

        Raises:
            PlanError: another mode, or a window that is not a number of seconds >= 3.
        """
        word = (text or "warn").strip().lower()
        mode, _, window = word.partition(":")
        if mode not in MODES:
            raise PlanError(
                f"--straggler {text!r}: expected off, warn or replace (optionally :WINDOW seconds, e.g. warn:30)",
                field="--straggler",
            )
        seconds = cls.window
        if window:
            try:
                seconds = float(window)
            except ValueError:
                seconds = -1.0
            if not 3 <= seconds <= 3600:
                raise PlanError(
                    f"--straggler {text!r}: the window is seconds from 3 to 3600 (e.g. warn:30)", field="--straggler"
                )
        return cls(mode, seconds)


@dataclass(frozen=True)
class Sample:
    """A rank's cumulative figures at ``time`` (seconds on any clock of its own, only differences count)."""

    time: float
    cpu: float
    delay: float
    sendq: float = 0.0  # bytes in its TCP send queues at ``time`` (not cumulative)
    link: float = -1.0  # cumulative seconds its busiest TCP connection had data in flight (-1: unknown)


@dataclass(frozen=True)
class StragglerVerdict:
    """A rank named a straggler (or cleared), with its evidence."""

    rank: int
    host: str
    share: float  # its starvation share over the window
    others: Tuple[float, float]  # the other ranks' lowest and highest share
    window: float  # seconds judged
    since: float  # the judge's clock when it was first named
    median: float = 0.0  # the other ranks' median share
    kind: str = "cpu"  # cpu: starved of CPU; link: its TCP send queues stay full
    sendq: float = 0.0  # its median send-queued bytes over the window's samples
    others_sendq: Tuple[float, float] = (0.0, 0.0)  # the other ranks' lowest and highest median
    median_sendq: float = 0.0
    link_busy: float = -1.0  # the share of the window its busiest TCP connection had data in flight (-1: unknown)

    @property
    def evidence(self) -> str:
        if self.kind == "link":
            low, high = (round(x / 1024) for x in self.others_sendq)
            others = f"{low} KiB" if low == high else f"{low}-{high} KiB"
            busy = f", its busiest connection sending {100 * self.link_busy:.0f} % of the time"
            busy = busy if self.link_busy >= 0 else ""
            return (
                f"rank {self.rank} on {self.host} kept {self.sendq / 1024:.0f} KiB waiting in its TCP send queues "
                f"over the last {self.window:.0f} s{busy} (the other ranks {others}): a slow link or receiver"
            )
        low, high = (round(100 * x) for x in self.others)
        others = f"{low} %" if low == high else f"{low}-{high} %"
        return (
            f"rank {self.rank} on {self.host} waited for CPU {100 * self.share:.0f} % of its runnable time "
            f"over the last {self.window:.0f} s (the other ranks {others})"
        )

    def to_json(self) -> Dict[str, object]:
        return {
            "rank": self.rank,
            "host": self.host,
            "share": round(self.share, 3),
            "others": [round(x, 3) for x in self.others],
            "window_s": round(self.window, 1),
            "by": self.kind,
            "send_queued": round(self.sendq),
            "link_busy": round(self.link_busy, 3),
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Update:
    """What one judgement changed: ranks newly named, ranks no longer named."""

    named: Tuple[StragglerVerdict, ...] = ()
    cleared: Tuple[StragglerVerdict, ...] = ()


@dataclass
class _Rank:
    samples: Deque[Sample]
    streak: int = 0  # judgements in a row that met the rule (named: that did not)
    fresh: bool = False  # the last judgement had a new sample of this rank


class StragglerJudge:
    """Fed every rank's samples; names and clears stragglers (see the module doc)."""

    def __init__(self, policy: StragglerPolicy) -> None:
        self.policy = policy
        self._ranks: Dict[int, _Rank] = {}
        self.named: Dict[int, StragglerVerdict] = {}
        self.last_shares: Dict[int, float] = {}  # rank -> share at the last judgement

    def feed(self, samples: Mapping[int, Sample], hosts: Mapping[int, str], now: float) -> Update:
        """One judgement from each rank's latest sample (rank -> :class:`Sample`; a rank without
        one is forgotten); ``now`` is the judge's clock (the ``since`` of a verdict)."""
        shares: Dict[int, Tuple[float, float, float, float, float]] = {}  # rank -> (share, busy part, span,
        # median sendq, busiest link's share or -1)
        for rank, s in samples.items():
            st = self._ranks.setdefault(rank, _Rank(deque()))
            last = st.samples[-1] if st.samples else None
            if last is not None and (s.cpu < last.cpu or s.delay < last.delay or s.time < last.time):
                st.samples.clear()  # a new process (a restart)
                last = None
            st.fresh = last is None or s.time > last.time  # else the same sample again (a host reports less often)
            if st.fresh:
                st.samples.append(s)
            while len(st.samples) > 2 and st.samples[1].time <= s.time - self.policy.window:
                st.samples.popleft()
            first = st.samples[0]
            span = s.time - first.time
            if span < self.policy.window / 2:
                continue
            cpu, delay = s.cpu - first.cpu, s.delay - first.delay
            runnable = cpu + delay
            sendq = median(x.sendq for x in st.samples)
            link = (s.link - first.link) / span if first.link >= 0 and s.link >= first.link else -1.0
            shares[rank] = (delay / runnable if runnable > 0 else 0.0, runnable / span, span, sendq, link)
        for gone in set(self._ranks) - set(samples):  # exited: no longer judged
            self._ranks.pop(gone)
            self.named.pop(gone, None)
        self.last_shares = {r: v[0] for r, v in shares.items()}
        named: List[StragglerVerdict] = []
        cleared: List[StragglerVerdict] = []
        measured_all = {r: self._measure(r, shares, hosts.get(r, "?"), now) for r in self._ranks}
        peers = len(shares) - 1
        verdicts = {r: self._meets(m, shares[r][1], peers) if m is not None else None for r, m in measured_all.items()}
        if any(v is not None and v.kind == "cpu" for v in verdicts.values()):  # a starved rank reads slowly:
            verdicts = {r: v if v is not None and v.kind == "cpu" else None for r, v in verdicts.items()}  # not links
        for rank, st in self._ranks.items():
            measured, verdict = measured_all[rank], verdicts[rank]
            held = self.named.get(rank)
            if not st.fresh:  # no new evidence of this rank
                continue
            if held is None:
                st.streak = st.streak + 1 if verdict is not None else 0
                if verdict is not None and st.streak >= self.policy.confirm:
                    self.named[rank] = verdict
                    named.append(verdict)
                    st.streak = 0
            else:
                st.streak = 0 if verdict is not None else st.streak + 1
                now_seen = replace(verdict or measured, since=held.since, kind=held.kind) if measured else held
                if verdict is not None or st.streak < self.policy.confirm:
                    self.named[rank] = now_seen
                else:
                    del self.named[rank]
                    cleared.append(now_seen)
                    st.streak = 0
        return Update(tuple(named), tuple(cleared))

    def _measure(
        self, rank: int, shares: Mapping[int, Tuple[float, float, float, float, float]], host: str, now: float
    ) -> Optional[StragglerVerdict]:
        """``rank``'s figures over the window beside the others' (named or not), or None without them."""
        others = [v for r, v in shares.items() if r != rank]
        if rank not in shares or not others:
            return None
        share, _, span, sendq, link = shares[rank]
        low, med, high = min(v[0] for v in others), median(v[0] for v in others), max(v[0] for v in others)
        queued = [v[3] for v in others]
        return StragglerVerdict(
            rank,
            host,
            share,
            (low, high),
            span,
            now,
            med,
            "cpu",
            sendq,
            (min(queued), max(queued)),
            median(queued),
            link,
        )

    def _meets(self, v: StragglerVerdict, busy: float, peers: int) -> Optional[StragglerVerdict]:
        """``v`` as the kind of straggler its figures (runnable ``busy`` of the window, beside
        ``peers`` other ranks) make it, or None.  The link rule needs two peers at least: between two
        ranks a full send queue says as much of the receiver as of the sender's link."""
        p = self.policy
        if v.share >= p.min_share and busy >= p.min_busy and _odds(v.share) >= p.odds_ratio * _odds(v.median):
            return v
        if peers < 2:
            return None
        if v.sendq >= p.min_sendq and v.sendq >= p.sendq_ratio * max(v.median_sendq, p.min_sendq / 16):
            if 0 <= v.link_busy < p.min_link_busy:  # full now and then, but its link drains: bursts
                return None
            return replace(v, kind="link")
        return None


def _odds(share: float) -> float:
    return share / (1.0 - share) if share < 1.0 else float("inf")
