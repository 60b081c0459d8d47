#!/usr/bin/env python3
"""Benchmark: what hang tracking costs, and how fast a hung job is summarised.

1. Follower CPU: a writer process appends 20 lines/s to each of 8 rank logs (every 4th a step
   line) while a follower process runs the metrics writer as ``mslaunch run`` does: once as
   before hang tracking (the anchor: :class:`MetricsWriter` alone) and once with the hang watch
   and the attempts' progress fed from it (``on_line`` / ``on_records``).  Reported: each one's
   CPU share of a core and the difference (the issue's bound: <= 0.5 % of a core more).
2. Limit to summary: ``mslaunch run --np 8`` of local ranks that print a step and then block,
   ``--hang-timeout 3``: from the moment the limit passed (the last step line's arrival, read from
   ``metrics.jsonl``, + the limit) to ``summary.json`` on disk, stack dumps of 8 ranks (+ the
   scheduler) included (the issue's bound: <= 5 s).  Anchor in the same run: one rank, same job.

Usage: python bench/bench_hang.py [--seconds 10] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FOLLOWER = r"""
import sys, time
from launcher.logs.metricsfile import MetricsWriter
folder, seconds, hang = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
kw = {}
if hang:
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.execution.supervision.restarts import AttemptProgress
    from launcher.logs.hang import HangPolicy
    watch, progress = HangWatch(HangPolicy("auto")), AttemptProgress()
    watch.begin(0, [(r, "localhost") for r in range(8)])
    kw = {"on_line": watch.on_line, "on_records": progress.on_records}
w = MetricsWriter(folder, **kw)
sys.stdout.write("ready\n"); sys.stdout.flush()
start = time.process_time()
w.start()
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.2)
    if hang:
        watch.due()  # the supervisor asks about once a second; more often here
w.stop()
print(f"{time.process_time() - start:.4f} {w.records}")
"""

WRITER = r"""
import os, sys, time
folder, ranks, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
fds = [os.open(os.path.join(folder, f"worker_{r}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT) for r in range(ranks)]
k, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    for r, fd in enumerate(fds):
        line = f"epoch: 1 step: {k // 4 + 1}, loss is 0.{k:04d}\n" if k % 4 == 0 else f"[INFO] rank {r} data batch {k} ready\n"
        os.write(fd, line.encode())
    k += 1
    time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t)))
"""

RANK = r"""
import os, socket, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"]))); s.listen(64)
    time.sleep(3600)
def blocked_in_collective():
    time.sleep(3600)
print("epoch: 1 step: 1, loss is 1.0", flush=True)
blocked_in_collective()
"""


def follower_cpu(seconds: float, hang: bool, env: Dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_hang_") as folder:
        fol = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER, folder, str(seconds), "1" if hang else "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert fol.stdout is not None and fol.stdout.readline().strip() == "ready"
        subprocess.run([sys.executable, "-c", WRITER, folder, "8", "20", str(seconds)], check=True, env=env)
        out, _ = fol.communicate(timeout=seconds + 60)
        return float(out.split()[0]) / seconds


def limit_to_summary(np: int, limit: float, env: Dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_hang_job_") as tmp:
        prog = os.path.join(tmp, "rank.py")
        with open(prog, "w") as fh:
            fh.write(RANK)
        job = os.path.join(tmp, "job")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "launcher",
                "run",
                "--np",
                str(np),
                "--master-port",
                "auto",
                "--log-dir",
                job,
                "--tee",
                "none",
                "--grace",
                "2",
                "--hang-timeout",
                str(limit),
                prog,
            ],
            capture_output=True,
            env=env,
            timeout=300,
            check=False,
        )
        written = os.stat(os.path.join(job, "summary.json")).st_mtime
        with open(os.path.join(job, "summary.json")) as fh:
            summary = json.load(fh)
        assert summary["status"] == "hung", summary
        with open(os.path.join(job, "metrics.jsonl")) as fh:
            last_step = max(json.loads(line)["time"] for line in fh if line.strip())
        return written - (last_step + limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    print(f"{os.cpu_count()} CPUs, machine possibly shared; medians of {args.runs} runs")
    base = statistics.median(follower_cpu(args.seconds, False, env) for _ in range(args.runs))
    hang = statistics.median(follower_cpu(args.seconds, True, env) for _ in range(args.runs))
    print(
        f"follower, 8 ranks x 20 lines/s for {args.seconds:g} s: without hang tracking (anchor) {base * 100:.2f} % of "
        "a core, "
        f"with {hang * 100:.2f} %: +{(hang - base) * 100:.2f} points ({hang / max(base, 1e-9):.2f}x the anchor)"
    )
    one: List[float] = [limit_to_summary(1, 3.0, env) for _ in range(args.runs)]
    eight: List[float] = [limit_to_summary(8, 3.0, env) for _ in range(args.runs)]
    a, b = statistics.median(one), statistics.median(eight)
    print(
        f"limit passed -> summary.json (dumps included): 1 rank (anchor) {a:.2f} s, 8 local ranks {b:.2f} s "
        f"({b / max(a, 1e-9):.2f}x the anchor); "
        f"runs: {', '.join(f'{x:.2f}' for x in eight)}"
    )


if __name__ == "__main__":
    main()
