"""``doctor --health --launcher slurm`` inside an allocation of a real 3-node Slurm cluster
whose node3 slurmd was stopped after the allocation was granted: node3 is faulty, the others
ok (one srun step per node), and no probe is left on any node; and the device checks in each
node's step on the shared cluster (fake device tools)."""
from __future__ import annotations

import json
import os
import re

import pytest

from tests.harness.cli import run_process
from tests.harness.conftest_slurm import require_slurm
from tests.harness.hostfaults import stop_slurmd
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]

FAKE_TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "fake_devices")


def test_a_node_whose_slurmd_is_down_is_faulty(tmp_path) -> None:
    require_slurm()
    with SlurmCluster(3) as cluster:  # its own: a node is broken for good
        res = cluster.run(["salloc", "--no-shell", "-N3", "--ntasks-per-node=1", "--immediate=30"], timeout=60)
        m = re.search(r"Granted job allocation (\d+)", res.stderr)
        assert res.returncode == 0 and m, res.stderr
        job = m.group(1)
        env = cluster.env()
        env.update({"SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_NODELIST": "node[1-3]",
                    "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NUM_NODES": "3"})
        stop_slurmd(cluster, "node3")
        r = run_process("doctor", "--health", "--launcher", "slurm", "--json", env=env, cwd=str(tmp_path), timeout=120)
        assert r.returncode == 1, r.stderr
        data = json.loads(r.stdout)
        verdicts = {h["host"]: h for h in data["hosts"]}
        assert [verdicts[n]["verdict"] for n in ("node1", "node2", "node3")] == ["ok", "ok", "faulty"], r.stdout
        assert verdicts["node1"]["gflops"] > 0 and verdicts["node1"]["mbps"] > 0
        assert data["network"] == "checked"
        assert verdicts["node3"]["reason"].startswith("faulty: srun: "), verdicts["node3"]  # e.g. "Application launch failed"
        cluster.run(["scancel", job], timeout=30)
        left = {n: p for n, p in cluster.node_pids(include_slurm=False).items()}
        assert left == {}


def test_device_checks_run_in_each_nodes_step(slurm, tmp_path) -> None:
    """``--device-target ascend`` under Slurm: the fake device tools answer per node
    (``SLURMD_NODENAME``) inside the probe's ``srun`` step; node2's NPU 0 link is down."""
    fake = tmp_path / "fake"
    (fake / "hosts").mkdir(parents=True)
    (fake / "hosts" / "node1").write_text("ascend_healthy\nnet=1\n")
    (fake / "hosts" / "node2").write_text("ascend_link_down\nnet=2\n")
    res = slurm.run(["salloc", "--no-shell", "-N2", "-w", "node[1-2]", "--ntasks-per-node=1", "--immediate=30"], timeout=60)
    m = re.search(r"Granted job allocation (\d+)", res.stderr)
    assert res.returncode == 0 and m, res.stderr
    job = m.group(1)
    try:
        env = slurm.env()
        env.update({"SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODELIST": "node[1-2]",
                    "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NUM_NODES": "2", "MSLAUNCH_DEVICE_TOOLS_DIR": FAKE_TOOLS,
                    "MSLAUNCH_FAKE_DEVICES_DIR": str(fake)})
        r = run_process("doctor", "--health", "--launcher", "slurm", "--json", "--device-target", "ascend", env=env,
                        cwd=str(tmp_path), timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        hosts = {h["host"]: h for h in json.loads(r.stdout)["hosts"]}
        assert hosts["node1"]["verdict"] == "ok" and hosts["node1"]["reason"].endswith("; devices ok: NPU 0"), hosts["node1"]
        assert hosts["node2"]["verdict"] == "faulty", hosts["node2"]
        assert hosts["node2"]["reason"].startswith("faulty: NPU 0: link status: DOWN (hccn_tool -link -g)"), hosts["node2"]
    finally:
        slurm.run(["scancel", job], timeout=30)
    assert slurm.node_pids(include_slurm=False) == {}
