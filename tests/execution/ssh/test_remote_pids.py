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


def wait_status_pids(mj, names, within=60):
    """``status --json``'s processes by name, once every one of ``names`` has a pid."""

    def processes():
        r = run_cli("status", "--json", str(mj.dir), env=mj.env)
        if r.returncode != 0:
            return None
        rows = {p["name"]: p for p in json.loads(r.stdout).get("processes", [])}
        return rows if all(rows.get(n) is not None and rows[n]["pid"] is not None for n in names) else None

    return wait_or_fail(processes, within, f"status --json with the pids of {', '.join(names)}")


def check_pids_on_hosts(mj, rows, hosts):
    """Rank k's pid in ``rows`` is the rank's own (rankprog.py wrote it), alive in ``hosts[k]``'s namespace."""
    c = mj.c
    for k, host in enumerate(hosts):
        row = rows[f"rank {k}"]
        assert (row["host"], row["state"]) == (c.hosts[host].ip, "running"), row
        written = mj.pids / f"rank{k}.pids"  # the wrapper may tell its pid before rankprog.py writes it
        wait_or_fail(lambda: written.exists() and written.read_text().endswith("\n"), 60, f"{written.name} written")
        own = int(written.read_text().split()[0])  # the rank's os.getpid()
        assert row["pid"] == own
        assert own in c.pids_in(host), (own, c.pids_in(host))


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err


@pytest.mark.netns
@pytest.mark.e2e
@pytest.mark.cost(4)
def test_status_json_gives_each_remote_ranks_pid_on_its_host(job, tmp_path):  # noqa: F811  (pytest's fixture)
    hosts = cluster_yaml(job.c, tmp_path / "inv.yaml", slots=1)
    proc = job.popen("hang", hosts=hosts, extra=("--np", "2", "--tee", "none"))
    try:
        rows = wait_status_pids(job, ["rank 0", "rank 1"])
        check_pids_on_hosts(job, rows, [0, 1])
    finally:
        stop(proc)
