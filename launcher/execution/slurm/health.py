"""The health check over Slurm (``doctor --health --launcher slurm``, ``run --preflight`` of a
Slurm job), inside an allocation.

One ``srun --overlap`` step per node (``-N1 -n1 -w NODE``, all at once: a node whose slurmd
does not answer fails its own step, not the others') runs the probe
(:mod:`launcher.execution.probes.health_probe`), which connects back to a TCP port this machine
opens on its address towards the nodes and speaks the same JSON lines as over SSH.  A node whose
probe does not connect within the start time limit, or whose step ends first, is ``faulty``
with srun's last line.  Peers reach a node's transfer sink at its ``NodeAddr`` (the sink listens
there only).

The check's token (``secrets.token_hex``, new for every check) reaches the probes in srun's
environment (never a command line); a probe's connection back must carry it (its hello's
``key``), as must every peer of a sink: any other connection is refused and named, one line
(``refused a connection from ADDR: bad token``), and the node's own probe is still awaited.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Dict, List, Mapping, Optional

from launcher.execution.checks.health import HealthBudget, HealthResult, close_all, device_limit, drive, probe_source
from launcher.execution.checks.links import ProbeLink
from launcher.execution.probes.health_probe import THREAD_ENV, TOKEN_ENV
from launcher.planning.health.rounds import DEFAULT_THRESHOLD

__all__ = ["slurm_health"]


class _SockLink(ProbeLink):
    """A probe that connected back; its ``srun`` is ``proc``."""

    def __init__(self, host: str, sock: socket.socket) -> None:
        super().__init__(host)
        self.sock = sock
        self.proc: Optional[subprocess.Popen] = None
        threading.Thread(target=self._pump, args=(sock.recv,), daemon=True).start()

    def send(self, obj: Dict[str, Any]) -> None:
        try:
            self.sock.sendall((json.dumps(obj) + "\n").encode())
        except OSError as exc:
            self.dead = self.dead or f"the probe's connection broke: {exc}"

    def end(self) -> None:
        self.send({"op": "quit"})
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def reap(self, deadline: float, kill: float) -> None:  # srun's own stop bounds the kill (_stop_srun)
        if self.proc is not None:
            _stop_srun(self.proc, deadline)
        self.sock.close()


def _hang_up(sock: socket.socket) -> None:
    """End a connection whose link's reader thread is in ``recv``: ``close`` alone leaves that call
    (and so the connection) open until it returns; ``shutdown`` ends both at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _stop_srun(proc: "subprocess.Popen[bytes]", deadline: float) -> None:
    """Wait for ``srun`` until ``deadline``; then SIGTERM (srun ends its step), then SIGKILL."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return
    except subprocess.TimeoutExpired:
        pass
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _last(proc: "subprocess.Popen[bytes]") -> str:
    try:
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    except (OSError, ValueError):
        err = ""
    lines = [x.strip() for x in err.splitlines() if x.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def slurm_health(
    environ: Mapping[str, str],
    python: str,
    *,
    kernel: str = "numpy",
    threshold: float = DEFAULT_THRESHOLD,
    budget: HealthBudget = HealthBudget(),
    devices: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> HealthResult:
    """Check every node of the allocation ``environ`` describes (see the module doc); ``devices``:
    node -> its device order, run after the network rounds (see
    :mod:`launcher.execution.checks.health`).

    Raises:
        MsLaunchError: not inside an allocation, or its variables cannot be read.
        LaunchError: scontrol fails.
    """
    from launcher.execution.slurm.nodes import my_addr, node_addrs
    from launcher.planning.backends.slurm import parse_allocation

    t_start = time.monotonic()
    nodes = list(parse_allocation(environ).nodes)
    addrs = node_addrs(nodes)
    me = my_addr(addrs[nodes[0]])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind((me, 0))
    srv.listen(len(nodes) + 8)
    lifetime = budget.lifetime(kernel) + device_limit(devices)
    token = secrets.token_hex(16)
    env = {**environ, **THREAD_ENV, TOKEN_ENV: token}
    refused: List[str] = []
    procs: Dict[str, "subprocess.Popen[bytes]"] = {}
    links: Dict[str, ProbeLink] = {}
    failures: Dict[str, str] = {}
    start_t = budget.mindspore_start_timeout if kernel == "mindspore" else budget.start_timeout
    try:
        for node in nodes:
            cfg = json.dumps(
                {
                    "lifetime": lifetime,
                    "bind": addrs[node],
                    "kernel": kernel,
                    "connect": [me, srv.getsockname()[1]],
                    "name": node,
                }
            )
            argv = [
                "srun",
                "--overlap",
                "--overcommit",
                "-N1",
                "-n1",
                f"--nodelist={node}",
                "--input=none",
                "--quiet",
                python,
                "-c",
                probe_source(),
                cfg,
            ]
            try:
                procs[node] = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                failures[node] = f"cannot run srun: {exc.strerror or exc}"
        _accept(srv, nodes, procs, links, failures, time.monotonic() + start_t, token, refused)
        for node in nodes:
            if node not in links and node not in failures:
                failures[node] = "the probe did not connect in time (srun: slurmd down or the node unreachable?)"
        addr = {n: addrs[n] for n in links}
        return drive(
            nodes,
            links,
            failures,
            addr,
            kernel=kernel,
            threshold=threshold,
            budget=budget,
            t_start=t_start,
            devices=devices,
            token=token,
            refused=refused,
        )
    finally:
        srv.close()
        close_all(list(links.values()))
        deadline = time.monotonic() + 2.0
        for node, proc in procs.items():
            if node not in links:
                _stop_srun(proc, deadline)


def _accept(
    srv: socket.socket,
    nodes: List[str],
    procs: Dict[str, "subprocess.Popen[bytes]"],
    links: Dict[str, ProbeLink],
    failures: Dict[str, str],
    deadline: float,
    token: str,
    refused: List[str],
) -> None:
    """Take the probes' connections (each says its node and the check's token first) until every
    node connected or failed, or ``deadline``; one without the token is closed and named in
    ``refused``."""
    srv.settimeout(0.1)
    while time.monotonic() < deadline and len(links) + len(failures) < len(nodes):
        try:
            sock, _ = srv.accept()
        except socket.timeout:
            sock = None
        if sock is not None:
            sock.settimeout(None)
            peer = sock.getpeername()[0]
            link = _SockLink("?", sock)
            hello = link.recv(time.monotonic() + 5.0)
            node = hello.get("hello")
            if not hmac.compare_digest(str(hello.get("key") or "").encode(), token.encode()):
                said = f" (it said it was {node})" if isinstance(node, str) else ""
                refused.append(f"refused a connection from {peer}{said}: bad token")
                _hang_up(sock)
            elif node in procs and node not in links:
                link.host = node
                link.proc = procs[node]
                links[node] = link
            else:
                _hang_up(sock)
        for node, proc in procs.items():
            if node not in links and node not in failures and proc.poll() is not None:
                failures[node] = f"srun: {_last(proc)}"
