"""Hostile and secret variables through one real job per multi-host backend (ssh, mpirun) on the
namespace cluster (tests/harness/envprobe.py): no value on the command line of any process, here
(mslaunch and its descendants) or on the hosts (every process of their namespaces: agents,
orted, wrappers, ranks); every value byte for byte at the ranks and the scheduler; the secrets in
no file of the job and in no output."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.harness.ci import skip_or_fail
from tests.harness.cli import mslaunch_argv
from tests.harness.envprobe import EnvProbe
from tests.harness.netns_cluster import NamespaceCluster, wait_gone

pytestmark = pytest.mark.netns


def _nothing_left(c: NamespaceCluster, within: float = 15.0):
    deadline = time.monotonic() + within
    while c.all_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    return c.all_pids()


def _run_probe_job(c: NamespaceCluster, tmp_path, *extra: str) -> None:
    assert c.all_pids() == {}, "a previous test left processes behind"
    probe = EnvProbe(tmp_path)
    home, job_dir = tmp_path / "home", tmp_path / "job"
    env = probe.environ(dict(os.environ, MSLAUNCH_HOME=str(home), MSLAUNCH_SSH_CONFIG=c.ssh_config))
    argv = ["run", "--hosts", c.inventory_yaml, "--np", "2", "--per-host", "1", "--master-port", "auto"]
    argv += ["--log-dir", str(job_dir), "--grace", "2", *extra, *probe.run_args(), *probe.program()]
    proc = subprocess.Popen(
        mslaunch_argv(*argv), env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pids = [proc.pid]
    try:
        pids += probe.wait_ready(3, alive=lambda: proc.poll() is None)
        on_hosts = [p for host in c.all_pids().values() for p in host]
        assert len(on_hosts) >= 3  # the ranks and the scheduler, and what started them there
        assert probe.leaks_on_command_lines([proc.pid], on_hosts) == []
        probe.release()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    logs = [(job_dir / n).read_text() for n in ("scheduler.log", "worker_0.log", "worker_1.log")]
    assert proc.returncode == 0, err + "".join(logs)
    assert wait_gone(pids, 20.0) == []
    probe.check_ranks(logs, 3)
    assert probe.files_holding_secrets(str(job_dir), str(home)) == []
    assert probe.shows_no_secret(out + err)
    left = _nothing_left(c)
    if left:
        c.reset()
        pytest.fail(f"processes left in the namespaces: {left}")


@pytest.mark.cost(8)
def test_hostile_and_secret_values_over_ssh(netns_cluster, tmp_path):
    _run_probe_job(netns_cluster, tmp_path, "--launcher", "ssh")


@pytest.mark.mpi
@pytest.mark.cost(10)
def test_hostile_and_secret_values_through_mpirun(netns_cluster, tmp_path):
    if shutil.which("mpirun") is None:
        skip_or_fail("mpirun not installed (apt-get install openmpi-bin)", "mpirun is missing in CI")
    _run_probe_job(netns_cluster, tmp_path, "--launcher", "mpirun", "--nic", str(netns_cluster.subnet))
