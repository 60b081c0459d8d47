"""The short fault stream: one job on the namespace cluster over ssh (2 ranks, one per host, the
third host spare) takes every fault kind of ``bench/bench_goodput.py`` from outside, one after
the other, and still ends 0 by itself with every step trained and nothing left on any host.

The workload is ``tests/scripts/ckptprog.py`` (a data-parallel stand-in: lockstep steps that
compute, checkpoints, a restart resumes from the newest step every rank saved): what is tested
here is mslaunch's part (noticing each fault, tearing down, restarting on the spare host, going
on smaller, resuming), in seconds; the reference trainer under the same stream, with the goodput
it keeps, is the bench's.

Faults (:mod:`tests.harness.faultstream`), in this order: a rank SIGKILLed; a rank SIGSTOPped;
the second host under a CPU quota (``--straggler replace``: its rank moves to the spare at a
planned restart, and the host is never taken back); the link of the host that rank moved to cut
with the rank alive behind it (no spare left: ``--min-hosts 1`` lets the job go on with one
rank); a rank SIGKILLed while the restart after the cut starts; a checkpoint write that fails.
``--host-failures 3``: faults that land on one host must not leave it out (which host a fault
blames is the spare-host rules' business, tested in test_spare_hosts.py).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import FaultStream, job_mark
from tests.harness.hostfaults import cgroup_v1_cpu, favored_children, host_faults
from tests.harness.paths import TESTS
from tests.integration.test_multihost import cluster, cluster_yaml, wait_nothing_left  # noqa: F401  (fixtures)

PROG = os.path.join(TESTS, "scripts", "ckptprog.py")
STEPS = 90  # the last fault (at step 54) comes well before the end, though the stream reads metrics.jsonl late
KINDS = ("kill", "stop", "slow", "cut", "restart", "ckpt")


@pytest.mark.netns
@pytest.mark.cost(50)
def test_every_fault_kind_in_one_stream_ends_in_a_job_that_finishes_by_itself(cluster, tmp_path):  # noqa: F811
    import subprocess

    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
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
        "--straggler",
        "replace:4",
        "--min-hosts",
        "1",
        "--env",
        f"FAULT_STREAM_MARK={mark}",
        "--no-python",
        sys.executable,
        PROG,
        str(work),
        str(STEPS),
        "0.05",
        "5",
        "cpu",
    )
    stream = FaultStream(
        str(job),
        kinds=KINDS,
        at_steps=(6, 14, 22, 44, 54),  # the slow host has 22 steps (of a second or more there) to be named
        quota_us=5000,  # 5 %: a step of 0.05 CPU-s takes a second there, slow long enough to be named
        mark=mark,
        seed=3,
        cluster=c,
        ckpt_path=lambda rank: str(work / "ckpt" / f"rank{rank}"),
    )
    # The job takes its CPU first, every host's sessions and mslaunch (and this thread, which
    # starts the stream's): under the suite's load the ranks beside the slow one waited for CPU
    # 59 % of the time, the slow rank 95 %, and naming it took 21 s, past the stream's next fault.
    hosts = tuple(range(len(c.hosts)))
    with host_faults(c, favored=hosts), favored_children(this_thread=True) as enter:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
            env=dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config),
            preexec_fn=enter,
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
    assert tuple(f.kind for f in faults) == KINDS, faults
    assert proc.returncode == 0, err[-3000:]
    s = json.loads((job / "summary.json").read_text())
    statuses = [a["status"] for a in s["attempt_results"]]
    assert s["status"] == "succeeded" and len(statuses) == 7, statuses
    assert statuses[1] == "hung" and s["attempt_results"][1]["hang"]["kind"] == "stopped", statuses
    assert statuses[2] == "planned", statuses  # the slow host left out at once, at a planned restart
    for f in faults:  # each one noticed, restarted from, and the job trained new steps after it
        assert f.noticed is not None and f.restart is not None and f.new_step is not None, f
    ip = [h.ip for h in c.hosts]
    slow, cut = faults[2], faults[3]
    assert (slow.host, cut.host) == (ip[1], ip[2])  # the cut host is the spare the slow host's rank moved to
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    named = next(e for e in events if e["kind"] == "straggler")
    assert (named["rank"], named["host"], named["time"] >= slow.at) == (slow.rank, ip[1], True), named
    excluded = [(e["host"], e["reason"]) for e in events if e["kind"] == "host_excluded"]
    assert [h for h, _ in excluded] == [ip[1], ip[2]], excluded
    assert excluded[0][1] == f"straggler: {named['evidence']}" and excluded[1][1].startswith("host lost ("), excluded
    resized = [e["world_size"] for e in events if e["kind"] == "resized"]
    assert resized == [1], resized  # no spare left at the cut: on with one rank
    ckpt_failed = next(e for e in events if e["kind"] == "failure" and e["time"] >= faults[5].at)
    assert ckpt_failed["name"] == f"rank {faults[5].rank}", ckpt_failed  # the rank whose save failed
    assert (work / "ckpt" / f"rank{faults[5].rank}").is_file()  # put back before the restart read it
    last = s["attempt_results"][-1]
    assert sorted(p["host"] for p in last["processes"] if p["rank"] is not None) == [ip[0]]
    log = (job / f"attempt_{len(statuses) - 1}" / "worker_0.log").read_text()
    steps_logged = [ln for ln in log.splitlines() if ln.startswith("epoch: 1 step: ")]
    assert "resume: global step " in log and steps_logged[-1] == f"epoch: 1 step: {STEPS}, loss is {1 / STEPS:.4f}"
    # each restart after a fault offers the checkpoint interval from the job's own figures (the
    # stand-in reports its writes' ckpt_ms): the faults counted are the failed and hung attempts so far
    offers = [(e["attempt"], e.get("ckpt_interval")) for e in events if e["kind"] == "restart"]
    for attempt, offer in offers:
        assert offer is not None, offers
        assert offer["faults"] == sum(st in ("failed", "hung") for st in statuses[:attempt]), offers
        assert offer["seconds"] >= 1 and offer["ckpt_seconds"] >= 0 and (offer["steps"] or 1) >= 1, offer
    # in steps once the ranks' step time is known (the stand-in's lines carry none: it comes from
    # their arrival), the same number on every rank of the next attempt
    assert offers[-1][1]["steps"] is not None, offers
    assert f"offered checkpoint interval: {offers[-1][1]['steps']} steps" in log, log[:2000]
    # mslaunch's own accounting of the stream: its parts add up; the stopped rank cost detection
    # (its hang from its last step to --stopped-timeout), and each of the 4 restarts its start.
    g = s["goodput"]
    assert g["productive_s"] + sum(g["badput_s"].values()) == pytest.approx(g["elapsed_s"], abs=0.01)
    assert g["badput_s"]["detect"] > 0 and g["badput_s"]["restart"] > 0 and 0 < g["ratio"] < 1
    assert wait_nothing_left(c) == {}
