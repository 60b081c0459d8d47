"""A hostfile's ``username=`` / ``port=`` reach the hosts: a job over ssh and one through mpirun on
namespace hosts whose sshd also listens on port 2222, with an ssh config that names a wrong user
and port (so the job only starts if the hostfile's own values win)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from tests.harness.ci import skip_or_fail
from tests.harness.cli import run_process

pytestmark = pytest.mark.netns

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")
PORT = 2222


def wrong_config(cluster, path) -> str:
    """The cluster's ssh config with a user and a port no host accepts."""
    text = open(cluster.ssh_config).read()
    text = re.sub(r"(?m)^    User root$", "    User nobody-msl", text)
    text = re.sub(r"(?m)^    Port 22$", "    Port 2299", text)
    assert "User nobody-msl" in text and "Port 2299" in text
    path.write_text(text)
    return str(path)


def wait_empty(cluster, within: float = 15.0):
    deadline = time.monotonic() + within
    while cluster.all_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    return cluster.all_pids()


@pytest.mark.parametrize("launcher", ["ssh", "mpirun"])
def test_hostfile_username_and_port_reach_the_hosts(make_netns_cluster, tmp_path, launcher) -> None:
    if launcher == "mpirun" and shutil.which("mpirun") is None:
        skip_or_fail(
            "mpirun not installed (apt-get install openmpi-bin)",
            "mpirun is missing in CI (make test installs openmpi-bin)",
        )
    c = make_netns_cluster(2, extra_ssh_port=PORT)
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        "# OpenMPI's spelling, spaces and all\n"
        + "".join(f"{h.ip} slots = 1 username = root port= {PORT}\n" for h in c.hosts)
    )
    config = wrong_config(c, tmp_path / "ssh_config")
    extra = (
        ["--launcher", "mpirun", "--method", "mpi", "--nic", str(c.subnet)]
        if launcher == "mpirun"
        else ["--launcher", "ssh"]
    )
    r = run_process(
        "run",
        "--hosts",
        str(hostfile),
        "--ssh-config",
        config,
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        "--grace",
        "2",
        *extra,
        PROG,
        "env",
        cwd=str(tmp_path),
        timeout=180,
    )
    mpirun_log = tmp_path / "job" / "mpirun.log"
    assert r.returncode == 0, r.stderr + (mpirun_log.read_text() if mpirun_log.exists() else "")
    plan = json.loads((tmp_path / "job" / "plan.json").read_text())
    assert plan["host_ssh"] == {h.ip: {"user": "root", "port": PORT} for h in c.hosts}
    for rank, h in enumerate(c.hosts):
        text = (tmp_path / "job" / f"worker_{rank}.log").read_text()
        inode = int(re.search(r"started pid=\d+ netns=(\d+)", text).group(1))
        assert inode == os.stat(f"/run/netns/{h.netns}").st_ino, f"rank {rank} ran on the wrong host"
        sshd_log = open(os.path.join(c.workdir, "hosts", h.name, "sshd.log")).read()
        assert re.search(rf"Connection from \S+ port \d+ on {re.escape(h.ip)} port {PORT}", sshd_log), sshd_log[-2000:]
        assert "Accepted publickey for root" in sshd_log
    assert wait_empty(c) == {}
