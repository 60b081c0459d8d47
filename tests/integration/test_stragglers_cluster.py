"""Slow hosts found while the job runs over ssh: 3 ranks of the computing stand-in
``tests/scripts/dploop.py`` (each step also sends 1 MiB to the barrier, its gradients), one per
namespace host, in one job: mid-job host 2 is put under a CPU quota
(:func:`tests.harness.hostfaults.throttle_cpu`: its sshd's group, so what starts there later; the
rank already running there is moved into the group by its pid); the host's agent sends the rank's
scheduler figures with its heartbeats, and the straggler event names rank 1 with that host, then
clears it once the quota is gone.  Then host 3's link is shaped to 8 Mbit/s
(:func:`tests.harness.hostfaults.shape_link`): rank 2's TCP send queue stays full, and it is named
for its link."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.execution.supervision.test_stragglerwatch import DPLOOP, _events, _steps, _until
from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import rank_pids
from tests.harness.hostfaults import (
    CPU_ROOT,
    cgroup_v1_cpu,
    shape_link,
    throttle_cpu,
    throttle_pids,
    unshape_link,
    unthrottle,
)
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)


@pytest.mark.netns
@pytest.mark.cost(25)
def test_a_host_under_a_cpu_quota_then_a_shaped_link_are_named_over_ssh(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    job, stop = str(tmp_path / "job"), str(tmp_path / "stop")
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "3", "--master-port", "auto",
        "--log-dir", job, "--tee", "none", "--straggler", "warn:6", "--env", f"FAULT_STREAM_MARK={tmp_path.name}",
        "--no-python", sys.executable, DPLOOP, "150000", stop, "100000", str(1 << 20),
    )  # fmt: skip
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    throttled = shaped = False

    def stragglers():
        return [e for e in _events(job) if e["kind"] == "straggler"]

    try:
        _until("20 steps", lambda: _steps(os.path.join(job, "worker_0.log")) >= 20)
        assert stragglers() == []
        pid = rank_pids(tmp_path.name)[("0", 1)]
        group = throttle_cpu(c, 1, quota_us=3000)
        throttled = True
        throttle_pids(os.path.relpath(group, CPU_ROOT), [pid], quota_us=3000)
        _until("rank 1 named", stragglers)
        unthrottle(c, 1)
        throttled = False
        _until("rank 1 cleared", lambda: [e for e in stragglers() if e["cleared"]])
        shape_link(c, 2)
        shaped = True
        _until("rank 2 named", lambda: [e for e in stragglers() if e["by"] == "link" and not e["cleared"]])
        unshape_link(c, 2)
        shaped = False
        with open(stop, "w"):
            pass
        _, err = proc.communicate(timeout=120)
    finally:
        if throttled:
            unthrottle(c, 1)
        if shaped:
            unshape_link(c, 2)
        with open(stop, "w"):
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen = stragglers()
    assert [(e["rank"], e["by"], e["cleared"]) for e in seen][:3] == [
        (1, "cpu", False),
        (1, "cpu", True),
        (2, "link", False),
    ], seen
    cpu, cleared, link = seen[:3]
    ip1, ip2 = c.hosts[1].ip, c.hosts[2].ip
    assert (cpu["rank"], cpu["host"], cpu["cleared"]) == (1, ip1, False), cpu
    assert cpu["evidence"].startswith(f"rank 1 on {ip1} waited for CPU "), cpu
    assert (cleared["rank"], cleared["cleared"]) == (1, True), cleared
    assert (link["rank"], link["host"], link["cleared"], link["by"]) == (2, ip2, False, "link"), link
    assert link["evidence"].startswith(f"rank 2 on {ip2} kept ") and "TCP send queues" in link["evidence"], link
    assert proc.returncode == 0, err
    with open(os.path.join(job, "summary.json")) as fh:
        rows = json.load(fh)["stragglers"]
    assert [(s["rank"], s["host"], s["by"]) for s in rows][:2] == [(1, ip1, "cpu"), (2, ip2, "link")], rows
    assert wait_nothing_left(c) == {}


@pytest.mark.netns
@pytest.mark.cost(20)
def test_replace_leaves_the_slow_host_out_at_once_for_the_spare(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    """``--straggler replace``: 2 ranks on hosts 1-2, host 3 spare; host 2 under a CPU quota: rank
    1 is named, the attempt ends ``planned`` (the ranks told so, then torn down), and the next runs
    rank 1 on host 3 at once, with ``--max-restarts 0`` (a planned restart is not one)."""
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    job, stop = str(tmp_path / "job"), str(tmp_path / "stop")
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "2", "--master-port", "auto",
        "--log-dir", job, "--tee", "none", "--grace", "3", "--straggler", "replace:6",
        "--env", f"FAULT_STREAM_MARK={tmp_path.name}",
        "--no-python", sys.executable, DPLOOP, "150000", stop, "100000",
    )  # fmt: skip
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    throttled = False
    try:
        _until("20 steps", lambda: _steps(os.path.join(job, "worker_0.log")) >= 20)
        group = throttle_cpu(c, 1, quota_us=3000)
        throttled = True
        throttle_pids(os.path.relpath(group, CPU_ROOT), [rank_pids(tmp_path.name)[("0", 1)]], quota_us=3000)
        _until("attempt 1 stepping", lambda: _steps(os.path.join(job, "attempt_1", "worker_0.log")) >= 5)
        unthrottle(c, 1)
        throttled = False
        with open(stop, "w"):
            pass
        _, err = proc.communicate(timeout=120)
    finally:
        if throttled:
            unthrottle(c, 1)
        with open(stop, "w"):
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    ip = [h.ip for h in c.hosts]
    evs = _events(job)
    named = next(e for e in evs if e["kind"] == "straggler")
    assert (named["rank"], named["host"]) == (1, ip[1]), named
    kinds = [e["kind"] for e in evs]
    assert (
        kinds.index("straggler")
        < kinds.index("planned_restart")
        < kinds.index("host_excluded")
        < kinds.index("restart")
    )
    excluded = next(e for e in evs if e["kind"] == "host_excluded")
    assert excluded["host"] == ip[1] and excluded["reason"] == f"straggler: {named['evidence']}", excluded
    assert "planned restart: leaving out " + ip[1] in err, err
    with open(os.path.join(job, "summary.json")) as fh:
        s = json.load(fh)
    first, second = s["attempt_results"]
    assert (first["status"], first["leave_out"][0]["host"]) == ("planned", ip[1])
    with open(os.path.join(job, "stopping")) as fh:
        assert fh.read() == "planned\n"  # what the ranks were told: save, no fault
    assert sorted(p["host"] for p in second["processes"] if p["rank"] is not None) == [ip[0], ip[2]]
    assert s["stragglers"][0]["replaced"] is True
    assert wait_nothing_left(c) == {}
