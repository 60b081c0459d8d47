"""The short fault stream: one job on the namespace cluster over ssh (2 ranks, one per host, the
third host spare) takes every fault kind of ``bench/bench_goodput.py`` from outside, one after
the other, and still ends 0 by itself with every step trained and nothing left on any host.

The workload is ``tests/scripts/ckptprog.py`` (a data-parallel stand-in: lockstep steps,
checkpoints, a restart resumes from the newest step every rank saved): what is tested here is
mslaunch's part (noticing each fault, tearing down, restarting on the spare host, resuming), in
seconds; the reference trainer under the same stream, with the goodput it keeps, is the bench's.

Faults (:mod:`tests.harness.faultstream`): a rank SIGKILLed, a rank SIGSTOPped, the link of the
second host cut with its rank alive behind it, and a rank SIGKILLed while the restart after the
cut starts.  ``--host-failures 3``: two kills that land on one host must not leave the stream
without a spare for its cut (which host a kill blames is the spare-host rules' business,
tested in test_spare_hosts.py).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import FaultStream, job_mark
from tests.harness.paths import TESTS
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

PROG = os.path.join(TESTS, "scripts", "ckptprog.py")
STEPS = 60


@pytest.mark.netns
@pytest.mark.cost(40)
def test_every_fault_kind_in_one_stream_ends_in_a_job_that_finishes_by_itself(cluster, tmp_path):  # noqa: F811
    import subprocess

    c = cluster
    inv = cluster_yaml(c, tmp_path / "inv.yaml", slots=1)
    job, work, mark = tmp_path / "job", tmp_path / "work", job_mark(tmp_path)
    argv = mslaunch_argv(
        "run",
        "--hosts",
        inv,
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--grace",
        "2",
        "--max-restarts",
        "6",
        "--host-failures",
        "3",
        "--stopped-timeout",
        "2",
        "--hang-timeout",
        "60",
        "--env",
        f"FAULT_STREAM_MARK={mark}",
        "--no-python",
        sys.executable,
        PROG,
        str(work),
        str(STEPS),
        "0.1",
        "5",
    )
    stream = FaultStream(
        str(job), kinds=("kill", "stop", "cut", "restart"), at_steps=(8, 20, 32), mark=mark, seed=3, cluster=c
    )
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
        env=dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config),
    )
    stream.start()
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        stream.stop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert stream.errors == [], stream.errors
    faults = stream.account()
    assert [f.kind for f in faults] == ["kill", "stop", "cut", "restart"], faults
    assert proc.returncode == 0, err[-3000:]
    s = json.loads((job / "summary.json").read_text())
    assert s["status"] == "succeeded" and len(s["attempt_results"]) == 5, [a["status"] for a in s["attempt_results"]]
    statuses = [a["status"] for a in s["attempt_results"]]
    assert statuses[1] == "hung" and s["attempt_results"][1]["hang"]["kind"] == "stopped", statuses
    for f in faults:  # each one noticed, restarted from, and the job trained new steps after it
        assert f.noticed is not None and f.restart is not None and f.new_step is not None, f
    assert faults[2].host == c.hosts[1].ip  # the cut host: its rank moved to the spare
    excluded = [
        e for e in map(json.loads, (job / "events.jsonl").read_text().splitlines()) if e["kind"] == "host_excluded"
    ]
    assert [e["host"] for e in excluded] == [c.hosts[1].ip], excluded
    last = s["attempt_results"][-1]
    assert sorted(p["host"] for p in last["processes"] if p["rank"] is not None) == sorted(
        [c.hosts[0].ip, c.hosts[2].ip]
    )
    for rank in (0, 1):
        log = (job / f"attempt_{len(statuses) - 1}" / f"worker_{rank}.log").read_text()
        assert "resume: global step " in log and log.rstrip().endswith(
            f"epoch: 1 step: {STEPS}, loss is {1 / STEPS:.4f}"
        )
    # mslaunch's own accounting of the stream: its parts add up; the stopped rank cost detection
    # (its hang from its last step to --stopped-timeout), and each of the 4 restarts its start.
    g = s["goodput"]
    assert g["productive_s"] + sum(g["badput_s"].values()) == pytest.approx(g["elapsed_s"], abs=0.01)
    assert g["badput_s"]["detect"] > 0 and g["badput_s"]["restart"] > 0 and 0 < g["ratio"] < 1
    assert wait_nothing_left(c) == {}
