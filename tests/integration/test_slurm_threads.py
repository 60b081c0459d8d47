"""Threads per rank for Slurm steps, on the shared 3-node Slurm 22.05 cluster (network namespaces):
node1's slurmd runs under a cgroup v1 cpuset of CPU 0 and a CPU quota of half a core, so its job
steps (the shims and their ranks) inherit them; node2 has both cores and no quota.  Each task's
shim reads its node's cores and sets its rank's threads; each rank reports its env and affinity
(tests/scripts/rankprog.py env)."""

from __future__ import annotations

import json
import os

import pytest

from tests.harness.cgroups import cpu_limit, unavailable_reason
from tests.harness.ci import skip_or_fail
from tests.harness.cli import run_process
from tests.integration.test_remote_threads import PROG, _records

pytestmark = [pytest.mark.slurm, pytest.mark.netns]


@pytest.mark.cost(40)
def test_slurm_ranks_get_threads_from_their_nodes_usable_cores(slurm, tmp_path) -> None:
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    common = ["--launcher", "slurm", "-H", "node1:2,node2:1", "--master-port", "auto", "--cpu-tune", "on"]
    with slurm.allocation(nodes=2, per_node=2) as env:
        env = dict(env, PYTHONPATH=os.environ.get("PYTHONPATH", ""), MSLAUNCH_HOME=str(tmp_path / "home"))
        planned = run_process("plan", *common, PROG, "env", env=env, cwd=str(tmp_path))
        assert planned.returncode == 0, planned.stderr
        assert "node1: threads per rank set at start by the Slurm task shim on each node" in planned.stdout
        assert "threads not planned" not in planned.stdout
        with cpu_limit(slurm.daemon_pids()["node1"], cpus="0", quota=0.5) as group:
            job = tmp_path / "job"
            r = run_process(
                "run",
                *common,
                "--tee",
                "none",
                "--log-dir",
                str(job),
                PROG,
                "env",
                env=env,
                cwd=str(tmp_path),
                timeout=120,
            )
            assert r.returncode == 0, r.stderr
            seen = _records(str(job))
            # node1: cpuset {0} and 0.5 core -> 1 usable core, 2 ranks: 1 thread each, oversubscribed
            assert seen[0]["cpus"] == [0] and seen[1]["cpus"] == [0]
            assert (seen[0]["omp"], seen[0]["ms"], seen[1]["omp"], seen[1]["ms"]) == ("1", "1", "1", "1")
            # node2: both cores, no quota, 1 rank: 2 threads
            assert seen[2]["cpus"] == [0, 1] and (seen[2]["omp"], seen[2]["ms"]) == ("2", "2")
            logs = {r_: (job / f"worker_{r_}.log").read_text() for r_ in range(3)}
            assert (
                "mslaunch: cpu: node1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s) on 1 "
                "usable "
                f"core(s) (cpuset 0, cgroup v1 cpu.cfs_quota_us /{group}: 0.5 core(s); read by the Slurm task shim on "
                "node1)"
            ) in logs[0]
            assert "mslaunch: warning: node1: 2 ranks on 1 usable core(s)" in logs[0]
            assert "mslaunch:" not in logs[1] and "warning" not in logs[2]
            record = json.loads((job / "host-threads" / "node1.json").read_text())
            assert (
                record["cores"]["usable"] == 1 and record["cores"]["quota"] == 0.5 and record["cpus_per_task"] is None
            )
            # the console says each node's decision once; host-threads.json has both nodes
            assert (
                r.stderr.count(
                    "mslaunch: cpu: node1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s)"
                )
                == 1
            )
            assert (
                r.stderr.count(
                    "mslaunch: cpu: node2: threads per rank 2 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 1 rank(s)"
                )
                == 1
            )
            assert (
                r.stderr.count("mslaunch: warning: node1: 2 ranks on 1 usable core(s)") == 1
                and "warning: node2" not in r.stderr
            )
            merged = json.loads((job / "host-threads.json").read_text())
            assert sorted(merged) == ["node1", "node2"] and merged["node1"] == record

        # CPUs per task asked of Slurm (as salloc -c 1 exports it): a rank's share is capped there
        job2 = tmp_path / "job2"
        r = run_process(
            "run",
            *common,
            "--tee",
            "none",
            "--log-dir",
            str(job2),
            PROG,
            "env",
            env=dict(env, SLURM_CPUS_PER_TASK="1"),
            cwd=str(tmp_path),
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        seen = _records(str(job2))
        assert seen[2]["cpus"] == [0, 1] and (seen[2]["omp"], seen[2]["ms"]) == ("1", "1")
        assert (
            "1 rank(s) on 2 usable core(s) (cpuset 0-1, no cgroup CPU quota; read by the Slurm task shim on node2); "
            "at most 1 per rank (SLURM_CPUS_PER_TASK=1)" in (job2 / "worker_2.log").read_text()
        )
    assert slurm.node_pids(include_slurm=False) == {}
