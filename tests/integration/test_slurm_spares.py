"""Spare nodes under Slurm, on a real 3-node Slurm 22.05 cluster (network namespaces) of this
module's own (a node is broken in each test).

A 2-rank job (``--np 2``, one rank per node) in a ``salloc --no-kill -N3`` allocation: node3 is the
spare.  Once both ranks run, node2 is broken:

* its slurmd stopped (by its pid): slurmctld marks node2 not responding, then down, and ends the
  step; the slurm backend reads node2's state from Slurm (``scontrol show node``) and ends rank 1
  as a lost host.  node2's shim still beats (its link is up): Slurm's view is what finds it;
* its link cut, its processes alive behind it: node2's shim stops beating, and mslaunch knows the
  node lost in seconds (:mod:`launcher.execution.slurm.beat`), before Slurm does; the shim, cut off
  from mslaunch, ends rank 1 itself.

Each time the restart (``--max-restarts 1``) leaves node2 out, rank 1 moves to node3, and the job
succeeds; summary.json, plan.json and the console name the lost node.  node2 is made whole again
afterwards; nothing is left on any node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any, Tuple

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.conftest_slurm import require_slurm
from tests.harness.faultkit import wait_for, wait_or_fail
from tests.harness.hostfaults import stop_slurmd
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
LOSTHOST = os.path.join(HERE, "scripts", "losthost.py")


def _allocate(cluster: SlurmCluster, *extra: str) -> dict:
    res = cluster.run(["salloc", "--no-shell", "-N3", "--ntasks-per-node=1", "--immediate=30", *extra], timeout=60)
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
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
    )
    return env


@pytest.fixture(scope="module")
def cluster():
    require_slurm()
    with SlurmCluster(3) as c:
        yield c


def _start(cluster: SlurmCluster, tmp_path) -> Tuple[subprocess.Popen, Any, Any]:
    """The 2-rank job in a fresh ``--no-kill`` allocation, once both ranks of attempt 0 run on
    node1 and node2: (its process, its pid folder, its job folder)."""
    env = _allocate(cluster, "--no-kill")
    pids, job = tmp_path / "pids", tmp_path / "job"
    pids.mkdir()
    argv = mslaunch_argv(
        "run",
        "--launcher",
        "slurm",
        "--np",
        "2",
        "--max-restarts",
        "1",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        "--env",
        f"PIDDIR={pids}",
        LOSTHOST,
        "3",
        "hold",
    )
    proc = subprocess.Popen(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_or_fail(
            lambda: (pids / "a0-r0").exists() and (pids / "a0-r1").exists() or proc.poll() is not None,
            120,
            "both ranks of attempt 0 running",
        )
        assert proc.poll() is None, proc.communicate()
        assert [(pids / f"a0-r{r}").read_text() for r in (0, 1)] == ["node1", "node2"]
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, pids, job


def _finish(proc: subprocess.Popen) -> Tuple[str, str]:
    try:
        return proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _moved_to_node3(job, pids, err: str, lost_re: str) -> str:
    """The job's first attempt lost node2 (rank 1's ``host_lost`` matching ``lost_re``), the
    second ran rank 1 on node3 and succeeded: what the summary, the plan and the console say."""
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"], second.get("replanned")) == ("failed", "succeeded", True), first
    cause = first["root_cause"]
    assert (cause["rank"], cause["host"]) == (1, "node2"), cause
    rank1 = {p["name"]: p for p in first["processes"]}["rank 1"]
    lost = rank1["host_lost"]
    assert re.fullmatch(lost_re, lost), lost
    assert (rank1["host"], rank1["torn_down"], cause["reason"]) == ("node2", False, lost)
    assert {p["name"]: p["torn_down"] for p in first["processes"]} == {
        "rank 0": True,
        "rank 1": False,
        "scheduler": True,
    }
    assert cause["cause"]["kind"] == "lost_host", cause
    excluded = [{"host": "node2", "reason": f"host lost (rank 1: {lost})", "by": "restart", "attempt": 1}]
    assert s["excluded_hosts"] == excluded
    plan = json.loads((job / "plan.json").read_text())
    assert plan["excluded_hosts"] == excluded and [p["host"] for p in plan["ranks"]] == ["node1", "node3"]
    assert {p["name"]: p["host"] for p in s["processes"]} == {
        "rank 0": "node1",
        "rank 1": "node3",
        "scheduler": "node1",
    }
    assert (pids / "a1-r1").read_text() == "node3"
    assert "rank1 done" in (job / "attempt_1" / "worker_1.log").read_text()
    assert (
        f"mslaunch: restart: leaving out node2 host lost (rank 1: {lost}); rank 1 moves to node3" in err.splitlines()
    ), err
    return lost


def _linked(cluster: SlurmCluster, node: str, job) -> bool:
    """Whether ``node`` holds an established TCP connection to the attempt's heartbeat port (from
    the tasks file; launcher.execution.slurm.beat)."""
    port = json.loads((job / "slurm" / "tasks.json").read_text())["beat"]["addr"][1]
    ns = cluster.net.hosts[cluster.nodes.index(node)].netns
    ss = ["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established", f"( dport = :{port} )"]
    return bool(subprocess.run(ss, capture_output=True, text=True, timeout=30).stdout.strip())


@pytest.mark.cost(25)
def test_a_node_whose_slurmd_stops_mid_job_is_lost_and_the_restart_uses_the_spare_node(cluster, tmp_path) -> None:
    proc, pids, job = _start(cluster, tmp_path)
    stop_slurmd(cluster, "node2")
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    _moved_to_node3(job, pids, err, r"Slurm node node2 is \S*(DOWN|NOT_RESPONDING)\S*")
    # node2 still runs what its step started (its slurmd is gone, Slurm cannot reach it);
    # started again, slurmd ends the step of a job the node is no longer part of.
    cluster.start_slurmd("node2")
    wait_for(lambda: not cluster.node_pids(include_slurm=False), 60)
    assert cluster.node_pids(include_slurm=False) == {}


@pytest.mark.cost(25)
def test_a_node_cut_off_is_lost_by_its_heartbeats_before_slurm_knows(cluster, tmp_path) -> None:
    """node2's link goes down with its rank alive: the heartbeats find it (5 s of silence), not
    Slurm; its shim, cut off, ends rank 1 (``cut_off`` in its record) and nothing is left there
    once the link is back."""
    wait_or_fail(lambda: "node2" in cluster.idle_nodes(), 60, "node2 back in service")
    proc, pids, job = _start(cluster, tmp_path)
    # a rank runs before its shim's link is up (the shim connects beside it): cut only once it is
    wait_or_fail(lambda: _linked(cluster, "node2", job), 60, "node2's shim linked to mslaunch")
    addr = cluster.addr("node2")
    cluster.net.cut_link(addr)
    try:
        out, err = _finish(proc)
        # the link stays down until the shim, hearing nothing, ended rank 1 (node2 sees the job folder)
        wait_or_fail(lambda: (job / "slurm" / "rank_1.exit.json").exists(), 30, "rank 1's shim ended it, cut off")
    finally:
        cluster.net.restore_link(addr, wait=False)
    assert proc.returncode == 0, err
    _moved_to_node3(
        job, pids, err, r"no heartbeat from node node2 for \d+ s \(its rank_1's shim\); the node or its link is down"
    )
    end = json.loads((job / "slurm" / "rank_1.exit.json").read_text())
    assert (end["node"], end["cut_off"], end["returncode"]) == ("node2", True, -9), end
    wait_for(lambda: not cluster.node_pids(include_slurm=False), 60)
    assert cluster.node_pids(include_slurm=False) == {}
