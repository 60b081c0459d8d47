"""A slow host found while the job runs over ssh: 3 ranks of the computing stand-in
``tests/scripts/dploop.py``, one per namespace host; mid-job host 3 is put under a CPU quota
(:func:`tests.harness.hostfaults.throttle_cpu`: its sshd's group, so what starts there later;
the rank already running there is moved into the group by its pid).  The host's agent sends the
rank's scheduler figures with its heartbeats; the straggler event names rank 2 with that host."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.execution.supervision.test_stragglerwatch import DPLOOP, _events, _steps, _until
from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import rank_pids
from tests.harness.hostfaults import CPU_ROOT, cgroup_v1_cpu, throttle_cpu, throttle_pids, unthrottle
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)


@pytest.mark.netns
@pytest.mark.cost(20)
def test_a_host_under_a_cpu_quota_is_named_over_ssh(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    job, stop = str(tmp_path / "job"), str(tmp_path / "stop")
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "3", "--master-port", "auto",
        "--log-dir", job, "--tee", "none", "--straggler", "warn:6", "--env", f"FAULT_STREAM_MARK={tmp_path.name}",
        "--no-python", sys.executable, DPLOOP, "150000", stop,
    )  # fmt: skip
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    throttled = False
    try:
        _until("20 steps", lambda: _steps(os.path.join(job, "worker_0.log")) >= 20)
        pid = rank_pids(tmp_path.name)[("0", 2)]
        group = throttle_cpu(c, 2, quota_us=3000)
        throttled = True
        throttle_pids(os.path.relpath(group, CPU_ROOT), [pid], quota_us=3000)
        named = _until("rank 2 named", lambda: [e for e in _events(job) if e["kind"] == "straggler"])
        unthrottle(c, 2)
        throttled = False
        with open(stop, "w"):
            pass
        _, err = proc.communicate(timeout=120)
    finally:
        if throttled:
            unthrottle(c, 2)
        with open(stop, "w"):
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ip = c.hosts[2].ip
    assert (named[0]["rank"], named[0]["host"]) == (2, ip), named
    assert named[0]["evidence"].startswith(f"rank 2 on {ip} waited for CPU "), named
    assert proc.returncode == 0, err
    with open(os.path.join(job, "summary.json")) as fh:
        assert [(s["rank"], s["host"]) for s in json.load(fh)["stragglers"]] == [(2, ip)]
    assert wait_nothing_left(c) == {}
