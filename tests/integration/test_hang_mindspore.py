"""Long jobs with real MindSpore 2.10 (CPU): hangs, collective timeouts, restarts that resume.

Each job costs ~10-60 s here; each case proves something different:

* a 2-rank data-parallel job whose rank 1 blocks in Python before the gradient AllReduce, with
  ``--hang-timeout 10 --max-restarts 1``: hung, the dump names the blocked function for rank 1 and
  a MindSpore frame for rank 0, the summary names rank 1; attempt 1 runs with MSLAUNCH_ATTEMPT=1
  and succeeds;
* the same job with ``--hang-timeout off``: MindSpore's ring AllReduce on rank 0 gives up, and the
  summary still names rank 1 (the stuck one), not rank 0 (the one that timed out);
* the reference trainer: rank 1 SIGKILLed after a checkpoint on both ranks; ``--max-restarts 1``
  resumes by itself from the newest common checkpoint and exits 0; ``report`` shows both attempts
  and the steps lost.  The same job is the reference trainer as ``top`` sees it: both ranks
  stepping while it runs, and at the end every step of the resumed attempt in ``metrics.jsonl``
  with its loss, each rank done at the last step, its throughput the trainer's own figure.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.harness.cli import mslaunch_argv, run_cli, run_process
from tests.harness.faultkit import wait_or_fail

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


def test_rank_blocked_before_allreduce_is_hung_dumped_named_and_restarted(tmp_path):
    job = tmp_path / "job"
    r = run_process("run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
                    "--hang-timeout", "10", "--max-restarts", "1", HANG, "6", "1", "3", cwd=tmp_path, timeout=400)
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


@pytest.mark.cost(42)
def test_collective_timeout_without_hang_watch_still_names_the_stuck_rank(tmp_path):
    job = tmp_path / "job"
    r = run_process("run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
                    "--hang-timeout", "off", HANG, "6", "1", "3", cwd=tmp_path, timeout=400)
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


@pytest.mark.cost(79)
def test_trainer_killed_after_a_checkpoint_resumes_by_itself(tmp_path):
    data, ckpt, job = tmp_path / "data", tmp_path / "ckpt", tmp_path / "job"
    subprocess.run([sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "400", "--test", "50"],
                   check=True, capture_output=True, timeout=120)
    argv = mslaunch_argv("run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
                         "--max-restarts", "1", "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet14", "--data-path", str(data),
                         "--image-size", "32", "--batch-size", "8", "--steps-per-epoch", "12", "--epochs", "1", "--workers", "1",
                         "--ckpt-dir", str(ckpt), "--ckpt-every", "6")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        def saved(rank):
            return (ckpt / f"ckpt_{rank}" / "resnet14-1_6.ckpt").exists()

        def logged(rank, step):
            log = job / f"worker_{rank}.log"
            return log.exists() and f"epoch: 1 step: {step}," in log.read_text(errors="replace")

        wait_or_fail(lambda: logged(0, 2) and logged(1, 2), 300, "two steps on both ranks")
        seen = []

        def top_sees_steps():  # the reference trainer as top sees it while it runs
            seen[:] = [_top(job)]
            return all((row["step"] or 0) >= 2 for row in seen[0]["ranks"]) or time.sleep(0.2)

        wait_or_fail(top_sees_steps, 60, "top showing two steps of both ranks")
        live = seen[0]
        assert live["state"] == "running" and [row["state"] for row in live["ranks"]] == ["running", "running"], live
        assert all(row["loss"] is not None and row["total_steps"] == 12 for row in live["ranks"]), live["ranks"]
        # rank 1 went past the checkpoint both ranks saved: the steps after it will be lost
        wait_or_fail(lambda: saved(0) and saved(1) and logged(1, 7), 300, "a checkpoint on both ranks and a step after it")
        plan = json.loads((job / "job.json").read_text())
        pid = _rank_pid(plan, job, 1)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert first["status"] == "failed" and "rank 1" in first["ended_because"] and "SIGKILL" in first["ended_because"]
    assert second["status"] == "succeeded" and second["resumed_from_step"] == 6
    assert second["steps_lost"] == first["best_step"] - 6 >= 1
    for rank in (0, 1):
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        assert re.search(r"resume: \S+resnet14-1_6\.ckpt \(global step 6\); continuing at epoch 1 step 7", log), log[-2000:]
    snap, recs = _top(job), [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    for rank in (0, 1):  # top and metrics.jsonl follow the resumed attempt, step by step
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        logged = [(int(s), float(v)) for s, v in re.findall(r"^epoch: 1 step: (\d+), loss is (\S+)$", log, re.M)]
        assert [s for s, _ in logged] == list(range(7, 13)), log[-2000:]
        mine = [(x["global_step"], x["loss"]) for x in recs if x["rank"] == rank and x["kind"] == "step" and x["attempt"] == 1]
        assert mine == logged
        row = snap["ranks"][rank]
        assert (row["step"], row["loss"], row["state"]) == (12, logged[-1][1], "done"), row
        per_rank = float(re.search(r"^epoch 1 throughput: ([\d.]+) img/s per rank", log, re.M).group(1))
        assert row["samples_per_s"] == per_rank  # the trainer's own figure
    assert snap["totals"]["samples_per_s"] == pytest.approx(sum(row["samples_per_s"] for row in snap["ranks"]))
    rep = run_process("report", str(job), "--output", str(tmp_path / "rep"), cwd=tmp_path, timeout=120)
    assert rep.returncode == 0, rep.stderr
    html = next((tmp_path / "rep").glob("*.html")).read_text()
    assert "attempt 0: failed (rank 1 on" in html and "attempt 1: succeeded; resumed at step 6" in html
    assert f"{second['steps_lost']} step(s) lost" in html
    assert_no_pids_left(s)


def _top(job):
    """``mslaunch top --json`` of the job (in this process: it only reads the job folder)."""
    r = run_cli("top", "--json", str(job))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _rank_pid(plan, job, rank):
    """The pid of ``rank`` from the ``started`` events of the job."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for line in (job / "events.jsonl").read_text().splitlines():
            ev = json.loads(line)
            if ev.get("kind") == "started" and ev.get("name") == f"rank {rank}" and ev.get("pid"):
                return int(ev["pid"])
        time.sleep(0.1)
    raise AssertionError(f"no started event for rank {rank}: {plan}")
