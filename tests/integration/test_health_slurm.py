"""The health check over Slurm on a real 3-node Slurm cluster (network namespaces).

* ``doctor --health --launcher slurm`` inside an allocation whose node3 slurmd was stopped after
  the allocation was granted and whose node2 slurmd (so every step there) runs under a 5% CPU
  quota: node3 is faulty, node2 slow (its compute, measured in its own step), node1 ok (one srun
  step per node), and no probe is left on any node;
* ``run --launcher slurm --preflight exclude`` in a 3-node allocation for a 2-rank job (one rank
  per node; node3 spare): node2 is faulty (its fake NPU's link is down; the device checks run in
  each node's step); the check runs inside the allocation, node2 is left out before the start and
  the job runs on node1 and node3.  (Which verdict leaves a node out does not matter to
  ``exclude``: the slow one is left out over ssh, tests/integration/test_health_cluster.py.)
"""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.harness.cli import run_process
from tests.harness.conftest_slurm import require_slurm
from tests.harness.faultkit import wait_for
from tests.harness.hostfaults import cgroup_v1_cpu, stop_slurmd, throttle_slurmd, unthrottle_slurmd
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FAKE_TOOLS = os.path.join(HERE, "scripts", "fake_devices")
LOSTHOST = os.path.join(HERE, "scripts", "losthost.py")


@pytest.mark.cost(27)
def test_a_node_whose_slurmd_is_down_is_faulty_and_one_under_a_cpu_quota_slow(tmp_path) -> None:
    require_slurm()
    quota = cgroup_v1_cpu()  # without the cgroup v1 cpu controller node2 runs free (and is ok)
    with SlurmCluster(3) as cluster:  # its own: a node is broken for good
        res = cluster.run(["salloc", "--no-shell", "-N3", "--ntasks-per-node=1", "--immediate=30"], timeout=60)
        m = re.search(r"Granted job allocation (\d+)", res.stderr)
        assert res.returncode == 0 and m, res.stderr
        job = m.group(1)
        env = cluster.env()
        env.update(
            {
                "SLURM_JOB_ID": job,
                "SLURM_JOBID": job,
                "SLURM_JOB_NODELIST": "node[1-3]",
                "SLURM_NODELIST": "node[1-3]",
                "SLURM_NTASKS_PER_NODE": "1",
                "SLURM_JOB_NUM_NODES": "3",
            }
        )
        stop_slurmd(cluster, "node3")
        if quota:
            throttle_slurmd(cluster, "node2")
        try:
            r = run_process(
                "doctor", "--health", "--launcher", "slurm", "--json", env=env, cwd=str(tmp_path), timeout=120
            )
        finally:
            if quota:
                unthrottle_slurmd(cluster, "node2")
        assert r.returncode == 1, r.stderr
        data = json.loads(r.stdout)
        verdicts = {h["host"]: h for h in data["hosts"]}
        expected = ["ok", "slow" if quota else "ok", "faulty"]
        assert [verdicts[n]["verdict"] for n in ("node1", "node2", "node3")] == expected, r.stdout
        assert verdicts["node1"]["gflops"] > 0 and verdicts["node1"]["mbps"] > 0
        assert data["network"] == "checked"
        if quota:
            reason = verdicts["node2"]["reason"]
            assert re.match(r"slow: compute [\d.]+ GFLOPS, median [\d.]+; threshold 0.5$", reason), reason
        assert verdicts["node3"]["reason"].startswith("faulty: srun: "), verdicts[
            "node3"
        ]  # e.g. "Application launch failed"
        cluster.run(["scancel", job], timeout=30)
        wait_for(lambda: not cluster.node_pids(include_slurm=False), 30)
        assert cluster.node_pids(include_slurm=False) == {}


def _preflight_run(slurm, tmp_path, extra_env, *program_args, threshold="0.5"):
    """``run --preflight exclude`` of a 2-rank job in a 3-node allocation, one rank per node: its
    ``preflight`` event."""
    res = slurm.run(["salloc", "--no-shell", "-N3", "--ntasks-per-node=1", "--immediate=30"], timeout=60)
    m = re.search(r"Granted job allocation (\d+)", res.stderr)
    assert res.returncode == 0 and m, res.stderr
    job_id = m.group(1)
    pids, job = tmp_path / "pids", tmp_path / "job"
    pids.mkdir()
    try:
        env = slurm.env()
        env.update(
            {
                "SLURM_JOB_ID": job_id,
                "SLURM_JOBID": job_id,
                "SLURM_JOB_NODELIST": "node[1-3]",
                "SLURM_NODELIST": "node[1-3]",
                "SLURM_NTASKS_PER_NODE": "1",
                "SLURM_JOB_NUM_NODES": "3",
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                **extra_env,
            }
        )
        r = run_process(
            "run",
            "--launcher",
            "slurm",
            "--np",
            "2",
            "--preflight",
            "exclude",
            "--health-threshold",
            threshold,
            "--master-port",
            "auto",
            "--log-dir",
            str(job),
            "--tee",
            "none",
            "--env",
            f"PIDDIR={pids}",
            LOSTHOST,
            "3",
            *program_args,
            env=env,
            cwd=str(tmp_path),
            timeout=300,
        )
    finally:
        slurm.run(["scancel", job_id], timeout=30)
    assert r.returncode == 0, r.stderr
    s = json.loads((job / "summary.json").read_text())
    assert {p["name"]: p["host"] for p in s["processes"]} == {
        "scheduler": "node1",
        "rank 0": "node1",
        "rank 1": "node3",
    }
    assert [(pids / f"a0-r{rank}").read_text() for rank in (0, 1)] == ["node1", "node3"]
    (excluded,) = s["excluded_hosts"]
    assert (excluded["host"], excluded["by"], excluded["attempt"]) == ("node2", "preflight", 0)
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    (pre,) = [e for e in events if e["kind"] == "preflight"]
    assert [(h["host"], h["verdict"]) for h in pre["hosts"]] == [
        ("node1", "ok"),
        ("node2", excluded["reason"].split(":")[0]),
        ("node3", "ok"),
    ]
    line = f"mslaunch: preflight: leaving out node2 {excluded['reason']}; rank 1 now on node3 (spare)"
    assert line in r.stderr.splitlines(), r.stderr
    wait_for(lambda: not slurm.node_pids(include_slurm=False), 30)
    assert slurm.node_pids(include_slurm=False) == {}
    return pre


@pytest.mark.cost(18)
def test_preflight_exclude_leaves_a_faulty_node_out_and_the_job_runs_on_the_spare(slurm, tmp_path) -> None:
    fake = tmp_path / "fake"
    (fake / "hosts").mkdir(parents=True)
    for k, case in ((1, "ascend_healthy"), (2, "ascend_link_down"), (3, "ascend_healthy")):
        (fake / "hosts" / f"node{k}").write_text(f"{case}\nnet={k}\n")
    pre = _preflight_run(
        slurm,
        tmp_path,
        {"MSLAUNCH_DEVICE_TOOLS_DIR": FAKE_TOOLS, "MSLAUNCH_FAKE_DEVICES_DIR": str(fake)},
        "--device-target",
        "Ascend",
        threshold="0.2",  # the device verdicts are this test's: the figures are measured beside the suite's work
    )
    reasons = {h["host"]: h["reason"] for h in pre["hosts"]}
    assert pre["devices"]["target"] == "ascend", pre["devices"]
    assert reasons["node1"].endswith("; devices ok: NPU 0") and reasons["node3"].endswith("; devices ok: NPU 0"), (
        reasons
    )
    assert reasons["node2"].startswith("faulty: NPU 0: link status: DOWN (hccn_tool -link -g)"), reasons
