"""The pre-flight health check's logic (pure): pairing rounds, medians, verdicts, JSON.

``mslaunch doctor --health`` and ``mslaunch run --preflight MODE`` measure every host of the
inventory (see :mod:`launcher.execution.checks.health` for the running part):

* **compute**: a fixed matmul kernel repeated for a short, fixed time on every host at once;
  the host's figure is its best window, in GFLOPS;
* **network**: round 1 pairs the hosts (1st with 2nd, 3rd with 4th, ...) and both members of a
  pair send to each other at once for a short, fixed time; the pair's figure is the slower
  direction, in MB/s.  Round 2 pairs each member of a *slow* pair (below ``threshold`` x the
  median) -- and the odd host out of round 1 -- with a distinct host of a fast pair: a host's
  network figure is the best of its transfers, so the healthy member of a slow pair is cleared
  by its round-2 transfer and the slow one stays slow (DLRover's node check does the same).
  Round 3 confirms: a host still below the bar after round 2 sends once more, with a fast host
  it has not been paired with where there is one, so one noisy transfer on a busy machine does not
  leave a healthy host out; its figure is still the best of its transfers.

Verdicts: ``faulty`` when the host did not answer (connection, start, kernel or timeout) or
none of its transfers worked (in every round it was in),
``slow`` when its compute or network figure is below ``threshold`` x the median of the hosts
that answered (network: of the hosts' round-1 figures, where every pair runs at once; round 2
only clears a host), else ``ok``.  Each verdict carries a one-line reason with the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.planning.health.policy import DEFAULT_THRESHOLD, PREFLIGHT_MODES
from launcher.planning.median import median

__all__ = [
    "DEFAULT_THRESHOLD",
    "KERNELS",
    "PREFLIGHT_MODES",
    "Transfer",
    "Verdict",
    "health_json",
    "judge",
    "confirm_pairs",
    "round1_pairs",
    "round2_pairs",
    "slow_members",
]

KERNELS = ("numpy", "mindspore")

OK, SLOW, FAULTY = "ok", "slow", "faulty"


@dataclass(frozen=True)
class Transfer:
    """One pair's bulk transfer: ``a`` and ``b`` sent to each other at once.

    Attributes:
        a, b: host names.
        mbps: the slower direction, MB/s (0.0 when a direction failed).
        round: 1, 2 or 3.
        error: why a direction failed, or None.
    """

    a: str
    b: str
    mbps: float
    round: int = 1
    error: Optional[str] = None

    def other(self, host: str) -> str:
        return self.b if host == self.a else self.a

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"a": self.a, "b": self.b, "round": self.round, "mbps": round(self.mbps, 1)}
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class Verdict:
    """One host's finding: ``status`` ok / slow / faulty, the figures, the one-line reason, and
    (when they were checked) its devices' verdicts (:func:`launcher.planning.health.devices.with_devices`)."""

    host: str
    status: str
    reason: str
    gflops: Optional[float] = None
    mbps: Optional[float] = None
    transfers: Tuple[Transfer, ...] = field(default=())
    devices: Optional[Any] = None  # its devices' verdicts (launcher.planning.health.devices.HostDevices), or None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def line(self) -> str:
        """``h2 slow: compute 0.9 GFLOPS, median 7.5; threshold 0.5``."""
        return f"{self.host} {self.reason}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "host": self.host,
            "verdict": self.status,
            "gflops": None if self.gflops is None else round(self.gflops, 2),
            "mbps": None if self.mbps is None else round(self.mbps, 1),
            "reason": self.reason,
            "transfers": [t.to_json() for t in self.transfers],
            **({"devices": self.devices.to_json()} if self.devices is not None else {}),
        }


def round1_pairs(hosts: Sequence[str]) -> Tuple[List[Tuple[str, str]], Optional[str]]:
    """Pairs of round 1 (in order: 1st with 2nd, ...) and the odd host out (None when even)."""
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    return pairs, (hosts[-1] if len(hosts) % 2 else None)


def _median(values: Sequence[float]) -> float:
    return float(median(values)) if values else 0.0


def slow_members(transfers: Sequence[Transfer], threshold: float) -> Tuple[List[str], List[str]]:
    """Round 1's hosts in slow pairs and in fast pairs (below / at least ``threshold`` x the
    median of the hosts' pair figures), each in pair order."""
    per_host = [t.mbps for t in transfers for _ in (t.a, t.b)]
    med = _median(per_host)
    slow: List[str] = []
    fast: List[str] = []
    for t in transfers:
        (slow if t.mbps < threshold * med else fast).extend((t.a, t.b))
    return slow, fast


def round2_pairs(candidates: Sequence[str], fast: Sequence[str]) -> List[Tuple[str, str]]:
    """Each candidate (a member of a slow pair, or the odd host) with a distinct fast host.

    Candidates beyond the number of fast hosts are not re-paired (their round-1 figure stands)."""
    return [(c, f) for c, f in zip(candidates, fast)]


def _network_figures(
    hosts: Sequence[str], transfers: Sequence[Transfer]
) -> Tuple[Dict[str, List[Transfer]], Dict[str, float], float]:
    """Each host's transfers, its best figure (hosts with a transfer) and the reference median
    (of round 1's figures, where every pair runs at once; later rounds run fewer transfers at
    once, so their figures only clear a host, they do not raise the bar)."""
    mine: Dict[str, List[Transfer]] = {h: [] for h in hosts}
    for t in transfers:
        for h in (t.a, t.b):
            if h in mine:
                mine[h].append(t)
    best = {h: max(t.mbps for t in ts) for h, ts in mine.items() if ts}
    first = [t.mbps for t in transfers if t.round == 1 for h in (t.a, t.b) if h in best]
    return mine, best, _median(first or list(best.values()))


def confirm_pairs(hosts: Sequence[str], transfers: Sequence[Transfer], threshold: float) -> List[Tuple[str, str]]:
    """Round 3: each host whose best figure is still below ``threshold`` x the median, with a
    host at or above it -- one it has not sent to yet where there is one, each fast host used
    once while others are left.  Hosts none of whose transfers worked are not re-tried (no
    answer is not noise)."""
    mine, best, med = _network_figures(hosts, transfers)
    slow = [
        h
        for h in hosts
        if h in best and best[h] < threshold * med and not all(t.error and t.mbps == 0.0 for t in mine[h])
    ]
    fast = [h for h in hosts if h in best and best[h] >= threshold * med]
    pairs: List[Tuple[str, str]] = []
    used: List[str] = []
    for h in slow:
        if not fast:
            break
        met = {t.other(h) for t in mine[h]}
        order = sorted(fast, key=lambda f: (f in met, used.count(f)))
        pairs.append((h, order[0]))
        used.append(order[0])
    return pairs


def judge(
    hosts: Sequence[str],
    gflops: Mapping[str, Optional[float]],
    failures: Mapping[str, str],
    transfers: Sequence[Transfer],
    threshold: float = DEFAULT_THRESHOLD,
    network: bool = True,
) -> List[Verdict]:
    """The verdict of every host, in ``hosts`` order.

    Args:
        hosts: every host checked.
        gflops: host -> its compute figure (None: not measured).
        failures: host -> why it is faulty (did not answer, kernel failed, timed out).
        transfers: every transfer of every round.
        threshold: a figure below ``threshold`` x the median is slow.
        network: False when the network was not checked (one host, or this machine only).
    """
    answered = [h for h in hosts if h not in failures]
    med_gflops = _median([g for g in (gflops.get(h) for h in answered) if g is not None])
    mine, best, med_mbps = _network_figures(answered, transfers)
    mine.update({h: [t for t in transfers if h in (t.a, t.b)] for h in hosts if h not in mine})
    out: List[Verdict] = []
    for h in hosts:
        ts = tuple(mine[h])
        if h in failures:
            out.append(Verdict(h, FAULTY, f"faulty: {failures[h]}", gflops.get(h), None, ts))
            continue
        g = gflops.get(h)
        m = best.get(h)
        if network and ts and all(t.error and t.mbps == 0.0 for t in ts):  # no transfer of it worked, in any round
            out.append(Verdict(h, FAULTY, f"faulty: network: {ts[-1].error}", g, m, ts))
            continue
        why: List[str] = []
        if g is not None and g < threshold * med_gflops:
            why.append(f"compute {g:.2f} GFLOPS, median {med_gflops:.2f}")
        if network and m is not None and m < threshold * med_mbps:
            partners = ", ".join(f"{t.other(h)} in round {t.round}" for t in ts)
            why.append(f"network {m:.1f} MB/s (with {partners}), median {med_mbps:.1f}")
        figures = _figures(g, m if network else None)
        if why:
            out.append(Verdict(h, SLOW, f"slow: {'; '.join(why)}; threshold {threshold:g}", g, m, ts))
        else:
            out.append(Verdict(h, OK, f"ok: {figures}", g, m, ts))
    return out


def _figures(g: Optional[float], m: Optional[float]) -> str:
    parts = []
    if g is not None:
        parts.append(f"compute {g:.2f} GFLOPS")
    parts.append(f"network {m:.1f} MB/s" if m is not None else "network not checked")
    return ", ".join(parts)


def health_json(
    verdicts: Sequence[Verdict],
    *,
    kernel: str,
    threshold: float,
    seconds: float,
    network_note: Optional[str] = None,
    devices: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """``doctor --health --json``: ``{"ok", "kernel", "threshold", "seconds", "median", "network", "hosts"}``,
    and ``"devices"`` when given (``{"target", "checks", "note"}``: what was checked, see
    :func:`launcher.planning.health.devices.devices_summary`)."""
    answered = [v for v in verdicts if v.status != FAULTY]
    g = [v.gflops for v in answered if v.gflops is not None]
    m = [v.mbps for v in answered if v.mbps is not None]
    return {
        "ok": all(v.ok for v in verdicts),
        "kernel": kernel,
        "threshold": threshold,
        "seconds": round(seconds, 2),
        "median": {"gflops": round(_median(g), 2) if g else None, "mbps": round(_median(m), 1) if m else None},
        "network": network_note or "checked",
        "hosts": [v.to_json() for v in verdicts],
        **({"devices": dict(devices)} if devices is not None else {}),
    }
