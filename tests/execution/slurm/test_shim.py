"""The Slurm task shim run as a process here, without Slurm (SLURM_PROCID set by the test): its
records, the secrets srun's environment carries, and its end of the heartbeats."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from launcher.execution.slurm.shim import SECRET_CARRIER

pytestmark = pytest.mark.e2e

PRINT_ENV = "import os; print(os.environ.get('TOKEN'), [k for k in os.environ if k.startswith('MSLAUNCH_SECRET')])"


def _tasks(tmp_path, argv, **extra):
    status = tmp_path / "slurm"
    status.mkdir()
    proc = {"name": "rank 0", "rank": 0, "argv": argv, "env": [["PLAIN", "1"]], "cwd": str(tmp_path)}
    proc.update(log=str(tmp_path / "worker_0.log"), **extra)
    tasks = {"scheduler": None, "workers": [proc], "status_dir": str(status)}
    return tasks, status


def _run(tmp_path, tasks, env=None, timeout=60):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    env = dict(os.environ, SLURM_PROCID="0", SLURMD_NODENAME="node7", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "launcher.execution.slurm.shim", str(path), "workers"],
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


def test_a_secret_reaches_the_rank_and_no_carrier_does_and_the_records_keep_the_ranks_name(tmp_path):
    carrier = f"{SECRET_CARRIER}0_TOKEN"
    tasks, status = _tasks(tmp_path, [sys.executable, "-c", PRINT_ENV], secrets={"TOKEN": carrier})
    res = _run(tmp_path, tasks, {carrier: "s3cret"})
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "worker_0.log").read_text() == "s3cret []\n"
    assert sorted(os.listdir(status)) == ["rank_0.exit.json", "rank_0.start.json"]
    assert "s3cret" not in json.dumps(tasks)


def test_a_shim_cut_off_from_mslaunch_ends_its_rank_and_says_so(tmp_path):
    """mslaunch's end of the heartbeats accepts the link and then says nothing: after the shim's
    timeout its rank (a long sleep) is SIGKILLed and its exit record says ``cut_off``."""
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(1)
    beat = {"addr": list(mute.getsockname()), "token": "t", "timeout": 1.0}
    tasks, status = _tasks(tmp_path, [sys.executable, "-c", "import time; time.sleep(120)"], **{})
    tasks["beat"] = beat
    try:
        res = _run(tmp_path, tasks)
        conn, _ = mute.accept()
        hello = json.loads(conn.recv(4096).split(b"\n")[0])
        conn.close()
    finally:
        mute.close()
    assert res.returncode == 128 + 9, res.stderr
    assert hello == {"node": "node7", "key": "rank_0", "token": "t"}
    end = json.loads((status / "rank_0.exit.json").read_text())
    assert (end["returncode"], end["cut_off"], end["stopped"]) == (-9, True, False)


def test_mslaunchs_sigterm_over_the_link_reaches_the_rank_as_slurms_would(tmp_path):
    """mslaunch's teardown sends ``T`` on the link (``scancel --signal`` waits for every node of
    the job): the shim passes SIGTERM to its rank and records the exit as stopped."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    tasks, status = _tasks(tmp_path, [sys.executable, "-c", "import time; time.sleep(120)"])
    tasks["beat"] = {"addr": list(srv.getsockname()), "token": "t"}
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    env = dict(os.environ, SLURM_PROCID="0", SLURMD_NODENAME="node7")
    shim = subprocess.Popen(
        [sys.executable, "-m", "launcher.execution.slurm.shim", str(path), "workers"], env=env, stderr=subprocess.PIPE
    )
    try:
        srv.settimeout(60)
        conn, _ = srv.accept()
        assert json.loads(conn.recv(4096).split(b"\n")[0])["key"] == "rank_0"
        conn.sendall(b".T")
        _, err = shim.communicate(timeout=60)
        conn.close()
    finally:
        srv.close()
        if shim.poll() is None:
            shim.kill()
            shim.communicate()
    assert shim.returncode == 128 + 15, err
    end = json.loads((status / "rank_0.exit.json").read_text())
    assert (end["returncode"], end["stopped"]) == (-15, True) and "cut_off" not in end
