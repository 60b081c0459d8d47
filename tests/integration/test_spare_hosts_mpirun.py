"""Spare hosts under ``--launcher mpirun`` on the 3-host namespace cluster (2 slots each, ``--np 4``:
the third host is spare): mpirun's daemon (``orted``) on the second host is killed by its pid
mid-job, as if the host went away.  The mpirun backend's own record of that host's daemon session
(its rsh agent wrapper, :mod:`launcher.execution.mpirun.rshwatch`) types the host as lost; the
restart (``--max-restarts 1``) leaves it out, ranks 2-3 move to the spare, and the job succeeds.
The ranks the dead daemon left on the lost host are ended by the test afterwards (by pid: no one
can reach them through mpirun any more); nothing else is left anywhere.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.faultkit import wait_or_fail
from tests.integration.test_multihost import cluster, cluster_yaml, need_mpirun, wait_nothing_left  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.netns, pytest.mark.mpi]

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
LOSTHOST = os.path.join(HERE, "scripts", "losthost.py")


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _lose_second_host(c, argv, tmp_path, pids, ranks: int):
    """Run ``argv`` (``losthost.py ... hold``); once its ``ranks`` ranks of attempt 0 run, SIGKILL
    mpirun's daemon on the second host by its pid; the job's (returncode, stderr).  The ranks the
    dead daemon left there are ended afterwards (mpirun cannot reach them any more)."""
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    proc = subprocess.Popen(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    left_on_bad: list = []
    try:
        wait_or_fail(
            lambda: all((pids / f"a0-r{r}").exists() for r in range(ranks)) or proc.poll() is not None,
            120,
            "every rank of attempt 0 running",
        )
        assert proc.poll() is None, proc.communicate()
        orted = [p for p in c.pids_in(1) if _comm(p) == "orted"]
        assert len(orted) == 1, [(p, _comm(p)) for p in c.pids_in(1)]
        left_on_bad = [p for p in c.pids_in(1) if p != orted[0]]  # its ranks (and their wrappers)
        os.kill(orted[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for p in left_on_bad:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return proc.returncode, err


@pytest.mark.cost(40)
def test_a_host_whose_mpirun_daemon_dies_is_lost_and_the_restart_uses_the_spare(cluster, need_mpirun, tmp_path):  # noqa: F811  (pytest's fixtures, imported above)
    c = cluster
    good, bad, spare = (h.ip for h in c.hosts)
    inv = cluster_yaml(c, tmp_path / "inv.yaml", slots=2)
    pids, job = tmp_path / "pids", tmp_path / "job"
    pids.mkdir()
    argv = mslaunch_argv(
        "run",
        "--launcher",
        "mpirun",
        "--hosts",
        inv,
        "--np",
        "4",
        "--max-restarts",
        "1",
        "--master-port",
        "auto",
        "--nic",
        str(c.subnet),
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        "--env",
        f"PIDDIR={pids}",
        LOSTHOST,
        "3",
        "hold",
    )
    code, err = _lose_second_host(c, argv, tmp_path, pids, 4)
    assert code == 0, err + (job / "mpirun.log").read_text()
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"], second.get("replanned")) == ("failed", "succeeded", True), first
    lost = {p["name"]: p.get("host_lost") for p in first["processes"] if p.get("host_lost")}
    how = f"mpirun's daemon on {bad} lost (its ssh session ended: exit status 255)"
    assert lost == {"rank 2": how, "rank 3": how}, first["processes"]
    cause = first["root_cause"]
    assert (cause["host"], cause["reason"], cause["cause"]["kind"]) == (bad, how, "lost_host"), cause
    excluded = [{"host": bad, "reason": f"host lost ({cause['name']}: {how})", "by": "restart", "attempt": 1}]
    assert s["excluded_hosts"] == excluded
    plan = json.loads((job / "plan.json").read_text())
    assert [p["host"] for p in plan["ranks"]] == [good, good, spare, spare] and plan["excluded_hosts"] == excluded
    assert "rank2 done" in (job / "attempt_1" / "worker_2.log").read_text()
    assert re.search(
        rf"mslaunch: restart: leaving out {re.escape(bad)} host lost \(rank 2: .*\); ranks 2-3 move to "
        rf"{re.escape(spare)}",
        err,
    ), err
    assert wait_nothing_left(c) == {}


@pytest.mark.cost(30)
def test_a_host_whose_rank_is_killed_is_left_out_and_is_not_taken_for_lost(cluster, need_mpirun, tmp_path):  # noqa: F811  (pytest's fixtures, imported above)
    """``tests/scripts/badhost.py``: the second host's local rank 0 dies by SIGKILL at step 2 in
    every attempt; ``--host-failures 1``: the restart leaves it out.  Its daemon's session ended
    cleanly, so no host is lost."""
    c = cluster
    good, bad, spare = (h.ip for h in c.hosts)
    inv = cluster_yaml(c, tmp_path / "inv.yaml", slots=2)
    pids, job = tmp_path / "pids", tmp_path / "job"
    pids.mkdir()
    r = run_process(
        "run",
        "--launcher",
        "mpirun",
        "--hosts",
        inv,
        "--np",
        "4",
        "--max-restarts",
        "1",
        "--host-failures",
        "1",
        "--master-port",
        "auto",
        "--nic",
        str(c.subnet),
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        "--env",
        f"PIDDIR={pids}",
        os.path.join(HERE, "scripts", "badhost.py"),
        bad,
        "4",
        env=dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config),
        cwd=str(tmp_path),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"], second.get("replanned")) == ("failed", "succeeded", True), first
    assert not any(p.get("host_lost") for p in first["processes"]), first["processes"]
    assert (first["root_cause"]["rank"], first["root_cause"]["host"], first["root_cause"]["signal"]) == (
        2,
        bad,
        "SIGKILL",
    )
    assert s["excluded_hosts"] == [
        {"host": bad, "reason": "1 failure (rank 2 killed by SIGKILL)", "by": "restart", "attempt": 1}
    ]
    assert {p["name"]: p["host"] for p in s["processes"] if p["rank"] is not None} == {
        "rank 0": good,
        "rank 1": good,
        "rank 2": spare,
        "rank 3": spare,
    }
    assert wait_nothing_left(c) == {}


@pytest.mark.cost(15)
def test_without_a_spare_min_hosts_goes_on_with_the_hosts_left_through_mpirun(cluster, need_mpirun, tmp_path):  # noqa: F811  (pytest's fixtures, imported above)
    """``--np 6`` fills the 3 hosts (no spare), ``--min-hosts 2``: the second host's daemon is killed;
    attempt 1 runs 4 ranks on the other two (mpirun's hosts planned again), each told the job's two sizes through
    mpirun's carriers."""
    c = cluster
    good, bad, other = (h.ip for h in c.hosts)
    pids, job = tmp_path / "pids", tmp_path / "job"
    pids.mkdir()
    argv = mslaunch_argv(
        "run", "--launcher", "mpirun", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=2), "--np", "6",
        "--max-restarts", "1", "--min-hosts", "2", "--master-port", "auto", "--nic", str(c.subnet),
        "--log-dir", str(job), "--tee", "none", "--grace", "2", "--env", f"PIDDIR={pids}", LOSTHOST, "3", "hold",
    )  # fmt: skip
    code, err = _lose_second_host(c, argv, tmp_path, pids, 6)
    assert code == 0, err + (job / "mpirun.log").read_text()
    s = json.loads((job / "summary.json").read_text())
    assert [a["status"] for a in s["attempt_results"]] == ["failed", "succeeded"]
    (resized,) = s["resized"]
    assert (resized["world_size"], resized["previous"], resized["planned"], resized["hosts"]) == (4, 6, 6, 2)
    plan = json.loads((job / "plan.json").read_text())
    assert [p["host"] for p in plan["ranks"]] == [good, good, other, other] and plan["planned_world_size"] == 6
    argv = plan["mpirun"]  # mpirun's hosts planned again
    assert argv[argv.index("-H") + 1] == f"{good}:3,{other}:2", argv  # the scheduler on the first too
    for r in range(4):
        log = (job / "attempt_1" / f"worker_{r}.log").read_text()
        assert "sizes: rank_size=4 world=4 planned=6" in log and f"rank{r} done" in log, log
    assert wait_nothing_left(c) == {}
