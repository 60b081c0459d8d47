"""Spare hosts on restart over ssh, on the 3-host namespace cluster (2 slots each): one host's
rank dies by SIGKILL in every attempt (``tests/scripts/badhost.py``).

* ``--np 4`` (the third host is spare), ``--max-restarts 3 --host-failures 3 --hang-timeout 60``:
  attempts 0-2 die on the bad host, each at step 2 (a crash loop by the restart rules, were the
  next attempt not re-planned); attempt 3 runs without the bad host, its ranks 2-3 on the spare,
  and succeeds.  plan.json, summary.json, events.jsonl, the console, ``status`` and ``logs tail``
  say so.
* ``--np 6`` (no spare), default ``--host-failures 2``: after attempt 1 the job stops with the
  one-line error naming the host and its failures, exit 137, no traceback.

Nothing is left running on any host after either.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.harness.cli import run_process
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

pytestmark = pytest.mark.netns

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
BADHOST = os.path.join(HERE, "scripts", "badhost.py")


def _run(c, tmp_path, name, np, *extra):
    inv = cluster_yaml(c, tmp_path / "inv.yaml", slots=2)
    pids = tmp_path / name / "pids"
    pids.mkdir(parents=True)
    job = tmp_path / name / "job"
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    r = run_process(
        "run",
        "--hosts",
        inv,
        "--np",
        str(np),
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
        "--max-restarts",
        "3",
        *extra,
        BADHOST,
        c.hosts[1].ip,
        "6",
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    return r, job, env


def test_a_bad_host_is_left_out_on_restart_and_without_a_spare_the_job_stops(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    c = cluster
    good1, bad, spare = (h.ip for h in c.hosts)
    r, job, env = _run(c, tmp_path, "spare", 4, "--host-failures", "3", "--hang-timeout", "60")
    assert r.returncode == 0, r.stderr
    s = json.loads((job / "summary.json").read_text())
    attempts = s["attempt_results"]
    assert [a["status"] for a in attempts] == ["failed"] * 3 + ["succeeded"]
    for a in attempts[:3]:
        cause = a["root_cause"]
        assert (cause["rank"], cause["host"], cause["signal"], a["best_step"]) == (2, bad, "SIGKILL", 2)
    assert [a.get("replanned", False) for a in attempts] == [False, False, False, True] and "restarts_stopped" not in s
    reason = "3 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)"
    excluded = [{"host": bad, "reason": reason, "by": "restart", "attempt": 3}]
    assert s["excluded_hosts"] == excluded
    plan = json.loads((job / "plan.json").read_text())
    assert plan["excluded_hosts"] == excluded
    assert [p["host"] for p in plan["ranks"]] == [good1, good1, spare, spare] and plan["scheduler"]["host"] == good1
    assert {p["name"]: p["host"] for p in s["processes"] if p["rank"] is not None} == {
        "rank 0": good1,
        "rank 1": good1,
        "rank 2": spare,
        "rank 3": spare,
    }
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in events if e["kind"] == "host_excluded"]
    assert (event["host"], event["reason"], event["attempt"], event["moves"]) == (
        bad,
        reason,
        3,
        f"ranks 2-3 move to {spare}",
    )
    assert f"mslaunch: restart: leaving out {bad} after {reason}; ranks 2-3 move to {spare}" in r.stderr.splitlines()
    log = (job / "attempt_3" / "worker_2.log").read_text()
    assert "attempt=3 rank=2 on_bad_host=False" in log and "rank2 done" in log
    tail = run_process("logs", "tail", "--log-dir", str(job), "-r", "2,3", env=env, timeout=60)
    assert tail.returncode == 0 and "[rank 2] rank2 done" in tail.stdout and "[rank 3] rank3 done" in tail.stdout, (
        tail.stdout + tail.stderr
    )
    status = run_process("status", str(job), env=env, timeout=60)
    assert f"left out {bad} from attempt 3 (restart): {reason}" in status.stdout, status.stdout + status.stderr
    assert wait_nothing_left(c) == {}

    r, job, _ = _run(c, tmp_path, "nospare", 6)
    assert r.returncode == 137, r.stderr
    line = (
        f"--hosts: no spare host for 6 ranks without {bad} ({bad}: 2 failures (rank 2 killed by SIGKILL, rank 2 killed "
        "by SIGKILL)); "
        "the other hosts have 4 slots: add hosts to the inventory, lower --np, "
        "or go on with fewer hosts (--min-hosts N)"
    )
    assert f"mslaunch: {line}" in r.stderr.splitlines() and "Traceback" not in r.stderr
    s = json.loads((job / "summary.json").read_text())
    assert (s["status"], s["attempts"], s["message"], s["restarts_stopped"]) == ("failed", 2, line, line)
    assert "excluded_hosts" not in json.loads((job / "plan.json").read_text())
    assert wait_nothing_left(c) == {}
