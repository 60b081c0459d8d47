"""Hangs of jobs whose ranks run on several namespace hosts, without MindSpore (the stand-in rank
``tests/scripts/hangprog.py``: one rank blocks in ``stuck_reading_data()``, the others wait in
``wait_for_peers()``).

* per-node mode (msrun's way): one ``mslaunch run --worker_num 4 --local_worker_num 2 --node_rank N``
  started inside each of two namespace hosts, as a cluster manager would; rank 3 (node 1) blocks:
  both nodes end ``hung`` (exit 125) with their ranks' stacks dumped, node 1's report names rank 3,
  node 0's names none of its own (its ranks wait alike), each node's summary, report and events say hung;
  with ``--hang-timeout SECONDS`` and with ``auto:FLOOR``;
* mpirun across hosts: the ranks OpenMPI started on the other hosts are dumped on their host over
  ssh, found there by the job's marker in their environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import List

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.integration.test_msrun_e2e import free_port, job_env, wait_all
from tests.integration.test_multihost import cluster, cluster_yaml, need_mpirun, wait_nothing_left  # noqa: F401  (fixtures)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
HANG = os.path.join(HERE, "scripts", "hangprog.py")

pytestmark = pytest.mark.netns


def start_pernode(c, work, port: int, hang: str) -> List[subprocess.Popen]:
    """One ``mslaunch run`` (msrun's flags) per namespace node: node 0 (h1, the master address)
    and node 1 (h2); rank 3 blocks at step 6 of attempt 0."""
    procs = []
    for k in (0, 1):
        argv = (
            ["ip", "netns", "exec", c.host(k).netns]
            + mslaunch_argv("run")
            + [
                "--worker_num=4",
                "--local_worker_num=2",
                f"--master_addr={c.host(0).ip}",
                f"--master_port={port}",
                f"--node_rank={k}",
                f"--log_dir={work / f'node{k}'}",
                "--join=True",
                "--hang-timeout",
                hang,
                "--grace",
                "2",
                HANG,
                "steps",
                "0.4",
                "200",
                "--stall-rank",
                "3",
                "--stall-at",
                "6",
            ]
        )
        out = open(work / f"node{k}.out", "w")
        procs.append(subprocess.Popen(argv, cwd=work, env=job_env(), stdout=out, stderr=subprocess.STDOUT))
    return procs


def check_node_hung(work, k: int, ranks) -> dict:
    folder = work / f"node{k}"
    out = (work / f"node{k}.out").read_text(errors="replace")
    s = json.loads((folder / "summary.json").read_text())
    assert s["status"] == "hung" and s["exit_code"] == 125, (k, s.get("message"), out[-3000:])
    hang = s["hang"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert sorted(rows) == list(ranks), hang
    for r in ranks:  # every rank of this node was dumped, on this node, by py-spy
        row = rows[r]
        assert row["alive"] is True and row["stack_files"], (k, row)
        text = (folder / "stacks" / row["stack_files"][0]).read_text()
        assert text.startswith(f"# mslaunch stack dump: rank{r}, pid ") and "tool: py-spy" in text, text[:300]
        want = "stuck_reading_data (hangprog.py:" if r == 3 else "wait_for_peers (hangprog.py:"
        assert row["frame"].startswith(want), (k, row)
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "hung" for e in events), [e["kind"] for e in events]
    status = run_process("status", str(folder), env=job_env(), timeout=60)  # the report's text, as a person reads it
    assert (
        status.returncode == 1
        and "hung: no progress for" in status.stdout
        and f"stacks: {folder / 'stacks'}" in status.stdout
    ), status.stdout
    return hang


@pytest.mark.cost(30)
@pytest.mark.parametrize("hang", ["6", "auto:6"])
def test_per_node_mode_hang_ends_both_nodes_hung_with_stacks(cluster, tmp_path, hang):  # noqa: F811  (pytest's fixture, imported above)
    c = cluster
    codes = wait_all(start_pernode(c, tmp_path, free_port(), hang), timeout=240)
    assert codes == [125, 125], [(tmp_path / f"node{k}.out").read_text()[-3000:] for k in (0, 1)]
    node0 = check_node_hung(tmp_path, 0, (0, 1))
    node1 = check_node_hung(tmp_path, 1, (2, 3))
    assert node1["culprit"]["rank"] == 3, node1  # it went silent first on its node
    assert node0["culprit"] is None, node0  # its ranks wait alike: none of them stands out
    if hang.startswith("auto"):
        assert all(n["derived"].startswith("auto") for n in (node0, node1)), (node0["derived"], node1["derived"])
    assert wait_nothing_left(c) == {}


@pytest.mark.mpi
@pytest.mark.cost(25)
def test_mpirun_ranks_on_other_hosts_are_dumped_on_their_hosts(cluster, tmp_path, need_mpirun):  # noqa: F811  (pytest's fixture, imported above)
    """mpirun across the three namespace hosts (2 ranks each, the scheduler on h1); rank 3 (h2)
    blocks: every rank's stacks were dumped on its own host by py-spy over ssh (none of them is a
    process below this machine's mpirun: they are found on their host by the job's marker in
    their environment), the report names rank 3, and nothing is left."""
    c = cluster
    job, pids = tmp_path / "job", tmp_path / "pids"
    pids.mkdir()
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    r = run_process(
        "run",
        "--hosts",
        c.inventory_yaml,
        "--launcher",
        "mpirun",
        "--env",
        f"PIDDIR={pids}",
        "--nic",
        str(c.subnet),
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        "--hang-timeout",
        "5",
        HANG,
        "steps",
        "0.4",
        "200",
        "--stall-rank",
        "3",
        "--stall-at",
        "6",
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert r.returncode == 125, r.stderr + (job / "mpirun.log").read_text(errors="replace")[-3000:]
    s = json.loads((job / "summary.json").read_text())
    hang = s["hang"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert sorted(rows) == list(range(6)) and hang["culprit"]["rank"] == 3, hang
    for rank, row in rows.items():
        assert row["host"] == c.hosts[rank // 2].ip and row["stack_files"], row
        text = (job / "stacks" / row["stack_files"][0]).read_text()
        assert text.startswith(f"# mslaunch stack dump: rank{rank}, pid ") and "tool: py-spy" in text, text[:300]
        assert (
            row["stack_files"][0] == f"rank{rank}.pid{(pids / f'rank{rank}.pids').read_text().split()[0]}.txt"
        )  # the rank's own process
        want = "stuck_reading_data (hangprog.py:" if rank == 3 else "wait_for_peers (hangprog.py:"
        assert row["frame"].startswith(want), row
    assert wait_nothing_left(c) == {}
