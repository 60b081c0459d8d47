"""Hostile and secret variables through one real ``mslaunch sbatch`` job on the Slurm cluster
(tests/harness/envprobe.py): the batch script and its records hold no secret (the run reads them
from ``secrets.json``, 0600, removed when the run ends), srun's steps carry them in their
environment (not in ``tasks.json``); no value on the command line of any process of the nodes;
every value byte for byte at the ranks and the scheduler; the secrets in no file and in no output."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.harness.cli import run_cli, run_process
from tests.harness.envprobe import EnvProbe
from tests.harness.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.netns]


@pytest.mark.cost(12)
def test_hostile_and_secret_values_through_sbatch_and_srun(slurm: SlurmCluster, tmp_path) -> None:
    probe = EnvProbe(tmp_path)
    home, job_dir = tmp_path / "home", tmp_path / "job"
    env = probe.environ(slurm.env())
    env.update(PYTHONPATH=os.environ.get("PYTHONPATH", ""), MSLAUNCH_HOME=str(home))
    args = ["-N", "2", "--ntasks-per-node", "1", "--log-dir", str(job_dir), "--np", "2", "--master-port", "auto"]
    res = run_process("sbatch", *args, *probe.run_args(), *probe.program(), env=env, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    sid, jid = res.stdout.split()
    try:
        secrets_file = job_dir / "secrets.json"
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        assert sorted(json.loads(secrets_file.read_text())) == ["HF_TOKEN", "S_CRED"]
        assert "--secret-env-file" in (job_dir / "sbatch.sh").read_text()
        probe.wait_ready(3, timeout=90)
        on_nodes = [p for pids in slurm.node_pids().values() for p in pids]
        assert len(on_nodes) >= 3  # the ranks, the scheduler, the shims, the batch script's mslaunch
        assert probe.leaks_on_command_lines([], on_nodes) == []
        tasks = (job_dir / "slurm" / "tasks.json").read_text()
        assert '"secrets"' in tasks and probe.shows_no_secret(tasks)
        status = run_cli("status", jid, env=env)
        assert status.returncode == 0 and probe.shows_no_secret(status.stdout + status.stderr), status.stdout
    finally:
        probe.release()
        slurm.wait_left_queue(sid, 120)
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded", (job_dir / "slurm.out").read_text()[-3000:]
    logs = [(job_dir / n).read_text() for n in ("scheduler.log", "worker_0.log", "worker_1.log")]
    probe.check_ranks(logs, 3)
    assert not secrets_file.exists()  # removed when the run ended (no requeue)
    assert probe.files_holding_secrets(str(job_dir), str(home)) == []
    assert probe.shows_no_secret(res.stdout + res.stderr)
    slurm.wait_idle()
    assert slurm.node_pids() == {}
