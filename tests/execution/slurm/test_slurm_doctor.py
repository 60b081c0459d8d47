"""``mslaunch doctor --launcher slurm`` on the real cluster: inside an allocation every check
passes (Python probed on every node); too many ranks and a down node are ✗; outside one it says so."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.harness.cli import run_process
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]


def _doctor(env, *args: str) -> subprocess.CompletedProcess:
    env = dict(env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    return run_process("doctor", "--launcher", "slurm", "--json", *args, env=env, timeout=180)


def test_doctor_inside_an_allocation(slurm: SlurmCluster) -> None:
    with slurm.allocation(3, 2) as env:
        ok = _doctor(env, "--np", "6")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        rows = {r["check"]: r for r in json.loads(ok.stdout)}
        assert set(rows) == {
            "sinfo",
            "squeue",
            "partitions",
            "nodes",
            "allocation",
            "python@node1",
            "python@node2",
            "python@node3",
        }
        assert all(r["ok"] for r in rows.values())
        assert "6 slot(s)" in rows["allocation"]["detail"]
        too_many = _doctor(env, "--np", "7")
        assert too_many.returncode == 1
        assert [r["check"] for r in json.loads(too_many.stdout) if not r["ok"]] == ["allocation"]


def test_doctor_outside_an_allocation_and_a_down_node(slurm: SlurmCluster) -> None:
    res = _doctor(slurm.env())
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["check"]: r for r in json.loads(res.stdout)}
    assert "not inside an allocation" in rows["allocation"]["detail"]
    assert slurm.run(["scontrol", "update", "nodename=node3", "state=drain", "reason=test"]).returncode == 0
    try:
        res = _doctor(slurm.env())
        assert res.returncode == 1
        bad = [r for r in json.loads(res.stdout) if not r["ok"]]
        assert [r["check"] for r in bad] == ["nodes"] and "node3" in bad[0]["detail"]
    finally:
        slurm.run(["scontrol", "update", "nodename=node3", "state=resume"])
