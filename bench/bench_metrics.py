"""Cost of the metrics follower (metrics.jsonl writer) at 8 ranks × 20 lines/s each (target <= 2% of a core).

A writer process appends real-format lines to 8 ``worker_<r>.log`` files in a temporary job dir
(20 lines/s per rank: LossMonitor lines, ``MSLAUNCH_METRIC`` lines and plain output).  Measured
over the same interval, each in its own process:

* mslaunch's :class:`~launcher.logs.metricsfile.MetricsWriter` (poll every 0.5 s, parse, append to
  metrics.jsonl), as it runs inside the supervisor;
* ``mslaunch top`` on the job dir, drawing its live table into a pseudo-terminal (1 refresh/s);
* the anchor: ``tail -q -F`` over the same 8 files (coreutils' follower, output to /dev/null).

Prints each one's CPU as % of one core, and the ratio mslaunch / tail.
Usage: python bench/bench_metrics.py [--seconds 20] [--ranks 8] [--rate 20]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
import tempfile
import threading
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRODUCER = r"""
import json, os, sys, time
folder, ranks, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
files = [open(os.path.join(folder, f"worker_{r}.log"), "a", buffering=1) for r in range(ranks)]
step = 0
start = time.monotonic()
while time.monotonic() - start < seconds:
    step += 1
    for r, fh in enumerate(files):
        kind = step % 4
        if kind == 0:
            fh.write(f"epoch: 1 step: {step}, loss is {2.0 / step:.7g}\n")
        elif kind == 1:
            fh.write("MSLAUNCH_METRIC " + json.dumps({"step": step, "loss": 2.0 / step, "step_time_ms": 50.0}) + "\n")
        elif kind == 2:
            fh.write(f"[WARNING] some framework message about step {step} and things that are not metrics\n")
        else:
            fh.write(f"epoch 1 throughput: 18.{step % 10} img/s per rank, 37.5 img/s total ({ranks} ranks)\n")
    time.sleep(max(0.0, start + step / rate - time.monotonic()))
"""

FOLLOWER = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from launcher.logs.metricsfile import MetricsWriter
w = MetricsWriter(sys.argv[1]).start()
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
w.stop()
sys.stdout.write(f"{w.records}\n"); sys.stdout.flush()
"""


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20.0, help="lines per second per rank")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mslaunch-bench-metrics-") as folder:
        for r in range(args.ranks):
            open(os.path.join(folder, f"worker_{r}.log"), "w").close()
        ours = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER, folder, ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert ours.stdout is not None and ours.stdout.readline().strip() == "ready"
        # `mslaunch top` needs a job: plan.json and a job.json whose supervisor pid (ours) is alive.
        with open(os.path.join(folder, "plan.json"), "w") as fh:
            json.dump(
                {
                    "job_id": "bench",
                    "world_size": args.ranks,
                    "ranks": [{"rank": r, "host": f"node{r // 4}"} for r in range(args.ranks)],
                },
                fh,
            )
        with open(os.path.join(folder, "job.json"), "w") as fh:
            json.dump({"job_id": "bench", "pid": os.getpid(), "started": time.time()}, fh)
        master, slave = pty.openpty()
        env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="120", LINES="30", TERM="xterm-256color")
        top = subprocess.Popen(
            [sys.executable, "-m", "launcher", "top", folder, "--interval", "1"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
        )
        os.close(slave)
        drained = [0]

        def drain() -> None:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return
                if not data:
                    return
                drained[0] += len(data)

        threading.Thread(target=drain, daemon=True).start()
        time.sleep(2.0)  # let top import and draw once before measuring
        with open(os.devnull, "wb") as null:
            tail = subprocess.Popen(
                ["tail", "-q", "-n", "0", "-F"] + [os.path.join(folder, f"worker_{r}.log") for r in range(args.ranks)],
                stdout=null,
                stderr=subprocess.DEVNULL,
            )
        p_ours, p_tail, p_top = psutil.Process(ours.pid), psutil.Process(tail.pid), psutil.Process(top.pid)
        c0_ours, c0_tail, c0_top, t0 = cpu(p_ours), cpu(p_tail), cpu(p_top), time.monotonic()
        subprocess.run(
            [sys.executable, "-c", PRODUCER, folder, str(args.ranks), str(args.rate), str(args.seconds)], check=True
        )
        c1_ours, c1_tail, c1_top, t1 = cpu(p_ours), cpu(p_tail), cpu(p_top), time.monotonic()
        top.terminate()
        top.wait(timeout=10)
        os.close(master)
        assert ours.stdin is not None
        ours.stdin.write("\n")
        ours.stdin.flush()
        records = int(ours.stdout.readline() or 0)
        ours.wait(timeout=30)
        tail.terminate()
        tail.wait(timeout=10)
        lines = sum(1 for r in range(args.ranks) for _ in open(os.path.join(folder, f"worker_{r}.log")))
    wall = t1 - t0
    pct_ours = 100.0 * (c1_ours - c0_ours) / wall
    pct_tail = 100.0 * (c1_tail - c0_tail) / wall
    print(f"{args.ranks} ranks × {args.rate:g} lines/s for {wall:.1f} s: {lines} lines, {records} metric records")
    print(f"mslaunch metrics follower: {pct_ours:.2f}% of a core (target <= 2%)")
    pct_top = 100.0 * (c1_top - c0_top) / wall
    print(f"mslaunch top (live, pty):  {pct_top:.2f}% of a core ({drained[0]} bytes drawn)")
    print(f"tail -F (anchor):          {pct_tail:.2f}% of a core")
    print(f"ratio mslaunch / tail: {pct_ours / pct_tail:.2f}" if pct_tail > 0 else "ratio: tail used no measurable CPU")
    return 0 if pct_ours <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
