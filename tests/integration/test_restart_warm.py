"""A restart that forks from the last attempt's warm zygote and takes the trainer's graphs from
MindSpore's compile cache (the default), with real MindSpore 2.10, must look to its user as one
that starts from nothing: the recorded runs below were recorded from a cold restart
(``--cold-restarts --env MS_COMPILER_CACHE_ENABLE=0``: a new zygote, every graph compiled), one
per kind of CPU (MindSpore's CPU kernels compute differently on CPUs with other vector features);
on a CPU not recorded, the test runs that cold restart itself and holds the warm one to it.

The reference trainer (2 ranks, ResNet-8 on 16x16 images, batch 4, 16 steps, ``--ckpt-every 8``) has
rank 1 SIGKILLed once both ranks logged step 9; ``--max-restarts 1`` resumes it from the step-8 checkpoint.
The job is held to the recorded run: the exit code, every attempt's status and resume step, each
rank's own lines in both attempts (the losses to 1e-4 relative; MindSpore's log lines and the
timing figures left out), and the checkpoint files at the end (their names, and byte for byte
where the losses are the recorded ones to the last digit).  That the restart really forked from the
kept zygote is checked on the ranks' parent process; that it took its three graphs (the resume's
AllGather, the train step, the AllReduce that agrees on a stop) from the cache, on MindSpore's own
log line.
The run is also the reference trainer as ``top`` shows it (both ranks stepping while it runs; at
the end every step of the resumed attempt in ``metrics.jsonl`` with its loss, each rank done, its
throughput the trainer's own figure) and as ``report`` shows it (both attempts, the steps lost).

On a recorded CPU the cold restart is not run (a second job of the same cost): ``--cold-restarts`` handing the
zygote no pool is tests/cli/test_cold_restarts.py's, a restart without a pool importing in a new
zygote tests/execution/local/test_zygote.py's, and ``MS_COMPILER_CACHE_ENABLE`` set by the user
turning the trainer's cache off tests/workloads/test_compile_cache.py's.  To record a CPU (or again,
when the trainer changed what it prints or computes: then empty :data:`RECORDED`), run this test with
``-s`` and add the entry it prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
from typing import Any, Dict

import pytest

from launcher.workloads.cifar10_synth import write_synthetic_cifar10
from tests.harness.cli import mslaunch_argv, run_cli
from tests.harness.faultkit import wait_or_fail
from tests.harness.hostfaults import favored_children
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
    run's folder masked; with ``upto``, up to the line starting so (where the kill cut attempt 0,
    once both ranks logged it: rank 1 may log one more step before it)."""
    text = path.read_text(errors="replace").replace(str(root), "<run>")
    lines = [
        ln
        for ln in text.splitlines()
        if ln.strip() and not re.match(r"\[(INFO|WARNING|ERROR|DEBUG)\]", ln) and not ln.startswith("compile cache: ")
    ]
    lines = [re.sub(r"throughput: .*", "throughput: <timing>", ln) for ln in lines]
    lines = [re.sub(r'"ckpt_ms": [0-9.]+', '"ckpt_ms": <ms>', ln) for ln in lines]
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


#: The job: 2 ranks of ResNet-8 on 16x16 images (the restart's code path at a fraction of ResNet-50's
#: compile), batch 4, 16 steps, checkpoints every 8 steps; rank 1 is SIGKILLed once both ranks logged
#: step 9 (seven steps before the next checkpoint could be written: a step takes a tenth of a second),
#: so the restart resumes from step 8 and trains steps 9-16.  The data: 128 records, 16 batches of 4
#: a rank (one pass is the epoch).
SPE, EVERY, KILL_AT = 16, 8, 9
ARCH, RECORDS = "resnet8", 128
PARAMS = 469066  # the network's parameter count, as the trainer prints it


def _run(tmp_path, mode, flags):
    data = tmp_path / mode / "data"
    write_synthetic_cifar10(str(data), train=RECORDS, test=8, seed=0)
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
        ARCH,
        "--data-path",
        str(data),
        "--image-size",
        "16",
        "--batch-size",
        "4",
        "--steps-per-epoch",
        str(SPE),
        "--epochs",
        "1",
        "--workers",
        "1",
        "--ckpt-dir",
        str(ckpt),
        "--ckpt-every",
        str(EVERY),
    )
    # its processes get the CPU first (near its time alone beside the suite's other work), and so
    # does this thread, which must kill rank 1 within the seven steps before the next checkpoint
    with favored_children(this_thread=True) as favored:
        return _run_job(tmp_path, mode, argv, job, ckpt, favored)


def _run_job(tmp_path, mode, argv, job, ckpt, favored):
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), preexec_fn=favored
    )
    parents, live = {}, {}
    try:

        def logged(rank, step, folder=job):
            log = folder / f"worker_{rank}.log"
            return log.exists() and f"epoch: 1 step: {step}," in log.read_text(errors="replace")

        def watch(folder, first):  # the default run also takes what `top` shows while both ranks step
            if mode == "warm" and not live and logged(0, first, folder) and logged(1, first, folder):
                snap = _top(job)
                if snap["state"] == "running" and all((row["step"] or 0) >= 2 for row in snap["ranks"]):
                    live.update(snap)

        def kill_step():  # both ranks logged it (under load rank 0 may print it later than rank 1)
            watch(job, 1)
            return logged(1, KILL_AT) and logged(0, KILL_AT)

        wait_or_fail(kill_step, 300, f"step {KILL_AT} on rank 1")
        parents[0] = _ppid(_started(job, 0, 0))
        os.kill(_started(job, 0, 1), signal.SIGKILL)
        wait_or_fail(
            lambda: (job / "events.jsonl").exists() and _started(job, 1, 0) is not None, 300, "attempt 1 started"
        )
        parents[1] = _ppid(_started(job, 1, 0))  # it trains 3 steps: running while this reads
        # (attempt 0's window for `top` is a step or two: under load it may fall in the restart's)
        wait_or_fail(lambda: watch(job / "attempt_1", EVERY + 1) or bool(live) or proc.poll() is not None, 400, "end")
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
                None if k else f"epoch: 1 step: {KILL_AT},",
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
    assert live, "top never showed both ranks past step 2 while they ran"
    assert live["state"] == "running" and [row["state"] for row in live["ranks"]] == ["running", "running"], live
    assert all(row["loss"] is not None and row["total_steps"] == SPE for row in live["ranks"]), live["ranks"]
    first, second = s["attempt_results"]
    assert "rank 1" in first["ended_because"] and "SIGKILL" in first["ended_because"]
    assert second["steps_lost"] == first["best_step"] - EVERY >= 1
    snap, recs = _top(job), [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    for rank in (0, 1):  # top and metrics.jsonl follow the resumed attempt, step by step
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        logged = [(int(st), float(v)) for st, v in re.findall(r"^epoch: 1 step: (\d+), loss is (\S+)$", log, re.M)]
        assert [st for st, _ in logged] == list(range(EVERY + 1, SPE + 1)), log[-2000:]
        mine = [
            (x["global_step"], x["loss"])
            for x in recs
            if x["rank"] == rank and x["kind"] == "step" and x["attempt"] == 1
        ]
        assert mine == logged
        row = snap["ranks"][rank]
        assert (row["step"], row["loss"], row["state"]) == (SPE, logged[-1][1], "done"), row
        per_rank = float(re.search(r"^epoch 1 throughput: ([\d.]+) img/s per rank", log, re.M).group(1))
        assert row["samples_per_s"] == per_rank  # the trainer's own figure
    assert snap["totals"]["samples_per_s"] == pytest.approx(sum(row["samples_per_s"] for row in snap["ranks"]))
    rep = run_cli("report", str(job), "--output", str(tmp_path / "rep"), cwd=str(tmp_path))
    assert rep.returncode == 0, rep.stderr
    html = next((tmp_path / "rep").glob("*.html")).read_text()
    assert "attempt 0: failed (rank 1 on" in html and f"attempt 1: succeeded; resumed at step {EVERY}" in html
    assert f"{second['steps_lost']} step(s) lost" in html


CKPT_MS = 'MSLAUNCH_METRIC {"ckpt_ms": <ms>}'  # how long the checkpoint took to write (masked)


def _lines(k, r, losses):
    """The lines of attempt ``k``, rank ``r`` of a run whose losses were ``losses`` (a cold run's;
    "<run>" is the run's folder)."""
    head = [
        f"params: {PARAMS}",
        f"data: <run>/data/cifar-10-batches-bin (train, {RECORDS} records; files are not 10000 records each, which"
        f" Cifar10Dataset requires, so read with numpy); rank {r} of 2: {RECORDS // 8} batches of 4 per pass",
        f'MSLAUNCH_METRIC {{"batch_size": 4, "epochs": 1, "steps_per_epoch": {SPE}}}',
    ]
    if k == 0:
        steps = [f"epoch: 1 step: {i + 1}, loss is {v}" for i, v in enumerate(losses[(0, r)])]
        return (
            head + steps[:EVERY] + [f"checkpoint: <run>/ckpt/ckpt_{r}/{ARCH}-1_{EVERY}.ckpt", CKPT_MS] + steps[EVERY:]
        )
    return (
        head
        + [
            f"resume: <run>/ckpt/ckpt_{r}/{ARCH}-1_{EVERY}.ckpt (global step {EVERY});"
            f" continuing at epoch 1 step {EVERY + 1}"
        ]
        + [f"epoch: 1 step: {i + EVERY + 1}, loss is {v}" for i, v in enumerate(losses[(1, r)])]
        + ["epoch 1 throughput: <timing>", f"checkpoint: <run>/ckpt/ckpt_{r}/{ARCH}-1_{SPE}.ckpt", CKPT_MS]
    )


def cpu_kernels() -> str:
    """The CPU's features MindSpore's CPU kernels choose their arithmetic by (the ``avx*``, ``amx*``
    and ``fma`` flags of /proc/cpuinfo): the same run's losses differ between CPUs that differ here."""
    with open("/proc/cpuinfo") as f:
        flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    return " ".join(sorted(x for x in set(flags) if x.startswith(("avx", "amx", "fma"))))


#: The recorded runs, by :func:`cpu_kernels`: each rank's losses in both attempts, and the checkpoint
#: files at the end (sha256), of a cold restart (``--cold-restarts --env MS_COMPILER_CACHE_ENABLE=0``)
#: on such a CPU.  A warm restart must match them: the losses to 1e-4 relative, the files byte for
#: byte where the losses are the recorded ones to the last digit.  On a CPU not recorded here the
#: test runs that cold restart too (a second job) and holds the warm one to it; the run then prints
#: the entry to add here (``pytest -s``).  Between CPUs the losses differ past 1e-4 within a few
#: steps (ResNet-14's by 0.2 % at its 4th step and 3 % at its 6th).
RECORDED: Dict[str, Dict[str, Any]] = {
    # recorded 2026-11-29 on an "Intel(R) Xeon(R) Processor" (Sapphire Rapids)
    "amx_bf16 amx_int8 amx_tile avx avx2 avx512_bf16 avx512_bitalg avx512_fp16 avx512_vbmi2 avx512_vnni"
    " avx512_vpopcntdq avx512bw avx512cd avx512dq avx512f avx512ifma avx512vbmi avx512vl avx_vnni fma": {
        "losses": {
            (0, 0): (
                "2.202297",
                "2.369719",
                "2.341197",
                "2.264798",
                "2.155268",
                "2.158962",
                "1.703699",
                "2.206759",
                "1.860371",
            ),
            (0, 1): (
                "2.250427",
                "2.240759",
                "2.184052",
                "2.105507",
                "2.219724",
                "2.175249",
                "1.993237",
                "1.835236",
                "2.274688",
            ),
            (1, 0): ("1.710992", "1.596608", "2.142232", "1.274435", "2.16422", "1.583751", "1.072806", "1.700531"),
            (1, 1): ("1.854856", "1.671185", "1.98311", "1.571659", "1.510988", "2.109892", "1.626168", "1.72822"),
        },
        "files": {
            "ckpt_0/resnet8-1_16.ckpt": "e9ead842e9229574e6bb8907c07ebbedf9c21092dd69eba9f4394718cb51af52",
            "ckpt_0/resnet8-1_8.ckpt": "47cbd484fb6ee4013cd60ed03ede104b7e74b69842a7c97b47b5e776c48387d4",
            "ckpt_1/resnet8-1_16.ckpt": "67121e016310fb6da0de8c0ae0df4e2a00b07def3388695737ed4c2701d5b0bb",
            "ckpt_1/resnet8-1_8.ckpt": "7e6d31fbdd767e13660542638e234a15454e4914186b336dc094083971ecb561",
        },
    },
}

_LOSS = re.compile(r"loss is (\S+)$")


def _recording(seen):
    """A run's entry of :data:`RECORDED`: its losses and its checkpoint files' sha256."""
    losses = {kr: tuple(m.group(1) for m in map(_LOSS.search, lines) if m) for kr, lines in seen["lines"].items()}
    return {"losses": losses, "files": {n: hashlib.sha256(b).hexdigest() for n, b in seen["files"].items()}}


def _assert_the_recorded_run(seen, err, recorded):
    """What a restart of this job shows its user, warm or cold: the exit code, every attempt's
    status and resume step, each rank's own lines in both attempts (losses to 1e-4 relative) and
    the checkpoint files at the end (their names; byte for byte where the losses are exact)."""
    assert seen["exit"] == 0, err[-3000:]
    assert seen["attempts"] == [("failed", None), ("succeeded", EVERY)]
    exact = True
    for (k, r), lines in seen["lines"].items():
        want = _lines(k, r, recorded["losses"])
        assert [_LOSS.sub("loss is <n>", ln) for ln in lines] == [_LOSS.sub("loss is <n>", ln) for ln in want], (k, r)
        got = [float(m.group(1)) for m in map(_LOSS.search, lines) if m]
        rec = [float(m.group(1)) for m in map(_LOSS.search, want) if m]
        assert got == pytest.approx(rec, rel=1e-4), (k, r)
        exact = exact and got == rec
    assert sorted(seen["files"]) == sorted(recorded["files"])
    if exact:
        assert {n: hashlib.sha256(b).hexdigest() for n, b in seen["files"].items()} == recorded["files"]


@pytest.mark.cost(50)  # alone on a recorded CPU 26-30 s, x1.7; on another, with the cold restart, about 45 s alone
def test_a_restart_from_the_warm_zygote_looks_the_same_as_a_cold_one(tmp_path):
    """The default: the recorded run (recorded from a cold restart), its restart forked from the
    zygote of attempt 0 and each rank's three graphs taken from the cache that attempt 0 wrote;
    and what top, metrics.jsonl and report show."""
    warm, parents, err = _run(tmp_path, "warm", [])
    recorded = RECORDED.get(cpu_kernels())
    if recorded is None:  # this CPU's arithmetic: the cold restart, run here
        cold, _, cold_err = _run(tmp_path, "cold", ["--cold-restarts", "--env", "MS_COMPILER_CACHE_ENABLE=0"])
        assert cold["exit"] == 0, cold_err[-3000:]
        recorded = _recording(cold)
        print(f"RECORDED[{cpu_kernels()!r}] = {recorded!r}")  # the entry to add for this CPU
    _assert_the_recorded_run(warm, err, recorded)
    assert parents[1] == parents[0]
    assert warm["cache"] == {(0, 0): (True, 0), (0, 1): (True, 0), (1, 0): (True, 3), (1, 1): (True, 3)}, warm["cache"]
    assert warm["cached"] == [
        f"rank_{r}/graph_cache/MS_WORKERcompile_cache_{g}.mindir" for r in (0, 1) for g in (0, 1, 2)
    ]
    _check_top_metrics_report(warm, tmp_path)
