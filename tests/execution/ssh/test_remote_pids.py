"""``status --json`` of a running ssh job gives every rank's pid as its own host sees it.

The ssh backend's ``started`` event comes before the host's agent has said the pid; the agent's
``started`` message follows, and the supervisor writes a ``pid`` event with it
(launcher.execution.supervision.state).  On the namespace cluster each pid must be a live process
in that host's namespace, and the very process of the rank (rankprog.py writes its own pid).
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.harness.cli import run_cli
from tests.harness.faultkit import wait_or_fail
from tests.integration.test_multihost import cluster, cluster_yaml, job  # noqa: F401  (fixtures)


@pytest.mark.netns
@pytest.mark.e2e
@pytest.mark.cost(4)
def test_status_json_gives_each_remote_ranks_pid_on_its_host(job, tmp_path):  # noqa: F811  (pytest's fixture)
    c = job.c
    hosts = cluster_yaml(c, tmp_path / "inv.yaml", slots=1)
    proc = job.popen("hang", hosts=hosts, extra=("--np", "2", "--tee", "none"))
    try:

        def processes():
            r = run_cli("status", "--json", str(job.dir), env=job.env)
            if r.returncode != 0:
                return None
            rows = {p["name"]: p for p in json.loads(r.stdout).get("processes", [])}
            ranks = [rows.get(f"rank {k}") for k in (0, 1)]
            return rows if all(p is not None and p["pid"] is not None for p in ranks) else None

        rows = wait_or_fail(processes, 60, "status --json with both ranks' pids")
        for k in (0, 1):
            row, host = rows[f"rank {k}"], c.hosts[k]
            assert (row["host"], row["state"]) == (host.ip, "running")
            own = int((job.pids / f"rank{k}.pids").read_text().split()[0])  # the rank's os.getpid()
            assert row["pid"] == own
            assert own in c.pids_in(k), (own, c.pids_in(k))  # alive, in that host's namespace
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143
