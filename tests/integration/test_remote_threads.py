"""Threads per rank on remote hosts, learned where mslaunch reaches each host at start (the ssh
agent), on namespace hosts with real, different CPU limits: h1 runs under a cgroup v1 cpuset of
CPU 0 and a CPU quota of half a core, h2 has both cores and no quota.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.harness.cgroups import cpu_limit, unavailable_reason
from tests.harness.ci import skip_or_fail
from tests.harness.cli import run_process

pytestmark = [pytest.mark.netns, pytest.mark.e2e]

PROG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "rankprog.py")


def _records(job_dir: str) -> dict:
    """rank -> what the rank saw (``rankprog.py env``: its env lines and ``cpus=``)."""
    out = {}
    for name in os.listdir(job_dir):
        if name.startswith("worker_") and name.endswith(".log"):
            with open(os.path.join(job_dir, name), encoding="utf-8") as f:
                kv = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line and not line.startswith("rank"))
            out[int(kv["RANK_ID"])] = {
                "omp": kv.get("OMP_NUM_THREADS"),
                "ms": kv.get("MSLAUNCH_CPU_THREADS"),
                "cpus": [int(c) for c in kv["cpus"].split(",")],
            }
    return out


@pytest.mark.cost(30)
def test_remote_ranks_get_threads_from_their_hosts_usable_cores(make_netns_cluster, tmp_path):
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    c = make_netns_cluster(2, cgroups=True)
    prog = PROG
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config, MSLAUNCH_HOME=str(tmp_path / "home"))
    common = ["-H", "h1:2,h2:1", "--launcher", "ssh", "--cpu-tune", "on", "--master-port", "auto"]

    planned = run_process("plan", *common, prog, "env", env=env, cwd=str(tmp_path))
    assert planned.returncode == 0, planned.stderr
    assert "h1: threads per rank set at start by the ssh agent" in planned.stdout
    assert "(not reached before this plan)" in planned.stdout
    shown = run_process("env", "show", "--rank", "2", *common, prog, "env", env=env, cwd=str(tmp_path))
    assert "OMP_NUM_THREADS" not in "".join(ln for ln in shown.stdout.splitlines(True) if ln.startswith("export"))
    assert "# h2: threads per rank set at start" in shown.stdout

    sshd = c.sshd_pid("h1")
    assert sshd is not None
    with cpu_limit(sshd, cpus="0", quota=0.5) as group:
        job = tmp_path / "job"
        r = run_process("run", *common, "--log-dir", str(job), prog, "env", env=env, cwd=str(tmp_path), timeout=120)
        assert r.returncode == 0, r.stderr
        seen = _records(str(job))
        # h1: cpuset {0} and 0.5 core -> 1 usable core, 2 ranks: 1 thread each, oversubscribed
        assert seen[0]["cpus"] == [0] and seen[1]["cpus"] == [0]
        assert (seen[0]["omp"], seen[0]["ms"], seen[1]["omp"]) == ("1", "1", "1")
        # h2: cores 0-1, no quota, 1 rank: 2 threads
        assert seen[2]["cpus"] == [0, 1] and (seen[2]["omp"], seen[2]["ms"]) == ("2", "2")
        assert (
            "h1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s) on 1 usable core(s)" in r.stderr
        )
        assert f"cgroup v1 cpu.cfs_quota_us /{group}: 0.5 core(s)" in r.stderr
        assert "warning: h1: 2 ranks on 1 usable core(s)" in r.stderr
        assert "warning: h2:" not in r.stderr
        record = json.loads((job / "host-threads.json").read_text())
        assert record["h1"]["cores"]["usable"] == 1 and record["h1"]["cores"]["quota"] == 0.5
        assert record["h2"]["cores"] == {
            "host": "h2",
            "cpus": "0-1",
            "quota": None,
            "quota_source": None,
            "usable": 2,
            "learned": "the ssh agent on h2",
        }

        # the user's own OMP_NUM_THREADS wins; mslaunch still sizes MindSpore's pool, and warns
        job2 = tmp_path / "job2"
        r = run_process(
            "run",
            *common,
            "--env",
            "OMP_NUM_THREADS=3",
            "--log-dir",
            str(job2),
            prog,
            "env",
            env=env,
            cwd=str(tmp_path),
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        seen = _records(str(job2))
        assert [seen[i]["omp"] for i in range(3)] == ["3", "3", "3"]
        assert [seen[i]["ms"] for i in range(3)] == ["1", "1", "2"]
        assert "h1: 2 ranks x OMP_NUM_THREADS=3 (yours) exceed its 1 usable core(s)" in r.stderr
        assert "h2: 1 ranks x OMP_NUM_THREADS=3 (yours) exceed its 2 usable core(s)" in r.stderr
    assert c.all_pids() == {}


@pytest.mark.mpi
@pytest.mark.cost(30)
def test_mpirun_ranks_get_threads_from_their_hosts_usable_cores(make_netns_cluster, tmp_path):
    """The same hosts under mpirun: each rank's wrapper reads its host's cpuset and quota."""
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    if shutil.which("mpirun") is None:
        skip_or_fail("mpirun not installed (apt-get install openmpi-bin)")
    c = make_netns_cluster(2, cgroups=True)
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config, MSLAUNCH_HOME=str(tmp_path / "home"))
    common = ["-H", "h1:2,h2:1", "--launcher", "mpirun", "--method", "mpi", "--nic", str(c.subnet), "--cpu-tune", "on"]

    planned = run_process("plan", *common, PROG, "env", env=env, cwd=str(tmp_path))
    assert planned.returncode == 0, planned.stderr
    assert "h1: threads per rank set at start by the rank wrapper (mslaunch-rank.sh) on each host" in planned.stdout
    assert "threads not planned" not in planned.stdout

    with cpu_limit(c.sshd_pid("h1"), cpus="0", quota=0.5) as group:
        job = tmp_path / "job"
        r = run_process("run", *common, "--log-dir", str(job), PROG, "env", env=env, cwd=str(tmp_path), timeout=120)
        assert r.returncode == 0, r.stderr + (job / "mpirun.log").read_text()
        seen = _records(str(job))
        # h1: cpuset {0} and 0.5 core -> 1 usable core, 2 ranks: 1 thread each, oversubscribed
        assert seen[0]["cpus"] == [0] and seen[1]["cpus"] == [0]
        assert (seen[0]["omp"], seen[0]["ms"], seen[1]["omp"], seen[1]["ms"]) == ("1", "1", "1", "1")
        # h2: both cores (mpirun binds nothing: --bind-to none), no quota, 1 rank: 2 threads
        assert seen[2]["cpus"] == [0, 1] and (seen[2]["omp"], seen[2]["ms"]) == ("2", "2")
        first = (job / "worker_0.log").read_text()
        assert (
            "mslaunch: cpu: h1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s) on 1 usable "
            "core(s) "
            f"(cpuset 0, cgroup v1 cpu.cfs_quota_us /{group}: 0.5 core(s); read by the rank wrapper on h1)"
        ) in first
        assert "mslaunch: warning: h1: 2 ranks on 1 usable core(s)" in first
        assert "mslaunch:" not in (job / "worker_1.log").read_text()
        assert "warning" not in (job / "worker_2.log").read_text()
        h1 = json.loads((job / "host-threads" / "h1.json").read_text())
        assert (h1["cpus"], h1["quota"], h1["usable"], h1["ranks"]) == ("0", 0.5, 1, 2)
        assert json.loads((job / "host-threads" / "h2.json").read_text())["usable"] == 2
        # the console says each host's decision once, as for ssh; host-threads.json has both hosts
        assert (
            r.stderr.count(
                "mslaunch: cpu: h1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s) on 1 usable"
            )
            == 1
        )
        assert (
            r.stderr.count(
                "mslaunch: cpu: h2: threads per rank 2 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 1 rank(s) on 2 usable"
            )
            == 1
        )
        assert (
            r.stderr.count("mslaunch: warning: h1: 2 ranks on 1 usable core(s)") == 1 and "warning: h2" not in r.stderr
        )
        merged = json.loads((job / "host-threads.json").read_text())
        assert (
            sorted(merged) == ["h1", "h2"]
            and merged["h1"]["usable"] == 1
            and merged["h1"]["warnings"] == [h1["warning"]]
        )

        # the user's own OMP_NUM_THREADS wins; mslaunch still sizes MindSpore's pool, and warns
        job2 = tmp_path / "job2"
        r = run_process(
            "run",
            *common,
            "--env",
            "OMP_NUM_THREADS=3",
            "--log-dir",
            str(job2),
            PROG,
            "env",
            env=env,
            cwd=str(tmp_path),
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        seen = _records(str(job2))
        assert [seen[i]["omp"] for i in range(3)] == ["3", "3", "3"]
        assert [seen[i]["ms"] for i in range(3)] == ["1", "1", "2"]
        assert "h1: 2 ranks on 1 usable core(s)" in (job2 / "worker_0.log").read_text()
        assert (
            "h2: 1 ranks x OMP_NUM_THREADS=3 (yours) exceed its 2 usable core(s)" in (job2 / "worker_2.log").read_text()
        )
    assert c.all_pids() == {}
