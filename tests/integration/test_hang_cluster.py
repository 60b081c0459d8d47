"""Hang dumps made on the ranks' hosts: over ssh (namespace hosts) and under Slurm (an srun on the node).

The stand-in rank ``tests/scripts/hangprog.py`` (no MindSpore): 2 ranks, one per host, rank 1
blocks in ``stuck_reading_data()`` at step 3 of attempt 0, rank 0 then waits in
``wait_for_peers()``; ``--hang-timeout 4 --max-restarts 1``: the attempt is hung, each rank's
stacks were dumped on its own host with py-spy (the frame each rank is blocked in), the summary
names rank 1, and attempt 1 (MSLAUNCH_ATTEMPT=1) runs every step and succeeds.  The same with
real MindSpore (rank 1 blocked before the gradient AllReduce, rank 0 waiting inside MindSpore's
AllReduce, a restart that succeeds), run locally: ``test_hang_mindspore.py``; the dump itself is
the same program on the rank's host either way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
HANG = os.path.join(HERE, "scripts", "hangprog.py")

#: the steps each rank runs in attempt 1 (attempt 0 hangs at step 3)
STEPS = 8


def _hung_then_restarted_args(pids) -> list:
    """``mslaunch run``'s options and program for the hung-then-restarted job (after ``--log-dir``)."""
    return [
        "--tee",
        "none",
        "--grace",
        "2",
        "--env",
        f"PIDDIR={pids}",
        "--hang-timeout",
        "4",
        "--max-restarts",
        "1",
        HANG,
        "steps",
        "0.3",
        str(STEPS),
        "--stall-rank",
        "1",
        "--stall-at",
        "3",
    ]


def _check_hung_then_restarted(job, pids, hosts):
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"]) == ("hung", "succeeded"), first.get("message")
    hang = first["hang"]
    assert hang["culprit"]["rank"] == 1 and first["root_cause"]["rank"] == 1
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert [rows[r]["host"] for r in (0, 1)] == hosts
    assert rows[1]["frame"].startswith("stuck_reading_data (hangprog.py:"), rows
    assert rows[0]["frame"].startswith("wait_for_peers (hangprog.py:"), rows
    for r in (0, 1):
        text = (job / "stacks" / rows[r]["stack_files"][0]).read_text()
        assert text.startswith(f"# mslaunch stack dump: rank{r}, pid ") and "tool: py-spy" in text
        assert (pids / f"rank{r}.attempt1").exists()  # attempt 1 ran with MSLAUNCH_ATTEMPT=1
        log = (job / "attempt_1" / f"worker_{r}.log").read_text(errors="replace")
        assert f"epoch: 0, step: {STEPS - 1}, loss is" in log, log


def _run_on_cluster(c, tmp_path, args):
    """``mslaunch run`` of 2 ranks, one per namespace host, in ``tmp_path/job`` (``tmp_path/pids``
    made for the program) with ``args`` (options, then the program)."""
    (tmp_path / "pids").mkdir()
    return run_process(
        "run",
        "--hosts",
        cluster_yaml(c, tmp_path / "inv.yaml", slots=1),
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        *args,
        env=dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config),
        cwd=str(tmp_path),
        timeout=300,
    )


@pytest.mark.netns
@pytest.mark.cost(11)
def test_hung_job_over_ssh_is_dumped_on_its_hosts(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    c = cluster
    job, pids = tmp_path / "job", tmp_path / "pids"
    r = _run_on_cluster(c, tmp_path, _hung_then_restarted_args(pids))
    assert r.returncode == 0, r.stderr
    _check_hung_then_restarted(job, pids, [c.hosts[0].ip, c.hosts[1].ip])
    assert wait_nothing_left(c) == {}


@pytest.mark.netns
@pytest.mark.cost(12)
def test_a_rank_stopped_on_its_host_is_seen_by_the_hosts_agent_named_and_the_restart_finishes(cluster, tmp_path):  # noqa: F811
    """SIGSTOP on a remote host: no exit, no line; the host agent's heartbeats say the rank is
    stopped, the attempt ends after --stopped-timeout (not --hang-timeout), rank 1 on its host is
    the culprit, the agent's SIGTERM reaches it (SIGCONT follows), and the restart finishes."""
    c = cluster
    job, pids = tmp_path / "job", tmp_path / "pids"
    flags = ["--tee", "none", "--grace", "3", "--env", f"PIDDIR={pids}", "--hang-timeout", "120"]
    flags += ["--stopped-timeout", "2", "--max-restarts", "1"]
    r = _run_on_cluster(c, tmp_path, [*flags, HANG, "steps", "0.2", str(STEPS), "--stop-rank", "1", "--stop-at", "3"])
    assert r.returncode == 0, r.stderr
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"]) == ("hung", "succeeded"), first.get("message")
    hang = first["hang"]
    assert hang["kind"] == "stopped" and hang["derived"] == "--stopped-timeout 2 s", hang
    assert (
        hang["culprit"]["rank"] == 1
        and first["root_cause"]["rank"] == 1
        and first["root_cause"]["host"] == c.hosts[1].ip
    )
    ended = {p["name"]: p for p in first["processes"]}
    assert ended["rank 1"]["signal"] == "SIGTERM", ended["rank 1"]  # not held until the SIGKILL
    assert f"epoch: 0, step: {STEPS - 1}, loss is" in (job / "attempt_1" / "worker_1.log").read_text()
    assert wait_nothing_left(c) == {}


@pytest.mark.slurm
@pytest.mark.netns
@pytest.mark.cost(12)
def test_hung_job_under_slurm_is_dumped_by_srun_on_its_nodes(slurm, tmp_path):
    job, pids = tmp_path / "job", tmp_path / "pids"
    pids.mkdir()
    run = " ".join(
        mslaunch_argv(
            "run",
            "--launcher",
            "slurm",
            "--np",
            "2",
            "--master-port",
            "auto",
            "--log-dir",
            str(job),
            *_hung_then_restarted_args(pids),
        )
    )
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    res = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=1", "sh", "-c", f"{run}; echo rc=$?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert re.findall(r"^rc=(\d+)$", res.stdout, re.M) == ["0"], res.stdout + res.stderr
    _check_hung_then_restarted(job, pids, ["node1", "node2"])
    slurm.wait_idle()
    assert slurm.node_pids() == {}


@pytest.mark.netns
def test_ranks_of_one_ssh_host_are_dumped_on_it_in_one_go(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    c = cluster
    inv = cluster_yaml(c, tmp_path / "inv.yaml", slots=2)
    job, pids = tmp_path / "job", tmp_path / "pids"
    pids.mkdir()
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    prog = os.path.join(HERE, "scripts", "hangprog.py")
    r = run_process(
        "run",
        "--hosts",
        inv,
        "--np",
        "2",
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
        "--hang-timeout",
        "4",
        prog,
        "steps",
        "0.3",
        "100",
        "--stall-rank",
        "1",
        "--stall-at",
        "5",
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert r.returncode == 125, r.stderr
    hang = json.loads((job / "summary.json").read_text())["hang"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert [rows[r]["host"] for r in (0, 1)] == [c.hosts[0].ip] * 2 and hang["culprit"]["rank"] == 1
    assert rows[1]["frame"].startswith("stuck_reading_data (hangprog.py:") and rows[0]["frame"].startswith(
        "wait_for_peers (hangprog.py:"
    )
    for r in (0, 1):
        assert "tool: py-spy" in (job / "stacks" / rows[r]["stack_files"][0]).read_text()
    assert wait_nothing_left(c) == {}
