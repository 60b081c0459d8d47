"""Hostile and secret variables through one real local job (tests/harness/envprobe.py): no value
on any process's command line, every value byte for byte at the ranks, the secrets in no file of
the job nor of the registry, and ``<secret>`` in ``status``, ``plan``, ``env show``, ``--dry-run``
and the report."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.cli import mslaunch_argv, run_cli
from tests.harness.envprobe import EnvProbe
from tests.harness.netns_cluster import wait_gone

pytestmark = pytest.mark.e2e


@pytest.mark.cost(8)
def test_hostile_and_secret_values_reach_local_ranks_and_nowhere_else(tmp_path):
    probe = EnvProbe(tmp_path)
    home, job_dir = tmp_path / "home", tmp_path / "job"
    env = probe.environ(dict(os.environ, MSLAUNCH_HOME=str(home)))
    options = ["--np", "2", "--master-port", "auto", *probe.run_args()]
    proc = subprocess.Popen(
        mslaunch_argv("run", "--log-dir", str(job_dir), "--grace", "2", *options, *probe.program()),
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = [proc.pid]
    try:
        pids += probe.wait_ready(3, alive=lambda: proc.poll() is None)
        assert probe.leaks_on_command_lines([proc.pid]) == []
        probe.release()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert wait_gone(pids, 20.0) == []
    logs = [(job_dir / n).read_text() for n in ("scheduler.log", "worker_0.log", "worker_1.log")]
    probe.check_ranks(logs, 3)
    assert probe.files_holding_secrets(str(job_dir), str(home)) == []
    assert probe.shows_no_secret(out + err)
    # what prints a plan or a job shows <secret>, and the other values as they are
    shown = [run_cli("status", str(job_dir), env=env, cwd=str(tmp_path))]
    for cmd in (["plan"], ["plan", "--json"], ["env", "show", "--rank", "1"], ["run", "--dry-run"]):
        shown.append(run_cli(*cmd, *options, *probe.program(), env=env, cwd=str(tmp_path)))
    for r in shown:
        assert r.returncode == 0, r.stderr
        assert probe.shows_no_secret(r.stdout + r.stderr), r.stdout
    assert "HF_TOKEN='<secret>'" in shown[1].stdout and "export S_CRED='<secret>'" in shown[3].stdout
    assert probe.marker in shown[1].stdout  # not a secret: shown
    report = run_cli("report", str(job_dir), env=env, cwd=str(tmp_path))
    assert report.returncode == 0, report.stderr
    assert probe.files_holding_secrets(str(job_dir)) == []
