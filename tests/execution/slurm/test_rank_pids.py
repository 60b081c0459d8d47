"""``status --json`` of a running Slurm job gives every rank's pid on its node (the task shim's start
record), not srun's."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.harness.cli import mslaunch_argv, run_cli
from tests.harness.faultkit import wait_or_fail

PROG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "rankprog.py"
)


@pytest.mark.slurm
@pytest.mark.netns
@pytest.mark.e2e
@pytest.mark.cost(8)
def test_status_json_gives_each_slurm_ranks_pid_on_its_node(slurm, tmp_path):
    job, pids = tmp_path / "job", tmp_path / "pids"
    pids.mkdir()
    run = mslaunch_argv("run", "--launcher", "slurm", "--np", "2", "--master-port", "auto", "--log-dir", str(job))
    run += ["--tee", "none", "--grace", "2", "--env", f"PIDDIR={pids}", PROG, "hang"]
    env = slurm.env()
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    salloc = subprocess.Popen(
        ["salloc", "-N2", "--ntasks-per-node=1", *run],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    try:

        def processes():
            r = run_cli("status", "--json", str(job), env=env)
            if r.returncode != 0:
                return None
            rows = {p["name"]: p for p in json.loads(r.stdout).get("processes", [])}
            ranks = [rows.get(f"rank {k}") for k in (0, 1)]
            return rows if all(p is not None and p["pid"] is not None for p in ranks) else None

        rows = wait_or_fail(processes, 60, "status --json with both ranks' pids")
        for k, node in enumerate(["node1", "node2"]):
            row = rows[f"rank {k}"]
            assert (row["host"], row["state"]) == (node, "running"), row
            own = int((pids / f"rank{k}.pids").read_text().split()[0])  # the rank's os.getpid()
            assert row["pid"] == own
            assert own in slurm.net.pids_in(slurm.nodes.index(node)), own  # alive, in its node's namespace
    finally:
        record = json.loads((job / "job.json").read_text()) if (job / "job.json").exists() else {}
        if record.get("pid"):
            os.kill(record["pid"], signal.SIGTERM)  # the mslaunch salloc started for this test
        out, err = salloc.communicate(timeout=60)
    assert salloc.returncode == 143, out + err
    slurm.wait_idle()
    assert slurm.node_pids() == {}
