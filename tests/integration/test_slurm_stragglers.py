"""Slow nodes found while a Slurm job runs: the reference trainer (real MindSpore: ResNet-8 on 16x16, data
parallel, 2 ranks) as srun steps on the namespace Slurm cluster; once the ranks step, rank 1's
process (on node2) is moved into a cgroup under a CPU quota.  mslaunch starts nothing on the nodes
but the steps: each rank's task shim samples it there (``rank-figures/``), and the straggler watch
names rank 1 with node2; the quota lifted, the job trains to its end by itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.execution.supervision.test_stragglerwatch import _events, _steps, _until
from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import job_mark, rank_pids
from tests.harness.hostfaults import cgroup_v1_cpu, throttle_pids, unthrottle_group

STEPS = 16


@pytest.mark.slurm
@pytest.mark.netns
@pytest.mark.mindspore
@pytest.mark.cost(30)  # 26 s alone
def test_a_trainer_rank_under_a_cpu_quota_mid_job_is_named_with_its_slurm_node(slurm, tmp_path):
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    job, data, mark = tmp_path / "job", tmp_path / "data", job_mark(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "200", "--test", "16"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    run = mslaunch_argv(
        "run", "--launcher", "slurm", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
        "--grace", "10", "--straggler", "warn:6", "--env", f"FAULT_STREAM_MARK={mark}", "--env", "GLOG_v=3",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet8", "--data-path", str(data),
        "--image-size", "16", "--batch-size", "4", "--steps-per-epoch", str(STEPS), "--epochs", "1", "--workers", "1",
    )  # fmt: skip
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    salloc = subprocess.Popen(
        ["salloc", "-N2", "--ntasks-per-node=1", *run], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=str(tmp_path),
    )  # fmt: skip
    group = f"mslaunch-test-{uuid.uuid4().hex[:8]}"
    throttled = False
    try:
        _until("2 steps", lambda: _steps(str(job / "worker_0.log")) >= 2 or salloc.poll() is not None, 240)
        assert [e for e in _events(str(job)) if e["kind"] == "straggler"] == []
        throttle_pids(group, [rank_pids(mark)[("0", 1)]], quota_us=10000)  # 10 %: slow steps of seconds
        throttled = True
        _until("rank 1 named", lambda: [e for e in _events(str(job)) if e["kind"] == "straggler"] or salloc.poll())
        unthrottle_group(group)
        throttled = False
        out, err = salloc.communicate(timeout=240)
    finally:
        if throttled:
            unthrottle_group(group)
        if salloc.poll() is None:
            record = json.loads((job / "job.json").read_text()) if (job / "job.json").exists() else {}
            if record.get("pid"):
                os.kill(record["pid"], signal.SIGTERM)
            salloc.communicate(timeout=60)
    named = next(e for e in _events(str(job)) if e["kind"] == "straggler")
    assert (named["rank"], named["host"], named["by"], named["cleared"]) == (1, "node2", "cpu", False), named
    assert named["evidence"].startswith("rank 1 on node2 waited for CPU "), named
    assert sorted(os.listdir(job / "rank-figures")) == ["rank0", "rank1"]
    assert salloc.returncode == 0, out + err
    assert _steps(str(job / "worker_1.log")) == STEPS  # it trained on to the end, on the same nodes
    slurm.wait_idle()
    assert slurm.node_pids() == {}
