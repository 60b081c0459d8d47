"""Long jobs with real MindSpore 2.10 (CPU): hangs, collective timeouts, restarts that resume.

Each job costs ~10-60 s here; each case proves something different:

* a 2-rank data-parallel job whose rank 1 blocks in Python before the gradient AllReduce, with
  ``--hang-timeout 10 --max-restarts 1``: hung, the dump names the blocked function for rank 1 and
  a MindSpore frame for rank 0, the summary names rank 1; attempt 1 runs with MSLAUNCH_ATTEMPT=1
  and succeeds;
* the same job with ``--hang-timeout off``: MindSpore's ring AllReduce on rank 0 gives up, and the
  summary still names rank 1 (the stuck one), not rank 0 (the one that timed out); the ring's
  timeout is MindSpore's ``MS_NODE_TIMEOUT`` (its CPU collectives read it as their wait limit, 30 s
  when unset), set to 8 s here for the ranks (``--env``);
(the reference trainer killed after a checkpoint, resuming by itself, as ``top``, ``metrics.jsonl``
and ``report`` show it: ``test_restart_warm.py``, whose default run is that job.)
"""

from __future__ import annotations

import json
import os
import re

import psutil
import pytest

from tests.harness.cli import run_cli, run_process

pytestmark = pytest.mark.mindspore

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
HANG = os.path.join(HERE, "scripts", "ms_dp_hang.py")


def assert_no_pids_left(summary):
    for attempt in summary["attempt_results"]:
        for proc in attempt["processes"]:
            if proc.get("pid"):
                try:
                    assert psutil.Process(proc["pid"]).status() == psutil.STATUS_ZOMBIE, proc
                except psutil.NoSuchProcess:
                    pass


@pytest.mark.cost(47)  # measured alone x2
def test_rank_blocked_before_allreduce_is_hung_dumped_named_and_restarted(tmp_path):
    job = tmp_path / "job"
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--hang-timeout",
        "10",
        "--max-restarts",
        "1",
        HANG,
        "6",
        "1",
        "3",
        cwd=tmp_path,
        timeout=400,
    )
    assert r.returncode == 0, r.stderr
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], second["status"]) == ("hung", "succeeded")
    hang = first["hang"]
    assert hang["limit_s"] == 10.0 and hang["idle_s"] >= 10.0 and hang["culprit"]["rank"] == 1
    assert first["root_cause"]["rank"] == 1 and "likely culprit: rank 1" in first["message"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[1]["frame"].startswith("block_before_allreduce (ms_dp_hang.py:") and rows[1]["in_collective"] is False
    assert "mindspore/" in rows[0]["frame"] and rows[0]["in_collective"] is True
    dump0 = (job / "stacks" / rows[0]["stack_files"][0]).read_text()
    assert "tool: py-spy" in dump0 and "AllReduce" in dump0  # the native frames show where it waits
    # attempt 1 knew it was a restart, and finished
    for rank in (0, 1):
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text()
        assert f"attempt=1 rank={rank}" in log and "epoch: 0, step: 5, loss is" in log
    assert "resumed_from_step" not in second  # the script does not resume: it started over at step 0
    assert_no_pids_left(s)


#: MindSpore's CPU ring collectives give up after ``MS_NODE_TIMEOUT`` seconds (30 when unset).
RING_TIMEOUT_S = 8


@pytest.mark.cost(50)  # measured alone x2
def test_collective_timeout_without_hang_watch_still_names_the_stuck_rank(tmp_path):
    job = tmp_path / "job"
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--hang-timeout",
        "off",
        "--env",
        f"MS_NODE_TIMEOUT={RING_TIMEOUT_S}",
        HANG,
        "6",
        "1",
        "3",
        cwd=tmp_path,
        timeout=400,
    )
    assert r.returncode == 125, r.stderr
    s = json.loads((job / "summary.json").read_text())
    hang = s["hang"]
    assert s["status"] == "hung" and hang["kind"] == "collective_timeout"
    assert hang["timed_out"]["rank"] == 0 and re.search(r"Ring \w+ wait receiving", hang["timed_out"]["line"]), hang
    assert hang["culprit"]["rank"] == 1 and s["root_cause"]["rank"] == 1
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[1]["frame"].startswith("block_before_allreduce") and rows[1]["stack_files"]
    assert "rank 0's collective timed out" in s["message"]
    assert_no_pids_left(s)


def _top(job):
    """``mslaunch top --json`` of the job (in this process: it only reads the job folder)."""
    r = run_cli("top", "--json", str(job))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
