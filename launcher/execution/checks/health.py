"""Run the pre-flight health check on hosts (``doctor --health``, ``run --preflight``).

One probe process per host (:mod:`launcher.execution.probes.health_probe`), started over the
backend's channel: a direct child for ``localhost``, an SSH session otherwise (mpirun jobs
reach their hosts over SSH as ``doctor`` does).  The launching machine drives every probe at once
with JSON lines (start, compute, the network rounds, quit) and turns the answers into verdicts
with :mod:`launcher.planning.health.rounds`.  Every step waits at most a fixed time; a host that does
not answer in time is ``faulty``.  Probes exit when their stdin ends (the session closes), on
``quit``, and after their own ``lifetime`` at the latest.

Network: only between hosts that are not this machine (``localhost`` hosts share one network
stack; their network figure is "not checked").  The odd host out of round 1 is paired with a
fast host in round 2; a host still slow after it is measured once more in round 3.

Devices (``devices``: host -> the order of :func:`launcher.planning.health.devices.probe_order`): after
the network rounds, so the tools' processes do not disturb the figures, every host that answered
runs its device commands at once (:mod:`launcher.execution.probes.device_runner`); the launching
machine waits the largest order's ``limit`` plus ``slack``, and each probe's lifetime grows by it.
The answers are returned raw (:attr:`HealthResult.device_answers`), judged by the caller.
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.execution.checks.links import LocalLink, ProbeLink, SshLink
from launcher.execution.probes.health_probe import THREAD_ENV
from launcher.planning.health.rounds import (
    DEFAULT_THRESHOLD,
    Transfer,
    Verdict,
    confirm_pairs,
    judge,
    round1_pairs,
    round2_pairs,
    slow_members,
)
from launcher.planning.inventory.model import Host

if TYPE_CHECKING:
    from launcher.execution.ssh.settings import SSHSettings

__all__ = ["HealthBudget", "HealthResult", "close_all", "device_limit", "drive", "run_health"]


@dataclass(frozen=True)
class HealthBudget:
    """Sizes and time limits of the check (seconds)."""

    n: int = 256  #: matmul size
    window: float = 0.3  #: one compute window
    repeats: int = 3  #: compute windows; the best counts
    transfer: float = 1.0  #: one transfer's duration
    delay: float = 0.2  #: start every host's step together, this long after the command is sent
    start_timeout: float = 20.0  #: the probe starts, imports its kernel, opens its sink
    slack: float = 8.0  #: added to every step's own duration for its answer
    mindspore_start_timeout: float = 90.0
    close: float = 2.0  #: at the end, the probes' grace to exit before they are killed
    kill: float = 3.0  #: the kill of a probe that did not exit, and the close of the connections (each bounded)

    def compute_limit(self) -> float:
        """How long the compute step waits for its answers."""
        return self.delay + self.window * self.repeats + self.slack

    def transfer_limit(self) -> float:
        """How long one network round waits for its answers."""
        return self.delay + self.transfer + self.slack

    def after_start_limit(self, devices: float = 0.0) -> float:
        """The longest the check goes on once every probe answered ``start``: compute, the three
        network rounds at most, the device step (its orders' longest ``limit``, 0: none), the end
        (the probes' grace, their kills, the connections' close).  Whatever a host does (its link
        cut, its probe stuck), the check is over by then, well within the probes' lifetime."""
        return (
            self.compute_limit()
            + 3 * self.transfer_limit()
            + (devices + self.slack if devices else 0.0)
            + self.close
            + 2 * self.kill
        )

    def lifetime(self, kernel: str) -> float:
        start = self.mindspore_start_timeout if kernel == "mindspore" else self.start_timeout
        return start + self.window * self.repeats + 2 * self.transfer + 4 * self.slack + 10


@dataclass(frozen=True)
class HealthResult:
    """The check's verdicts, in host order.

    Attributes:
        device_answers: host -> its probe's answer to the device order (``{"outcomes": [...]}``),
            for the hosts that were sent one and answered.
        device_failures: host -> why it gave no device answer (it did not answer the check, or
            not the device order in time).
        refused: one line per connection refused for a bad token (``h2: refused a connection
            from ADDR: bad token``): an impostor's figures are never used.
    """

    verdicts: Tuple[Verdict, ...]
    seconds: float
    network_note: str
    device_answers: Mapping[str, Any] = field(default_factory=dict)
    device_failures: Mapping[str, str] = field(default_factory=dict)
    refused: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


def device_limit(devices: Optional[Mapping[str, Mapping[str, Any]]]) -> float:
    """The longest ``limit`` of the hosts' device orders (0 without any)."""
    return max((float(o.get("limit", 0.0)) for o in (devices or {}).values() if o.get("commands")), default=0.0)


def _argv(python: str, kernel: str, bind: str, lifetime: float) -> List[str]:
    cfg = json.dumps({"lifetime": lifetime, "bind": bind, "kernel": kernel})
    return [python, "-c", probe_source(), cfg]


def _ask(
    links: Dict[str, ProbeLink], orders: Mapping[str, Dict[str, Any]], timeout: float
) -> Dict[str, Dict[str, Any]]:
    """Send each host its command at once, then collect every answer within ``timeout``."""
    for h, cmd in orders.items():
        links[h].send(cmd)
    deadline = time.monotonic() + timeout
    return {h: links[h].recv(deadline) for h in orders}


def run_health(
    hosts: Sequence[Host],
    python: Mapping[str, Optional[str]],
    ssh: Optional["SSHSettings"] = None,
    *,
    kernel: str = "numpy",
    threshold: float = DEFAULT_THRESHOLD,
    budget: HealthBudget = HealthBudget(),
    devices: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> HealthResult:
    """Check every host (see the module doc) and return one verdict per host, in order.

    Args:
        hosts: the inventory's hosts (spares too).
        python: host name -> the interpreter to run the probe with (None: ``python3`` remote,
            this interpreter locally); it needs numpy (and MindSpore for ``kernel="mindspore"``).
        devices: host name -> its device order (:func:`launcher.planning.health.devices.probe_order`),
            or None: no device step.

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    from launcher.errors import LaunchError
    from launcher.execution.ssh.connection import SshConnection, connect_each
    from launcher.execution.ssh.settings import SSHSettings

    t_start = time.monotonic()
    names = [h.name for h in hosts]
    failures: Dict[str, str] = {}
    remote = [h for h in hosts if not h.is_local]
    conns: Dict[str, Any] = connect_each(remote, ssh or SSHSettings()) if remote else {}
    links: Dict[str, ProbeLink] = {}
    addr: Dict[str, str] = {}
    lifetime = budget.lifetime(kernel) + device_limit(devices)
    try:
        for h in hosts:
            py = python.get(h.name) or h.python
            if h.is_local:
                try:
                    argv = _argv(py or sys.executable, kernel, "127.0.0.1", lifetime)
                    links[h.name] = LocalLink(h.name, argv, THREAD_ENV)
                except OSError as exc:
                    failures[h.name] = f"cannot start the probe: {exc.strerror or exc}: {py or sys.executable}"
                continue
            conn = conns.get(h.name)
            if not isinstance(conn, SshConnection):
                failures[h.name] = f"ssh: {conn}"
                continue
            addr[h.name] = h.addr or conn.target.hostname
            env = " ".join(f"{k}={v}" for k, v in THREAD_ENV.items())
            command = f"exec env {env} " + " ".join(
                shlex.quote(p) for p in _argv(py or "python3", kernel, addr[h.name], lifetime)
            )
            try:
                links[h.name] = SshLink(h.name, conn, command)
            except (LaunchError, Exception) as exc:  # paramiko raises its own errors on exec
                failures[h.name] = f"cannot start the probe: {exc}"
        return drive(
            names,
            links,
            failures,
            addr,
            kernel=kernel,
            threshold=threshold,
            budget=budget,
            t_start=t_start,
            devices=devices,
            no_network="not checked: fewer than 2 hosts besides this machine answered"
            if remote
            else "not checked: every host is this machine",
        )
    finally:
        close_all(list(links.values()), budget.close, budget.kill)
        shut = [
            threading.Thread(target=c.close, args=(budget.kill,), daemon=True)
            for c in conns.values()
            if isinstance(c, SshConnection)
        ]
        for t in shut:  # at once: each close is bounded (a host whose link is gone does not hold the others up)
            t.start()
        for t in shut:
            t.join(budget.kill + 1)


def drive(
    names: Sequence[str],
    links: Dict[str, ProbeLink],
    failures: Dict[str, str],
    addr: Mapping[str, str],
    *,
    kernel: str,
    threshold: float,
    budget: HealthBudget,
    t_start: float,
    no_network: str = "not checked: fewer than 2 hosts answered",
    devices: Optional[Mapping[str, Mapping[str, Any]]] = None,
    token: str = "",
    refused: Sequence[str] = (),
) -> HealthResult:
    """The check over open probes (``links``; hosts without one are in ``failures``): start,
    compute, the network rounds between the hosts of ``addr`` (host -> the address its peers
    connect to), the device orders of ``devices`` (host -> order), verdicts.  Updates
    ``failures``; sets each link's ``pid``.

    Args:
        token: the check's token (default a new one), given to every probe in ``start``: a
            probe's sink takes a peer's data only after it.
        refused: lines of connections refused before (the Slurm channel's impostors).
    """
    start_t = budget.mindspore_start_timeout if kernel == "mindspore" else budget.start_timeout
    token = token or secrets.token_hex(16)  # over the channel: every sink takes only this check's probes
    started = _ask(links, {h: {"op": "start", "kernel": kernel, "n": budget.n, "token": token} for h in links}, start_t)
    port = _note(started, failures, "start", "port")
    for h, a in started.items():
        links[h].pid = a.get("pid")
    alive = [h for h in names if h in links and h not in failures]
    done = _ask(
        links,
        {
            h: {"op": "compute", "window": budget.window, "repeats": budget.repeats, "delay": budget.delay}
            for h in alive
        },
        budget.compute_limit(),
    )
    gflops = _note(done, failures, "compute", "gflops")
    netted = [h for h in names if h in addr and h not in failures]
    transfers: List[Transfer] = []
    network = len(netted) >= 2
    if network:
        pairs, odd = round1_pairs(netted)
        transfers = _transfers(links, pairs, addr, port, budget, 1)
        slow, fast = slow_members(transfers, threshold)
        candidates = slow + ([odd] if odd else [])
        if candidates and fast:
            transfers += _transfers(links, round2_pairs(candidates, fast), addr, port, budget, 2)
        again = confirm_pairs(netted, transfers, threshold)
        if again:
            transfers += _transfers(links, again, addr, port, budget, 3)
    answers, missing = _devices(names, links, failures, devices, budget) if devices else ({}, {})
    verdicts = judge(names, gflops, failures, transfers, threshold, network=network)
    lines = list(refused) + [
        f"{h}: refused a connection from {a}: bad token" for h in names if h in links for a in links[h].refused
    ]
    return HealthResult(
        tuple(verdicts),
        time.monotonic() - t_start,
        "checked" if network else no_network,
        answers,
        missing,
        tuple(lines),
    )


def _devices(
    names: Sequence[str],
    links: Dict[str, ProbeLink],
    failures: Mapping[str, str],
    devices: Mapping[str, Mapping[str, Any]],
    budget: HealthBudget,
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """Send every host that answered so far its device order at once; the answers and, per
    host without one, why."""
    answers: Dict[str, Any] = {}
    missing: Dict[str, str] = {}
    orders: Dict[str, Dict[str, Any]] = {}
    for h in names:
        order = devices.get(h)
        if order is None:
            continue
        if h in failures or h not in links or links[h].dead:
            missing[h] = failures.get(h) or (links[h].dead if h in links else None) or "no probe"
        elif not order.get("commands"):
            answers[h] = {"outcomes": []}
        else:
            orders[h] = dict(order)
    got = _ask(links, orders, device_limit(orders) + budget.slack) if orders else {}
    for h, a in got.items():
        if isinstance(a.get("outcomes"), list):
            answers[h] = a
        else:
            missing[h] = f"device checks: {a.get('error', 'no answer')}"
    return answers, missing


def close_all(links: Sequence[ProbeLink], grace: float = HealthBudget.close, kill: float = HealthBudget.kill) -> None:
    """End every probe at once, wait up to ``grace`` seconds for all, kill the rest (in parallel,
    each kill waited for ``kill`` seconds at most)."""
    for link in links:
        try:
            link.end()
        except Exception:
            pass
    deadline = time.monotonic() + grace

    def reap(link: ProbeLink) -> None:
        try:
            link.reap(deadline, kill)
        except Exception:
            pass

    threads = [threading.Thread(target=reap, args=(link,), daemon=True) for link in links]
    for t in threads:
        t.start()
    for t in threads:
        t.join(grace + 10)


def _note(answers: Mapping[str, Dict[str, Any]], failures: Dict[str, str], step: str, key: str) -> Dict[str, Any]:
    """The ``key`` of every good answer; a failed host goes to ``failures``."""
    out: Dict[str, Any] = {}
    for h, a in answers.items():
        if key in a:
            out[h] = a[key]
        else:
            failures.setdefault(h, f"{step}: {a.get('error', 'no answer')}")
    return out


def _transfers(
    links: Dict[str, ProbeLink],
    pairs: Sequence[Tuple[str, str]],
    addr: Mapping[str, str],
    port: Mapping[str, Any],
    budget: HealthBudget,
    rnd: int,
) -> List[Transfer]:
    """Both members of every pair send to each other at once; one :class:`Transfer` per pair."""
    orders: Dict[str, Dict[str, Any]] = {}
    for a, b in pairs:
        for src, dst in ((a, b), (b, a)):
            orders[src] = {
                "op": "send",
                "addr": addr[dst],
                "port": port[dst],
                "seconds": budget.transfer,
                "delay": budget.delay,
            }
    answers = _ask(links, orders, budget.transfer_limit())
    out = []
    for a, b in pairs:
        got = [answers[a].get("mbps"), answers[b].get("mbps")]
        errs = [f"{h}: {answers[h]['error']}" for h in (a, b) if "error" in answers[h]]
        mbps = min(float(x) if x is not None else 0.0 for x in got)
        out.append(Transfer(a, b, mbps, rnd, "; ".join(errs) or None))
    return out


def probe_source() -> str:
    """The probe's source text (:mod:`launcher.execution.probes.health_probe`, after
    :mod:`launcher.execution.probes.device_runner`), as ``python -c`` runs it."""
    from launcher.execution.probes import program_source

    return program_source("launcher.execution.probes.device_runner", "launcher.execution.probes.health_probe")
