"""A restart that forks from the last attempt's warm zygote and takes the trainer's graphs from
MindSpore's compile cache (the default) against one that starts from nothing (``--cold-restarts``,
the cache turned off with ``MS_COMPILER_CACHE_ENABLE=0``), with real MindSpore 2.10: the same
program, killed the same way, must look the same to its user either way.

The reference trainer (2 ranks, ``--ckpt-every 4``) has rank 1 SIGKILLed once it logged step 6;
``--max-restarts 1`` resumes it from the step-4 checkpoint.  Compared between the two runs: the
exit code, every attempt's status and resume step, each rank's own lines in both attempts (the
losses included; MindSpore's log lines and the timing figures left out), and the checkpoint files
at the end (byte for byte).  That the default's restart really forked from the kept zygote, and
the cold one from a new one, is checked on the ranks' parent process; that the default's restart
took both of its graphs (the resume's AllGather, then the train step) from the cache, on MindSpore's
own log line, and the cold one compiled them.  The default run is also the reference trainer as
``top`` shows it (both ranks stepping while it runs; at the end every step of the resumed attempt
in ``metrics.jsonl`` with its loss, each rank done, its throughput the trainer's own figure) and as
``report`` shows it (both attempts, the steps lost).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.faultkit import wait_or_fail
from tests.integration.test_hang_mindspore import _top, assert_no_pids_left

pytestmark = pytest.mark.mindspore


def _ppid(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("PPid:")).split()[1])


def _started(job, attempt, rank):
    for line in (job / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("kind") == "started" and ev.get("name") == f"rank {rank}" and ev.get("attempt", 0) == attempt:
            return int(ev["pid"])
    return None


def _own_lines(path, root, upto=None):
    """The lines the trainer printed: MindSpore's log lines left out, timing figures and the
    run's folder masked; with ``upto``, up to the line starting so (where the kill cut attempt 0:
    a rank may or may not log one more step before it)."""
    text = path.read_text(errors="replace").replace(str(root), "<run>")
    lines = [
        ln
        for ln in text.splitlines()
        if ln.strip() and not re.match(r"\[(INFO|WARNING|ERROR|DEBUG)\]", ln) and not ln.startswith("compile cache: ")
    ]
    lines = [re.sub(r"throughput: .*", "throughput: <timing>", ln) for ln in lines]
    if upto is not None:
        lines = lines[: next(i for i, ln in enumerate(lines) if ln.startswith(upto)) + 1]
    return lines


def _cache_use(path):
    """(the trainer's ``compile cache:`` line, how many graphs MindSpore took from the cache)."""
    text = path.read_text(errors="replace")
    return (
        any(ln.startswith("compile cache: ") for ln in text.splitlines()),
        text.count("Use the compilation cache and execute the backend actions only"),
    )


def _run(tmp_path, data, mode, flags):
    job, ckpt = tmp_path / mode / "job", tmp_path / mode / "ckpt"
    argv = mslaunch_argv(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job),
        "--tee",
        "none",
        "--max-restarts",
        "1",
        *flags,
        "-m",
        "launcher.workloads.resnet50_cifar10",
        "--arch",
        "resnet14",
        "--data-path",
        str(data),
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--steps-per-epoch",
        "12",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--ckpt-dir",
        str(ckpt),
        "--ckpt-every",
        "4",
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    parents, live = {}, {}
    try:

        def logged(rank, step):
            log = job / f"worker_{rank}.log"
            return log.exists() and f"epoch: 1 step: {step}," in log.read_text(errors="replace")

        def step6():  # the default run also takes what `top` shows while both ranks step
            if mode == "warm" and not live and logged(0, 1) and logged(1, 1):
                snap = _top(job)
                if all((row["step"] or 0) >= 2 for row in snap["ranks"]):
                    live.update(snap)
            return logged(1, 6)

        wait_or_fail(step6, 300, "step 6 on rank 1")
        parents[0] = _ppid(_started(job, 0, 0))
        os.kill(_started(job, 0, 1), signal.SIGKILL)
        wait_or_fail(
            lambda: (job / "events.jsonl").exists() and _started(job, 1, 0) is not None, 300, "attempt 1 started"
        )
        parents[1] = _ppid(_started(job, 1, 0))  # it trains 8 steps: running while this reads
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    summary = json.loads((job / "summary.json").read_text())
    assert_no_pids_left(summary)
    seen = {
        "exit": proc.returncode,
        "attempts": [(a["status"], a.get("resumed_from_step")) for a in summary["attempt_results"]],
        "lines": {
            (k, r): _own_lines(
                job / (f"attempt_{k}" if k else ".") / f"worker_{r}.log",
                tmp_path / mode,
                None if k else "epoch: 1 step: 6,",
            )
            for k in (0, 1)
            for r in (0, 1)
        },
        "files": {str(p.relative_to(ckpt)): p.read_bytes() for p in sorted(ckpt.rglob("*")) if p.is_file()},
        "cache": {
            (k, r): _cache_use(job / (f"attempt_{k}" if k else ".") / f"worker_{r}.log") for k in (0, 1) for r in (0, 1)
        },
        "cached": sorted(str(p.relative_to(job / "compile_cache")) for p in (job / "compile_cache").rglob("*.mindir")),
    }
    seen["job"], seen["live"], seen["summary"] = job, live, summary
    return seen, parents, err


def _check_top_metrics_report(warm, tmp_path):
    """What `top`, metrics.jsonl and `report` show of the default run: live while it ran, then
    the resumed attempt step by step, the steps lost and the restart."""
    job, live, s = warm["job"], warm["live"], warm["summary"]
    assert live, "top never showed both ranks past step 2 before rank 1's step 6"
    assert live["state"] == "running" and [row["state"] for row in live["ranks"]] == ["running", "running"], live
    assert all(row["loss"] is not None and row["total_steps"] == 12 for row in live["ranks"]), live["ranks"]
    first, second = s["attempt_results"]
    assert "rank 1" in first["ended_because"] and "SIGKILL" in first["ended_because"]
    assert second["steps_lost"] == first["best_step"] - 4 >= 2
    snap, recs = _top(job), [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    for rank in (0, 1):  # top and metrics.jsonl follow the resumed attempt, step by step
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        logged = [(int(st), float(v)) for st, v in re.findall(r"^epoch: 1 step: (\d+), loss is (\S+)$", log, re.M)]
        assert [st for st, _ in logged] == list(range(5, 13)), log[-2000:]
        mine = [
            (x["global_step"], x["loss"])
            for x in recs
            if x["rank"] == rank and x["kind"] == "step" and x["attempt"] == 1
        ]
        assert mine == logged
        row = snap["ranks"][rank]
        assert (row["step"], row["loss"], row["state"]) == (12, logged[-1][1], "done"), row
        per_rank = float(re.search(r"^epoch 1 throughput: ([\d.]+) img/s per rank", log, re.M).group(1))
        assert row["samples_per_s"] == per_rank  # the trainer's own figure
    assert snap["totals"]["samples_per_s"] == pytest.approx(sum(row["samples_per_s"] for row in snap["ranks"]))
    rep = run_process("report", str(job), "--output", str(tmp_path / "rep"), cwd=tmp_path, timeout=120)
    assert rep.returncode == 0, rep.stderr
    html = next((tmp_path / "rep").glob("*.html")).read_text()
    assert "attempt 0: failed (rank 1 on" in html and "attempt 1: succeeded; resumed at step 4" in html
    assert f"{second['steps_lost']} step(s) lost" in html


@pytest.mark.cost(150)
def test_a_restart_from_the_warm_zygote_looks_the_same_as_a_cold_one(tmp_path):
    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "400", "--test", "50"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    warm, warm_parents, err_w = _run(tmp_path, data, "warm", [])
    cold, cold_parents, err_c = _run(tmp_path, data, "cold", ["--cold-restarts", "--env", "MS_COMPILER_CACHE_ENABLE=0"])
    assert warm["exit"] == cold["exit"] == 0, (err_w, err_c)
    assert warm["attempts"] == cold["attempts"] == [("failed", None), ("succeeded", 4)]
    for key in warm["lines"]:
        assert warm["lines"][key] == cold["lines"][key], key
    assert any(
        ln.startswith("resume: ") and "(global step 4); continuing at epoch 1 step 5" in ln
        for ln in warm["lines"][(1, 0)]
    )
    assert [ln for ln in warm["lines"][(1, 1)] if ln.startswith("epoch: 1 step: ")][-1].startswith("epoch: 1 step: 12,")
    assert warm["files"].keys() == cold["files"].keys() and warm["files"] and warm["files"] == cold["files"]
    # the default's restart forked from the zygote of attempt 0; --cold-restarts from a new one
    assert warm_parents[1] == warm_parents[0] and cold_parents[1] != cold_parents[0]
    # the default's attempt 0 wrote both graphs of each rank, its restart took both from there
    assert warm["cache"] == {(0, 0): (True, 0), (0, 1): (True, 0), (1, 0): (True, 2), (1, 1): (True, 2)}, warm["cache"]
    assert warm["cached"] == [f"rank_{r}/graph_cache/MS_WORKERcompile_cache_{g}.mindir" for r in (0, 1) for g in (0, 1)]
    assert set(cold["cache"].values()) == {(False, 0)} and cold["cached"] == []
    _check_top_metrics_report(warm, tmp_path)
