"""The Slurm health check's connection back (launcher.execution.slurm.health): a connection that
claims a node's name without the check's token is refused and named, one line, and the node's
real probe (started as srun starts it: the token in its environment, not on its command line) is
the one whose figures count."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time

import psutil
import pytest

from launcher.execution.checks.health import HealthBudget, close_all, drive, probe_source
from launcher.execution.probes.health_probe import THREAD_ENV, TOKEN_ENV
from launcher.execution.slurm.health import _accept

BUDGET = HealthBudget(window=0.05, repeats=1, transfer=0.2, delay=0.0, close=2.0, kill=2.0)


def _probe(name: str, port: int, token: str) -> "subprocess.Popen[bytes]":
    cfg = json.dumps(
        {"lifetime": 60, "bind": "127.0.0.1", "kernel": "numpy", "connect": ["127.0.0.1", port], "name": name}
    )
    return subprocess.Popen(
        [sys.executable, "-c", probe_source(), cfg],
        env={**THREAD_ENV, TOKEN_ENV: token, "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.e2e
def test_an_impostor_with_a_nodes_name_but_no_token_is_refused_and_the_real_probe_counts() -> None:
    token = secrets.token_hex(16)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    impostor = socket.create_connection(("127.0.0.1", port), timeout=60)  # first in the queue: it says it is node1
    impostor.sendall(json.dumps({"hello": "node1", "key": "0" * 32, "addr": "127.0.0.1"}).encode() + b"\n")
    procs = {n: _probe(n, port, token) for n in ("node1", "node2")}
    links: dict = {}
    failures: dict = {}
    refused: list = []
    try:
        for node, proc in procs.items():
            assert token not in " ".join(psutil.Process(proc.pid).cmdline())
        _accept(srv, ["node1", "node2"], procs, links, failures, time.monotonic() + 30, token, refused)
        assert sorted(links) == ["node1", "node2"] and failures == {}
        assert refused == ["refused a connection from 127.0.0.1 (it said it was node1): bad token"]
        try:
            assert impostor.recv(1) == b""  # closed unread
        except ConnectionResetError:
            pass  # closed with its hello unread
        addr = {"node1": "127.0.0.1", "node2": "127.0.0.1"}
        res = drive(
            ["node1", "node2"],
            links,
            failures,
            addr,
            kernel="numpy",
            threshold=0.5,
            budget=BUDGET,
            t_start=time.monotonic(),
            token=token,
            refused=refused,
        )
        # both real probes judged (a busy machine may make one slow, never a missing one faulty)
        assert [v.status in ("ok", "slow") for v in res.verdicts] == [True, True], [v.reason for v in res.verdicts]
        assert all(
            v.gflops and v.gflops > 0 and v.mbps and v.mbps > 0 for v in res.verdicts
        )  # the real probes' figures
        assert res.refused == tuple(refused)
    finally:
        impostor.close()
        srv.close()
        close_all(list(links.values()), 2.0, 2.0)
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert all(p.returncode is not None for p in procs.values())
