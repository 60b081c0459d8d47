"""``status --json`` of a running mpirun job gives every rank's pid on its host (the rank wrapper
records it: launcher/execution/process/rankpids.py), beside mpirun's own."""

from __future__ import annotations

import pytest

from tests.execution.ssh.test_remote_pids import check_pids_on_hosts, stop, wait_status_pids
from tests.integration.test_multihost import cluster, cluster_yaml, job, need_mpirun  # noqa: F401  (fixtures)


@pytest.mark.netns
@pytest.mark.mpi
@pytest.mark.e2e
@pytest.mark.cost(5)
def test_status_json_gives_each_mpirun_ranks_pid_on_its_host(job, tmp_path, need_mpirun):  # noqa: F811
    c = job.c
    hosts = cluster_yaml(c, tmp_path / "inv.yaml", slots=1)
    extra = ("--np", "2", "--tee", "none", "--launcher", "mpirun", "--method", "mpi", "--nic", str(c.subnet))
    proc = job.popen("hang", hosts=hosts, extra=extra)
    try:
        rows = wait_status_pids(job, ["mpirun", "rank 0", "rank 1"])
        check_pids_on_hosts(job, rows, [0, 1])
        assert rows["mpirun"]["host"] == "localhost"
    finally:
        stop(proc)
