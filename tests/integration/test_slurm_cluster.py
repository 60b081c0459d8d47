"""The Slurm test cluster itself (tests/harness/slurm_cluster.py): nodes up with their own
hostnames and addresses, srun across them, idle between jobs, nothing left after teardown."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.conftest_slurm import require_slurm
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]


def test_three_nodes_idle_with_their_addresses(slurm: SlurmCluster) -> None:
    assert slurm.idle_nodes() == ["node1", "node2", "node3"]
    res = slurm.run(["scontrol", "show", "node", "-o"])
    assert res.returncode == 0, res.stderr
    addrs = {}
    for line in res.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        addrs[fields["NodeName"]] = fields["NodeAddr"]
    assert addrs == {n: slurm.addr(n) for n in slurm.nodes}
    assert len(set(addrs.values())) == 3


def test_srun_runs_one_task_per_node_with_distinct_hostnames_and_addresses(slurm: SlurmCluster) -> None:
    res = slurm.run(["srun", "-N3", "-n3", "--label", "sh", "-c", "echo $(hostname) $(hostname -I) $SLURM_NODEID"])
    assert res.returncode == 0, res.stderr
    rows = sorted(line.split(":", 1)[1].split() for line in res.stdout.strip().splitlines())
    assert rows == [[f"node{k}", slurm.addr(f"node{k}"), str(k - 1)] for k in (1, 2, 3)]


def test_back_to_back_jobs_after_wait_idle(slurm: SlurmCluster) -> None:
    for _ in range(2):
        res = slurm.run(["srun", "-N3", "-n6", "true"])
        assert res.returncode == 0, res.stderr
        slurm.wait_idle()
    assert slurm.node_pids() == {}


def test_teardown_leaves_no_daemon_namespace_or_directory() -> None:
    require_slurm()
    cluster = SlurmCluster(2)
    pids = list(cluster.daemon_pids().values())
    netns = [h.netns for h in cluster.net.hosts]
    workdir = cluster.net.workdir
    # a job still running at teardown is ended too
    job = subprocess.Popen(
        ["srun", "-N2", "-n2", "sleep", "300"], env=cluster.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        cluster.close()
    finally:
        job.kill()
        job.wait()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), pid
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed.split() for ns in netns)
    assert not os.path.exists(workdir)


def test_up_and_down_from_the_command_line(tmp_path) -> None:
    require_slurm()
    work = tmp_path / "cl"
    import sys

    up = subprocess.run(
        [sys.executable, "-m", "tests.harness.slurm_cluster", "up", "--nodes", "2", "--dir", str(work)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stderr
        conf = up.stdout.splitlines()[0].split("=", 1)[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = conf
        res = subprocess.run(["srun", "-N2", "hostname"], env=env, capture_output=True, text=True, timeout=60)
        assert sorted(res.stdout.split()) == ["node1", "node2"]
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "tests.harness.slurm_cluster", "down", "--dir", str(work)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert not (work / "slurm").exists()
