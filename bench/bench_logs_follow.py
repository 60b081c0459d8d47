#!/usr/bin/env python3
"""Benchmark: CPU of following many growing rank logs (``mslaunch logs tail -f``'s follower).

For N = 10 and N = 1,000 files (``--files``), in one run: a writer process appends one line per
file every ``--period`` seconds (so the line rate grows with N) while a follower process runs
:class:`launcher.logs.follow.Follower` over the folder exactly as ``logs tail -f`` does (output
to /dev/null).  Reported per case: the follower's CPU seconds over ``--seconds`` of following,
its CPU share, CPU per 1,000 lines, whether every line arrived, and the same follower's CPU over
the same files when nothing grows (idle).  Also the sweep-per-0.2-s behaviour of the earlier
follower (list the folder and stat every file at every sweep; ``--no-legacy`` skips it).

Usage: python bench/bench_logs_follow.py [--seconds 10] [--files 10,1000] [--period 0.5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FOLLOWER = r"""
import os, sys, threading, time
from launcher.logs.follow import Follower, job_log_sources
folder, seconds, legacy = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
count = [0]
out = open(os.devnull, "w")
def emit(src, line):
    count[0] += 1
    out.write(line + "\n")
kw = {"rescan": 0.0} if legacy else {}
f = Follower(lambda: job_log_sources(folder), emit, from_start=True, interval=0.2, **kw)
sys.stdout.write("ready\n"); sys.stdout.flush()
start_cpu, end = time.process_time(), time.monotonic() + seconds
wait = 0.2
while time.monotonic() < end:
    n = f.poll()
    out.flush()
    wait = 0.2 if legacy else f.next_wait(n)
    time.sleep(wait)
f.flush()
print(f"{time.process_time() - start_cpu:.4f} {count[0]}")
"""

WRITER = r"""
import os, sys, time
folder, files, period, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
fds = [os.open(os.path.join(folder, f"worker_{r}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT) for r in range(files)]
written, k, end = 0, 0, time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    for r, fd in enumerate(fds):
        os.write(fd, f"rank {r} step {k} loss 0.{k:04d}\n".encode())
    written += files
    k += 1
    time.sleep(max(0.0, period - (time.monotonic() - t)))
print(written)
"""


def follow(
    folder: str, files: int, seconds: float, period: float, grow: bool, legacy: bool, env: Dict[str, str]
) -> Dict[str, float]:
    """One case: start the follower, then (``grow``) the writer for ``seconds``; the follower's CPU."""
    fol = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER, folder, str(seconds + 1.0), "1" if legacy else "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert fol.stdout is not None and fol.stdout.readline().strip() == "ready"
    written = 0
    if grow:
        w = subprocess.run(
            [sys.executable, "-c", WRITER, folder, str(files), str(period), str(seconds)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        written = int(w.stdout)
    out, _ = fol.communicate(timeout=seconds + 60)
    cpu, lines = out.split()
    return {"cpu": float(cpu), "lines": int(lines), "written": written}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--files", default="10,1000")
    parser.add_argument("--period", type=float, default=0.5, help="seconds between two lines of one file")
    parser.add_argument("--no-legacy", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    results: Dict[str, Dict[str, float]] = {}
    sizes: List[int] = [int(n) for n in args.files.split(",")]
    for n in sizes:
        for legacy in [False] if args.no_legacy else [False, True]:
            with tempfile.TemporaryDirectory(prefix="bench_follow_") as folder:
                for r in range(n):
                    open(os.path.join(folder, f"worker_{r}.log"), "w").close()
                name = f"{n} files{' (legacy sweep)' if legacy else ''}"
                results[name + " idle"] = follow(folder, n, args.seconds, args.period, False, legacy, env)
                results[name] = follow(folder, n, args.seconds, args.period, True, legacy, env)
    print(
        f"following for {args.seconds:.0f} s, one line per file every {args.period} s; {os.cpu_count()} CPUs, machine "
        "possibly shared"
    )
    print(f"{'case':<36} {'cpu s':>7} {'cpu %':>6} {'lines':>7} {'all':>4} {'cpu ms/1k lines':>16}")
    for name, r in results.items():
        per = r["cpu"] / r["lines"] * 1e6 if r["lines"] else float("nan")
        share = r["cpu"] / (args.seconds + 1.0) * 100
        complete = "yes" if r["lines"] == r["written"] else f"no ({r['written']:.0f} written)"
        print(f"{name:<36} {r['cpu']:>7.3f} {share:>5.1f}% {r['lines']:>7.0f} {complete:>4} {per:>16.1f}")
    small, big = f"{sizes[0]} files", f"{sizes[-1]} files"
    r_small, r_big = results[small], results[big]
    print(
        f"ratio {big} / {small}: cpu {r_big['cpu'] / max(r_small['cpu'], 1e-6):.1f}x for "
        f"{r_big['lines'] / max(r_small['lines'], 1):.0f}x the lines "
        "(cpu per line "
        f"{r_big['cpu'] / max(r_big['lines'], 1) / max(r_small['cpu'] / max(r_small['lines'], 1), 1e-12):.2f}x)"
    )
    if not args.no_legacy:
        leg = results[f"{big} (legacy sweep) idle"]["cpu"]
        new = results[f"{big} idle"]["cpu"]
        print(
            f"idle {big}: {new:.3f} s cpu now vs {leg:.3f} s with a full sweep every 0.2 s "
            f"({leg / max(new, 1e-6):.1f}x)"
        )


if __name__ == "__main__":
    main()
