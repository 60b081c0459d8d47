"""The health check's runner on this machine's channel (``localhost`` hosts: the probe is a
direct child): verdicts, a host that cannot start the probe, a probe that misses its time limit,
and nothing left running afterwards."""

from __future__ import annotations

import os
import sys

import psutil

from launcher.execution.checks.health import HealthBudget, run_health
from launcher.planning.inventory.model import Host


def _children() -> set:
    """Live descendants of this process (a session's shared clusters are among them: compare with a snapshot)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_local_hosts_get_compute_figures_and_no_network() -> None:
    before = _children()
    res = run_health((Host("localhost", 1), Host("127.0.0.1", 1)), {})
    assert [v.status for v in res.verdicts] == ["ok", "ok"]
    assert all(v.gflops and v.gflops > 0 and v.mbps is None for v in res.verdicts)
    assert res.network_note == "not checked: every host is this machine"
    assert _children() - before == set()


def test_a_probe_that_does_not_start_or_answer_in_time_is_faulty_and_killed(tmp_path) -> None:
    slow = tmp_path / "slowpython"
    slow.write_text(f'#!/bin/sh\nsleep 30\nexec {sys.executable} "$@"\n')
    os.chmod(slow, 0o755)
    hosts = (
        Host("localhost", 1),
        Host("127.0.0.1", 1, python=str(slow)),
        Host("::1", 1, python=str(tmp_path / "nopython")),
    )
    before = _children()
    res = run_health(hosts, {}, budget=HealthBudget(start_timeout=1.0))
    assert [v.status for v in res.verdicts] == ["ok", "faulty", "faulty"]
    assert res.verdicts[1].reason == "faulty: start: no answer in time"
    assert res.verdicts[2].reason.startswith("faulty: cannot start the probe: No such file or directory")
    assert _children() - before == set()


def test_device_orders_run_after_the_network_and_a_host_without_a_probe_has_a_reason(tmp_path) -> None:
    tool = tmp_path / "npu-smi"
    tool.write_text('#!/bin/sh\necho "held by $$"\n')
    os.chmod(tool, 0o755)
    order = {
        "op": "devices",
        "limit": 5.0,
        "output_limit": 100,
        "commands": [
            {"key": "npu-smi info", "tool": "npu-smi", "candidates": [str(tool)], "argv": ["info"], "timeout": 5.0}
        ],
    }
    hosts = (Host("localhost", 1), Host("127.0.0.1", 1), Host("::1", 1, python=str(tmp_path / "nopython")))
    before = _children()
    res = run_health(
        hosts,
        {},
        devices={"localhost": order, "127.0.0.1": {"op": "devices", "commands": [], "limit": 0}, "::1": order},
    )
    assert [v.status for v in res.verdicts] == ["ok", "ok", "faulty"]
    (first,) = res.device_answers["localhost"]["outcomes"]
    assert first["key"] == "npu-smi info" and first["status"] == "exited" and first["stdout"].startswith("held by ")
    assert res.device_answers["127.0.0.1"] == {"outcomes": []}
    assert set(res.device_answers) == {"localhost", "127.0.0.1"}
    assert res.device_failures["::1"].startswith("cannot start the probe: No such file or directory")
    assert _children() - before == set()


def test_the_kill_of_a_probe_on_a_host_that_no_longer_answers_is_not_waited_for() -> None:
    """SshLink.reap on a connection whose every command blocks (a host whose link is gone): the
    probe did not exit, its kill is sent and waited for ``kill`` seconds only (the kill is still
    blocked when reap returns); the probe's lifetime ends it on its host."""
    import threading
    import time

    from launcher.execution.checks.links import SshLink

    release = threading.Event()
    calls = []

    class Chan:
        closed = False

        def exec_command(self, command: str) -> None:
            pass

        def recv(self, n: int) -> bytes:
            release.wait()
            return b""

        def exit_status_ready(self) -> bool:
            return False

        def close(self) -> None:
            self.closed = True

    class Conn:  # a connection to a host that no longer answers
        def open_channel(self) -> Chan:
            return Chan()

        def run(self, command: str, timeout: float = 30.0):
            calls.append(command)
            release.wait()

    link = SshLink("h3", Conn(), "probe")
    link.pid = 4242
    try:
        link.reap(time.monotonic(), kill=0.2)
        assert calls == ["kill -9 4242"] and not release.is_set() and link.chan.closed
    finally:
        release.set()
