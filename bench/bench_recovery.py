"""Recovery after a lost rank, against the first attempt's start, both from the same run.

The reference trainer (``launcher/workloads/resnet50_cifar10.py``, ResNet-14 at 32x32, batch 8,
a synthetic CIFAR-10 of 400 images) runs with 2 ranks, ``--ckpt-every 4`` and ``--max-restarts 1``;
once rank 1 has logged step 6 the benchmark SIGKILLs it.  The restart resumes from the step-4
checkpoint by itself.  Per run:

* **first**: from the moment ``mslaunch run`` is started to the first step line of attempt 0;
* **recovery**: from the SIGKILL to the first step line of attempt 1;
* **ratio** = recovery / first (the target: <= 0.5).

and where each went, from ``events.jsonl`` and the arrival of the ranks' log lines (read every
20 ms): *teardown* (the kill to the ``restart`` event: noticing the death, SIGTERM/grace/SIGKILL of
the others, the zygote or the processes released), *start* (to the workers' ``started`` events:
the launcher, the scheduler, forks or exec + ``import mindspore``), *cluster* (to ``params:``:
the ranks' ``init()``, the network built), *data* (to ``data:``: the input pipeline), *ckpt* (to
``resume:``: the train step built and the checkpoint loaded; attempt 0 has none) and *compile*
(to the first step line: the graph compiled, or taken from the compile cache, and one step run).

Modes (each round runs them back to back, the order rotating): ``warm`` is the default (the
zygote kept across attempts, and the trainer's graphs taken from MindSpore's compile cache in the
job dir); ``noshim`` is the default without the zygotes' fastjoin shim
(``--env MSLAUNCH_FAST_JOIN=0``: MindSpore's own 3 s address polls); ``nocache`` turns the cache
off (``--env MS_COMPILER_CACHE_ENABLE=0``); ``cold`` is
``--cold-restarts`` (a restart imports MindSpore again, the cache still used); ``coldnocache`` is
both off, a restart as it was before either.  The load average is printed before and after.

Usage: python bench/bench_recovery.py [--rounds 3] [--modes warm,noshim,nocache,cold,coldnocache] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

from benchkit import exit_if_cannot_run

PY = sys.executable
MODES: Dict[str, List[str]] = {
    "warm": [],
    "noshim": ["--env", "MSLAUNCH_FAST_JOIN=0"],  # the zygotes without the fastjoin shim
    "cold": ["--cold-restarts"],
    "nocache": ["--env", "MS_COMPILER_CACHE_ENABLE=0"],
    "coldnocache": ["--cold-restarts", "--env", "MS_COMPILER_CACHE_ENABLE=0"],
}
KILL_AFTER = 6
PHASES = ("teardown", "start", "cluster", "data", "ckpt", "compile")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LineStamps:
    """Follows log files; remembers when each line was first seen (wall clock)."""

    def __init__(self) -> None:
        self.lines: Dict[str, List[tuple]] = {}
        self._pos: Dict[str, int] = {}
        self._stop = threading.Event()
        self._files: List[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def follow(self, *paths: str) -> None:
        self._files.extend(p for p in paths if p not in self._files)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._poll()

    def _poll(self) -> None:
        now = time.time()
        for path in list(self._files):
            try:
                with open(path, "rb") as f:
                    f.seek(self._pos.get(path, 0))
                    chunk = f.read()
            except OSError:
                continue
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                continue
            self._pos[path] = self._pos.get(path, 0) + cut
            for raw in chunk[:cut].splitlines():
                self.lines.setdefault(path, []).append((now, raw.decode(errors="replace")))

    def first(self, path: str, start: str) -> Optional[float]:
        for when, line in self.lines.get(path, []):
            if line.startswith(start):
                return when
        return None


def one_run(mode: str, data: str, work: str) -> Dict[str, float]:
    """One job in ``mode``; its timings (wall-clock seconds)."""
    job, ckpt = os.path.join(work, "job"), os.path.join(work, "ckpt")
    argv = [
        PY,
        "-m",
        "launcher",
        "run",
        "--np",
        "2",
        "--master-port",
        str(free_port()),
        "--log-dir",
        job,
        "--tee",
        "none",
        "--quiet",
        "--max-restarts",
        "1",
        *MODES[mode],
        "-m",
        "launcher.workloads.resnet50_cifar10",
        "--arch",
        "resnet14",
        "--data-path",
        data,
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
        ckpt,
        "--ckpt-every",
        "4",
    ]
    logs = {(k, r): os.path.join(job, *(["attempt_1"] if k else []), f"worker_{r}.log") for k in (0, 1) for r in (0, 1)}
    stamps = LineStamps()
    stamps.follow(*logs.values())
    stamps.start()
    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=work)
    killed = None
    try:
        deadline = time.monotonic() + 600
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if stamps.first(logs[(0, 1)], f"epoch: 1 step: {KILL_AFTER},") is not None:
                pid = _rank_pid(job, 1)
                os.kill(pid, signal.SIGKILL)
                killed = time.time()
            time.sleep(0.02)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stamps.stop()
    if killed is None or proc.returncode != 0:
        raise RuntimeError(f"{mode}: mslaunch exited {proc.returncode} (killed: {killed is not None}): {err[-1500:]}")
    events = [json.loads(line) for line in open(os.path.join(job, "events.jsonl"))]

    def event(kind: str, attempt: int, name_start: str = "") -> float:
        times = [
            e["time"]
            for e in events
            if e["kind"] == kind and e.get("attempt", 0) == attempt and str(e.get("name", "")).startswith(name_start)
        ]
        return max(times)

    def line(attempt: int, start: str) -> float:
        found = [stamps.first(logs[(attempt, r)], start) for r in (0, 1)]
        if any(f is None for f in found):
            raise RuntimeError(f"{mode}: attempt {attempt} has no line {start!r} on every rank")
        return min(found)  # type: ignore[type-var]

    restart = [e["time"] for e in events if e["kind"] == "restart"][0]
    step0, step1 = line(0, "epoch: 1 step: 1,"), line(1, f"epoch: 1 step: {KILL_AFTER - 1},")
    out = {"first": step0 - t0, "recovery": step1 - killed}
    out["ratio"] = out["recovery"] / out["first"]
    marks0 = [t0, t0, event("started", 0, "rank"), line(0, "params:"), line(0, "data:"), line(0, "data:"), step0]
    marks1 = [
        killed,
        restart,
        event("started", 1, "rank"),
        line(1, "params:"),
        line(1, "data:"),
        line(1, "resume:"),
        step1,
    ]
    for phase, a, b, c, d in zip(PHASES, marks0, marks0[1:], marks1, marks1[1:]):
        out[f"0.{phase}"], out[f"1.{phase}"] = b - a, d - c
    with open(os.path.join(job, "summary.json")) as f:
        summary = json.load(f)
    out["resumed_from"] = summary["attempt_results"][1].get("resumed_from_step", -1)
    return out


def _rank_pid(job: str, rank: int) -> int:
    for line in open(os.path.join(job, "events.jsonl")):
        ev = json.loads(line)
        if ev.get("kind") == "started" and ev.get("name") == f"rank {rank}" and ev.get("attempt", 0) == 0:
            return int(ev["pid"])
    raise RuntimeError(f"no started event for rank {rank}")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="warm,noshim,nocache,cold,coldnocache")
    ap.add_argument("--keep", default=None, help="keep the jobs' folders under this folder")
    args = ap.parse_args()
    exit_if_cannot_run()
    modes = [m for m in args.modes.split(",") if m]
    base = args.keep or tempfile.mkdtemp(prefix="bench_recovery_")
    data = os.path.join(base, "data")
    subprocess.run(
        [PY, "-m", "launcher.workloads.cifar10_synth", data, "--train", "400", "--test", "50"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    print(f"before: {load()}", flush=True)
    results: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
    try:
        for k in range(args.rounds):
            for mode in modes[k % len(modes) :] + modes[: k % len(modes)]:
                work = os.path.join(base, f"{mode}_{k}")
                os.makedirs(work)
                r = one_run(mode, data, work)
                results[mode].append(r)
                phases = " ".join(f"{p} {r['0.' + p]:.2f}/{r['1.' + p]:.2f}" for p in PHASES)
                print(
                    f"round {k} {mode}: first {r['first']:.2f} s, recovery {r['recovery']:.2f} s, ratio "
                    f"{r['ratio']:.3f} "
                    f"(resumed from step {r['resumed_from']}); attempt 0/1: {phases}; {load()}",
                    flush=True,
                )
                if not args.keep:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"after: {load()}")
    for mode, runs in results.items():
        if not runs:
            continue
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        phases = " ".join(f"{p} {med['0.' + p]:.2f}/{med['1.' + p]:.2f}" for p in PHASES)
        print(
            f"{mode}: median of {len(runs)}: first {med['first']:.2f} s, recovery {med['recovery']:.2f} s, "
            f"ratio {med['ratio']:.3f} (runs {', '.join('%.3f' % r['ratio'] for r in runs)}); attempt 0/1: {phases}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
